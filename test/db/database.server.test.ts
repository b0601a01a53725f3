import t from 'tap';
import { openDatabase, openScratchPostgres } from '../../src/db/database.js';

// The server tier's read-only open (the commands that only read; test/cli.readOnly.server.test.ts runs them as a reading role).
t.test('a server database opened read-only runs every transaction read-only and installs nothing', async (t) => {
  const scratch = await openScratchPostgres(undefined, 'factlog_read_only');
  t.teardown(() => scratch.close());
  const url = (scratch.knex.client.config.connection as { connectionString: string }).connectionString;
  const installed = async () => (await scratch.knex.raw(`SELECT count(*)::int AS n FROM pg_extension WHERE extname = 'vector'`)).rows[0].n > 0;
  await scratch.knex.raw('DROP EXTENSION IF EXISTS vector');

  const reader = await openDatabase({ kind: 'postgres', url, maxConns: 2, readOnly: true });
  t.teardown(() => reader.close());
  t.equal((await reader.knex.raw('SHOW default_transaction_read_only')).rows[0].default_transaction_read_only, 'on');
  await t.rejects(reader.knex.raw('CREATE TABLE written (id int)'), /read-only transaction/, 'a write fails instead of landing');
  t.equal(reader.hasVector, false, 'no extension in the database: none for the reader');
  t.notOk(await installed(), 'and the reader installed none');

  const writer = await openDatabase({ kind: 'postgres', url, maxConns: 2 });
  t.teardown(() => writer.close());
  t.equal((await writer.knex.raw('SHOW default_transaction_read_only')).rows[0].default_transaction_read_only, 'off', 'an ordinary open writes');
  const available = (await writer.knex.raw(`SELECT count(*)::int AS n FROM pg_available_extensions WHERE name = 'vector'`)).rows[0].n > 0;
  t.equal(writer.hasVector, available, 'an ordinary open (serve, migrate) installs the extension where the server has it');
  t.equal(await installed(), available);
  if (available) {
    const again = await openDatabase({ kind: 'postgres', url, maxConns: 2, readOnly: true });
    t.teardown(() => again.close());
    t.equal(again.hasVector, true, 'a reader finds the installed extension');
  }
});
