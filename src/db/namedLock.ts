import { AsyncLocalStorage } from 'node:async_hooks';
import { Semaphore } from '../util/concurrency.js';
import type { Database } from './database.js';

/** The driver's client of a connection taken out of knex's pool (typed loosely: it is the driver's). */
interface PooledConnection {
  query(sql: string, params: unknown[]): Promise<unknown>;
}

/**
 * `exclusive`: one holder of the name at a time. `shared`: any number of shared holders together,
 * none beside an exclusive one (a reader-writer lock: commands that act in a repository share it,
 * a change of who may act there takes it alone).
 */
export type LockMode = 'exclusive' | 'shared';

interface Waiter {
  mode: LockMode;
  grant(): void;
}

/** The holders and the queue of one name in this process; holders are granted in arrival order. */
interface LocalLock {
  shared: number;
  exclusive: boolean;
  queue: Waiter[];
}

const localLocks = new Map<string, LocalLock>();

function grantWaiting(lock: LocalLock): void {
  while (lock.queue.length > 0 && !lock.exclusive) {
    const next = lock.queue[0];
    if (next.mode === 'exclusive' && lock.shared > 0) return;
    lock.queue.shift();
    if (next.mode === 'exclusive') lock.exclusive = true;
    else lock.shared += 1;
    next.grant();
  }
}

/** Waits for the name in this process; answers its release. A shared waiter queues behind an earlier exclusive one, so changes are not starved. */
async function acquireLocal(name: string, mode: LockMode): Promise<() => void> {
  let lock = localLocks.get(name);
  if (!lock) localLocks.set(name, (lock = { shared: 0, exclusive: false, queue: [] }));
  const held = lock;
  await new Promise<void>((grant) => {
    held.queue.push({ mode, grant });
    grantWaiting(held);
  });
  return () => {
    if (mode === 'exclusive') held.exclusive = false;
    else held.shared -= 1;
    grantWaiting(held);
    // The last holder of a name leaves no entry behind.
    if (!held.exclusive && held.shared === 0 && held.queue.length === 0 && localLocks.get(name) === held) localLocks.delete(name);
  };
}

/**
 * Runs `work` while no conflicting holder of `name` runs (`mode`, exclusive by default), in this
 * process and, on the PostgreSQL server, in every process of the deployment: a check-then-append
 * that must not interleave with another one (a report's parent chain checked, then the new
 * parent appended).
 *
 * In the process, holders queue per name. Across processes a session advisory lock is held on a
 * connection taken out of the pool for the duration (a transaction-scoped lock would hold a
 * transaction open while the command appends and waits for its projections, which on PGlite,
 * one connection, would wait for itself). PGlite has one process per data directory, so the
 * queue alone serialises there.
 */
export function withNamedLock<T>(db: Database, name: string, work: () => Promise<T>, mode: LockMode = 'exclusive', readModels?: readonly string[]): Promise<T> {
  return withNamedLocks(db, [{ name, mode, readModels }], work);
}

/** One name of `withNamedLocks` and how it is held. */
export interface NamedLockRequest {
  name: string;
  mode: LockMode;
  /**
   * The read models (projection names) its holders decide on: a holder's write that one of them
   * had not applied when the holder answered leaves the next holder a position to wait for
   * (LockGuard). Absent: every read model the write concerns; empty: none (a lock whose holders
   * read only tables written in place).
   */
  readModels?: readonly string[];
}

/**
 * What is done around every holder of named locks of one database (src/app/lockMarks.ts): once a
 * call's locks are taken, before its work, `taken` waits until the read models have what earlier
 * holders of those names wrote and answered before the read models had it. Registered once per
 * database (guardNamedLocks), so every holder gets it by taking the lock.
 */
export interface LockGuard {
  taken(locks: readonly NamedLockRequest[]): Promise<void>;
}

const guards = new WeakMap<Database, LockGuard>();

export function guardNamedLocks(db: Database, guard: LockGuard): void {
  guards.set(db, guard);
}

/** The locks the calling work holds, outermost first (a write made there marks them: src/app/lockMarks.ts). */
const heldLocks = new AsyncLocalStorage<readonly NamedLockRequest[]>();

export function locksHeld(): readonly NamedLockRequest[] {
  return heldLocks.getStore() ?? [];
}

/**
 * Runs `work` holding each of `locks`, taken in the order given (callers keep one order, so two
 * holders cannot wait for each other) and released in reverse: the same as nesting
 * `withNamedLock` calls, but across processes every advisory lock is held on one pooled
 * connection rather than one connection per name, so a command that takes several (a
 * repository's and its credential's, src/app/repositoryFence.ts) costs one connection, and
 * commands waiting for their second lock cannot take the pool's last connections.
 */
export async function withNamedLocks<T>(db: Database, locks: readonly NamedLockRequest[], work: () => Promise<T>): Promise<T> {
  if (db.kind === 'pglite' || holdingLocks.getStore() !== undefined) return holdLocks(db, locks, work);
  // Outermost on a server: wait for a place first, holding nothing meanwhile (holdersOf).
  return holdersOf(db).run(() => holdingLocks.run(true, () => holdLocks(db, locks, work)));
}

/** Set while a holder's work runs: its nested locks are part of it and wait for no place of their own. */
const holdingLocks = new AsyncLocalStorage<true>();
const placesByDatabase = new WeakMap<Database, Semaphore>();

/**
 * Outermost holders of a server database's locks at once, per process. Each holds a pooled
 * connection while its work appends and waits for read models on others: holders as many as the
 * pool's connections (`databases.<name>.max_conns`) left the work none, so every one of them
 * waited out the pool's acquire timeout (60 s) and failed. A quarter of the pool: each holder may
 * nest one more lock's connection, and at least half stays for the work. A holder waits for its
 * place before it takes any lock, so one waiting holds nothing another needs.
 */
function holdersOf(db: Database): Semaphore {
  let places = placesByDatabase.get(db);
  if (places === undefined) {
    const poolSize = db.knex.client.config.pool?.max ?? 1;
    places = new Semaphore(Math.max(1, Math.floor(poolSize / 4)));
    placesByDatabase.set(db, places);
  }
  return places;
}

async function holdLocks<T>(db: Database, locks: readonly NamedLockRequest[], work: () => Promise<T>): Promise<T> {
  const releases: Array<() => void> = [];
  const guarded = () =>
    heldLocks.run([...locksHeld(), ...locks], async () => {
      await guards.get(db)?.taken(locks);
      return work();
    });
  try {
    for (const { name, mode } of locks) releases.push(await acquireLocal(name, mode));
    if (db.kind === 'pglite') return await guarded();
    const connection = (await db.knex.client.acquireConnection()) as PooledConnection;
    try {
      const holding = async (index: number): Promise<T> => {
        if (index === locks.length) return guarded();
        const { name, mode } = locks[index];
        const [lock, unlock] = mode === 'shared' ? ['pg_advisory_lock_shared', 'pg_advisory_unlock_shared'] : ['pg_advisory_lock', 'pg_advisory_unlock'];
        await connection.query(`SELECT ${lock}(hashtext($1))`, [name]);
        try {
          return await holding(index + 1);
        } finally {
          await connection.query(`SELECT ${unlock}(hashtext($1))`, [name]);
        }
      };
      return await holding(0);
    } finally {
      await db.knex.client.releaseConnection(connection);
    }
  } finally {
    for (const release of releases.reverse()) release();
  }
}

/** withNamedLock bound to one database, for code that holds a knex but not the Database (the pipeline's stages). */
export interface NamedLocks {
  exclusive<T>(name: string, work: () => Promise<T>): Promise<T>;
}

export function namedLocks(db: Database): NamedLocks {
  // The pipeline's stages wait for their read models themselves (awaitReadModels), and make no command of the command bus, which marks locks.
  return { exclusive: (name, work) => withNamedLock(db, name, work, 'exclusive', []) };
}
