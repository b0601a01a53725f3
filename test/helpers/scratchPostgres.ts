import type { Test } from 'tap';
import { openDatabase, openScratchPostgres, type Database } from '../../src/db/database.js';

/**
 * A fresh database on the PostgreSQL server (dropped at the test's end) and a second pool of
 * `maxConns` connections on it: two nodes of one database, or one connection every statement meets.
 */
export async function scratchPostgresWithSecondPool(t: Test, prefix: string, maxConns: number): Promise<{ scratch: Database; second: Database }> {
  const scratch = await openScratchPostgres(undefined, prefix);
  const url = (scratch.knex.client.config.connection as { connectionString: string }).connectionString;
  const second = await openDatabase({ kind: 'postgres', url, maxConns });
  t.teardown(async () => {
    await second.close();
    await scratch.close();
  });
  return { scratch, second };
}
