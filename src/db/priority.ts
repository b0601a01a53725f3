import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * Priorities on a one-connection database (PGlite). Everything the process sends to PGlite
 * queues for its one connection; the pipeline keeps hundreds of statements in that queue while
 * it works, and a request arriving behind them would wait for all of them. Every statement
 * carries the level of the work that sent it, and whenever PGlite's thread is free it runs a
 * waiting statement of the highest level, in arrival order (src/db/statementScheduler.ts):
 *
 * 1. foreground: requests (and whatever runs outside the two marks below);
 * 2. projections: the projection runner's reads of the log and its batches (`inProjections`),
 *    so a request waits for the batch holding the connection, never for queued ones;
 * 3. background: the stage runtime's jobs and the scheduler (`inBackground`);
 * 4. deferred: the jobs of the stages that derive summaries, syntheses and relations from what
 *    the source stages made (`inBackground(work, 'deferred')`, `Stage.deferred`): while sources
 *    are being decomposed and linked, they take the connection only when those leave it free,
 *    and have more to do at once, in fewer statements and model calls, when their turn comes.
 */
export type BackgroundLevel = 'background' | 'deferred';
type MarkedLevel = 'projections' | BackgroundLevel;
/** Every level, highest first. */
export type Level = 'foreground' | MarkedLevel;
export const LEVELS: readonly Level[] = ['foreground', 'projections', 'background', 'deferred'];
const level = new AsyncLocalStorage<MarkedLevel>();

/** Runs `work` (and everything it starts) as background (or deferred) work. */
export function inBackground<T>(work: () => T, as: BackgroundLevel = 'background'): T {
  return level.run(as, work);
}

/** Runs `work` (and everything it starts) as projection work: after requests, before background work. */
export function inProjections<T>(work: () => T): T {
  return level.run('projections', work);
}

/** Runs `work` at `at`: what backgroundLevel() said where a caller was, for work done on its behalf later. */
export function runAtLevel<T>(at: Level, work: () => T): T {
  return at === 'foreground' ? level.exit(work) : level.run(at, work);
}

export function isBackground(): boolean {
  const current = backgroundLevel();
  return current === 'background' || current === 'deferred';
}

/** The level of the work running now: `foreground` outside the marks above. */
export function backgroundLevel(): Level {
  return level.getStore() ?? 'foreground';
}
