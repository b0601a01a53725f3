import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * Background work on a one-connection database (PGlite). Everything the process sends to PGlite
 * queues for its one connection; the pipeline keeps hundreds of statements in that queue while
 * it works, and a request arriving behind them would wait for all of them. Work started inside
 * `inBackground` (the stage runtime's jobs, the scheduler) marks its statements as background:
 * whenever the connection comes free, a waiting foreground statement (a request, a projection
 * batch) gets it before any waiting background one. Deferred work (the stages that derive
 * summaries, syntheses and relations from what the source stages made) waits behind both: while
 * sources are being decomposed and linked, it takes the connection only when they leave it free,
 * and it has more to do at once, in fewer statements and model calls, when its turn comes.
 */
export type BackgroundLevel = 'background' | 'deferred';

const background = new AsyncLocalStorage<BackgroundLevel>();

/** Runs `work` (and everything it starts) as background (or deferred) work. */
export function inBackground<T>(work: () => T, level: BackgroundLevel = 'background'): T {
  return background.run(level, work);
}

export function isBackground(): boolean {
  return background.getStore() !== undefined;
}

/** The level of the work running now: `foreground` outside `inBackground`. */
export function backgroundLevel(): BackgroundLevel | 'foreground' {
  return background.getStore() ?? 'foreground';
}

/** One holder at a time; a waiting foreground caller goes first, then background, then deferred ones. */
export class PriorityGate {
  private held = false;
  private readonly foreground: Array<() => void> = [];
  private readonly backgroundQueue: Array<() => void> = [];
  private readonly deferredQueue: Array<() => void> = [];

  enter(): Promise<void> {
    if (!this.held) {
      this.held = true;
      return Promise.resolve();
    }
    const level = backgroundLevel();
    const queue = level === 'deferred' ? this.deferredQueue : level === 'background' ? this.backgroundQueue : this.foreground;
    return new Promise((resolve) => queue.push(resolve));
  }

  leave(): void {
    const next = this.foreground.shift() ?? this.backgroundQueue.shift() ?? this.deferredQueue.shift();
    if (next) next();
    else this.held = false;
  }

  /** Callers waiting: foreground, background and deferred. */
  waiting(): { foreground: number; background: number; deferred: number } {
    return { foreground: this.foreground.length, background: this.backgroundQueue.length, deferred: this.deferredQueue.length };
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
