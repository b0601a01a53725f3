import pino from 'pino';
import t from 'tap';
import { notFound } from '../../../src/app/errors.js';
import { toolFailure } from '../../../src/mcp/tools/common.js';
import type { ProjectionStatus, ReadModelRunner } from '../../../src/projection/types.js';

/** A runner that reports the given read models' states: what toolFailure reads of it. */
const runnerWith = (states: Record<string, ProjectionStatus['state']>): Pick<ReadModelRunner, 'status'> => ({
  status: async () => Object.entries(states).map(([name, state]) => ({ name, state, position: 0, head: 0, lag: 0, lastError: null })),
});

t.test('a not-found tool failure while a read model is rebuilt says unavailable, not not found', async (t) => {
  const log = pino({ level: 'silent' });
  const during = await toolFailure(notFound('fact'), { log, projections: runnerWith({ facts: 'rebuilding', concepts: 'running' }) });
  t.same(during, { isError: true, content: [{ type: 'text', text: 'unavailable: fact not found while read model facts is being rebuilt: it may not be re-applied yet; retry after the rebuild' }] });
  const after = await toolFailure(notFound('fact'), { log, projections: runnerWith({ facts: 'running' }) });
  t.same(after, { isError: true, content: [{ type: 'text', text: 'not found: fact not found' }] });
});
