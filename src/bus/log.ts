import type { Knex } from 'knex';
import { type Database, migrateUnderLock } from '../db/database.js';
import type { EventStore, Subscription } from '../eventstore/port.js';
import type { Bus, BusConsumer, BusConsumerOptions } from './port.js';

/** The part of a pino logger the buses use (pino loggers and test spies fit). */
export interface BusLogger {
  info(details: Record<string, unknown>, message: string): void;
  warn(details: Record<string, unknown>, message: string): void;
  error(details: Record<string, unknown>, message: string): void;
}

export const silentBusLogger: BusLogger = { info() {}, warn() {}, error() {} };

export interface LogBusOptions {
  store: EventStore;
  /** Holds `bus_log_checkpoints`; usually the read-model database. */
  db: Database;
  log?: BusLogger;
  /** Events per batch; default 500. */
  batchSize?: number;
  /** First delay before redelivering a batch whose handler failed, doubled per failure; default 500 ms. */
  retryBaseMs?: number;
  /** Longest redelivery delay; default 30 s. */
  retryMaxMs?: number;
}

/** Creates `bus_log_checkpoints(group pk, position)` if it is missing. */
export async function migrateLogBus(knex: Knex): Promise<void> {
  await migrateUnderLock(knex, 'bus_log_checkpoints', async (trx) => {
    await trx.raw(`CREATE TABLE IF NOT EXISTS bus_log_checkpoints (
      "group" text PRIMARY KEY,
      position bigint NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT now()
    )`);
  });
}

/** Stored checkpoint of a group: the global position of the last event it acknowledged (0: none). */
export async function readLogBusCheckpoint(knex: Knex, group: string): Promise<number> {
  const row: { position: string | number } | undefined = await knex('bus_log_checkpoints')
    .where({ group })
    .first('position');
  return row ? Number(row.position) : 0;
}

/**
 * The embedded tier's Bus: each consumer is a catch-up subscription on the event store's global
 * log, starting after its group's checkpoint. The checkpoint moves only after the handler
 * resolves, so a crash redelivers the unacknowledged batch (at least once), and a handler that
 * throws gets the same batch again after a backoff. Events arrive in global order.
 *
 * One consumer per group per process: the log has no partitions to split between members, so a
 * second consumer of a group would only duplicate the first one's work and race its checkpoint.
 */
export function createLogBus(options: LogBusOptions): Bus {
  const { store, db } = options;
  const log = options.log ?? silentBusLogger;
  const retryBaseMs = options.retryBaseMs ?? 500;
  const retryMaxMs = options.retryMaxMs ?? 30_000;
  const consumers = new Map<string, LogConsumer>();
  let migrated: Promise<void> | null = null;
  let closed = false;

  return {
    async consume(consumerOptions: BusConsumerOptions): Promise<BusConsumer> {
      validateConsumerOptions(consumerOptions);
      if (closed) throw new Error('the bus is closed');
      if (consumers.has(consumerOptions.group)) {
        throw new Error(`group ${consumerOptions.group} already has a consumer on this log bus`);
      }
      migrated ??= migrateLogBus(db.knex);
      await migrated;
      const consumer = new LogConsumer(store, db.knex, consumerOptions, log, {
        batchSize: options.batchSize,
        retryBaseMs,
        retryMaxMs,
        onStopped: () => consumers.delete(consumerOptions.group),
      });
      consumers.set(consumerOptions.group, consumer);
      await consumer.start();
      return consumer;
    },

    async close() {
      closed = true;
      await Promise.all([...consumers.values()].map((consumer) => consumer.stop()));
    },
  };
}

/** Checks that apply to every Bus adapter: a group name, and at least one event type. */
export function validateConsumerOptions(options: BusConsumerOptions): void {
  if (typeof options.group !== 'string' || options.group.trim() === '') throw new RangeError('group must be a non-empty string');
  if (!Array.isArray(options.types) || options.types.length === 0) {
    throw new RangeError(`group ${options.group}: types must name at least one event type`);
  }
  if (options.types.some((type) => typeof type !== 'string' || type === '')) {
    throw new RangeError(`group ${options.group}: every type must be a non-empty string`);
  }
  if (typeof options.handler !== 'function') throw new RangeError(`group ${options.group}: handler must be a function`);
}

class LogConsumer implements BusConsumer {
  private subscription: Subscription | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private failures = 0;
  private stopped = false;

  constructor(
    private readonly store: EventStore,
    private readonly knex: Knex,
    private readonly options: BusConsumerOptions,
    private readonly log: BusLogger,
    private readonly settings: { batchSize?: number; retryBaseMs: number; retryMaxMs: number; onStopped: () => void },
  ) {}

  async start(): Promise<void> {
    const { group, types, handler } = this.options;
    const after = await readLogBusCheckpoint(this.knex, group);
    if (this.stopped) return;
    this.subscription = this.store.subscribe({
      after,
      batchSize: this.settings.batchSize,
      types,
      handler: async (batch) => {
        await handler(batch);
        const last = batch[batch.length - 1];
        // Only after the handler: a crash before this line redelivers the batch.
        await this.knex('bus_log_checkpoints')
          .insert({ group, position: last.globalPosition, updated_at: new Date() })
          .onConflict('group')
          .merge(['position', 'updated_at']);
        this.failures = 0;
      },
      onError: (error) => this.retry(error),
    });
  }

  /** The store's subscription stops after a failure: start a new one from the checkpoint. */
  private retry(error: unknown): void {
    this.subscription = null;
    if (this.stopped) return;
    this.failures += 1;
    const delayMs = Math.min(this.settings.retryMaxMs, this.settings.retryBaseMs * 2 ** (this.failures - 1));
    this.log.warn(
      { group: this.options.group, error: error instanceof Error ? error.message : String(error), failures: this.failures, retryInMs: delayMs },
      'log bus consumer failed; redelivering from its checkpoint',
    );
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.start().catch((startError: unknown) => this.retry(startError));
    }, delayMs);
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    await this.subscription?.stop();
    this.subscription = null;
    this.settings.onStopped();
  }
}
