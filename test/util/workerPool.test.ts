import t from 'tap';
import { busyWorkerPool } from './fixtures/busyPool.js';

const pool = () => busyWorkerPool('test-busy');

t.test('onStart runs when the worker begins the call: after its start-up and the calls before it on that worker', async (t) => {
  const workers = pool();
  t.teardown(() => workers.close());
  const order: string[] = [];
  const first = workers.call({ method: 'busy', ms: 300 }, { onStart: () => order.push('first started') }).then(() => order.push('first answered'));
  const second = workers.call({ method: 'echo', value: 'x' }, { onStart: () => order.push('second started') }).then((value) => order.push(`second answered ${String(value)}`));
  await Promise.all([first, second]);
  t.same(order, ['first started', 'first answered', 'second started', 'second answered x'], 'the second waited for the first without starting');
});

t.test('a call without onStart gets no started reply, and answers as before', async (t) => {
  const workers = pool();
  t.teardown(() => workers.close());
  t.equal(await workers.call({ method: 'echo', value: 'y' }), 'y');
});
