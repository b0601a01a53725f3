import t from 'tap';
import { endGroupedRun, isGroupedRun } from './groupedRun.js';
import { dumpBytes, pgliteTemplate, releaseMemoryPglite, takeMemoryPglite } from './pglite.js';

/** The WAL segment files of an uncompressed tar dump, with their sizes (ustar headers: name at 0, octal size at 124). */
function walSegments(tar: Uint8Array): Array<{ name: string; size: number }> {
  const segments: Array<{ name: string; size: number }> = [];
  const text = new TextDecoder();
  for (let at = 0; at + 512 <= tar.length && tar[at] !== 0; ) {
    const name = text.decode(tar.subarray(at, at + 100)).replace(/\0.*$/s, '');
    const size = Number.parseInt(text.decode(tar.subarray(at + 124, at + 136)).replace(/\0.*$/s, '').trim() || '0', 8);
    if (/pg_wal\/[0-9A-F]{24}$/.test(name)) segments.push({ name: name.split('/').pop()!, size });
    at += 512 + Math.ceil(size / 512) * 512;
  }
  return segments;
}

t.test('a dump holds one WAL segment of 1 MB; a database loaded from it writes past it, and its own dump holds one again', async (t) => {
  const template = walSegments(await pgliteTemplate());
  t.equal(template.length, 1, 'the current segment only, no future ones');
  t.equal(template[0]?.size, 1024 * 1024, '1 MB segments');
  const pglite = await takeMemoryPglite();
  t.teardown(() => releaseMemoryPglite(pglite));
  await pglite.exec(`CREATE TABLE filler AS SELECT g AS id, repeat('x', 200) AS text FROM generate_series(1, 20000) g`);
  const { rows } = await pglite.query<{ n: number }>(`SELECT count(*)::int AS n FROM filler`);
  t.same(rows, [{ n: 20000 }]);
  const again = walSegments(await dumpBytes(pglite));
  t.equal(again.length, 1, 'one segment after the checkpoint');
  t.ok(again[0]!.name > template[0]!.name, 'a later segment: the writes went past the first');
  await pglite.exec('DROP TABLE filler');
});

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

t.test('a kept PGlite not taken again is closed, so the process can end: after a moment, or in a grouped run at its end', async (t) => {
  const pglite = await takeMemoryPglite();
  await releaseMemoryPglite(pglite);
  t.notOk(pglite.closed, 'kept open');
  if (isGroupedRun()) {
    // What test/group.ts runs once the group's files are done (closing every kept item of the process).
    await endGroupedRun();
    t.ok(pglite.closed, 'closed at the end of the group');
    const next = await takeMemoryPglite();
    await releaseMemoryPglite(next);
    await endGroupedRun();
    t.ok(next.closed, 'and one kept after that end is closed at the next');
    return;
  }
  // Kept for 200 ms, then closed (its close takes a moment more): waited for, up to 10 s.
  for (let waited = 0; waited < 10_000 && !pglite.closed; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
  t.ok(pglite.closed, 'closed once the moment passed');
});
