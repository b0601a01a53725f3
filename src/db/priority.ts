import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * Background work on a one-connection database (PGlite). Everything the process sends to PGlite
 * queues for its one connection; the pipeline keeps hundreds of statements in that queue while
 * it works, and a request arriving behind them would wait for all of them. Work started inside
 * `inBackground` (the stage runtime's jobs, the scheduler) marks its statements as background:
 * whenever the connection comes free, a waiting foreground statement (a request, a projection
 * batch) gets it before any waiting background one.
 */
const background = new AsyncLocalStorage<true>();

/** Runs `work` (and everything it starts) as background work. */
export function inBackground<T>(work: () => T): T {
  return background.run(true, work);
}

export function isBackground(): boolean {
  return background.getStore() === true;
}

/** One holder at a time; a waiting foreground caller goes before every waiting background one. */
export class PriorityGate {
  private held = false;
  private readonly foreground: Array<() => void> = [];
  private readonly backgroundQueue: Array<() => void> = [];

  enter(): Promise<void> {
    if (!this.held) {
      this.held = true;
      return Promise.resolve();
    }
    return new Promise((resolve) => (isBackground() ? this.backgroundQueue : this.foreground).push(resolve));
  }

  leave(): void {
    const next = this.foreground.shift() ?? this.backgroundQueue.shift();
    if (next) next();
    else this.held = false;
  }

  /** Callers waiting: foreground and background. */
  waiting(): { foreground: number; background: number } {
    return { foreground: this.foreground.length, background: this.backgroundQueue.length };
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
