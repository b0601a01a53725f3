import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import { openDatabase } from '../../src/db/database.js';
import { directoryState } from '../helpers/olderSchema.js';
import { seedPgliteDir } from '../helpers/pglite.js';

t.test('a read-only open reads the directory, keeps its writes in memory, and leaves every byte on disk as it was', async (t) => {
  const root = mkdtempSync(path.join(tmpdir(), 'factlog-snapshot-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const dir = path.join(root, 'pglite');
  await seedPgliteDir(dir);
  const writer = await openDatabase({ kind: 'pglite', dataDir: dir, autovacuumIntervalMs: false });
  await writer.knex.raw('CREATE TABLE kept (n int)');
  await writer.knex('kept').insert([{ n: 1 }, { n: 2 }]);
  await writer.close();
  const before = directoryState(dir);

  const reader = await openDatabase({ kind: 'pglite', dataDir: dir, readOnly: true });
  t.same(await reader.knex('kept').orderBy('n').pluck('n'), [1, 2], 'what is on disk is read');
  await reader.knex('kept').insert({ n: 3 });
  await reader.knex.raw('CREATE TABLE dropped (n int)');
  await reader.knex.raw('CHECKPOINT');
  t.same(await reader.knex('kept').orderBy('n').pluck('n'), [1, 2, 3], 'its writes are seen in its session');
  await reader.close();
  t.same(directoryState(dir), before, 'and never reach the directory (no checkpoint, no control file, no hint bits)');

  const again = await openDatabase({ kind: 'pglite', dataDir: dir, readOnly: true });
  t.same(await again.knex('kept').orderBy('n').pluck('n'), [1, 2]);
  await again.close();
  await t.rejects(openDatabase({ kind: 'pglite', dataDir: path.join(root, 'none'), readOnly: true }), { message: /holds no database to read/ });
});
