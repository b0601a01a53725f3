import { randomUUID } from 'node:crypto';
import type { Test } from 'tap';
import { type Database, openScratchPostgres } from '../../src/db/database.js';
import { openTestPglite } from '../helpers/pglite.js';
import { JobRepository, migrateJobs } from '../../src/pipeline/jobs.js';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import type { EventStore, ReadAllOptions } from '../../src/eventstore/port.js';
import type { JobOutcome, JobFinishedEvent, RuntimeLogger, StageRuntime, StageRuntimeSettings } from '../../src/pipeline/runtime.js';
import type { JobContext, Stage } from '../../src/pipeline/types.js';
import { withServers } from '../helpers/servers.js';

/** The same suites run on both tiers of the read-model database (PGlite only in `make test-unit`). */
export const backends: ReadonlyArray<{ name: 'pglite' | 'postgres'; open: () => Promise<Database> }> = [
  { name: 'pglite', open: openTestPglite },
  ...(withServers ? [{ name: 'postgres' as const, open: () => openScratchPostgres(undefined, 'factlog_pipeline') }] : []),
];

/** An in-memory log with the gap-free global positions the real store gives readers. */
export class FakeLog implements Pick<EventStore, 'readAll'> {
  readonly events: RecordedEvent[] = [];

  add(type = 'SourceRegistered', data: Record<string, unknown> = {}, subjectId = randomUUID()): RecordedEvent {
    const event: RecordedEvent = {
      eventId: randomUUID(),
      streamId: `source-${subjectId}`,
      streamVersion: 0,
      globalPosition: this.events.length + 1,
      type,
      schemaVersion: 1,
      data: { sourceId: subjectId, ...data },
      occurredAt: new Date().toISOString(),
      repositoryId: 'repo-1',
      actor: 'user-1',
      causationId: null,
      correlationId: randomUUID(),
    };
    this.events.push(event);
    return event;
  }

  async readAll(options: ReadAllOptions = {}): Promise<RecordedEvent[]> {
    const after = options.after ?? 0;
    return this.events.filter((event) => event.globalPosition > after).slice(0, options.limit ?? 1000);
  }
}

export function jobInputFor(kind: string, event: RecordedEvent) {
  return {
    kind,
    subjectId: String(event.data.sourceId),
    triggerEventId: event.eventId,
    triggerPosition: event.globalPosition,
    repositoryId: event.repositoryId,
    correlationId: event.correlationId,
  };
}

export function testStage(kind: string, run: (context: JobContext) => Promise<void>, triggers = ['SourceRegistered']): Stage {
  return {
    kind,
    triggers,
    subjectOf: (event) => (typeof event.data.sourceId === 'string' ? event.data.sourceId : null),
    run,
  };
}

/** Fast timings so the suites take seconds, not the spec's minutes. */
export function fastSettings(overrides: Partial<StageRuntimeSettings> = {}): StageRuntimeSettings {
  return {
    concurrency: {},
    jobTimeoutMs: 0,
    heartbeatIntervalMs: 20,
    heartbeatTimeoutMs: 400,
    leaseMs: 400,
    pollIntervalMs: 10,
    retry: { maxAttempts: 3, baseDelayMs: 10, maxDelayMs: 50 },
    rescueOnStartup: true,
    stopTimeoutMs: 2000,
    rescueIntervalMs: 0,
    ...overrides,
  };
}

export interface LogLine {
  level: keyof RuntimeLogger;
  message: string;
  details: Record<string, unknown>;
}

export function recordingLog(): RuntimeLogger & { lines: LogLine[] } {
  const lines: LogLine[] = [];
  const at =
    (level: keyof RuntimeLogger) =>
    (details: Record<string, unknown>, message: string): void => {
      lines.push({ level, message, details });
    };
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

/** Resolves with the first finished event of `jobId` with `outcome`; rejects after `timeoutMs`. */
export function nextOutcome(
  runtime: StageRuntime,
  jobId: string,
  outcome: JobOutcome,
  timeoutMs = 5000,
): Promise<JobFinishedEvent> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      unsubscribe();
      reject(new Error(`job ${jobId} did not reach ${outcome} within ${timeoutMs} ms`));
    }, timeoutMs);
    const unsubscribe = runtime.onJobFinished((event) => {
      if (event.job.id !== jobId || event.outcome !== outcome) return;
      clearTimeout(timer);
      unsubscribe();
      resolve(event);
    });
  });
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A promise with its resolver outside, to hold a job running until the test lets go. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open = (): void => undefined;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/**
 * The fixture of the intake and runtime suites: a migrated jobs table on `backend`, emptied
 * before each subtest, a repository over it and a fresh in-memory log; closed with `t`.
 */
export async function openJobsFixture(t: Test, backend: (typeof backends)[number]) {
  const db = await backend.open();
  t.teardown(() => db.close());
  await migrateJobs(db.knex);
  t.beforeEach(async () => {
    await db.knex.raw('TRUNCATE jobs');
  });
  return { db, jobs: new JobRepository(db.knex), log: new FakeLog() };
}
