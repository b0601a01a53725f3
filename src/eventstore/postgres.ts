import type { Knex } from 'knex';
import { type Database, migrateUnderLock } from '../db/database.js';
import type { NewEvent, RecordedEvent } from './envelope.js';
import {
  ConcurrencyError,
  InvalidEventError,
  type AppendResult,
  type EventStore,
  type ExpectedVersion,
  type ReadAllOptions,
  type ReadStreamOptions,
  type SubscribeOptions,
  type Subscription,
} from './port.js';
import type { EventSchemaRegistry } from './schemas.js';
import { checkExpectedVersion, validateNewEvents } from './validation.js';

/**
 * The EventStore on PostgreSQL: the same SQL runs on PGlite (embedded) and on a server.
 *
 * Gap-free global log. Readers of the global log (readAll, headPosition, subscriptions) only see
 * rows whose writing transaction id is below the oldest transaction still running
 * (`pg_snapshot_xmin(pg_current_snapshot())`, as Emmett does), so an append that is still
 * in flight hides every later position until it commits. That alone is not enough: a
 * transaction can take its id before a concurrent one and its position after it, and then a
 * reader would see the later position first. So `factlog_append_events` takes the transaction
 * id and the positions inside one short global advisory lock (released before commit, so
 * appends still overlap): position order and transaction-id order agree, and a position a
 * reader has passed can never appear later.
 *
 * Streams are read without that filter: stream versions are ordered by the stream's row lock,
 * and a command must see the latest committed version to pass the expected-version check.
 */

export interface PostgresEventStoreOptions {
  schemas: EventSchemaRegistry;
  /** How often idle subscriptions look for appends made elsewhere; default 50 ms on a server, 250 ms on PGlite. */
  pollIntervalMs?: number;
}

/** SQLSTATE raised by `factlog_append_events` when the expected version does not hold. */
const wrongVersionState = 'FLVER';
/** SQLSTATE raised when an append is not the first write of its transaction (see appendInTransaction). */
const lateAppendState = 'FLXID';
const uniqueViolationState = '23505';
/** jsonb refuses \u0000 in strings. */
const untranslatableCharacterState = '22P05';

const defaultReadLimit = 1000;
const defaultBatchSize = 500;

/** Events of the global log visible to readers: written by transactions older than every running one. */
const visibleToReaders = 'transaction_id < pg_snapshot_xmin(pg_current_snapshot())';

const migrationStatements = [
  `CREATE TABLE IF NOT EXISTS events (
    global_position bigserial PRIMARY KEY,
    event_id uuid NOT NULL,
    stream_id text NOT NULL,
    stream_version integer NOT NULL,
    type text NOT NULL,
    schema_version integer NOT NULL DEFAULT 1,
    repository_id text,
    actor text NOT NULL,
    causation_id text,
    correlation_id text,
    data jsonb NOT NULL,
    occurred_at timestamptz NOT NULL DEFAULT now(),
    transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
    CONSTRAINT events_event_id_key UNIQUE (event_id),
    CONSTRAINT events_stream_version_key UNIQUE (stream_id, stream_version)
  )`,
  `CREATE INDEX IF NOT EXISTS events_repository_position_idx ON events (repository_id, global_position)`,
  `CREATE INDEX IF NOT EXISTS events_type_position_idx ON events (type, global_position)`,
  `CREATE TABLE IF NOT EXISTS streams (
    stream_id text PRIMARY KEY,
    version integer NOT NULL
  )`,
  // p_events: a JSON array of {eventId, type, schemaVersion, repositoryId, actor, causationId, correlationId, data}.
  `CREATE OR REPLACE FUNCTION factlog_append_events(p_stream_id text, p_expected text, p_events jsonb)
  RETURNS SETOF events
  LANGUAGE plpgsql AS $fn$
  DECLARE
    v_lock_key constant bigint := hashtext('factlog.events.append');
    v_current integer;
    v_count integer := jsonb_array_length(p_events);
  BEGIN
    -- A transaction id taken before the lock could be older than a concurrent append's
    -- while its positions come later: readers could then pass a position that fills in later.
    IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
      RAISE EXCEPTION 'an append must be the first write of its transaction' USING ERRCODE = '${lateAppendState}';
    END IF;
    PERFORM pg_advisory_lock(v_lock_key);
    BEGIN
      PERFORM pg_current_xact_id();
      SELECT s.version INTO v_current FROM streams s WHERE s.stream_id = p_stream_id FOR UPDATE;
      IF NOT FOUND AND v_count > 0 THEN
        -- Waits for a racing creator of the same stream; if it committed, its row is read and locked below.
        INSERT INTO streams (stream_id, version) VALUES (p_stream_id, -1) ON CONFLICT (stream_id) DO NOTHING;
        SELECT s.version INTO v_current FROM streams s WHERE s.stream_id = p_stream_id FOR UPDATE;
        -- -1 only ever exists inside this function: the row is ours and the stream is new.
        IF v_current = -1 THEN v_current := NULL; END IF;
      END IF;
      IF p_expected = 'no_stream' THEN
        IF v_current IS NOT NULL THEN
          RAISE EXCEPTION 'wrong expected version' USING ERRCODE = '${wrongVersionState}', DETAIL = v_current::text;
        END IF;
      ELSIF p_expected = 'stream_exists' THEN
        IF v_current IS NULL THEN
          RAISE EXCEPTION 'wrong expected version' USING ERRCODE = '${wrongVersionState}', DETAIL = 'no_stream';
        END IF;
      ELSIF p_expected <> 'any' THEN
        IF v_current IS DISTINCT FROM p_expected::integer THEN
          RAISE EXCEPTION 'wrong expected version' USING ERRCODE = '${wrongVersionState}',
            DETAIL = coalesce(v_current::text, 'no_stream');
        END IF;
      END IF;
      -- A retried batch whose events are already stored: the retry lost, as a version race would.
      -- (= ANY of an array keeps this an index probe; a join would scan the whole log.)
      IF EXISTS (SELECT 1 FROM events ev WHERE ev.event_id = ANY (
                   ARRAY(SELECT (d.doc->>'eventId')::uuid FROM jsonb_array_elements(p_events) AS d(doc)))) THEN
        RAISE EXCEPTION 'event id already stored' USING ERRCODE = '${wrongVersionState}',
          DETAIL = coalesce(v_current::text, 'no_stream');
      END IF;
      IF v_count > 0 THEN
        UPDATE streams SET version = coalesce(v_current, -1) + v_count WHERE stream_id = p_stream_id;
        RETURN QUERY
          INSERT INTO events (event_id, stream_id, stream_version, type, schema_version, repository_id,
                              actor, causation_id, correlation_id, data)
          SELECT (e.doc->>'eventId')::uuid, p_stream_id, coalesce(v_current, -1) + e.n::integer,
                 e.doc->>'type', (e.doc->>'schemaVersion')::integer, e.doc->>'repositoryId',
                 e.doc->>'actor', e.doc->>'causationId', e.doc->>'correlationId', e.doc->'data'
          FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(doc, n)
          ORDER BY e.n
          RETURNING *;
      END IF;
    EXCEPTION
      -- The lock is a session lock (so it can be released before commit): release it on every error.
      WHEN query_canceled THEN
        PERFORM pg_advisory_unlock(v_lock_key);
        RAISE;
      WHEN OTHERS THEN
        PERFORM pg_advisory_unlock(v_lock_key);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(v_lock_key);
  END;
  $fn$`,
];

/** Creates the event tables and the append function; safe to run any number of times, concurrently. */
export async function migrateEventStore(knex: Knex): Promise<void> {
  await migrateUnderLock(knex, 'events', async (trx) => {
    for (const statement of migrationStatements) await trx.raw(statement);
  });
}

/** A row of `events` as the drivers return it (int8 is a string on pg, a number on PGlite). */
interface EventRow {
  global_position: string | number;
  event_id: string;
  stream_id: string;
  stream_version: number;
  type: string;
  schema_version: number;
  repository_id: string | null;
  actor: string;
  causation_id: string | null;
  correlation_id: string | null;
  data: Record<string, unknown>;
  occurred_at: Date | string;
}

const eventColumns = [
  'global_position',
  'event_id',
  'stream_id',
  'stream_version',
  'type',
  'schema_version',
  'repository_id',
  'actor',
  'causation_id',
  'correlation_id',
  'data',
  'occurred_at',
] as const;

function toRecordedEvent(row: EventRow): RecordedEvent {
  return {
    eventId: row.event_id,
    streamId: row.stream_id,
    streamVersion: Number(row.stream_version),
    globalPosition: Number(row.global_position),
    type: row.type,
    schemaVersion: Number(row.schema_version),
    repositoryId: row.repository_id,
    actor: row.actor,
    causationId: row.causation_id,
    correlationId: row.correlation_id,
    data: row.data,
    occurredAt: (row.occurred_at instanceof Date ? row.occurred_at : new Date(row.occurred_at)).toISOString(),
  };
}

function databaseErrorCode(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null || !('code' in error)) return undefined;
  const code = (error as { code: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}

async function currentStreamVersion(runner: Knex | Knex.Transaction, streamId: string): Promise<number | 'no_stream'> {
  const row = (await runner('streams').select('version').where('stream_id', streamId).first()) as { version: number } | undefined;
  return row ? Number(row.version) : 'no_stream';
}

/**
 * Appends inside the caller's transaction (for writes that must commit together with the events).
 * The append must be the transaction's first write and its only append, and the transaction should
 * commit promptly: until it does, readers of the global log see no later position.
 * Validation and error mapping are those of EventStore.append.
 */
export async function appendInTransaction(
  trx: Knex.Transaction,
  schemas: EventSchemaRegistry,
  streamId: string,
  events: readonly NewEvent[],
  expected: ExpectedVersion,
): Promise<AppendResult> {
  // A savepoint keeps the caller's transaction usable after a refused append (and lets us read the actual version).
  let actualVersionUnknown = false;
  try {
    return await trx.transaction((savepoint) =>
      appendEvents(savepoint, schemas, streamId, events, expected, async () => {
        actualVersionUnknown = true;
        return 'no_stream'; // replaced below, once the savepoint is rolled back
      }),
    );
  } catch (error) {
    if (actualVersionUnknown && error instanceof ConcurrencyError) {
      throw new ConcurrencyError(streamId, expected, await currentStreamVersion(trx, streamId));
    }
    throw error;
  }
}

async function appendEvents(
  runner: Knex | Knex.Transaction,
  schemas: EventSchemaRegistry,
  streamId: string,
  events: readonly NewEvent[],
  expected: ExpectedVersion,
  actualVersionAfterConflict: () => Promise<number | 'no_stream'>,
): Promise<AppendResult> {
  if (typeof streamId !== 'string' || streamId === '') throw new RangeError('streamId must be a non-empty string');
  checkExpectedVersion(expected);
  const documents = validateNewEvents(schemas, events);
  let rows: EventRow[];
  try {
    const result = await runner.raw('SELECT * FROM factlog_append_events(?, ?, ?::jsonb)', [
      streamId,
      String(expected),
      JSON.stringify(documents),
    ]);
    rows = (result as { rows: EventRow[] }).rows;
  } catch (error) {
    const code = databaseErrorCode(error);
    if (code === wrongVersionState) {
      const detail = (error as { detail?: string }).detail;
      const actual = detail === undefined || detail === 'no_stream' ? 'no_stream' : Number(detail);
      throw new ConcurrencyError(streamId, expected, actual);
    }
    // A racing append created the stream first, or a retried batch whose event ids are already stored.
    if (code === uniqueViolationState) throw new ConcurrencyError(streamId, expected, await actualVersionAfterConflict());
    if (code === untranslatableCharacterState) {
      throw new InvalidEventError(documents[0]?.type ?? 'unknown', 'a string contains a character jsonb cannot store (\\u0000)');
    }
    throw error;
  }
  const recorded = rows.map(toRecordedEvent).sort((a, b) => a.globalPosition - b.globalPosition);
  const last = recorded[recorded.length - 1];
  if (!last) {
    // An empty batch only checks the expected version.
    const version = await currentStreamVersion(runner, streamId);
    return { nextExpectedVersion: version === 'no_stream' ? -1 : version, lastPosition: 0, events: [] };
  }
  return { nextExpectedVersion: last.streamVersion, lastPosition: last.globalPosition, events: recorded };
}

interface GlobalReadOptions extends ReadAllOptions {
  /** Only positions up to this one (inclusive): lets a filtered reader know how far it has scanned. */
  upTo?: number;
}

async function readGlobal(knex: Knex, options: GlobalReadOptions): Promise<RecordedEvent[]> {
  const limit = options.limit ?? defaultReadLimit;
  if (!Number.isInteger(limit) || limit < 0) throw new RangeError(`limit must be an integer >= 0, got ${String(limit)}`);
  const after = options.after ?? 0;
  if (!Number.isInteger(after) || after < 0) throw new RangeError(`after must be an integer >= 0, got ${String(after)}`);
  if (limit === 0 || (options.types !== undefined && options.types.length === 0)) return [];
  const query = knex('events')
    .select(...eventColumns)
    .whereRaw(visibleToReaders)
    .andWhere('global_position', '>', after)
    .orderBy('global_position')
    .limit(limit);
  if (options.upTo !== undefined) query.andWhere('global_position', '<=', options.upTo);
  if (options.types !== undefined) query.whereIn('type', [...options.types]);
  if (options.repositoryId !== undefined) query.andWhere('repository_id', options.repositoryId);
  if (options.streamId !== undefined) query.andWhere('stream_id', options.streamId);
  const rows = (await query) as EventRow[];
  return rows.map(toRecordedEvent);
}

async function readHead(knex: Knex): Promise<number> {
  const result = await knex.raw(`SELECT coalesce(max(global_position), 0) AS head FROM events WHERE ${visibleToReaders}`);
  const row = (result as { rows: Array<{ head: string | number }> }).rows[0];
  return Number(row?.head ?? 0);
}

export function createPostgresEventStore(db: Database, options: PostgresEventStoreOptions): EventStore {
  const { knex } = db;
  const pollIntervalMs = options.pollIntervalMs ?? (db.kind === 'pglite' ? 250 : 50);
  const subscriptions = new Set<PollingSubscription>();

  return {
    async append(streamId, events, expected) {
      const result = await appendEvents(knex, options.schemas, streamId, events, expected, () =>
        currentStreamVersion(knex, streamId),
      );
      if (result.events.length > 0) for (const subscription of subscriptions) subscription.notify();
      return result;
    },

    async readStream(streamId: string, readOptions: ReadStreamOptions = {}) {
      const fromVersion = readOptions.fromVersion ?? 0;
      if (!Number.isInteger(fromVersion) || fromVersion < 0) throw new RangeError(`fromVersion must be an integer >= 0`);
      const query = knex('events')
        .select(...eventColumns)
        .where('stream_id', streamId)
        .andWhere('stream_version', '>=', fromVersion)
        .orderBy('stream_version');
      if (readOptions.limit !== undefined) {
        if (!Number.isInteger(readOptions.limit) || readOptions.limit < 0) throw new RangeError('limit must be an integer >= 0');
        query.limit(readOptions.limit);
      }
      return ((await query) as EventRow[]).map(toRecordedEvent);
    },

    readAll: (readOptions = {}) => readGlobal(knex, readOptions),

    headPosition: () => readHead(knex),

    subscribe(subscribeOptions: SubscribeOptions): Subscription {
      const subscription = new PollingSubscription(knex, subscribeOptions, pollIntervalMs, () =>
        subscriptions.delete(subscription),
      );
      subscriptions.add(subscription);
      subscription.start();
      return subscription;
    },

    async close() {
      await Promise.all([...subscriptions].map((subscription) => subscription.stop()));
    },
  };
}

interface CaughtUpWaiter {
  target: number;
  resolve: () => void;
  reject: (error: Error) => void;
}

/** Catch-up then live: reads batches after its position, awaits the handler, sleeps when idle. */
class PollingSubscription implements Subscription {
  /** Last position delivered to the handler. */
  private position: number;
  /** Every visible position up to here has been looked at (delivered or filtered out). */
  private scanned: number;
  private running = true;
  private failure: Error | null = null;
  /** Set by notify(): an append happened since the last read began, so do not sleep. */
  private appendedSinceRead = false;
  private wake: (() => void) | null = null;
  private loop: Promise<void> = Promise.resolve();
  private waiters: CaughtUpWaiter[] = [];
  private readonly batchSize: number;

  constructor(
    private readonly knex: Knex,
    private readonly options: SubscribeOptions,
    private readonly pollIntervalMs: number,
    private readonly onFinished: () => void,
  ) {
    if (!Number.isInteger(options.after) || options.after < 0) throw new RangeError('after must be an integer >= 0');
    this.batchSize = options.batchSize ?? defaultBatchSize;
    if (!Number.isInteger(this.batchSize) || this.batchSize < 1) throw new RangeError('batchSize must be an integer >= 1');
    this.position = options.after;
    this.scanned = options.after;
  }

  start(): void {
    this.loop = this.run().finally(() => {
      this.running = false;
      this.settleWaiters();
      this.onFinished();
    });
  }

  notify(): void {
    this.appendedSinceRead = true;
    this.wake?.();
  }

  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loop;
  }

  async caughtUp(): Promise<void> {
    const target = await readHead(this.knex);
    return new Promise<void>((resolve, reject) => {
      this.waiters.push({ target, resolve, reject });
      this.settleWaiters();
    });
  }

  private settleWaiters(): void {
    const pending: CaughtUpWaiter[] = [];
    for (const waiter of this.waiters) {
      if (this.scanned >= waiter.target) waiter.resolve();
      else if (!this.running) waiter.reject(this.failure ?? new Error('subscription stopped before catching up'));
      else pending.push(waiter);
    }
    this.waiters = pending;
  }

  private async run(): Promise<void> {
    const { types, handler } = this.options;
    while (this.running) {
      try {
        this.appendedSinceRead = false;
        // With a type filter the batch alone cannot tell how far the log was scanned: bound it by the head.
        const upTo = types !== undefined ? await readHead(this.knex) : undefined;
        const batch = await readGlobal(this.knex, { after: this.position, limit: this.batchSize, types, upTo });
        if (!this.running) return;
        const last = batch[batch.length - 1];
        if (last) {
          await handler(batch);
          this.position = last.globalPosition;
        }
        const full = batch.length === this.batchSize;
        this.scanned = Math.max(this.scanned, full || upTo === undefined ? this.position : upTo);
        this.settleWaiters();
        if (full) continue;
      } catch (error) {
        this.failure = error instanceof Error ? error : new Error(String(error));
        this.running = false;
        if (this.options.onError) this.options.onError(error);
        else process.emitWarning(`event subscription stopped: ${this.failure.message}`);
        return;
      }
      if (!this.appendedSinceRead && this.running) await this.sleep();
    }
  }

  private sleep(): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, this.pollIntervalMs);
      const self = this;
      function done() {
        clearTimeout(timer);
        self.wake = null;
        resolve();
      }
      this.wake = done;
    });
  }
}
