import type { Database } from '../db/database.js';
import { errorMessage } from '../util/errorMessage.js';

export interface Leadership {
  stop(): Promise<void>;
  isLeader(): boolean;
}

/**
 * Runs `start` in exactly one process of a deployment at a time (the relay must publish the log
 * once, not once per node). Leadership is a PostgreSQL session advisory lock held on a dedicated
 * connection: when the leader dies its connection closes, the lock is released, and another
 * node's next attempt takes over. On PGlite (one process) the caller is always the leader.
 */
export function runAsLeader(
  db: Database,
  name: string,
  role: { start(): Promise<void>; stop(): Promise<void> },
  options: { retryMs?: number; log?: { info(o: object, m: string): void; warn(o: object, m: string): void } } = {},
): Leadership {
  let leader = false;
  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  // A knex connection taken out of the pool for as long as we lead (typed loosely: it is the driver's client).
  let connection: { query(sql: string, params: unknown[]): Promise<{ rows: { locked: boolean }[] }> } | null = null;

  const attempt = async () => {
    if (stopped) return;
    try {
      if (db.kind === 'pglite') {
        leader = true;
      } else {
        connection ??= (await db.knex.client.acquireConnection()) as typeof connection;
        const { rows } = await connection!.query('SELECT pg_try_advisory_lock(hashtext($1)) AS locked', [`factlog.leader.${name}`]);
        leader = rows[0]?.locked === true;
      }
      if (leader) {
        options.log?.info({ role: name }, 'became leader');
        await role.start();
        return;
      }
    } catch (error) {
      options.log?.warn({ role: name, error: errorMessage(error) }, 'leader election failed; retrying');
      if (connection) {
        await db.knex.client.releaseConnection(connection).catch(() => undefined);
        connection = null;
      }
    }
    if (!stopped) timer = setTimeout(() => void attempt(), options.retryMs ?? 5_000);
  };
  void attempt();

  return {
    isLeader: () => leader,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      if (leader) await role.stop();
      leader = false;
      if (connection) {
        await connection.query('SELECT pg_advisory_unlock_all() AS locked', []).catch(() => undefined);
        await db.knex.client.releaseConnection(connection).catch(() => undefined);
        connection = null;
      }
    },
  };
}
