import type { Knex } from 'knex';
import type { Database } from '../db/database.js';
import { guardNamedLocks, locksHeld, type LockGuard } from '../db/namedLock.js';
import type { AppendedWrite, ReadModelRunner } from '../projection/types.js';
import { ReadModelsBehindError } from './errors.js';

/** Read-model database table; service state every node sees, not a projection's (a rebuild leaves it alone). */
const MARKS = 'lock_pending_positions';

/**
 * Read models under a named lock (docs/architecture.md, "Locks and lagging read models"). A
 * holder of a named lock reads a read model, decides and appends, and its command waits for the
 * read models (settle) before it answers and releases the lock. When that wait runs out, or the
 * projection was stopped, failed or being rebuilt (settle waits for none of those), the lock is
 * released before the read model has the holder's events, and the next holder decided on stale
 * rows: a URL registered twice, an owner demoted past the last one, a revoked member still
 * writing.
 *
 * So such a write leaves a mark on every lock its command holds (`leave`, called by the command
 * bus's settle): the lock's name, the projection that had not applied it, the write's stream and
 * position, for each projection the lock's holders read (NamedLockRequest.readModels). The next
 * holder of the name (`taken`, called by withNamedLocks once the locks are taken, before the
 * work) waits for each marked projection to apply each marked write (`projectionReached` with the
 * write's stream: the bus runner reads that stream's checkpoint), then removes the mark; one that
 * does not within the command's wait refuses the command (ReadModelsBehindError, HTTP 503) with
 * nothing written. A lock without a mark costs its holder no wait, and one lookup by primary key
 * for all the locks of its call on a server, none on PGlite (embeddedMarkedNames): no holder waits
 * for the log's head, which the pipeline keeps moving.
 */
export interface LockMarks extends LockGuard {
  /** A write made by the calling work was answered before `unapplied` had it: marks the locks the work holds. */
  leave(write: AppendedWrite, unapplied: readonly string[]): Promise<void>;
}

interface MarkRow {
  lock_name: string;
  projection: string;
  /** '' in a mark left before migration 032: the write's stream is not known. */
  stream_id: string;
  position: string | number;
}

export function createLockMarks(deps: { db: Database; projections: Pick<ReadModelRunner, 'projectionReached'>; waitMs: number }): LockMarks {
  const knex = deps.db.knex;
  const local = deps.db.kind === 'pglite' ? embeddedMarkedNames(knex) : null;

  const mark = (rows: ReadonlyArray<{ lock_name: string }>) =>
    knex(MARKS)
      .insert(rows)
      .onConflict(['lock_name', 'projection', 'stream_id'])
      // A shared lock's holders mark it side by side: of one stream, the later position stays (a stream's events are applied in order).
      .merge({ position: knex.raw('greatest(??, excluded.position)', [`${MARKS}.position`]), created_at: knex.raw('excluded.created_at') });

  const marks: LockMarks = {
    async leave(write, unapplied) {
      const created_at = new Date();
      const rows = locksHeld().flatMap((lock) =>
        unapplied
          .filter((projection) => lock.readModels?.includes(projection) ?? true)
          .map((projection) => ({ lock_name: lock.name, projection, stream_id: write.streamId, position: write.position, created_at })),
      );
      if (rows.length === 0) return;
      if (local === null) await mark(rows);
      else await local.change(() => mark(rows), (names) => rows.forEach((row) => names.add(row.lock_name)));
    },

    async taken(locks) {
      const names = locks.filter((lock) => lock.readModels?.length !== 0).map((lock) => lock.name);
      if (names.length === 0 || (local !== null && !(await local.anyMarked(names)))) return;
      const found: MarkRow[] = await knex(MARKS).whereIn('lock_name', names).select('lock_name', 'projection', 'stream_id', 'position');
      if (found.length === 0) return;
      // Per projection and stream, the latest marked write (of one stream, it follows the earlier ones).
      const writes = new Map<string, { projection: string; streamId: string; position: number }>();
      for (const mark of found) {
        const key = JSON.stringify([mark.projection, mark.stream_id]);
        const position = Math.max(writes.get(key)?.position ?? 0, Number(mark.position));
        writes.set(key, { projection: mark.projection, streamId: mark.stream_id, position });
      }
      const reached = await Promise.all(
        [...writes.values()].map(async ({ projection, streamId, position }) => ({
          projection,
          reached: await deps.projections.projectionReached(projection, position, deps.waitMs, streamId === '' ? undefined : streamId),
        })),
      );
      const behind = [...new Set(reached.filter((each) => !each.reached).map((each) => each.projection))];
      if (behind.length > 0) throw new ReadModelsBehindError(behind, 'this change may be made');
      // Only what was waited for: a holder beside this one (a shared lock) may have marked a later position since.
      const clear = () =>
        knex(MARKS)
          .where((any) => {
            for (const mark of found) any.orWhere((one) => one.where({ lock_name: mark.lock_name, projection: mark.projection, stream_id: mark.stream_id }).where('position', '<=', Number(mark.position)));
          })
          .delete();
      if (local === null) {
        await clear();
        return;
      }
      await local.change(
        async () => {
          await clear();
          return new Set<string>(await knex(MARKS).whereIn('lock_name', names).distinct().pluck('lock_name'));
        },
        (marked, left) => names.filter((name) => !left.has(name)).forEach((name) => marked.delete(name)),
      );
    },
  };
  guardNamedLocks(deps.db, marks);
  return marks;
}

/**
 * On PGlite this process is the database's only client (one process per data directory,
 * src/db/dataDirLock.ts) and makes every change of the marks: which lock names have marks is
 * known here, read once, so a holder of a lock without one makes no statement at all. The changes
 * run one at a time, each followed by its update of the names, so the names follow the table.
 */
function embeddedMarkedNames(knex: Knex) {
  let loaded: Promise<Set<string>> | undefined;
  const marked = () =>
    (loaded ??= knex(MARKS)
      .distinct()
      .pluck('lock_name')
      .then(
        (names: string[]) => new Set(names),
        (error: unknown) => {
          loaded = undefined;
          throw error;
        },
      ));
  let changes: Promise<unknown> = Promise.resolve();
  return {
    anyMarked: async (names: readonly string[]) => {
      const known = await marked();
      return names.some((name) => known.has(name));
    },
    change<T>(statements: () => Promise<T>, update: (marked: Set<string>, result: T) => void): Promise<void> {
      const done = changes.then(async () => {
        const known = await marked();
        update(known, await statements());
      });
      changes = done.catch(() => undefined);
      return done;
    },
  };
}
