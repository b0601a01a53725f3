import type { Knex } from 'knex';
import { withoutPlannerStatistics } from '../db/autovacuum.js';
import type { Database } from '../db/database.js';
import { applyMigrations, functionHasBody, plannerStatisticsOff, relationsExist, type Migrator } from '../db/migrations.js';
import { rawQuery } from '../db/rawQuery.js';
import { databaseErrorCode, UNIQUE_VIOLATION } from '../db/errorCodes.js';
import { isoTimestamp } from '../db/timestamps.js';
import type { NewEvent, RecordedEvent } from './envelope.js';
import {
  ConcurrencyError,
  InvalidEventError,
  type AppendResult,
  type EventStore,
  type ExpectedVersion,
  type ReadAllOptions,
  type ReadStreamOptions,
  type ReadStreamsOptions,
  type StreamAppend,
  type StreamAppendOutcome,
  type SubscribeOptions,
  type Subscription,
} from './port.js';
import type { EventSchemaRegistry } from './schemas.js';
import { checkExpectedVersion, validateNewEvents, validateStreamAppends } from './validation.js';

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
/** jsonb refuses \u0000 in strings. */
const untranslatableCharacterState = '22P05';

const defaultReadLimit = 1000;
const defaultBatchSize = 500;

/** Events of the global log visible to readers: written by transactions older than every running one. */
const visibleToReaders = 'transaction_id < pg_snapshot_xmin(pg_current_snapshot())';

/**
 * The end of both append functions: the append lock is a session lock (so it can be released
 * before commit), released on every error and after the work.
 */
const releaseAppendLockAndEnd = `    EXCEPTION
      WHEN query_canceled THEN
        PERFORM pg_advisory_unlock(v_lock_key);
        RAISE;
      WHEN OTHERS THEN
        PERFORM pg_advisory_unlock(v_lock_key);
        RAISE;
    END;
    PERFORM pg_advisory_unlock(v_lock_key);
  END;
  $fn$`;

/** Columns of `events` that no statement filters, joins or sorts on: the envelope's payload and provenance. */
export const unfilteredEventColumns = ['data', 'actor', 'causation_id', 'correlation_id', 'occurred_at', 'schema_version'] as const;

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
  // No planner statistics for the columns no read filters on: ANALYZE of 24,000 events sampled
  // the payloads too and held PGlite's one connection 160 ms (60 ms without them), several times
  // a 1,000-page ingest (docs/performance.md, "Twentieth round"). Set once: changing the catalogue
  // at every start would invalidate every connection's cached plans of the table.
  withoutPlannerStatistics('events', unfilteredEventColumns),
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
      -- A retried batch whose events are already stored fails on events_event_id_key (a unique
      -- violation, which the caller reports as a lost version race). No lookup beforehand: its
      -- cached generic plan scanned the whole log, so appends slowed as the log grew.
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
${releaseAppendLockAndEnd}`,
];

/**
 * The multi-stream append (`appendToStreams`): the same steps as `factlog_append_events` for each
 * part, under one advisory lock and in one transaction, but a part whose expected version does
 * not hold (or whose event ids are stored already) is reported instead of raised, so the other
 * parts are stored. Streams are locked in id order, so two multi-stream appends cannot deadlock.
 * p_appends: a JSON array of {streamId, expected, events: [as factlog_append_events]}.
 * Returns, per part (out_index: its place in p_appends): a refused part one row with
 * out_conflict and the actual version (null: no stream); an empty part one row with the
 * current version; a stored part one row per event with its position, version and time.
 */
const appendToStreamsFunction = `CREATE OR REPLACE FUNCTION factlog_append_to_streams(p_appends jsonb)
  RETURNS TABLE (out_index integer, out_conflict boolean, out_actual integer, out_position bigint, out_version integer, out_time timestamptz)
  LANGUAGE plpgsql AS $fn$
  DECLARE
    v_lock_key constant bigint := hashtext('factlog.events.append');
    v_part record;
    v_stream text;
    v_expected text;
    v_events jsonb;
    v_current integer;
    v_found boolean;
    v_count integer;
    v_holds boolean;
    v_stored_ids uuid[];
  BEGIN
    IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
      RAISE EXCEPTION 'an append must be the first write of its transaction' USING ERRCODE = '${lateAppendState}';
    END IF;
    PERFORM pg_advisory_lock(v_lock_key);
    BEGIN
      PERFORM pg_current_xact_id();
      -- The call's event ids already stored (a retried part), looked up once for every part: a
      -- lookup per part cost about 0.2 ms each, a third of a 20-part append (docs/performance.md,
      -- "Fourteenth round"). The ids are distinct within a call (validateStreamAppends), so no part
      -- can meet another part's events. EXECUTE plans the lookup for the table as it is now: as a
      -- static statement PL/pgSQL cached one plan per session, and a plan made while events was
      -- small (a new data directory) was a sequential scan, kept while the table grew.
      EXECUTE 'SELECT coalesce(array_agg(e.event_id), ''{}'') FROM events e WHERE e.event_id = ANY ($1)' INTO v_stored_ids
        USING ARRAY(SELECT (d.doc->>'eventId')::uuid FROM jsonb_array_elements(p_appends) AS p(doc), jsonb_array_elements(p.doc->'events') AS d(doc));
      FOR v_part IN
        SELECT p.doc, (p.n - 1)::integer AS idx FROM jsonb_array_elements(p_appends) WITH ORDINALITY AS p(doc, n)
        ORDER BY p.doc->>'streamId' COLLATE "C"
      LOOP
        v_stream := v_part.doc->>'streamId';
        v_expected := v_part.doc->>'expected';
        v_events := v_part.doc->'events';
        v_count := jsonb_array_length(v_events);
        SELECT s.version INTO v_current FROM streams s WHERE s.stream_id = v_stream FOR UPDATE;
        v_found := FOUND;
        IF NOT v_found THEN v_current := NULL; END IF;
        v_holds := CASE
          WHEN v_expected = 'no_stream' THEN v_current IS NULL
          WHEN v_expected = 'stream_exists' THEN v_current IS NOT NULL
          WHEN v_expected = 'any' THEN true
          ELSE v_current IS NOT DISTINCT FROM v_expected::integer
        END;
        IF v_holds AND v_count > 0 AND NOT v_found THEN
          -- Waits for a racing creator of the same stream; if it committed, its version is checked again.
          INSERT INTO streams (stream_id, version) VALUES (v_stream, -1) ON CONFLICT (stream_id) DO NOTHING;
          SELECT s.version INTO v_current FROM streams s WHERE s.stream_id = v_stream FOR UPDATE;
          IF v_current = -1 THEN
            v_current := NULL;
          ELSE
            v_holds := v_expected = 'any' OR v_expected = 'stream_exists' OR v_current IS NOT DISTINCT FROM
              CASE WHEN v_expected ~ '^[0-9]+$' THEN v_expected::integer END;
          END IF;
        END IF;
        -- A retried part whose events are already stored: the retry lost, as a version race would.
        IF v_holds AND v_count > 0 AND cardinality(v_stored_ids) > 0
           AND EXISTS (SELECT 1 FROM jsonb_array_elements(v_events) AS d(doc) WHERE (d.doc->>'eventId')::uuid = ANY (v_stored_ids)) THEN
          v_holds := false;
        END IF;
        IF NOT v_holds THEN
          -- A stream row this part created (version -1) must not outlive the refusal.
          DELETE FROM streams s WHERE s.stream_id = v_stream AND s.version = -1;
          out_index := v_part.idx; out_conflict := true; out_actual := v_current;
          out_position := NULL; out_version := NULL; out_time := NULL;
          RETURN NEXT;
        ELSIF v_count = 0 THEN
          out_index := v_part.idx; out_conflict := false; out_actual := v_current;
          out_position := NULL; out_version := NULL; out_time := NULL;
          RETURN NEXT;
        ELSE
          UPDATE streams SET version = coalesce(v_current, -1) + v_count WHERE stream_id = v_stream;
          RETURN QUERY
            WITH inserted AS (
              INSERT INTO events (event_id, stream_id, stream_version, type, schema_version, repository_id,
                                  actor, causation_id, correlation_id, data)
              SELECT (e.doc->>'eventId')::uuid, v_stream, coalesce(v_current, -1) + e.n::integer,
                     e.doc->>'type', (e.doc->>'schemaVersion')::integer, e.doc->>'repositoryId',
                     e.doc->>'actor', e.doc->>'causationId', e.doc->>'correlationId', e.doc->'data'
              FROM jsonb_array_elements(v_events) WITH ORDINALITY AS e(doc, n)
              ORDER BY e.n
              RETURNING events.global_position, events.stream_version, events.occurred_at
            )
            SELECT v_part.idx, false, NULL::integer, i.global_position, i.stream_version, i.occurred_at FROM inserted i;
        END IF;
      END LOOP;
${releaseAppendLockAndEnd}`;

const [createEvents, indexByRepository, indexByType, eventStatistics, createStreams, appendEventsFunction] = migrationStatements;

/**
 * The event store's schema as migration steps (src/db/migrations.ts): each looks in the catalogue
 * for what it makes, so a database that has it is not changed (the functions are replaced when
 * their body differs from this release's).
 */
export const eventStoreMigrator: Migrator = {
  schema: 'event store',
  lockName: 'events',
  steps: [
    {
      id: 'events',
      applied: (knex) => relationsExist(knex, 'events', 'events_repository_position_idx', 'events_type_position_idx'),
      up: async (trx) => {
        for (const statement of [createEvents, indexByRepository, indexByType]) await trx.raw(statement);
      },
    },
    { id: 'events_planner_statistics', applied: (knex) => plannerStatisticsOff(knex, 'events', unfilteredEventColumns), up: async (trx) => void (await trx.raw(eventStatistics)) },
    { id: 'streams', applied: (knex) => relationsExist(knex, 'streams'), up: async (trx) => void (await trx.raw(createStreams)) },
    {
      id: 'factlog_append_events',
      applied: (knex) => functionHasBody(knex, 'factlog_append_events', appendEventsFunction),
      up: async (trx) => void (await trx.raw(appendEventsFunction)),
    },
    {
      id: 'factlog_append_to_streams',
      applied: (knex) => functionHasBody(knex, 'factlog_append_to_streams', appendToStreamsFunction),
      up: async (trx) => void (await trx.raw(appendToStreamsFunction)),
    },
  ],
};

/** Creates the event tables and the append functions where missing; safe to run any number of times, concurrently. Returns the steps applied. */
export function migrateEventStore(knex: Knex): Promise<string[]> {
  return applyMigrations(knex, eventStoreMigrator);
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

/** The same columns for the statements written out (rawQuery). */
const eventColumnList = eventColumns.map((column) => `"${column}"`).join(', ');

/** What `factlog_append_events` assigned to one appended event. */
interface AppendedRow {
  global_position: string | number;
  stream_version: number;
  occurred_at: Date | string;
}

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
    occurredAt: isoTimestamp(row.occurred_at),
  };
}

async function currentStreamVersion(runner: Knex | Knex.Transaction, streamId: string): Promise<number | 'no_stream'> {
  const [row] = (await rawQuery<{ version: number }>(runner, 'SELECT version FROM streams WHERE stream_id = ? LIMIT 1', [streamId])).rows;
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
  let rows: AppendedRow[];
  try {
    // Only what the store assigned comes back: the rest is in `documents`, and sending each
    // event's data back to be parsed again cost as much as storing it.
    const result = await rawQuery<AppendedRow>(
      runner,
      'SELECT global_position, stream_version, occurred_at FROM factlog_append_events(?, ?, ?::jsonb) ORDER BY stream_version',
      [streamId, String(expected), JSON.stringify(documents)],
    );
    rows = result.rows;
  } catch (error) {
    const code = databaseErrorCode(error);
    if (code === wrongVersionState) {
      const detail = (error as { detail?: string }).detail;
      const actual = detail === undefined || detail === 'no_stream' ? 'no_stream' : Number(detail);
      throw new ConcurrencyError(streamId, expected, actual);
    }
    // A racing append created the stream first, or a retried batch whose event ids are already stored.
    if (code === UNIQUE_VIOLATION) throw new ConcurrencyError(streamId, expected, await actualVersionAfterConflict());
    if (code === untranslatableCharacterState) {
      throw new InvalidEventError(documents[0]?.type ?? 'unknown', 'a string contains a character jsonb cannot store (\\u0000)');
    }
    throw error;
  }
  // The function numbers the events in batch order: the n-th row (by stream version) is documents[n].
  const recorded = rows.map((row, index): RecordedEvent => {
    const document = documents[index];
    return {
      eventId: document.eventId,
      streamId,
      streamVersion: Number(row.stream_version),
      globalPosition: Number(row.global_position),
      type: document.type,
      schemaVersion: document.schemaVersion,
      repositoryId: document.repositoryId,
      actor: document.actor,
      causationId: document.causationId,
      correlationId: document.correlationId,
      data: document.data,
      occurredAt: isoTimestamp(row.occurred_at),
    };
  });
  const last = recorded[recorded.length - 1];
  if (!last) {
    // An empty batch only checks the expected version.
    const version = await currentStreamVersion(runner, streamId);
    return { nextExpectedVersion: version === 'no_stream' ? -1 : version, lastPosition: 0, events: [] };
  }
  return { nextExpectedVersion: last.streamVersion, lastPosition: last.globalPosition, events: recorded };
}

/** `readStreams`: every event of the streams in one statement, grouped by stream. */
async function readManyStreams(knex: Knex, streamIds: readonly string[], options: ReadStreamsOptions = {}): Promise<Map<string, RecordedEvent[]>> {
  const byStream = new Map<string, RecordedEvent[]>();
  for (const streamId of streamIds) {
    if (typeof streamId !== 'string') throw new RangeError('stream ids must be strings');
    byStream.set(streamId, []);
  }
  if (byStream.size === 0) return byStream;
  // The omitted fields are removed where the rows are made (`data - fields`), so they never cross to this thread.
  const omitted = Object.entries(options.omitData ?? {}).filter(([, fields]) => fields.length > 0);
  const columns =
    omitted.length === 0
      ? eventColumnList
      : eventColumnList.replace('"data"', `CASE "type" ${omitted.map(() => 'WHEN ? THEN "data" - ?::text[]').join(' ')} ELSE "data" END AS "data"`);
  const ids = [...byStream.keys()];
  const omittedBindings = omitted.flatMap(([type, fields]) => [type, [...fields]]);
  // Read on from a version: one index range per stream, so the rows before it are never visited.
  // Only when some stream has one: a reader that keeps none (FoldedStates' first read) reads whole.
  const after = options.after;
  const { rows } = after !== undefined && ids.some((id) => after[id] !== undefined)
    ? await rawQuery<EventRow>(
        knex,
        `SELECT ${columns} FROM unnest(?::text[], ?::int[]) AS s(id, read_after)
           CROSS JOIN LATERAL (SELECT * FROM events WHERE stream_id = s.id AND stream_version > s.read_after) AS e
          ORDER BY e.stream_id, e.stream_version`,
        [...omittedBindings, ids, ids.map((id) => after[id] ?? -1)],
      )
    : await rawQuery<EventRow>(
        knex,
        `SELECT ${columns} FROM events WHERE stream_id = ANY(?::text[]) ORDER BY stream_id, stream_version`,
        [...omittedBindings, ids],
      );
  for (const row of rows) byStream.get(row.stream_id)?.push(toRecordedEvent(row));
  return byStream;
}

/** What `factlog_append_to_streams` returns: one row per stored event, or one per refused or empty part. */
interface PartRow {
  out_index: number;
  out_conflict: boolean;
  out_actual: number | null;
  out_position: string | number | null;
  out_version: number | null;
  out_time: Date | string | null;
}

/**
 * How much JSON one statement of a multi-stream append carries at most (a part larger than this
 * goes alone). On PGlite a statement holds the one connection until it ends: a summary pass's
 * append of 120 concepts' slices (1.1 MB) held it 146 ms while a search waited
 * (docs/performance.md, "Twenty-first round"). Parts are independent (see the port), so a call
 * may go as several statements, in order.
 */
const APPEND_STATEMENT_BYTES = 256 * 1024;

/** Consecutive parts' JSON documents in groups of at most APPEND_STATEMENT_BYTES. */
function statementGroups(documents: readonly string[]): Array<{ start: number; documents: string[] }> {
  const groups: Array<{ start: number; documents: string[] }> = [];
  let bytes = 0;
  for (const [index, document] of documents.entries()) {
    const current = groups.at(-1);
    if (current === undefined || bytes + document.length > APPEND_STATEMENT_BYTES) {
      groups.push({ start: index, documents: [document] });
      bytes = document.length;
    } else {
      current.documents.push(document);
      bytes += document.length;
    }
  }
  return groups;
}

/**
 * `appendToStreams`: the parts in as few statements of factlog_append_to_streams as
 * APPEND_STATEMENT_BYTES allows (one for most calls); see the port.
 */
async function appendManyStreams(knex: Knex, schemas: EventSchemaRegistry, appends: readonly StreamAppend[]): Promise<StreamAppendOutcome[]> {
  const validated = validateStreamAppends(schemas, appends);
  if (appends.length === 0) return [];
  const refuseNul = () => new InvalidEventError(validated.flat()[0]?.type ?? 'unknown', 'a string contains a character jsonb cannot store (\\u0000)');
  const documents = appends.map((part, index) => JSON.stringify({ streamId: part.streamId, expected: String(part.expected), events: validated[index] }));
  const groups = statementGroups(documents);
  // One statement refuses a \u0000 before storing anything; several must find it before the first.
  if (groups.length > 1 && documents.some((document) => document.includes('\\u0000'))) throw refuseNul();
  const rows: PartRow[] = [];
  for (const group of groups) {
    try {
      const result = await rawQuery<PartRow>(knex, 'SELECT * FROM factlog_append_to_streams(?::jsonb)', [`[${group.documents.join(',')}]`]);
      for (const row of result.rows) rows.push({ ...row, out_index: Number(row.out_index) + group.start });
    } catch (error) {
      if (databaseErrorCode(error) === untranslatableCharacterState) throw refuseNul();
      throw error;
    }
  }
  const rowsByPart = new Map<number, PartRow[]>();
  for (const row of rows) {
    const index = Number(row.out_index);
    const list = rowsByPart.get(index) ?? [];
    list.push(row);
    rowsByPart.set(index, list);
  }
  return appends.map((part, index): StreamAppendOutcome => {
    const partRows = (rowsByPart.get(index) ?? []).sort((a, b) => Number(a.out_version) - Number(b.out_version));
    const [first] = partRows;
    const actual = first?.out_actual === null || first?.out_actual === undefined ? 'no_stream' : Number(first.out_actual);
    if (!first || first.out_conflict) return { streamId: part.streamId, conflict: new ConcurrencyError(part.streamId, part.expected, actual) };
    if (first.out_position === null) {
      // An empty part only checks the version.
      return { streamId: part.streamId, result: { nextExpectedVersion: actual === 'no_stream' ? -1 : actual, lastPosition: 0, events: [] } };
    }
    const events = partRows.map((row, position): RecordedEvent => {
      const document = validated[index][position];
      return {
        eventId: document.eventId,
        streamId: part.streamId,
        streamVersion: Number(row.out_version),
        globalPosition: Number(row.out_position),
        type: document.type,
        schemaVersion: document.schemaVersion,
        repositoryId: document.repositoryId,
        actor: document.actor,
        causationId: document.causationId,
        correlationId: document.correlationId,
        data: document.data,
        occurredAt: isoTimestamp(row.out_time as Date | string),
      };
    });
    const last = events[events.length - 1];
    return { streamId: part.streamId, result: { nextExpectedVersion: last.streamVersion, lastPosition: last.globalPosition, events } };
  });
}

interface GlobalReadOptions extends ReadAllOptions {
  /** Only positions up to this one (inclusive): lets a filtered reader know how far it has scanned. */
  upTo?: number;
}

/**
 * How a global read comes back. `rows`: one row per event, as the driver shapes it (a server: the
 * pg driver parses each row on this thread). `json`: on PGlite, the whole batch as one JSON text
 * (`json_agg`), parsed on this thread. PGlite runs in a worker thread that is the bottleneck of a
 * catch-up (busy 95% of it, this thread 10%), and per row it decoded every column and cloned a
 * row object across threads: half of a 500-event read's cost there (docs/performance.md, "Catch-up,
 * fourth round"). One text clones as one string. On a server the aggregate costs the server
 * more than the rows cost the driver, so it reads rows.
 */
type GlobalReadShape = 'rows' | 'json';

async function readGlobal(knex: Knex, options: GlobalReadOptions, shape: GlobalReadShape = 'rows'): Promise<RecordedEvent[]> {
  const limit = options.limit ?? defaultReadLimit;
  if (!Number.isInteger(limit) || limit < 0) throw new RangeError(`limit must be an integer >= 0, got ${String(limit)}`);
  const after = options.after ?? 0;
  if (!Number.isInteger(after) || after < 0) throw new RangeError(`after must be an integer >= 0, got ${String(after)}`);
  if (limit === 0 || (options.types !== undefined && options.types.length === 0)) return [];
  const conditions = [visibleToReaders, 'global_position > ?'];
  const bindings: unknown[] = [after];
  if (options.upTo !== undefined) {
    conditions.push('global_position <= ?');
    bindings.push(options.upTo);
  }
  if (options.types !== undefined) {
    conditions.push('type = ANY(?::text[])');
    bindings.push([...options.types]);
  }
  if (options.repositoryId !== undefined) {
    conditions.push('repository_id = ?');
    bindings.push(options.repositoryId);
  }
  if (options.streamId !== undefined) {
    conditions.push('stream_id = ?');
    bindings.push(options.streamId);
  }
  bindings.push(limit);
  if (shape === 'json') {
    const { rows } = await rawQuery<{ events: string | null }>(
      knex,
      `SELECT json_agg(e ORDER BY e.global_position)::text AS events
         FROM (SELECT ${eventColumnList} FROM events WHERE ${conditions.join(' AND ')} ORDER BY global_position LIMIT ?) AS e`,
      bindings,
    );
    const text = rows[0]?.events;
    // JSON gives int8 as a number and occurred_at as an RFC 3339 string, which isoTimestamp parses as
    // PGlite parses the row's text (`new Date`): the same occurredAt either way.
    return text ? (JSON.parse(text) as EventRow[]).map(toRecordedEvent) : [];
  }
  const { rows } = await rawQuery<EventRow>(
    knex,
    `SELECT ${eventColumnList} FROM events WHERE ${conditions.join(' AND ')} ORDER BY global_position LIMIT ?`,
    bindings,
  );
  return rows.map(toRecordedEvent);
}

async function readHead(knex: Knex, seen: SeenHead): Promise<number> {
  const [row] = (await rawQuery<{ head: string | number }>(knex, `SELECT coalesce(max(global_position), 0) AS head FROM events WHERE ${visibleToReaders}`)).rows;
  const head = Number(row?.head ?? 0);
  seen.read(head);
  return head;
}

/**
 * The head as this process learnt it, for `recentHeadPosition`: read by a statement (the head
 * itself, or a subscription's unfiltered read that came back short), or raised by an append
 * where a committed append is visible at once (PGlite: one connection, so no older transaction
 * can still be running). Only a read makes it recent.
 */
export class SeenHead {
  private position = 0;
  private readAt = Number.NEGATIVE_INFINITY;

  /** `now`: milliseconds on a monotonic clock; tests pass one they move themselves. */
  constructor(private readonly now: () => number = () => performance.now()) {}

  /** A statement found `position` to be the head. */
  read(position: number): void {
    // Lower: an append noted meanwhile moved it on after the statement's snapshot.
    if (position < this.position) return;
    this.position = position;
    this.readAt = this.now();
  }

  /**
   * A read found nothing visible after `position`. That is the head only if the head is known
   * to have reached it already: a subscription may start after a position the log never had.
   */
  nothingAfter(position: number): void {
    if (position === this.position) this.readAt = this.now();
  }

  /** An event at `position` is stored and visible (a full read's last event, an append on PGlite). */
  raise(position: number): void {
    this.position = Math.max(this.position, position);
  }

  recent(maxAgeMs: number): number | null {
    return this.now() - this.readAt <= maxAgeMs ? this.position : null;
  }
}

export function createPostgresEventStore(db: Database, options: PostgresEventStoreOptions): EventStore {
  const { knex } = db;
  const pollIntervalMs = options.pollIntervalMs ?? (db.kind === 'pglite' ? 250 : 50);
  const subscriptions = new Set<PollingSubscription>();
  const seen = new SeenHead();
  // On a server an older transaction of another connection may still hide a committed append from readers.
  const appendsVisibleAtOnce = db.kind === 'pglite';
  const readShape: GlobalReadShape = db.kind === 'pglite' ? 'json' : 'rows';
  // A server has a pool: a subscription catching up reads its next batch on another connection
  // while its handler applies this one. PGlite's one connection would only queue the read.
  const readAhead = db.kind === 'postgres';

  return {
    async append(streamId, events, expected) {
      const result = await appendEvents(knex, options.schemas, streamId, events, expected, () =>
        currentStreamVersion(knex, streamId),
      );
      if (result.events.length > 0) {
        if (appendsVisibleAtOnce) seen.raise(result.lastPosition);
        for (const subscription of subscriptions) subscription.notify(result.lastPosition);
      }
      return result;
    },

    async readStream(streamId: string, readOptions: ReadStreamOptions = {}) {
      const fromVersion = readOptions.fromVersion ?? 0;
      if (!Number.isInteger(fromVersion) || fromVersion < 0) throw new RangeError(`fromVersion must be an integer >= 0`);
      if (typeof streamId !== 'string') throw new RangeError('streamId must be a string');
      const bindings: unknown[] = [streamId, fromVersion];
      let limit = '';
      if (readOptions.limit !== undefined) {
        if (!Number.isInteger(readOptions.limit) || readOptions.limit < 0) throw new RangeError('limit must be an integer >= 0');
        limit = ' LIMIT ?';
        bindings.push(readOptions.limit);
      }
      const { rows } = await rawQuery<EventRow>(
        knex,
        `SELECT ${eventColumnList} FROM events WHERE stream_id = ? AND stream_version >= ? ORDER BY stream_version${limit}`,
        bindings,
      );
      return rows.map(toRecordedEvent);
    },

    readStreams: (streamIds, readOptions) => readManyStreams(knex, streamIds, readOptions),

    async appendToStreams(appends) {
      const outcomes = await appendManyStreams(knex, options.schemas, appends);
      if (outcomes.some((outcome) => outcome.result && outcome.result.events.length > 0)) {
        if (appendsVisibleAtOnce) for (const outcome of outcomes) if (outcome.result) seen.raise(outcome.result.lastPosition);
        const lastPosition = Math.max(...outcomes.map((outcome) => outcome.result?.lastPosition ?? 0));
        for (const subscription of subscriptions) subscription.notify(lastPosition);
      }
      return outcomes;
    },

    readAll: (readOptions = {}) => readGlobal(knex, readOptions, readShape),

    headPosition: () => readHead(knex, seen),
    async committedHeadPosition() {
      const [row] = (await rawQuery<{ head: string | number }>(knex, 'SELECT coalesce(max(global_position), 0) AS head FROM events')).rows;
      return Number(row?.head ?? 0);
    },

    recentHeadPosition: (maxAgeMs) => seen.recent(maxAgeMs),

    subscribe(subscribeOptions: SubscribeOptions): Subscription {
      const subscription = new PollingSubscription(knex, subscribeOptions, pollIntervalMs, readShape, readAhead, seen, () =>
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

/**
 * How soon a subscription looks again for an append made through its store that its last read
 * did not see (hidden on a server until older transactions anywhere on it end), however long its
 * poll interval: the server's default poll interval.
 */
const hiddenAppendPollMs = 50;

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
  /** The last position appended through this store (notify): the subscription has not scanned it while below. */
  private appendedUpTo = 0;
  private wake: (() => void) | null = null;
  private loop: Promise<void> = Promise.resolve();
  private waiters: CaughtUpWaiter[] = [];
  private readonly batchSize: number;

  constructor(
    private readonly knex: Knex,
    private readonly options: SubscribeOptions,
    private readonly pollIntervalMs: number,
    private readonly readShape: GlobalReadShape,
    /** Whether to read the next batch while the handler works on a full one (see run). */
    private readonly readAhead: boolean,
    private readonly seen: SeenHead,
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

  notify(lastPosition: number): void {
    this.appendedSinceRead = true;
    this.appendedUpTo = Math.max(this.appendedUpTo, lastPosition);
    this.wake?.();
  }

  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loop;
  }

  async caughtUp(): Promise<void> {
    const target = await readHead(this.knex, this.seen);
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
    /** The next batch, read while the handler applied a full one: what the next turn would read. */
    let next: Promise<RecordedEvent[]> | null = null;
    while (this.running) {
      try {
        // Cleared where each read begins: an append noted after that is still to be read.
        if (next === null) this.appendedSinceRead = false;
        // With a type filter the batch alone cannot tell how far the log was scanned: bound it by the head.
        const upTo = types !== undefined ? await readHead(this.knex, this.seen) : undefined;
        const batch = await (next ?? this.readAfter(this.position, upTo));
        next = null;
        if (!this.running) return;
        const last = batch[batch.length - 1];
        if (last) {
          // Catching up (a full batch, no type filter): the read after it cannot depend on the
          // handler, and reads only what is visible when it runs, as it would after the handler.
          if (this.readAhead && types === undefined && batch.length === this.batchSize) {
            this.appendedSinceRead = false;
            next = this.readAfter(last.globalPosition, undefined);
            // Handled: a failed read ahead fails when awaited, or not at all if never delivered.
            next.catch(() => undefined);
          }
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
      if (!this.appendedSinceRead && this.running) {
        // On a server an older transaction elsewhere can hide an append from the read its wake
        // caused: look again soon rather than after a whole poll interval.
        await this.sleep(this.scanned < this.appendedUpTo ? Math.min(this.pollIntervalMs, hiddenAppendPollMs) : this.pollIntervalMs);
      }
    }
  }

  /** The batch after `after` (bounded by `upTo` with a type filter); an unfiltered read also tells the head as it was then. */
  private async readAfter(after: number, upTo: number | undefined): Promise<RecordedEvent[]> {
    const { types } = this.options;
    const batch = await readGlobal(this.knex, { after, limit: this.batchSize, types, upTo }, this.readShape);
    if (types === undefined) this.noteHead(after, batch);
    return batch;
  }

  /** An unfiltered read tells the head: its last event if it came back short, else a position the head has passed. */
  private noteHead(after: number, batch: readonly RecordedEvent[]): void {
    const last = batch[batch.length - 1];
    if (!last) this.seen.nothingAfter(after);
    else if (batch.length < this.batchSize) this.seen.read(last.globalPosition);
    else this.seen.raise(last.globalPosition);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, ms);
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
