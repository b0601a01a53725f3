import t from 'tap';
import { withNamedLock } from '../../src/db/namedLock.js';
import { openTestPglite } from '../helpers/pglite.js';
import { scratchPostgresWithSecondPool } from '../helpers/scratchPostgres.js';

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs two holders of one name at once; answers the order their steps ran in. */
async function interleaving(first: Parameters<typeof withNamedLock>[0], second: Parameters<typeof withNamedLock>[0], name: string): Promise<string[]> {
  const steps: string[] = [];
  const holder = (db: Parameters<typeof withNamedLock>[0], label: string) =>
    withNamedLock(db, name, async () => {
      steps.push(`${label} in`);
      await pause(150);
      steps.push(`${label} out`);
    });
  await Promise.all([holder(first, 'one'), pause(20).then(() => holder(second, 'two'))]);
  return steps;
}

t.test('on the PostgreSQL server, two processes (two pools) never hold one name together', async (t) => {
  const { scratch: nodeA, second: nodeB } = await scratchPostgresWithSecondPool(t, 'factlog_lock', 2);
  t.same(await interleaving(nodeA, nodeB, 'factlog.test.lock'), ['one in', 'one out', 'two in', 'two out'], 'the second waits for the first');
  const other = await Promise.all([withNamedLock(nodeA, 'factlog.test.a', async () => 'a'), withNamedLock(nodeB, 'factlog.test.b', async () => 'b')]);
  t.same(other, ['a', 'b'], 'other names do not wait');
  await t.rejects(withNamedLock(nodeA, 'factlog.test.lock', async () => Promise.reject(new Error('boom'))), /boom/);
  t.same(await interleaving(nodeB, nodeA, 'factlog.test.lock'), ['one in', 'one out', 'two in', 'two out'], 'a failed holder released the lock');
});

t.test('on PGlite (one process), holders in the process queue', async (t) => {
  const db = await openTestPglite();
  t.teardown(() => db.close());
  t.same(await interleaving(db, db, 'factlog.test.local'), ['one in', 'one out', 'two in', 'two out']);
});
