import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * Priorities on a one-connection database (PGlite). Everything the process sends to PGlite
 * queues for its one connection; the pipeline keeps hundreds of statements in that queue while
 * it works, and a request arriving behind them would wait for all of them. Whenever the
 * connection comes free it goes to a waiting caller of the highest level, in arrival order:
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

/**
 * One holder at a time; a waiting caller goes before every waiting caller of a lower level.
 *
 * A request runs its statements one after another (authentication, then its reads), each
 * entering the gate anew. Handed straight to the next waiter when a request's statement ends,
 * the connection would go to a projection batch or a pipeline statement before the request's
 * next statement arrives, and that statement would wait for all of it. So when a request
 * leaves and only lower levels wait, the hand-off waits for the end of the current turn of the
 * event loop (setImmediate): a statement the request sends on at once still goes first.
 */
export class PriorityGate {
  private held = false;
  /** The level of the holder (or of the last holder, while a hand-off waits). */
  private holder: Level = 'foreground';
  /** Waiting callers by level, highest first (the keys' order is the order of service). */
  private readonly queues: Record<Level, Array<() => void>> = { foreground: [], projections: [], background: [], deferred: [] };
  /** When a foreground caller last entered (performance.now()). */
  private lastForegroundAt = Number.NEGATIVE_INFINITY;

  enter(): Promise<void> {
    const entering = backgroundLevel();
    if (entering === 'foreground') this.lastForegroundAt = performance.now();
    if (!this.held) {
      this.held = true;
      this.holder = entering;
      return Promise.resolve();
    }
    return new Promise((resolve) =>
      this.queues[entering].push(() => {
        this.holder = entering;
        resolve();
      }),
    );
  }

  leave(): void {
    const next = this.queues.foreground.shift();
    if (next) next();
    else if (this.holder === 'foreground' && Object.values(this.queues).some((queue) => queue.length > 0)) setImmediate(() => this.handOff());
    else this.handOff();
  }

  private handOff(): void {
    const next = Object.values(this.queues).find((queue) => queue.length > 0)?.shift();
    if (next) next();
    else this.held = false;
  }

  /** Milliseconds since a foreground caller last entered; Infinity if none has. */
  msSinceForeground(): number {
    return performance.now() - this.lastForegroundAt;
  }

  /** Callers waiting, by level. */
  waiting(): Record<Level, number> {
    const { foreground, projections, background, deferred } = this.queues;
    return { foreground: foreground.length, projections: projections.length, background: background.length, deferred: deferred.length };
  }
}

/** The part of a knex client the gate wraps. */
interface ConnectionHandout {
  acquireConnection(): Promise<unknown>;
  releaseConnection(connection: unknown): Promise<void>;
}

/** Puts `gate` in front of a one-connection knex client's connection handout. */
export function gateConnection(client: ConnectionHandout, gate: PriorityGate): void {
  const acquire = client.acquireConnection.bind(client);
  const release = client.releaseConnection.bind(client);
  client.acquireConnection = async () => {
    await gate.enter();
    try {
      return await acquire();
    } catch (error) {
      gate.leave();
      throw error;
    }
  };
  client.releaseConnection = async (connection) => {
    try {
      await release(connection);
    } finally {
      gate.leave();
    }
  };
}
