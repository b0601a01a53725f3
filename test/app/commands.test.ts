import t from 'tap';
import { createCommandBus, MAX_SETTLE_WAIT_MS, settleWaitMs } from '../../src/app/commands.js';
import type { EventStore } from '../../src/eventstore/port.js';
import { ProjectionWaitTimeoutError } from '../../src/projection/runner.js';
import type { AppendedWrite } from '../../src/projection/types.js';

t.test('a command waits for its read models at most two thirds of the HTTP deadline, so a lagging read model still gets an answer out', async (t) => {
  t.equal(settleWaitMs({ read_timeout: '15s', write_timeout: '15s' }), 20_000, 'the defaults: the connection closes after 30 s idle');
  t.equal(settleWaitMs({ read_timeout: '2s', write_timeout: '1s' }), 2_000);
  t.equal(settleWaitMs({ read_timeout: '0s', write_timeout: '15s' }), 10_000, 'one limit off: the other is the deadline');
  t.equal(settleWaitMs({ read_timeout: '1m', write_timeout: '1m' }), MAX_SETTLE_WAIT_MS, 'never longer than 30 s');
  t.equal(settleWaitMs({ read_timeout: '0s', write_timeout: '0s' }), MAX_SETTLE_WAIT_MS, 'no deadline at all');
});

t.test("a write answered before its read models had it marks the locks of its work: a wait that ran out names them, a projection not waited for too, a write they have marks nothing", async (t) => {
  const left: Array<[number, readonly string[]]> = [];
  const marks = { leave: async (write: AppendedWrite, unapplied: readonly string[]) => void left.push([write.position, unapplied]) };
  const write = (position: number): AppendedWrite => ({ position, streamId: 's-1', streamVersion: position, types: ['Something'] });
  const quiet = { warn: () => undefined };
  // Only settle is called, which does not use the store.
  const timedOut = createCommandBus({} as EventStore, async (w) => Promise.reject(new ProjectionWaitTimeoutError(w.position, 10, ['users at 1'], ['users'])), quiet, undefined, marks);
  await timedOut.settle(write(2));
  const stopped = createCommandBus({} as EventStore, async () => ['sources'], quiet, undefined, marks);
  await stopped.settle(write(3));
  const applied = createCommandBus({} as EventStore, async () => [], quiet, undefined, marks);
  await applied.settle(write(4));
  await applied.settle(null);
  t.same(left, [[2, ['users']], [3, ['sources']]]);
  const failing = createCommandBus({} as EventStore, async () => Promise.reject(new Error('the database is gone')), quiet, undefined, marks);
  await t.rejects(failing.settle(write(5)), /the database is gone/, 'any other failure is the caller’s, as before');
});
