import t from 'tap';
import { releaseMemoryPglite, takeMemoryPglite } from './pglite.js';

t.test('a released PGlite comes back to the next taker as empty as a fresh one', async (t) => {
  const first = await takeMemoryPglite();
  await first.exec(`CREATE TABLE things (id serial PRIMARY KEY, name text); INSERT INTO things (name) VALUES ('a'), ('b')`);
  await first.exec(`CREATE FUNCTION answer() RETURNS int LANGUAGE sql AS 'SELECT 42'`);
  await first.exec(`SET work_mem = '7MB'`);
  await first.query('SELECT pg_advisory_lock(7)');
  await first.exec('BEGIN; INSERT INTO things (name) VALUES ($$left open$$)');
  await releaseMemoryPglite(first);

  const again = await takeMemoryPglite();
  t.equal(again, first, 'the same instance, kept');
  const objects = await again.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_class WHERE relnamespace = 'public'::regnamespace`);
  t.same(objects.rows, [{ n: 0 }], 'no relation left in public');
  await t.rejects(again.query('SELECT answer()'), { code: '42883' }, 'no function left');
  t.same((await again.query(`SELECT current_setting('work_mem') AS value`)).rows, [{ value: '4MB' }], 'settings reset');
  t.same((await again.query(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory'`)).rows, [{ n: 0 }], 'advisory locks released');
  await again.exec('CREATE TABLE things (id serial PRIMARY KEY, name text)');
  t.same((await again.query(`INSERT INTO things (name) VALUES ('c') RETURNING id`)).rows, [{ id: 1 }], 'a new sequence starts at 1');
  await releaseMemoryPglite(again);
});

t.test('a PGlite that made a schema of its own is closed, not kept', async (t) => {
  const first = await takeMemoryPglite();
  await first.exec('CREATE SCHEMA elsewhere');
  await releaseMemoryPglite(first);
  t.ok(first.closed, 'closed');
  const next = await takeMemoryPglite();
  t.not(next, first, 'the next taker gets another');
  await releaseMemoryPglite(next);
});

t.test('a kept PGlite not taken again is closed, so the process can end', async (t) => {
  const pglite = await takeMemoryPglite();
  await releaseMemoryPglite(pglite);
  t.notOk(pglite.closed, 'kept open for a moment');
  // Kept for 200 ms, then closed (its close takes a moment more): waited for, up to 10 s.
  for (let waited = 0; waited < 10_000 && !pglite.closed; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
  t.ok(pglite.closed, 'closed once the moment passed');
});
