import t from 'tap';
import { boundedErrorMessage, MAX_KEPT_ERROR_CHARS } from '../../src/util/errorMessage.js';

t.test('a short message is kept whole, an Error or not', async (t) => {
  t.equal(boundedErrorMessage(new Error('relation "facts" does not exist')), 'relation "facts" does not exist');
  t.equal(boundedErrorMessage('plain'), 'plain');
  t.equal(boundedErrorMessage(new Error('x'.repeat(MAX_KEPT_ERROR_CHARS))), 'x'.repeat(MAX_KEPT_ERROR_CHARS), 'exactly the bound');
});

t.test("a failed statement's megabyte of SQL keeps its start and the reason at its end", async (t) => {
  const sql = `insert into "fact_vectors" values ${Array.from({ length: 40_000 }, (_, n) => `($${3 * n + 1}, $${3 * n + 2}, $${3 * n + 3})`).join(', ')}`;
  const full = `${sql} - bind message has 54464 parameter formats but 0 parameters`;
  const message = boundedErrorMessage(new Error(full));
  t.ok(message.length < MAX_KEPT_ERROR_CHARS + 100, `bounded (${message.length} characters)`);
  t.match(message, /^insert into "fact_vectors" values \(\$1, \$2, \$3\)/, 'the start');
  t.match(message, / - bind message has 54464 parameter formats but 0 parameters$/, 'the reason at the end');
  t.match(message, new RegExp(`… \\(${full.length - MAX_KEPT_ERROR_CHARS} characters left out\\) …`), 'says how much was left out');
});

t.test('a smaller bound is kept', async (t) => {
  t.equal(boundedErrorMessage(new Error('abcdefghij'), 4), 'ab … (6 characters left out) … ij');
});
