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
 * 3. background: the stage runtime's jobs and the scheduler (`inBackground`).
 */
type Level = 'projections' | 'background';
const level = new AsyncLocalStorage<Level>();

/** Runs `work` (and everything it starts) as background work. */
export function inBackground<T>(work: () => T): T {
  return level.run('background', work);
}

/** Runs `work` (and everything it starts) as projection work: after requests, before background work. */
export function inProjections<T>(work: () => T): T {
  return level.run('projections', work);
}

export function isBackground(): boolean {
  return level.getStore() === 'background';
}

/** One holder at a time; a waiting caller goes before every waiting caller of a lower level. */
export class PriorityGate {
  private held = false;
  private readonly foreground: Array<() => void> = [];
  private readonly projections: Array<() => void> = [];
  private readonly background: Array<() => void> = [];

  enter(): Promise<void> {
    if (!this.held) {
      this.held = true;
      return Promise.resolve();
    }
    const store = level.getStore();
    const queue = store === 'background' ? this.background : store === 'projections' ? this.projections : this.foreground;
    return new Promise((resolve) => queue.push(resolve));
  }

  leave(): void {
    const next = this.foreground.shift() ?? this.projections.shift() ?? this.background.shift();
    if (next) next();
    else this.held = false;
  }

  /** Callers waiting, by level. */
  waiting(): { foreground: number; projections: number; background: number } {
    return { foreground: this.foreground.length, projections: this.projections.length, background: this.background.length };
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
