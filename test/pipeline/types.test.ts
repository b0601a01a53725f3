import t from 'tap';
import { isPermanentError, PermanentJobError } from '../../src/pipeline/types.js';
import { FetchError } from '../../src/providers/fetch/http.js';
import { ModelCallError } from '../../src/providers/llm/port.js';

t.test('isPermanentError: the one test of "a retry cannot help"', async (t) => {
  t.ok(isPermanentError(new PermanentJobError('unsupported content')), 'a PermanentJobError');
  t.ok(isPermanentError(Object.assign(new Error('copy'), { name: 'PermanentJobError' })), 'one from a second copy of the module, by name');
  t.ok(isPermanentError(new ModelCallError('bad request', true, 400)), 'a provider error flagged permanent');
  t.notOk(isPermanentError(new ModelCallError('busy', false, 503)), 'a provider error flagged transient');
  t.ok(isPermanentError(new FetchError({ url: 'ftp://x', permanent: true, reason: 'unsupported scheme', attempts: 0, detail: 'ftp' })));
  t.notOk(isPermanentError(new FetchError({ url: 'http://x', permanent: false, reason: 'timeout', attempts: 3, detail: 'slow' })));
  t.notOk(isPermanentError(new Error('connection reset')), 'an ordinary error is worth a retry');
  t.notOk(isPermanentError({ permanent: 'yes' }), 'only permanent: true counts');
  for (const value of [null, undefined, 'permanent', 42]) t.notOk(isPermanentError(value), `${String(value)} is not an error`);
});
