import t from 'tap';
import { MAX_SETTLE_WAIT_MS, settleWaitMs } from '../../src/app/commands.js';

t.test('a command waits for its read models at most two thirds of the HTTP deadline, so a lagging read model still gets an answer out', async (t) => {
  t.equal(settleWaitMs({ read_timeout: '15s', write_timeout: '15s' }), 20_000, 'the defaults: the connection closes after 30 s idle');
  t.equal(settleWaitMs({ read_timeout: '2s', write_timeout: '1s' }), 2_000);
  t.equal(settleWaitMs({ read_timeout: '0s', write_timeout: '15s' }), 10_000, 'one limit off: the other is the deadline');
  t.equal(settleWaitMs({ read_timeout: '1m', write_timeout: '1m' }), MAX_SETTLE_WAIT_MS, 'never longer than 30 s');
  t.equal(settleWaitMs({ read_timeout: '0s', write_timeout: '0s' }), MAX_SETTLE_WAIT_MS, 'no deadline at all');
});
