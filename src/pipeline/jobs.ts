import { createHash } from 'node:crypto';
import type { Knex } from 'knex';
import type { Job, JobState } from './types.js';
import { withoutPlannerStatistics } from '../db/autovacuum.js';
import { applyMigrations, plannerStatisticsOff, relationsExist, type Migrator } from '../db/migrations.js';
import { rawQuery } from '../db/rawQuery.js';
import { isoTimestamp, isoTimestampOrNull, utcMicrosecondsText } from '../db/timestamps.js';
import { isUuid } from '../util/uuid.js';
import { boundedErrorMessage } from '../util/errorMessage.js';

/**
 * The `jobs` table and its repository (DESIGN.md, "Stage runtime").
 *
 * Jobs hold runtime state (attempts, leases, errors), not a read model derived from the log:
 * no projection lists them as rebuildable tables. Every operation is one short SQL statement,
 * so on PGlite (one connection) no worker ever holds the connection while a stage runs, and on
 * a PostgreSQL server `FOR UPDATE SKIP LOCKED` lets many claimers share the queue.
 *
 * Times come from the database clock (`now()`), never the process clock, so several workers
 * on several hosts agree on leases and backoffs.
 */

export const jobStates: readonly JobState[] = ['queued', 'running', 'succeeded', 'failed', 'dead'];

/** Attempts a job gets when the enqueuer does not say (the runtime overwrites it at claim). */
const defaultMaxAttempts = 5;

/**
 * `last_error` is for people reading the tasks API, not a log: a longer message keeps its start
 * and its end, in at most this many characters (boundedErrorMessage).
 */
export const MAX_TASK_ERROR_CHARS = 4000;

/**
 * The characters of MAX_TASK_ERROR_CHARS a failed attempt's own error leaves free: a rescue writes
 * its note (`orphaned: worker … stopped heartbeating during attempt N; attempt M failed: `: 73
 * characters, the worker id (a host name, a pid and 8 characters: 81 at most on Linux) and the
 * attempts' numbers) before the reason it keeps, in its one statement, where no bounding can run.
 */
const ORPHAN_NOTE_ROOM = 400;

/** A failed attempt's error in `last_error`, at most (boundedErrorMessage): what is left beside a rescue's note. */
export const MAX_ATTEMPT_ERROR_CHARS = MAX_TASK_ERROR_CHARS - ORPHAN_NOTE_ROOM;

/**
 * The reason a rescue's note carried on (`; attempt M failed: …`), as group 1 of a `last_error`
 * written by a rescue; no match for a note that carried none. The worker id is matched lazily:
 * the first `stopped heartbeating` ends it, not one inside the reason.
 */
const CARRIED_REASON = '^orphaned: worker .*? stopped heartbeating during attempt [0-9]+(; attempt [0-9]+ failed: .*)$';

/** Queued jobs one statement of `endCovered` ends at most (see there). */
export const ENDED_PER_STATEMENT = 200;

/** A job row with the bookkeeping the tasks API and the runtime need beyond `Job`. */
export interface JobRecord extends Job {
  maxAttempts: number;
  /** When a queued job becomes claimable (the backoff of a transient failure). */
  nextAttemptAt: string;
  leaseUntil: string | null;
  heartbeatAt: string | null;
  /** Worker id of the last claim. */
  claimedBy: string | null;
  finishedAt: string | null;
}

/** A job this worker holds; `claimToken` fences every later write to the claim it came from. */
export interface ClaimedJob extends JobRecord {
  claimToken: string;
}

export interface EnqueueJobInput {
  kind: string;
  subjectId: string;
  /** A scheduled job (no trigger event) passes its derived id (`scheduledTriggerId`) and position 0. */
  triggerEventId: string;
  triggerPosition: number;
  repositoryId: string | null;
  correlationId: string | null;
  /** The source the job works for, so the tasks API can answer "is this source done". */
  sourceId?: string | null;
  /** The report the job works for (annotate_report). */
  reportId?: string | null;
  maxAttempts?: number;
}

export interface ClaimOptions {
  leaseMs: number;
  /** The runtime's retry budget, written on the row so the tasks API shows what applies. */
  maxAttempts?: number;
}

export interface FailJobInput {
  error: string;
  /** A permanent failure is final at once; a transient one is retried while attempts remain. */
  permanent: boolean;
  /** Backoff before the next attempt of a transient failure. */
  retryDelayMs: number;
}

export interface RescueOptions {
  /** A running job whose heartbeat is older than this is an orphan even if its lease runs on. */
  heartbeatTimeoutMs: number;
  /** Also rescue every running job claimed by this worker id (it has just restarted). */
  claimedBy?: string;
  /** Rescue every running job: right at start-up on PGlite, which only one process can open. */
  everyRunning?: boolean;
}

export interface RescueResult {
  /** Back to queued, to run again. */
  requeued: JobRecord[];
  /** Orphaned with no attempt left: `dead`, retried only by hand. */
  dead: JobRecord[];
}

export interface JobListFilter {
  repositoryId?: string;
  kind?: string;
  state?: JobState;
  subjectId?: string;
  sourceId?: string;
  /** Jobs of any of these sources (an investigation's). */
  sourceIds?: readonly string[];
  reportId?: string;
  /** 1..1000, default 50. */
  limit?: number;
  /** Default 0. */
  offset?: number;
  /** Only the jobs after this one in the list's order (a keyset page; with `offset`, counted from there). */
  after?: JobListPosition;
}

/**
 * A job's place in `list`'s order (created_at descending, trigger_position descending, id): its
 * creation time in UTC with microseconds (`YYYY-MM-DDTHH:MM:SS.ffffffZ`; a `Date` keeps
 * milliseconds, and jobs of one statement share the time), its trigger position in decimal, its id.
 */
export interface JobListPosition {
  at: string;
  position: string;
  id: string;
}

export interface JobList {
  jobs: JobRecord[];
  /** Rows matching the filter, ignoring limit, offset and `after`. */
  total: number;
  /** The last job listed when more follow it (pass it as `after` for the next page); null on the last page. */
  next: JobListPosition | null;
}

export type RetryResult =
  | { status: 'requeued'; job: JobRecord }
  | { status: 'not_found' }
  /** Only failed and dead jobs can be retried; the job is returned as it is. */
  | { status: 'not_retryable'; job: JobRecord };

/** Job counts by kind, then state (every state present, zeros included): queue depth for metrics. */
export type JobCounts = Record<string, Record<JobState, number>>;

export interface JobCountsFilter {
  repositoryId: string;
  sourceId?: string;
  /** Jobs of any of these sources (an investigation's). */
  sourceIds?: readonly string[];
  reportId?: string;
}

/** Fixed namespace of job ids (a random v4 chosen once). */
const jobIdNamespace = Buffer.from('3c6f0e2a8d4b4f0e9b7a5c1d2e3f4a5b', 'hex');

/**
 * The job id is a name-based UUID (v5 layout) of (kind, subject, trigger event): a duplicate
 * delivery computes the same id, and intake stays deterministic as projections must be.
 */
export function jobIdFor(kind: string, subjectId: string, triggerEventId: string): string {
  const digest = createHash('sha1')
    .update(jobIdNamespace)
    .update(`${kind}\u0000${subjectId}\u0000${triggerEventId.toLowerCase()}`)
    .digest();
  digest[6] = (digest[6] & 0x0f) | 0x50;
  digest[8] = (digest[8] & 0x3f) | 0x80;
  const hex = digest.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * The jobs table's schema as migration steps (src/db/migrations.ts). Each looks first for what it
 * makes (the last object of each step: its DDL commits as one), so a migrated database gets no DDL
 * at all: an ALTER TABLE takes its ACCESS EXCLUSIVE lock before it finds the column there, and a
 * node that joins a running cluster would then deadlock with the workers' claims on `jobs`.
 */
export const jobsMigrator: Migrator = {
  schema: 'jobs',
  lockName: 'jobs',
  steps: [
    { id: 'jobs', applied: (knex) => relationsExist(knex, 'jobs_report_idx'), up: createJobsTable },
    { id: 'job_count_deltas', applied: (knex) => relationsExist(knex, 'job_count_deltas'), up: createJobCounts },
    // No planner statistics for the columns no statement filters on: the embedded autovacuum's
    // ANALYZE of a 1,000-page ingest's 9,000 jobs took 90 ms with them and 55 ms without, holding
    // PGlite's one connection while searches waited (docs/performance.md, "Twenty-sixth round").
    // Its ALTER (a SHARE UPDATE EXCLUSIVE lock, which the workers' claims do not wait for) runs
    // once per database.
    {
      id: 'jobs_planner_statistics',
      applied: (knex) => plannerStatisticsOff(knex, 'jobs', unfilteredJobColumns),
      up: async (trx) => void (await trx.raw(withoutPlannerStatistics('jobs', unfilteredJobColumns))),
    },
    { id: 'jobs_list_order', applied: (knex) => relationsExist(knex, 'jobs_list_state_idx'), up: createListIndexes },
  ],
};

/**
 * Creates the `jobs` table and its indexes if missing. Safe to run concurrently from several
 * processes: an advisory lock serializes the DDL (plain IF NOT EXISTS races on a server).
 * Returns the steps applied.
 */
export function migrateJobs(knex: Knex): Promise<string[]> {
  return applyMigrations(knex, jobsMigrator);
}

/** Columns of `jobs` that no statement filters, joins or sorts on (trigger_event_id is read through its unique index only). */
export const unfilteredJobColumns = ['trigger_event_id', 'correlation_id', 'attempts', 'max_attempts', 'heartbeat_at', 'claimed_by', 'last_error', 'updated_at', 'finished_at'] as const;

async function createJobsTable(trx: Knex.Transaction): Promise<void> {
  await trx.raw(`
    CREATE TABLE IF NOT EXISTS jobs (
      id               uuid PRIMARY KEY,
      kind             text NOT NULL,
      repository_id    text,
      subject_id       text NOT NULL,
      trigger_event_id uuid NOT NULL,
      trigger_position bigint NOT NULL,
      correlation_id   text,
      state            text NOT NULL DEFAULT 'queued'
                       CHECK (state IN ('queued', 'running', 'succeeded', 'failed', 'dead')),
      attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
      max_attempts     integer NOT NULL DEFAULT ${defaultMaxAttempts} CHECK (max_attempts >= 1),
      next_attempt_at  timestamptz NOT NULL DEFAULT now(),
      lease_until      timestamptz,
      heartbeat_at     timestamptz,
      claimed_by       text,
      claim_token      uuid,
      last_error       text,
      created_at       timestamptz NOT NULL DEFAULT now(),
      updated_at       timestamptz NOT NULL DEFAULT now(),
      finished_at      timestamptz,
      CONSTRAINT jobs_trigger_key UNIQUE (kind, subject_id, trigger_event_id)
    )`);
  // Claiming scans only queued rows of one kind, oldest due first.
  await trx.raw(
    `CREATE INDEX IF NOT EXISTS jobs_claim_idx ON jobs (kind, next_attempt_at) WHERE state = 'queued'`,
  );
  // Rescue scans only running rows.
  await trx.raw(`CREATE INDEX IF NOT EXISTS jobs_running_idx ON jobs (lease_until) WHERE state = 'running'`);
  await trx.raw(`CREATE INDEX IF NOT EXISTS jobs_repository_idx ON jobs (repository_id, created_at DESC)`);
  await trx.raw(`CREATE INDEX IF NOT EXISTS jobs_subject_idx ON jobs (subject_id)`);
  // Added after the first release: additive, so databases created before gain them in place.
  await trx.raw(`ALTER TABLE jobs ADD COLUMN IF NOT EXISTS source_id text`);
  await trx.raw(`ALTER TABLE jobs ADD COLUMN IF NOT EXISTS report_id text`);
  await trx.raw(`CREATE INDEX IF NOT EXISTS jobs_source_idx ON jobs (repository_id, source_id) WHERE source_id IS NOT NULL`);
  await trx.raw(`CREATE INDEX IF NOT EXISTS jobs_report_idx ON jobs (repository_id, report_id) WHERE report_id IS NOT NULL`);
}

/**
 * `list`'s whole order within a repository, and within a repository and state, so that a keyset
 * page starts at its position in an index and reads its own rows. jobs_repository_idx had the
 * time alone: a page sorted the repository's jobs, and one deep in its history first read and
 * dropped every job before its position. jobs_list_idx begins with its columns, so it goes. The
 * state's own index: a state that is not most of the jobs (failed, dead, queued) walked in the
 * whole order reads much of the history to fill a page. A plain CREATE INDEX, as a step runs in a
 * transaction (CONCURRENTLY cannot): jobs waits while it builds (docs/operations.md, "Upgrading").
 */
async function createListIndexes(trx: Knex.Transaction): Promise<void> {
  // The drop first: its exclusive lock is the step's first on jobs, not one raised from the builds'
  // share lock while a transaction that read jobs waits behind that to write (a deadlock).
  await trx.raw(`DROP INDEX IF EXISTS jobs_repository_idx`);
  await trx.raw(`CREATE INDEX IF NOT EXISTS jobs_list_idx ON jobs (repository_id, created_at DESC, trigger_position DESC, id)`);
  await trx.raw(`CREATE INDEX IF NOT EXISTS jobs_list_state_idx ON jobs (repository_id, state, created_at DESC, trigger_position DESC, id)`);
}

/**
 * A repository's job counts by kind and state, kept as they change: the tasks API answers every
 * poll with them, and counting `jobs` itself grows with the repository's history (18 ms of
 * PGlite's thread a poll at 1,000 pages, about 12,000 jobs; docs/performance.md, "Nineteenth
 * round"). Statement-level triggers add each statement's net change per (repository, kind,
 * state) as rows of `job_count_deltas`: insert-only, so concurrent workers never wait on a
 * shared counter row; readers sum them, and a reader that finds many rows folds them into one
 * per group (`JobRepository.compactCounts`). Created with the current counts, under a lock that keeps
 * `jobs` still meanwhile.
 */
async function createJobCounts(trx: Knex.Transaction): Promise<void> {
  await trx.raw('LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE');
  await trx.raw(`CREATE TABLE job_count_deltas (
    repository_id text,
    kind          text NOT NULL,
    state         text NOT NULL,
    delta         bigint NOT NULL
  )`);
  await trx.raw('CREATE INDEX job_count_deltas_repository_idx ON job_count_deltas (repository_id)');
  // A function per event, each summing the transition tables its event has (an old row counts -1, a new row +1).
  const newRows = { table: 'NEW TABLE AS new_jobs', rows: 'SELECT repository_id, kind, state, 1 AS d FROM new_jobs' };
  const oldRows = { table: 'OLD TABLE AS old_jobs', rows: 'SELECT repository_id, kind, state, -1 AS d FROM old_jobs' };
  const transitions = { INSERT: [newRows], UPDATE: [oldRows, newRows], DELETE: [oldRows] };
  for (const [event, tables] of Object.entries(transitions)) {
    const name = `factlog_job_counts_${event.toLowerCase()}`;
    await trx.raw(`CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        INSERT INTO job_count_deltas (repository_id, kind, state, delta)
          SELECT repository_id, kind, state, sum(d) FROM (${tables.map((table) => table.rows).join(' UNION ALL ')}) AS changed
          GROUP BY repository_id, kind, state HAVING sum(d) <> 0;
        RETURN NULL;
      END
      $fn$`);
    await trx.raw(
      `CREATE TRIGGER ${name} AFTER ${event} ON jobs REFERENCING ${tables.map((table) => table.table).join(' ')} FOR EACH STATEMENT EXECUTE FUNCTION ${name}()`,
    );
  }
  await trx.raw(`CREATE FUNCTION factlog_job_counts_truncate() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
      DELETE FROM job_count_deltas;
      RETURN NULL;
    END
    $fn$`);
  await trx.raw('CREATE TRIGGER factlog_job_counts_truncate AFTER TRUNCATE ON jobs FOR EACH STATEMENT EXECUTE FUNCTION factlog_job_counts_truncate()');
  await trx.raw(`INSERT INTO job_count_deltas (repository_id, kind, state, delta)
    SELECT repository_id, kind, state, count(*) FROM jobs GROUP BY repository_id, kind, state`);
}

interface JobRow {
  id: string;
  kind: string;
  repository_id: string | null;
  subject_id: string;
  source_id: string | null;
  report_id: string | null;
  trigger_event_id: string;
  trigger_position: string | number;
  correlation_id: string | null;
  state: JobState;
  attempts: number;
  max_attempts: number;
  next_attempt_at: Date | string;
  lease_until: Date | string | null;
  heartbeat_at: Date | string | null;
  claimed_by: string | null;
  claim_token: string | null;
  last_error: string | null;
  created_at: Date | string;
  updated_at: Date | string;
  finished_at: Date | string | null;
}

function toRecord(row: JobRow): JobRecord {
  return {
    id: row.id,
    kind: row.kind,
    repositoryId: row.repository_id,
    subjectId: row.subject_id,
    sourceId: row.source_id,
    reportId: row.report_id,
    triggerEventId: row.trigger_event_id,
    // bigint arrives as a string from pg and as a number from PGlite
    triggerPosition: Number(row.trigger_position),
    correlationId: row.correlation_id,
    state: row.state,
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    lastError: row.last_error,
    nextAttemptAt: isoTimestamp(row.next_attempt_at),
    leaseUntil: isoTimestampOrNull(row.lease_until),
    heartbeatAt: isoTimestampOrNull(row.heartbeat_at),
    claimedBy: row.claimed_by,
    finishedAt: isoTimestampOrNull(row.finished_at),
    createdAt: isoTimestamp(row.created_at),
    updatedAt: isoTimestamp(row.updated_at),
  };
}

function toClaimed(row: JobRow): ClaimedJob {
  if (row.claim_token === null) throw new Error(`job ${row.id} was claimed without a claim token`);
  return { ...toRecord(row), claimToken: row.claim_token };
}

function requireText(name: string, value: unknown): string {
  if (typeof value !== 'string' || value.trim() === '') {
    throw new TypeError(`${name} must be a non-empty string`);
  }
  return value;
}

function requireInteger(name: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`${name} must be an integer in [${min}, ${max}], got ${String(value)}`);
  }
  return value;
}

function requireDuration(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new RangeError(`${name} must be a finite number of milliseconds >= 0, got ${String(value)}`);
  }
  return value;
}

function requireState(value: unknown): JobState {
  if (!jobStates.includes(value as JobState)) {
    throw new RangeError(`state must be one of ${jobStates.join(', ')}, got ${String(value)}`);
  }
  return value as JobState;
}

/**
 * Whether a later job of the same kind and subject took this one's place (its source started
 * over, say): re-running this one would redo what the later one did or does.
 */
export function isSuperseded(job: Job, others: readonly Job[]): boolean {
  return others.some((later) => later.kind === job.kind && later.subjectId === job.subjectId && later.triggerPosition > job.triggerPosition);
}

/** More rows than this in `job_count_deltas` for one read: the read folds them (about a few seconds of an ingest's job changes). */
const compactAbove = 500;

function countsOf(rows: ReadonlyArray<{ kind: string; state: JobState; count: number }>): JobCounts {
  const counts: JobCounts = {};
  for (const row of rows) {
    counts[row.kind] ??= { queued: 0, running: 0, succeeded: 0, failed: 0, dead: 0 };
    counts[row.kind][row.state] = row.count;
  }
  return counts;
}

/**
 * A scheduled job (trigger position 0) of the row `r`'s kind and subject in `state`: one
 * condition per state, so each reads its state's partial index (`jobs_claim_idx`,
 * `jobs_running_idx`), a few rows, not the subject's whole history.
 */
const pendingScheduled = (state: 'queued' | 'running') =>
  `SELECT 1 FROM jobs pending WHERE pending.state = '${state}' AND pending.kind = r.kind AND pending.subject_id = r.subject_id AND pending.trigger_position = 0`;

/** `now() + ms` in SQL; ms bound as float8 so fractions and large values both work. */
const nowPlusMs = `now() + (?::double precision * interval '1 millisecond')`;

/**
 * The jobs table over knex. Pass a transaction to enlist an operation in it (the intake
 * projection enqueues inside the projection's transaction).
 */
export class JobRepository {
  constructor(private readonly knex: Knex) {}

  /**
   * Inserts a queued job; a duplicate (same kind, subject and trigger event) changes nothing.
   * The conflict target is left open: the id is derived from that same triple, so two racing
   * inserts collide on the primary key as often as on the trigger key, and either is a duplicate.
   */
  async enqueue(input: EnqueueJobInput): Promise<{ id: string; inserted: boolean }> {
    const [result] = await this.enqueueMany([input]);
    return result;
  }

  /**
   * enqueue for many jobs in one statement; the answers in the order given. A job listed twice
   * is inserted once (the second answer says not inserted), as two enqueues in a row would.
   * With `skipWhilePending` (scheduled jobs) a job is not inserted while a scheduled job of its
   * kind and subject is queued or running: a pass slower than its interval would otherwise have
   * the next buckets' passes start beside it, each doing the same work, and on a loaded machine
   * each one slower for the others (97 catch-up passes of one repository running at once in one
   * CI run). The pending pass covers what the skipped one would have done.
   */
  async enqueueMany(
    inputs: readonly EnqueueJobInput[],
    options: { skipWhilePending?: boolean } = {},
  ): Promise<Array<{ id: string; inserted: boolean }>> {
    const rows = inputs.map((input) => {
      const kind = requireText('kind', input.kind);
      const subjectId = requireText('subjectId', input.subjectId);
      const triggerEventId = requireText('triggerEventId', input.triggerEventId);
      if (!isUuid(triggerEventId)) throw new TypeError(`triggerEventId must be a UUID, got ${triggerEventId}`);
      const triggerPosition = requireInteger('triggerPosition', input.triggerPosition, 0);
      const maxAttempts = requireInteger('maxAttempts', input.maxAttempts ?? defaultMaxAttempts, 1, 1000);
      return {
        id: jobIdFor(kind, subjectId, triggerEventId),
        kind,
        repository_id: input.repositoryId,
        subject_id: subjectId,
        source_id: input.sourceId ?? null,
        report_id: input.reportId ?? null,
        trigger_event_id: triggerEventId,
        trigger_position: triggerPosition,
        correlation_id: input.correlationId,
        max_attempts: maxAttempts,
      };
    });
    if (rows.length === 0) return [];
    // ON CONFLICT cannot touch one row twice in a statement: a repeated id is sent once.
    const unique = [...new Map(rows.map((row) => [row.id, row])).values()];
    const result = await rawQuery<{ id: string }>(
      this.knex,
      `INSERT INTO jobs (id, kind, repository_id, subject_id, source_id, report_id, trigger_event_id,
                         trigger_position, correlation_id, max_attempts)
       SELECT r.id, r.kind, r.repository_id, r.subject_id, r.source_id, r.report_id, r.trigger_event_id,
              r.trigger_position, r.correlation_id, r.max_attempts
         FROM jsonb_to_recordset(?::jsonb) AS r(id uuid, kind text, repository_id text, subject_id text, source_id text,
              report_id text, trigger_event_id uuid, trigger_position bigint, correlation_id text, max_attempts integer)
        WHERE NOT ?::boolean OR (NOT EXISTS (${pendingScheduled('queued')}) AND NOT EXISTS (${pendingScheduled('running')}))
       ON CONFLICT DO NOTHING
       RETURNING id`,
      [JSON.stringify(unique), options.skipWhilePending === true],
    );
    const inserted = new Set(result.rows.map((row) => String(row.id)));
    return rows.map((row) => {
      const fresh = inserted.delete(row.id);
      return { id: row.id, inserted: fresh };
    });
  }

  /**
   * Takes the oldest due queued job of `kind`, or null. One statement: the row lock of the
   * subquery plus SKIP LOCKED hands each job to exactly one of many concurrent claimers.
   */
  async claim(kind: string, workerId: string, options: ClaimOptions): Promise<ClaimedJob | null> {
    const [claimed] = await this.claimMany(kind, workerId, 1, options);
    return claimed ?? null;
  }

  /**
   * Takes up to `limit` of the oldest due queued jobs of `kind` in one statement (oldest first),
   * each with its own claim token. A dispatcher with many free workers fills them with one
   * round trip instead of one per job.
   */
  async claimMany(kind: string, workerId: string, limit: number, options: ClaimOptions): Promise<ClaimedJob[]> {
    return (await this.claimBatch(kind, workerId, limit, options)).claims;
  }

  /**
   * claimMany, also telling whether another due job of the kind was left queued (`more`), so a
   * dispatcher knows without a second claim that comes back empty.
   */
  async claimBatch(kind: string, workerId: string, limit: number, options: ClaimOptions): Promise<{ claims: ClaimedJob[]; more: boolean }> {
    requireText('kind', kind);
    requireText('workerId', workerId);
    requireInteger('limit', limit, 1, 1000);
    const leaseMs = requireDuration('leaseMs', options.leaseMs);
    const maxAttempts =
      options.maxAttempts === undefined ? null : requireInteger('maxAttempts', options.maxAttempts, 1, 1000);
    // The CTE is evaluated once: `id IN (subquery ... LIMIT n SKIP LOCKED)` may be re-run per row
    // and take more than n. It picks one job more than it claims, to tell whether any is left.
    const result = await rawQuery<JobRow & { more: boolean }>(
      this.knex,
      `WITH picked AS MATERIALIZED (
         SELECT id, next_attempt_at, trigger_position FROM jobs
          WHERE kind = ? AND state = 'queued' AND next_attempt_at <= now()
          ORDER BY next_attempt_at, trigger_position
          LIMIT ?
          FOR UPDATE SKIP LOCKED),
       chosen AS (SELECT id FROM picked ORDER BY next_attempt_at, trigger_position LIMIT ?),
       claimed AS (
       UPDATE jobs
          SET state = 'running',
              attempts = attempts + 1,
              max_attempts = COALESCE(?::integer, max_attempts),
              claimed_by = ?,
              claim_token = gen_random_uuid(),
              lease_until = ${nowPlusMs},
              heartbeat_at = now(),
              finished_at = NULL,
              updated_at = now()
         FROM chosen
        WHERE jobs.id = chosen.id AND jobs.state = 'queued'
        RETURNING jobs.*)
       SELECT claimed.*, (SELECT count(*) FROM picked) > ? AS more FROM claimed`,
      [kind, limit + 1, limit, maxAttempts, workerId, leaseMs, limit],
    );
    const claimed = result.rows.map(toClaimed);
    return {
      claims: claimed.sort(
        (a, b) => Date.parse(a.nextAttemptAt) - Date.parse(b.nextAttemptAt) || a.triggerPosition - b.triggerPosition,
      ),
      more: result.rows.some((row) => row.more === true),
    };
  }

  /**
   * Extends the lease of the given claims; returns the tokens still held. A token missing from
   * the answer lost its job (rescued after a stall, or retried by hand): its run must stop.
   */
  async heartbeat(claimTokens: readonly string[], leaseMs: number): Promise<Set<string>> {
    requireDuration('leaseMs', leaseMs);
    if (claimTokens.length === 0) return new Set();
    const result = await rawQuery<{ claim_token: string }>(
      this.knex,
      `UPDATE jobs
          SET heartbeat_at = now(), lease_until = ${nowPlusMs}, updated_at = now()
        WHERE claim_token = ANY(?::uuid[]) AND state = 'running'
        RETURNING claim_token`,
      [leaseMs, [...claimTokens]],
    );
    return new Set(result.rows.map((row) => row.claim_token));
  }

  /** Marks a claimed job succeeded; null when the claim was lost meanwhile (nothing changed). */
  async succeed(claim: Pick<ClaimedJob, 'id' | 'claimToken'>): Promise<JobRecord | null> {
    return (await this.succeedMany([claim])).get(claim.claimToken) ?? null;
  }

  /**
   * Marks claimed jobs succeeded in one statement; the answer maps each claim token still held
   * to its row. A token missing from it lost its claim meanwhile (nothing changed for that job).
   */
  async succeedMany(claims: ReadonlyArray<Pick<ClaimedJob, 'id' | 'claimToken'>>): Promise<Map<string, JobRecord>> {
    if (claims.length === 0) return new Map();
    const result = await rawQuery<JobRow & { held_token: string }>(
      this.knex,
      `UPDATE jobs
          SET state = 'succeeded', last_error = NULL, lease_until = NULL, claim_token = NULL,
              finished_at = now(), updated_at = now()
         FROM unnest(?::uuid[], ?::uuid[]) AS held(job_id, token)
        WHERE jobs.id = held.job_id AND jobs.claim_token = held.token AND jobs.state = 'running'
        RETURNING jobs.*, held.token AS held_token`,
      [claims.map((claim) => claim.id), claims.map((claim) => claim.claimToken)],
    );
    return new Map(result.rows.map((row) => [row.held_token, toRecord(row)]));
  }

  /**
   * Ends, as succeeded and without running them, the queued jobs of `kind` and `subjectId` whose
   * triggers are at or before `throughPosition` (scheduled ones, at 0, too): a run that began
   * after the read models had applied those triggers does what each of them would do
   * (`JobContext.coverQueued`). Their `attempts` stay as they were (0 for a job never claimed).
   * A job claimed meanwhile is not queued any more and is left to its worker. Returns how many ended.
   *
   * At most ENDED_PER_STATEMENT jobs a statement: a summaries run covers a repository's every
   * queued trigger, a thousand and more during a burst of pages, and ending them in one
   * statement held PGlite's one connection up to 166 ms while requests waited
   * (docs/performance.md, "Twenty-fourth round").
   */
  async endCovered(kind: string, subjectId: string, throughPosition: number): Promise<number> {
    requireText('kind', kind);
    requireText('subjectId', subjectId);
    requireInteger('throughPosition', throughPosition, 0);
    let total = 0;
    for (;;) {
      // A picked job claimed before the update reached it stays its worker's: ended < picked.
      const result = await rawQuery<{ picked: number; ended: number }>(
        this.knex,
        `WITH picked AS MATERIALIZED (
           SELECT id FROM jobs WHERE kind = ? AND state = 'queued' AND subject_id = ? AND trigger_position <= ? LIMIT ?),
         ended AS (
           UPDATE jobs
              SET state = 'succeeded', last_error = NULL, finished_at = now(), updated_at = now()
            WHERE id IN (SELECT id FROM picked) AND state = 'queued'
            RETURNING 1)
         SELECT (SELECT count(*) FROM picked)::integer AS picked, (SELECT count(*) FROM ended)::integer AS ended`,
        [kind, subjectId, throughPosition, ENDED_PER_STATEMENT],
      );
      total += Number(result.rows[0]?.ended ?? 0);
      if (Number(result.rows[0]?.picked ?? 0) < ENDED_PER_STATEMENT) return total;
    }
  }

  /**
   * Records a failed attempt. Permanent, or transient with no attempt left: `failed`.
   * Transient with attempts left: back to `queued`, due after `retryDelayMs`.
   * Null when the claim was lost meanwhile (nothing changed).
   */
  async fail(claim: Pick<ClaimedJob, 'id' | 'claimToken'>, input: FailJobInput): Promise<JobRecord | null> {
    const retryDelayMs = requireDuration('retryDelayMs', input.retryDelayMs);
    const final = `(?::boolean OR attempts >= max_attempts)`;
    const result = await this.knex.raw<{ rows: JobRow[] }>(
      `UPDATE jobs
          SET state = CASE WHEN ${final} THEN 'failed' ELSE 'queued' END,
              next_attempt_at = CASE WHEN ${final} THEN next_attempt_at ELSE ${nowPlusMs} END,
              finished_at = CASE WHEN ${final} THEN now() ELSE NULL END,
              last_error = ?, lease_until = NULL, claim_token = NULL, updated_at = now()
        WHERE id = ? AND claim_token = ? AND state = 'running'
        RETURNING *`,
      [
        input.permanent,
        input.permanent,
        retryDelayMs,
        input.permanent,
        boundedErrorMessage(input.error, MAX_ATTEMPT_ERROR_CHARS),
        claim.id,
        claim.claimToken,
      ],
    );
    const row = result.rows[0];
    return row ? toRecord(row) : null;
  }

  /**
   * Gives back a claim without counting the attempt (the worker stopped before running it).
   * Returns whether the job was still held.
   */
  async release(claim: Pick<ClaimedJob, 'id' | 'claimToken'>): Promise<boolean> {
    const result = await this.knex.raw<{ rows: Array<{ id: string }> }>(
      `UPDATE jobs
          SET state = 'queued', attempts = GREATEST(attempts - 1, 0), lease_until = NULL,
              claim_token = NULL, next_attempt_at = now(), updated_at = now()
        WHERE id = ? AND claim_token = ? AND state = 'running'
        RETURNING id`,
      [claim.id, claim.claimToken],
    );
    return result.rows.length > 0;
  }

  /** The API's retry: a failed or dead job goes back to queued with a fresh attempt budget. */
  async retry(id: string): Promise<RetryResult> {
    if (!isUuid(id)) return { status: 'not_found' };
    const result = await this.knex.raw<{ rows: JobRow[] }>(
      `UPDATE jobs
          SET state = 'queued', attempts = 0, next_attempt_at = now(), lease_until = NULL,
              claim_token = NULL, finished_at = NULL, updated_at = now()
        WHERE id = ? AND state IN ('failed', 'dead')
        RETURNING *`,
      [id],
    );
    const row = result.rows[0];
    if (row) return { status: 'requeued', job: toRecord(row) };
    const existing = await this.get(id);
    return existing ? { status: 'not_retryable', job: existing } : { status: 'not_found' };
  }

  /**
   * Running jobs whose worker is gone (lease expired, heartbeat too old, or selected by the
   * options) go back to queued; those with no attempt left become `dead`.
   *
   * `last_error` says so (`orphaned: worker w stopped heartbeating during attempt 2`) and keeps
   * the reason the attempt before failed with (`; attempt 1 failed: HTTP 500`): the dead job, its
   * task and its source's failure would otherwise show only that a worker died. A job orphaned
   * again carries the reason its last note kept, not the note (no chain of notes): the last real
   * failure is what a reader needs. A first attempt keeps nothing (a `last_error` left from
   * before a retry by hand is another run's). The reason is the stored one, bounded already
   * (MAX_ATTEMPT_ERROR_CHARS, its note's room left free); a text still over MAX_TASK_ERROR_CHARS
   * (a worker id of hundreds of characters, or a reason stored before this room was kept) keeps
   * the note alone.
   */
  async rescueOrphans(options: RescueOptions): Promise<RescueResult> {
    const heartbeatTimeoutMs = requireDuration('heartbeatTimeoutMs', options.heartbeatTimeoutMs);
    const result = await this.knex.raw<{ rows: JobRow[] }>(
      `WITH orphans AS (
         SELECT id,
                'orphaned: worker ' || COALESCE(claimed_by, 'unknown') ||
                ' stopped heartbeating during attempt ' || attempts AS note,
                CASE WHEN attempts <= 1 OR last_error IS NULL THEN ''
                     WHEN last_error LIKE 'orphaned: worker %' THEN COALESCE(substring(last_error FROM ?), '')
                     ELSE '; attempt ' || (attempts - 1) || ' failed: ' || last_error
                END AS earlier
           FROM jobs
          WHERE state = 'running'
            AND (?::boolean
                 OR claimed_by = ?
                 OR lease_until IS NULL OR lease_until < now()
                 OR heartbeat_at IS NULL
                 OR heartbeat_at < now() - (?::double precision * interval '1 millisecond'))
          FOR UPDATE SKIP LOCKED)
       UPDATE jobs
          SET state = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'queued' END,
              finished_at = CASE WHEN attempts >= max_attempts THEN now() ELSE NULL END,
              next_attempt_at = now(),
              last_error = CASE WHEN char_length(orphans.note || orphans.earlier) <= ?::integer
                                THEN orphans.note || orphans.earlier ELSE orphans.note END,
              lease_until = NULL, claim_token = NULL, updated_at = now()
         FROM orphans
        WHERE jobs.id = orphans.id
        RETURNING jobs.*`,
      [CARRIED_REASON, options.everyRunning === true, options.claimedBy ?? null, heartbeatTimeoutMs, MAX_TASK_ERROR_CHARS],
    );
    const records = result.rows.map(toRecord);
    return {
      requeued: records.filter((job) => job.state === 'queued'),
      dead: records.filter((job) => job.state === 'dead'),
    };
  }

  async get(id: string): Promise<JobRecord | null> {
    if (!isUuid(id)) return null;
    const row = await this.knex<JobRow>('jobs').where({ id }).first();
    return row ? toRecord(row) : null;
  }

  /** Newest first. */
  async list(filter: JobListFilter = {}): Promise<JobList> {
    const limit = requireInteger('limit', filter.limit ?? 50, 1, 1000);
    const offset = requireInteger('offset', filter.offset ?? 0, 0);
    const where = (query: Knex.QueryBuilder): Knex.QueryBuilder => {
      if (filter.repositoryId !== undefined) query.where('repository_id', filter.repositoryId);
      if (filter.kind !== undefined) query.where('kind', filter.kind);
      if (filter.state !== undefined) query.where('state', requireState(filter.state));
      if (filter.subjectId !== undefined) query.where('subject_id', filter.subjectId);
      if (filter.sourceId !== undefined) query.where('source_id', filter.sourceId);
      if (filter.sourceIds !== undefined) query.whereIn('source_id', [...filter.sourceIds]);
      if (filter.reportId !== undefined) query.where('report_id', filter.reportId);
      return query;
    };
    const { after } = filter;
    const page = where(this.knex('jobs')).select(
      '*',
      this.knex.raw(`${utcMicrosecondsText('created_at')} AS list_at`),
      this.knex.raw('trigger_position::text AS list_position'),
    );
    if (after !== undefined) {
      // After the given job in the order below, ties on the time and on the position included. The
      // id goes the other way, so no one row comparison says it; the first one bounds the scan of
      // the list's indexes (createListIndexes) at the position, the second drops its earlier ties.
      const position = [after.at, after.position] as const;
      page
        .whereRaw('(created_at, trigger_position) <= (?::timestamptz, ?::bigint)', position)
        .andWhere((later) => later.whereRaw('(created_at, trigger_position) < (?::timestamptz, ?::bigint)', position).orWhere('id', '>', after.id));
    }
    // One row past the page says whether a next one follows.
    const rows: Array<JobRow & { list_at: string; list_position: string }> = await page
      .orderBy([
        { column: 'created_at', order: 'desc' },
        { column: 'trigger_position', order: 'desc' },
        { column: 'id', order: 'asc' },
      ])
      .limit(limit + 1)
      .offset(offset);
    const listed = rows.slice(0, limit);
    const last = listed.at(-1);
    const next = rows.length > limit && last !== undefined ? { at: last.list_at, position: last.list_position, id: last.id } : null;
    return { jobs: listed.map(toRecord), total: await this.total(filter, where), next };
  }

  /** How many jobs `list`'s filter matches: from the kept counts when it filters by repository, kind and state only. */
  private async total(filter: JobListFilter, where: (query: Knex.QueryBuilder) => Knex.QueryBuilder): Promise<number> {
    const keptCountsAnswer = filter.subjectId === undefined && filter.sourceId === undefined && filter.sourceIds === undefined && filter.reportId === undefined;
    if (!keptCountsAnswer) {
      const row: { total: number } | undefined = await where(this.knex('jobs')).select(this.knex.raw('count(*)::integer AS total')).first();
      return row?.total ?? 0;
    }
    let total = 0;
    for (const [kind, byState] of Object.entries(await this.keptCounts(filter.repositoryId))) {
      if (filter.kind !== undefined && kind !== filter.kind) continue;
      for (const state of jobStates) if (filter.state === undefined || state === filter.state) total += byState[state];
    }
    return total;
  }

  /** Counts by kind and state, optionally for one repository. */
  async counts(filter: { repositoryId?: string } = {}): Promise<JobCounts> {
    return this.countWhere(filter);
  }

  /** Counts by kind and state of one repository's jobs, optionally only those of a source or report. */
  async countsFor(filter: JobCountsFilter): Promise<JobCounts> {
    requireText('repositoryId', filter.repositoryId);
    return this.countWhere(filter);
  }

  private async countWhere(filter: { repositoryId?: string; sourceId?: string; sourceIds?: readonly string[]; reportId?: string }): Promise<JobCounts> {
    if (filter.sourceId === undefined && filter.sourceIds === undefined && filter.reportId === undefined) return this.keptCounts(filter.repositoryId);
    const query = this.knex('jobs')
      .select('kind', 'state', this.knex.raw('count(*)::integer AS count'))
      .groupBy('kind', 'state');
    if (filter.repositoryId !== undefined) query.where('repository_id', filter.repositoryId);
    if (filter.sourceId !== undefined) query.where('source_id', filter.sourceId);
    if (filter.sourceIds !== undefined) query.whereIn('source_id', [...filter.sourceIds]);
    if (filter.reportId !== undefined) query.where('report_id', filter.reportId);
    return countsOf(await query);
  }

  /**
   * The counts of one repository's jobs (or of every job), summed from `job_count_deltas`
   * (createJobCounts). Once a read sums more than `compactAbove` rows it folds them.
   */
  private async keptCounts(repositoryId?: string): Promise<JobCounts> {
    const query = this.knex('job_count_deltas')
      .select('kind', 'state', this.knex.raw('sum(delta)::integer AS count'), this.knex.raw('count(*)::integer AS rows'))
      .groupBy('kind', 'state');
    if (repositoryId !== undefined) query.where('repository_id', repositoryId);
    const rows: Array<{ kind: string; state: JobState; count: number; rows: number }> = await query;
    if (rows.reduce((sum, row) => sum + row.rows, 0) > compactAbove) await this.compactCounts();
    return countsOf(rows.filter((row) => row.count !== 0));
  }

  /**
   * Folds `job_count_deltas` into one row per (repository, kind, state), in one statement: the
   * rows it deletes are the rows it sums, and rows added meanwhile stay as they are. Two folds
   * at once would each sum only the rows it deleted first, so a fold runs only when it gets the
   * lock, and a reader that does not get it leaves the rows to the one that did.
   */
  private async compactCounts(): Promise<void> {
    await this.knex.transaction(async (trx) => {
      const lock = await trx.raw(`SELECT pg_try_advisory_xact_lock(hashtext('factlog.job_count_deltas')) AS held`);
      if (lock.rows[0]?.held !== true) return;
      await trx.raw(`WITH folded AS (DELETE FROM job_count_deltas RETURNING repository_id, kind, state, delta)
        INSERT INTO job_count_deltas (repository_id, kind, state, delta)
        SELECT repository_id, kind, state, sum(delta) FROM folded GROUP BY repository_id, kind, state HAVING sum(delta) <> 0`);
    });
  }
}

/**
 * The trigger id of a scheduled job: name-based on (kind, repository, interval bucket), so every
 * worker that enqueues the job for that bucket computes the same job and only one row lands.
 */
export function scheduledTriggerId(kind: string, repositoryId: string, bucket: number): string {
  return jobIdFor(`scheduled:${kind}`, repositoryId, `bucket:${bucket}`);
}
