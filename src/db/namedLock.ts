import type { Database } from './database.js';

/** The driver's client of a connection taken out of knex's pool (typed loosely: it is the driver's). */
interface PooledConnection {
  query(sql: string, params: unknown[]): Promise<unknown>;
}

const localQueues = new Map<string, Promise<void>>();

/**
 * Runs `work` while no other holder of `name` runs, in this process and, on the PostgreSQL
 * server, in every process of the deployment: a check-then-append that must not interleave with
 * another one (a report's parent chain checked, then the new parent appended).
 *
 * In the process, holders queue on a promise chain per name. Across processes a session advisory
 * lock is held on a connection taken out of the pool for the duration (a transaction-scoped lock
 * would hold a transaction open while the command appends and waits for its projections, which on
 * PGlite, one connection, would wait for itself). PGlite has one process per data directory, so
 * the chain alone serialises there.
 */
export async function withNamedLock<T>(db: Database, name: string, work: () => Promise<T>): Promise<T> {
  const previous = localQueues.get(name) ?? Promise.resolve();
  let release!: () => void;
  const mine = new Promise<void>((resolve) => (release = resolve));
  const queued = previous.then(() => mine);
  localQueues.set(name, queued);
  await previous;
  try {
    if (db.kind === 'pglite') return await work();
    const connection = (await db.knex.client.acquireConnection()) as PooledConnection;
    try {
      await connection.query('SELECT pg_advisory_lock(hashtext($1))', [name]);
      try {
        return await work();
      } finally {
        await connection.query('SELECT pg_advisory_unlock(hashtext($1))', [name]);
      }
    } finally {
      await db.knex.client.releaseConnection(connection);
    }
  } finally {
    release();
    // The last holder of a name leaves no entry behind.
    if (localQueues.get(name) === queued) localQueues.delete(name);
  }
}
