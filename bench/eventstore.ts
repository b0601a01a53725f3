/**
 * Event store benchmark: append rates (single and batched), projection catch-up, and the raw
 * INSERT rate of a similar table as the ceiling, on PGlite and on the PostgreSQL server.
 *
 *   node --import=tsx bench/eventstore.ts
 *   BENCH_LOG_COPIES=40 BENCH_PHASE_MS=5000 node --import=tsx bench/eventstore.ts
 *
 * The catch-up rows replay a real pipeline log (bench/pipelineLog.ts: recorded once by running
 * the pipeline over the test corpus, cached in bench/.tmp, BENCH_REFRESH_LOG=1 records it again).
 *
 * Writes the "Event store" section of bench/RESULTS.md (other sections are kept).
 *
 * Each store runs in a process of its own, started as its tier starts the service: PGlite under
 * bin/factlog.js's environment and V8 flags (its shebang, as bench/pipeline.ts starts the service),
 * the server under deploy/compose.yaml's entrypoint. BENCH_SERVICE_FLAGS=0 measures both in this
 * process, on node's defaults.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { openDatabase, openScratchPostgres, type Database } from '../src/db/database.js';
import type { NewEvent } from '../src/eventstore/envelope.js';
import type { EventStore } from '../src/eventstore/port.js';
import { createPostgresEventStore, migrateEventStore } from '../src/eventstore/postgres.js';
import { EventSchemaRegistry } from '../src/eventstore/schemas.js';
import { ProjectionRunner } from '../src/projection/runner.js';
import type { Projection } from '../src/projection/types.js';
import { postgresSearchIndexOn } from '../src/app/wiring/search.js';
import { readModelProjections } from '../projections/index.js';
import { migrateReadModels } from '../projections/migrations/index.js';
import { createSearchIndexProjection } from '../projections/searchIndex.js';
import { envNumber, log } from './common.js';
import { appendReplicatedLog, corpusPipelineLog } from './pipelineLog.js';
import { statementShape } from './sqlProfile.js';
import { describeGauge, machineGauge } from './machineGauge.js';
import { serverTierLaunch, serviceLaunch, type ServiceLaunch } from '../test/helpers/serviceLaunch.js';

/** Each timed phase stops at this duration or its operation cap, whichever comes first. */
const phaseMs = Number(process.env.BENCH_PHASE_MS ?? 5000);
const concurrentWriters = 8;
/** Copies of the corpus pipeline log replayed by the catch-up measurement (774 events each). */
const logCopies = envNumber('BENCH_LOG_COPIES', 20);
/**
 * BENCH_PARTS=catchup: only the real-log catch-up (and its append), printed and not written to
 * bench/RESULTS.md; BENCH_BACKENDS=pglite or postgres runs one store only.
 */
const catchUpOnly = process.env.BENCH_PARTS === 'catchup';
const backends = new Set((process.env.BENCH_BACKENDS ?? 'pglite,postgres').split(','));

interface Rate {
  perSecond: number;
  count: number;
  seconds: number;
  /** Median latency of one operation, in ms (single-operation phases only). */
  p50Ms?: number;
  p99Ms?: number;
  /** SQL statements sent per event (catch-up rows). */
  statementsPerEvent?: number;
  /** CPU time per item in µs: this process (PGlite runs in it) and the server's backends; load does not change it much. */
  cpu?: { node: number; server: number };
}

/** CPU used so far, in µs: this process, and each server backend of this database by pid. */
interface CpuSample {
  node: number;
  backends: Map<number, number>;
}

async function cpuMicros(db: Database): Promise<CpuSample> {
  const usage = process.cpuUsage();
  const backends = new Map<number, number>();
  if (db.kind === 'postgres') {
    const result = await db.knex.raw('SELECT pid FROM pg_stat_activity WHERE datname = current_database()');
    for (const { pid } of (result as { rows: Array<{ pid: number }> }).rows) {
      try {
        // /proc/<pid>/stat after the command name: state is field 3, utime and stime fields 14 and 15 (clock ticks of 10 ms).
        const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
        backends.set(pid, (Number(fields[11]) + Number(fields[12])) * 10_000);
      } catch {
        // a backend that ended meanwhile
      }
    }
  }
  return { node: usage.user + usage.system, backends };
}

/**
 * CPU per item between two samples. Backends are compared by pid: a sum over whichever were
 * alive went negative when the pool closed an idle connection in between. A backend that
 * ended in between is left out (its last part is not known), one that started counts whole.
 */
function cpuPer(before: CpuSample, after: CpuSample, items: number): { node: number; server: number } {
  let server = 0;
  for (const [pid, micros] of after.backends) server += micros - (before.backends.get(pid) ?? 0);
  return { node: (after.node - before.node) / items, server: server / items };
}

type Row = { label: string; unit: string; pglite?: Rate; postgres?: Rate };

function schemas(): EventSchemaRegistry {
  const registry = new EventSchemaRegistry();
  registry.register('BenchEventRecorded', {
    type: 'record',
    name: 'BenchEventRecorded',
    namespace: 'factlog.events',
    fields: [
      { name: 'name', type: 'string' },
      { name: 'count', type: 'int' },
      { name: 'note', type: ['null', 'string'], default: null },
      { name: 'tags', type: { type: 'array', items: 'string' } },
    ],
  });
  return registry;
}

function benchEvent(index: number): NewEvent {
  return {
    type: 'BenchEventRecorded',
    data: { name: `event number ${index}`, count: index, note: index % 2 ? 'odd' : null, tags: ['bench', 'factlog'] },
    metadata: { repositoryId: 'repo-bench', actor: 'system:bench', causationId: null, correlationId: null },
  };
}

/** Runs `operation` back to back (on `workers` parallel loops) until the phase ends; each call returns items done. */
async function timed(maxOperations: number, operation: (index: number) => Promise<number>, workers = 1, db?: Database): Promise<Rate> {
  const cpuBefore = db ? await cpuMicros(db) : undefined;
  const latencies: number[] = [];
  let items = 0;
  let started = 0;
  const begin = performance.now();
  const deadline = begin + phaseMs;
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (started < maxOperations && performance.now() < deadline) {
        const index = started++;
        const t0 = performance.now();
        const done = await operation(index); // (not `items += await ...`: that reads items before awaiting)
        items += done;
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const seconds = (performance.now() - begin) / 1000;
  const cpu = db && cpuBefore ? cpuPer(cpuBefore, await cpuMicros(db), items) : undefined;
  latencies.sort((a, b) => a - b);
  return {
    ...(cpu ? { cpu } : {}),
    perSecond: items / seconds,
    count: items,
    seconds,
    p50Ms: latencies[Math.floor(latencies.length * 0.5)],
    p99Ms: latencies[Math.floor(latencies.length * 0.99)],
  };
}

const countsProjection: Projection = {
  name: 'bench_counts',
  eventTypes: ['BenchEventRecorded'],
  tables: ['bench_counts'],
  async apply(trx, event) {
    await trx.raw(
      `INSERT INTO bench_counts (stream_id, events, last_position) VALUES (?, 1, ?)
       ON CONFLICT (stream_id) DO UPDATE SET events = bench_counts.events + 1, last_position = excluded.last_position`,
      [event.streamId, event.globalPosition],
    );
  },
};

async function rawInsertRates(db: Database): Promise<{ single: Rate; multi: Rate }> {
  const { knex } = db;
  await knex.raw(`CREATE TABLE raw_events (
    global_position bigserial PRIMARY KEY, event_id uuid NOT NULL UNIQUE, stream_id text NOT NULL,
    stream_version integer NOT NULL, type text NOT NULL, schema_version integer NOT NULL,
    repository_id text, actor text NOT NULL, causation_id text, correlation_id text, data jsonb NOT NULL,
    occurred_at timestamptz NOT NULL DEFAULT now(), UNIQUE (stream_id, stream_version))`);
  const row = (index: number) => {
    const event = benchEvent(index);
    return {
      event_id: randomUUID(),
      stream_id: `raw-${index % 100}`,
      stream_version: index,
      type: event.type,
      schema_version: 1,
      repository_id: event.metadata.repositoryId,
      actor: event.metadata.actor,
      data: JSON.stringify(event.data),
    };
  };
  const single = await timed(20_000, async (index) => {
    await knex('raw_events').insert(row(index));
    return 1;
  });
  const offset = 1_000_000;
  const multi = await timed(
    2_000,
    async (index) => {
      await knex('raw_events').insert(Array.from({ length: 100 }, (_, n) => row(offset + index * 100 + n)));
      return 100;
    },
    1,
    db,
  );
  return { single, multi };
}

/**
 * Catch-up on a real log: the corpus pipeline log (`logCopies` copies) appended to a fresh event
 * store in this database, then every read-model projection of the service rebuilt from position
 * 0 together (one reading of the log), then the search-index projection alone, as the tier wires
 * it (on PGlite: vectors to their table and to the graphs in the process), timed apart so its
 * vectors do not hide the rest.
 */
async function realLogCatchUp(db: Database): Promise<{ append: Rate; catchUp: Rate; searchIndex: Rate }> {
  await migrateEventStore(db.knex);
  const registry = await EventSchemaRegistry.load();
  const store = createPostgresEventStore(db, { schemas: registry });
  const corpusLog = await corpusPipelineLog();
  const appendCpu = await cpuMicros(db);
  const appendBegin = performance.now();
  const appended = await appendReplicatedLog(store, corpusLog, logCopies);
  const appendSeconds = (performance.now() - appendBegin) / 1000;
  const appendCpuPerEvent = cpuPer(appendCpu, await cpuMicros(db), appended);
  await migrateReadModels(db.knex);
  const search = postgresSearchIndexOn(db, 100);
  const searchProjection = createSearchIndexProjection(search, { vectorDimensions: 100 });
  // BENCH_BATCH_SIZE: events per catch-up batch, live and rebuilding alike (the runner's defaults otherwise).
  const batchSize = process.env.BENCH_BATCH_SIZE ? Number(process.env.BENCH_BATCH_SIZE) : undefined;
  // BENCH_CATCHUP_TRANSACTIONS: transactions side by side for a server's catch-up batch (the runner's default otherwise; 1: one).
  const catchUpTransactions = process.env.BENCH_CATCHUP_TRANSACTIONS ? Number(process.env.BENCH_CATCHUP_TRANSACTIONS) : undefined;
  const runner = new ProjectionRunner(store, db, [...readModelProjections, searchProjection], {
    ...(batchSize ? { batchSize, rebuildBatchSize: batchSize } : {}),
    ...(catchUpTransactions ? { catchUpTransactions } : {}),
  });
  let statements = 0;
  const countStatement = () => (statements += 1);
  // BENCH_STATEMENTS=1: count and time the catch-up's statements by shape (knex `query` to
  // `query-response`: on PGlite one connection, so that is the statement's own time plus the hop).
  const shapes = new Map<string, { count: number; ms: number }>();
  const startedAt = new Map<string, { shape: string; at: number }>();
  const onQuery = (query: { sql: string; __knexQueryUid: string }) => startedAt.set(query.__knexQueryUid, { shape: statementShape(query.sql), at: performance.now() });
  const onResponse = (_response: unknown, query: { __knexQueryUid: string }) => {
    const started = startedAt.get(query.__knexQueryUid);
    if (!started) return;
    startedAt.delete(query.__knexQueryUid);
    const shape = shapes.get(started.shape) ?? { count: 0, ms: 0 };
    shape.count += 1;
    shape.ms += performance.now() - started.at;
    shapes.set(started.shape, shape);
  };
  const timedRebuild = async (names: readonly string[]): Promise<Rate> => {
    statements = 0;
    shapes.clear();
    db.knex.on('query', countStatement);
    if (process.env.BENCH_STATEMENTS) db.knex.on('query', onQuery).on('query-response', onResponse);
    const cpuBefore = await cpuMicros(db);
    const begin = performance.now();
    const window = [process.hrtime.bigint() / 1000n];
    await Promise.all(names.map((name) => runner.rebuild(name)));
    const seconds = (performance.now() - begin) / 1000;
    window.push(process.hrtime.bigint() / 1000n);
    // BENCH_MARKS=1: the rebuild's start and end on the monotonic clock in µs, as a --cpu-prof profile's timestamps.
    if (process.env.BENCH_MARKS) log(`    window ${window.join(' ')} (${names.length} projections)`);
    db.knex.off('query', countStatement);
    if (process.env.BENCH_STATEMENTS) {
      db.knex.off('query', onQuery).off('query-response', onResponse);
      const rows = [...shapes].sort((a, b) => b[1].ms - a[1].ms).slice(0, 40);
      for (const [shape, { count, ms }] of rows) log(`    ${String(count).padStart(6)} ${ms.toFixed(0).padStart(7)} ms  ${shape}`);
    }
    const cpu = cpuPer(cpuBefore, await cpuMicros(db), appended);
    return { perSecond: appended / seconds, count: appended, seconds, statementsPerEvent: statements / appended, cpu };
  };
  const catchUp = await timedRebuild(readModelProjections.map((projection) => projection.name));
  // BENCH_EACH=1: then each read-model projection rebuilt alone, to say which of them the rebuild's time is.
  if (process.env.BENCH_EACH) {
    for (const projection of readModelProjections) {
      const alone = await timedRebuild([projection.name]);
      log(`    ${projection.name.padEnd(24)} alone ${alone.seconds.toFixed(2)} s, ${(alone.statementsPerEvent ?? 0).toFixed(4)} statements and ${((alone.cpu?.node ?? 0) + (alone.cpu?.server ?? 0)).toFixed(0)} µs CPU per event`);
    }
  }
  const searchIndex = await timedRebuild([searchProjection.name]);
  await runner.stop();
  await store.close();
  return { append: { perSecond: appended / appendSeconds, count: appended, seconds: appendSeconds, cpu: appendCpuPerEvent }, catchUp, searchIndex };
}

async function benchBackend(db: Database): Promise<Record<string, Rate>> {
  log(`  real pipeline log: append ${logCopies} copies, then rebuild every read model from 0`);
  const real = await realLogCatchUp(db);
  if (catchUpOnly) return { realAppend: real.append, realCatchUp: real.catchUp, realSearchIndex: real.searchIndex };
  await db.knex.raw('DROP TABLE events, streams CASCADE');
  await migrateEventStore(db.knex);
  const store: EventStore = createPostgresEventStore(db, { schemas: schemas() });
  const results: Record<string, Rate> = {};
  const versions = new Map<string, number>();
  const appendTo = async (streamId: string, events: NewEvent[]) => {
    const result = await store.append(streamId, events, versions.get(streamId) ?? 'no_stream');
    versions.set(streamId, result.nextExpectedVersion);
    return events.length;
  };

  log(`  single appends`);
  results.single = await timed(20_000, (index) => appendTo(`single-${index % 100}`, [benchEvent(index)]));
  log(`  batched appends`);
  results.batched = await timed(
    400,
    (index) => appendTo(`batch-${index % 20}`, Array.from({ length: 100 }, (_, n) => benchEvent(index * 100 + n))),
    1,
    db,
  );
  log(`  concurrent single appends`);
  results.concurrent = await timed(
    20_000,
    // Every append creates its own stream, so no append loses a version race.
    (index) => store.append(`concurrent-${index}`, [benchEvent(index)], 'no_stream').then(() => 1),
    concurrentWriters,
  );

  log(`  projection catch-up`);
  await db.knex.raw(`CREATE TABLE bench_counts (stream_id text PRIMARY KEY, events integer NOT NULL, last_position bigint NOT NULL)`);
  const head = await store.headPosition();
  const eventCount = Number(((await db.knex('events').count({ n: '*' })) as Array<{ n: string | number }>)[0].n);
  const runner = new ProjectionRunner(store, db, [countsProjection]);
  const begin = performance.now();
  await runner.start();
  await runner.waitFor(head, 600_000);
  const seconds = (performance.now() - begin) / 1000;
  await runner.stop();
  results.catchUp = { perSecond: eventCount / seconds, count: eventCount, seconds };

  log(`  raw inserts`);
  const raw = await rawInsertRates(db);
  results.rawSingle = raw.single;
  results.rawMulti = raw.multi;
  results.realAppend = real.append;
  results.realCatchUp = real.catchUp;
  results.realSearchIndex = real.searchIndex;
  await store.close();
  return results;
}

function formatRate(rate: Rate | undefined): string {
  if (!rate) return 'n/a';
  const perSecond = rate.perSecond >= 100 ? Math.round(rate.perSecond).toLocaleString('en-US') : rate.perSecond.toFixed(1);
  const latency = rate.p50Ms !== undefined && rate.count > 0 ? ` (p50 ${rate.p50Ms.toFixed(2)} ms, p99 ${rate.p99Ms?.toFixed(2)} ms)` : '';
  return `${perSecond}${latency}`;
}

function formatCpu(rate: Rate | undefined): string {
  if (!rate?.cpu) return 'n/a';
  const { node, server } = rate.cpu;
  return server > 0 ? `${Math.round(node)} + ${Math.round(server)}` : `${Math.round(node)}`;
}

/** The ceiling's CPU time per row over the rate's: above 1 when the rate costs less. */
function cpuRatio(rate: Rate | undefined, ceiling: Rate | undefined): string {
  if (!rate?.cpu || !ceiling?.cpu) return 'n/a';
  return `${((ceiling.cpu.node + ceiling.cpu.server) / (rate.cpu.node + rate.cpu.server)).toFixed(2)}×`;
}

function ratio(rate: Rate | undefined, ceiling: Rate | undefined): string {
  return rate && ceiling ? `${(rate.perSecond / ceiling.perSecond).toFixed(2)}×` : 'n/a';
}

type Backend = 'pglite' | 'postgres';

/** What one store's run reports: its rates, and the server's version. */
interface BackendResult {
  rates: Record<string, Rate>;
  serverVersion?: string;
}

/** One store's measurements, in this process. */
async function runBackend(backend: Backend): Promise<BackendResult> {
  if (backend === 'pglite') {
    log(`PGlite (data directory on disk), ${launchDescription(backend)}`);
    // Made only for PGlite, which removes it: a server-only run left an empty one behind.
    const tmp = path.resolve('bench/.tmp', `eventstore-${process.pid}`);
    await mkdir(tmp, { recursive: true });
    // BENCH_PGLITE_SETTINGS=name=value,...: server settings over the embedded node's own (src/db/database.ts).
    const settings = Object.fromEntries(
      (process.env.BENCH_PGLITE_SETTINGS ?? '')
        .split(',')
        .filter(Boolean)
        .map((pair) => {
          const match = /^([a-z_.]+)=(.+)$/.exec(pair);
          if (!match) throw new Error(`BENCH_PGLITE_SETTINGS: expected name=value, got "${pair}"`);
          return [match[1], match[2]];
        }),
    );
    const pglite = await openDatabase({ kind: 'pglite', dataDir: path.join(tmp, 'pglite'), settings });
    try {
      return { rates: await benchBackend(pglite) };
    } finally {
      await pglite.close();
      await rm(tmp, { recursive: true, force: true });
    }
  }
  log(`PostgreSQL server, ${launchDescription(backend)}`);
  const server = await openScratchPostgres(undefined, 'factlog_bench');
  try {
    const version = await server.knex.raw('SHOW server_version');
    const serverVersion = `PostgreSQL ${String((version as { rows: Array<{ server_version: string }> }).rows[0].server_version).split(' ')[0]}`;
    return { rates: await benchBackend(server), serverVersion };
  } finally {
    await server.close();
  }
}

/**
 * The launch each store runs under, as its tier starts the service: PGlite as an embedded node
 * (bin/factlog.js's shebang: its V8 flags cost PGlite's catch-up about a quarter against node's
 * defaults), the server as a server-tier node (deploy/compose.yaml's entrypoint).
 */
const launchOf = (backend: Backend): ServiceLaunch => (backend === 'pglite' ? serviceLaunch() : serverTierLaunch());

/** Set in a store's own process: which store it measures, and where its result goes. */
const CHILD_BACKEND = 'BENCH_EVENTSTORE_BACKEND';
const CHILD_RESULT = 'BENCH_EVENTSTORE_RESULT';

function launchDescription(backend: Backend): string {
  if (process.env.BENCH_SERVICE_FLAGS === '0') return "node's default V8 flags (BENCH_SERVICE_FLAGS=0)";
  const { env, flags } = launchOf(backend);
  const where = backend === 'pglite' ? "an embedded node's launch (bin/factlog.js)" : "a server-tier node's launch (deploy/compose.yaml)";
  return `${where}: ${Object.entries(env).map(([name, value]) => `${name}=${value} `).join('')}node ${flags.join(' ') || '(no V8 flags)'}`;
}

/**
 * One store's measurements in a process of its own, started as its tier starts node: V8 flags
 * must be on node's command line (NODE_OPTIONS refuses --liftoff-only) and glibc reads its
 * MALLOC_ settings at start. BENCH_SERVICE_FLAGS=0 measures in this process, on node's defaults.
 */
async function runBackendInItsLaunch(backend: Backend): Promise<BackendResult> {
  if (process.env.BENCH_SERVICE_FLAGS === '0') return runBackend(backend);
  const { env, flags } = launchOf(backend);
  await mkdir(path.resolve('bench/.tmp'), { recursive: true });
  const resultFile = path.resolve('bench/.tmp', `eventstore-${process.pid}-${backend}.json`);
  const child = spawn(process.execPath, [...flags, ...process.execArgv, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, ...env, [CHILD_BACKEND]: backend, [CHILD_RESULT]: resultFile },
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  if (code !== 0) throw new Error(`the ${backend} measurement ended with exit code ${String(code)}`);
  try {
    return JSON.parse(await readFile(resultFile, 'utf8')) as BackendResult;
  } finally {
    await rm(resultFile, { force: true });
  }
}

async function main(): Promise<void> {
  const started = new Date();
  const loadAtStart = os.loadavg()[0].toFixed(2);
  // Before the work, so its own load does not count: which hour of this VM the run had.
  const gauge = describeGauge(await machineGauge());
  log(gauge);
  const byBackend: Record<Backend, Record<string, Rate>> = { pglite: {}, postgres: {} };
  let serverVersion = 'PostgreSQL';
  for (const backend of (['pglite', 'postgres'] as const).filter((name) => backends.has(name))) {
    const result = await runBackendInItsLaunch(backend);
    byBackend[backend] = result.rates;
    if (result.serverVersion) serverVersion = result.serverVersion;
  }

  if (catchUpOnly) {
    const line = (label: string, rate: Rate | undefined) =>
      rate ? `${label}: ${formatRate(rate)} events/s, ${rate.statementsPerEvent?.toFixed(3) ?? 'n/a'} statements and ${formatCpu(rate)} µs CPU per event, ${rate.seconds.toFixed(2)} s` : `${label}: not run`;
    process.stdout.write(
      [
        `load average at start / end: ${loadAtStart} / ${os.loadavg()[0].toFixed(2)}; ${logCopies} copies of the corpus log`,
        `PGlite under ${launchDescription('pglite')}; the server under ${launchDescription('postgres')}`,
        gauge,
        line('PGlite, read models', byBackend.pglite.realCatchUp),
        line('PGlite, search index', byBackend.pglite.realSearchIndex),
        line(`${serverVersion}, read models`, byBackend.postgres.realCatchUp),
        line(`${serverVersion}, search index`, byBackend.postgres.realSearchIndex),
        '',
      ].join('\n'),
    );
    return;
  }

  const rows: Row[] = [
    { label: 'append, 1 event per append (sequential)', unit: 'events/s', pglite: byBackend.pglite.single, postgres: byBackend.postgres.single },
    { label: 'append, 100 events per append (sequential)', unit: 'events/s', pglite: byBackend.pglite.batched, postgres: byBackend.postgres.batched },
    { label: `append, 1 event per append, ${concurrentWriters} concurrent writers`, unit: 'events/s', pglite: byBackend.pglite.concurrent, postgres: byBackend.postgres.concurrent },
    { label: 'projection catch-up (1 upsert per event, 500 per transaction)', unit: 'events/s', pglite: byBackend.pglite.catchUp, postgres: byBackend.postgres.catchUp },
    { label: `projection catch-up, real pipeline log: rebuild of the ${readModelProjections.length} read-model projections from 0, together`, unit: 'events/s', pglite: byBackend.pglite.realCatchUp, postgres: byBackend.postgres.realCatchUp },
    { label: 'same log: rebuild of the search-index projection on pgvector (HNSW inserts)', unit: 'events/s', pglite: byBackend.pglite.realSearchIndex, postgres: byBackend.postgres.realSearchIndex },
    { label: 'append of that log, one append per run of a stream\'s events (sequential)', unit: 'events/s', pglite: byBackend.pglite.realAppend, postgres: byBackend.postgres.realAppend },
    { label: 'ceiling: raw INSERT, 1 row per statement', unit: 'rows/s', pglite: byBackend.pglite.rawSingle, postgres: byBackend.postgres.rawSingle },
    { label: 'ceiling: raw INSERT, 100 rows per statement', unit: 'rows/s', pglite: byBackend.pglite.rawMulti, postgres: byBackend.postgres.rawMulti },
  ];
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  const section = [
    '## Event store',
    '',
    `Machine: ${os.availableParallelism()} CPUs (nproc), ${cpu}, ${Math.round(os.totalmem() / 2 ** 30)} GiB RAM; Node ${process.version}; ${serverVersion} on 127.0.0.1.`,
    `Load average at start / end: ${loadAtStart} / ${os.loadavg()[0].toFixed(2)} (the machine is shared: expect ±30% between runs).`,
    `At the start, the ${gauge}.`,
    `Date: ${started.toISOString()}. Command: \`node --import=tsx bench/eventstore.ts\` (each phase ${phaseMs / 1000} s or its operation cap; BENCH_LOG_COPIES=${logCopies}).`,
    `Each store in a process of its own: PGlite under ${launchDescription('pglite')}; the server under ${launchDescription('postgres')}.`,
    '',
    `| measurement | unit | PGlite (on disk) | ${serverVersion} |`,
    '|---|---|---:|---:|',
    ...rows.map((row) => `| ${row.label} | ${row.unit} | ${formatRate(row.pglite)} | ${formatRate(row.postgres)} |`),
    '',
    `Statements per event during the real-log catch-up: ${[byBackend.pglite.realCatchUp, byBackend.postgres.realCatchUp].map((rate) => rate?.statementsPerEvent?.toFixed(2) ?? 'n/a').join(' / ')} (read models), ${[byBackend.pglite.realSearchIndex, byBackend.postgres.realSearchIndex].map((rate) => rate?.statementsPerEvent?.toFixed(2) ?? 'n/a').join(' / ')} (search index) (PGlite / server); the log: ${logCopies} copies of the corpus pipeline log (bench/pipelineLog.ts), ${byBackend.pglite.realCatchUp?.count ?? 0} events.`,
    `Batched appends against the raw 100-row INSERT ceiling: ${ratio(byBackend.pglite.batched, byBackend.pglite.rawMulti)} on PGlite, ${ratio(byBackend.postgres.batched, byBackend.postgres.rawMulti)} on the server (target ≥ 0.5×); by CPU time per row (this process + server backends), which load changes less: ${cpuRatio(byBackend.pglite.batched, byBackend.pglite.rawMulti)} / ${cpuRatio(byBackend.postgres.batched, byBackend.postgres.rawMulti)}.`,
    `CPU per event (µs, this process + server backends; PGlite / server): real-log catch-up ${formatCpu(byBackend.pglite.realCatchUp)} / ${formatCpu(byBackend.postgres.realCatchUp)}; append of that log ${formatCpu(byBackend.pglite.realAppend)} / ${formatCpu(byBackend.postgres.realAppend)}; batched append ${formatCpu(byBackend.pglite.batched)} / ${formatCpu(byBackend.postgres.batched)}; raw 100-row INSERT ${formatCpu(byBackend.pglite.rawMulti)} / ${formatCpu(byBackend.postgres.rawMulti)}.`,
    '',
    'Notes: appends are validated against the Avro schema and run through `factlog_append_events`',
    '(advisory lock + version check + insert, one round trip). PGlite is one connection, so its',
    '"concurrent" row measures queueing, not parallelism. Catch-up counts events applied from',
    'position 0 to the head by a ProjectionRunner with a one-upsert-per-event projection; the raw',
    'INSERT rows use a table shaped like `events` with no validation, locking or version check.',
    `Event counts: ${rows
      .filter((row) => row.label.startsWith('append') || row.label.startsWith('projection'))
      .map((row) => `${row.label.split(',')[0].split(' (')[0]}: ${row.pglite?.count ?? 0} / ${row.postgres?.count ?? 0}`)
      .join('; ')} (PGlite / server).`,
    '',
  ].join('\n');

  const resultsPath = path.resolve('bench/RESULTS.md');
  const previous = existsSync(resultsPath) ? await readFile(resultsPath, 'utf8') : '# Benchmark results\n\n';
  const sectionPattern = /^## Event store\n[\s\S]*?(?=^## |(?![\s\S]))/m;
  const next = sectionPattern.test(previous)
    ? previous.replace(sectionPattern, `${section}\n`)
    : `${previous.trimEnd()}\n\n${section}`;
  await writeFile(resultsPath, `${next.trimEnd()}\n`);
  process.stdout.write(`${section}\n`);
  log(`total ${((Date.now() - started.getTime()) / 1000).toFixed(0)} s`);
}

const childBackend = process.env[CHILD_BACKEND];
if (childBackend === 'pglite' || childBackend === 'postgres') {
  const result = await runBackend(childBackend);
  await writeFile(process.env[CHILD_RESULT] ?? '', JSON.stringify(result));
} else {
  await main();
}
