import type { Knex } from 'knex';
import type { RecordedEvent } from '../eventstore/envelope.js';

/**
 * A read-model projection: `(event) -> read-model writes`. One file per read model in
 * `projections/`. The runner applies events in global order inside one transaction per batch
 * and writes the projection's checkpoint in that same transaction, so each event takes
 * effect exactly once and a rebuild from position 0 yields the same rows as the live run.
 */
export interface Projection {
  /** Unique, stable name: the checkpoint key and the argument of `factlog projections rebuild`. */
  readonly name: string;
  /** Event types this projection reacts to; other events only advance its checkpoint. */
  readonly eventTypes: readonly string[];
  /** Tables whose rows are wholly derived from the log: emptied before a rebuild. */
  readonly tables: readonly string[];
  /** Must be deterministic: no clocks, no randomness, nothing but the event and the transaction. */
  apply(trx: Knex.Transaction, event: RecordedEvent): Promise<void>;
}

export interface ProjectionStatus {
  name: string;
  /** Global position of the last event applied. */
  position: number;
  /** Global position of the log head when measured. */
  head: number;
  /** head - position. */
  lag: number;
  /** running | rebuilding | stopped | failed */
  state: 'running' | 'rebuilding' | 'stopped' | 'failed';
  lastError: string | null;
}

/** A write the caller wants to read back: where it landed in the log and what it contained. */
export interface AppendedWrite {
  position: number;
  streamId: string;
  /** Version of the last event appended to the stream. */
  streamVersion: number;
  types: readonly string[];
}

/**
 * What the service needs of a projection runner, on either tier: the embedded runner follows the
 * global log; the bus runner consumes Kafka and keeps per-stream checkpoints.
 */
export interface ReadModelRunner {
  start(): Promise<void>;
  stop(): Promise<void>;
  status(): Promise<ProjectionStatus[]>;
  /** Resolves once every projection that handles the write's event types has applied it. */
  settle(write: AppendedWrite, timeoutMs: number): Promise<void>;
  rebuild(name: string, onProgress?: (done: number, total: number) => void): Promise<void>;
}
