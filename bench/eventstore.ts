/**
 * Event store benchmark: append rates (single and batched), projection catch-up, and the raw
 * INSERT rate of a similar table as the ceiling, on PGlite and on the PostgreSQL server.
 *
 *   node --import=tsx bench/eventstore.ts
 *
 * Writes the "Event store" section of bench/RESULTS.md (other sections are kept).
 */
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Knex } from 'knex';
import { openDatabase, openScratchPostgres, type Database } from '../src/db/database.js';
import type { NewEvent } from '../src/eventstore/envelope.js';
import type { EventStore } from '../src/eventstore/port.js';
import { createPostgresEventStore, migrateEventStore } from '../src/eventstore/postgres.js';
import { EventSchemaRegistry } from '../src/eventstore/schemas.js';
import { ProjectionRunner } from '../src/projection/runner.js';
import type { Projection } from '../src/projection/types.js';
import { log } from './common.js';

/** Each timed phase stops at this duration or its operation cap, whichever comes first. */
const phaseMs = Number(process.env.BENCH_PHASE_MS ?? 5000);
const concurrentWriters = 8;

interface Rate {
  perSecond: number;
  count: number;
  seconds: number;
  /** Median latency of one operation, in ms (single-operation phases only). */
  p50Ms?: number;
  p99Ms?: number;
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
async function timed(maxOperations: number, operation: (index: number) => Promise<number>, workers = 1): Promise<Rate> {
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
  latencies.sort((a, b) => a - b);
  return {
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

async function rawInsertRates(knex: Knex): Promise<{ single: Rate; multi: Rate }> {
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
  const multi = await timed(2_000, async (index) => {
    await knex('raw_events').insert(Array.from({ length: 100 }, (_, n) => row(offset + index * 100 + n)));
    return 100;
  });
  return { single, multi };
}

async function benchBackend(db: Database): Promise<Record<string, Rate>> {
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
  results.batched = await timed(400, (index) =>
    appendTo(`batch-${index % 20}`, Array.from({ length: 100 }, (_, n) => benchEvent(index * 100 + n))),
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
  const raw = await rawInsertRates(db.knex);
  results.rawSingle = raw.single;
  results.rawMulti = raw.multi;
  await store.close();
  return results;
}

function formatRate(rate: Rate | undefined): string {
  if (!rate) return 'n/a';
  const perSecond = rate.perSecond >= 100 ? Math.round(rate.perSecond).toLocaleString('en-US') : rate.perSecond.toFixed(1);
  const latency = rate.p50Ms !== undefined && rate.count > 0 ? ` (p50 ${rate.p50Ms.toFixed(2)} ms, p99 ${rate.p99Ms?.toFixed(2)} ms)` : '';
  return `${perSecond}${latency}`;
}

async function main(): Promise<void> {
  const started = new Date();
  const loadAtStart = os.loadavg()[0].toFixed(2);
  const tmp = path.resolve('bench/.tmp', `eventstore-${process.pid}`);
  await mkdir(tmp, { recursive: true });
  const byBackend: Record<'pglite' | 'postgres', Record<string, Rate>> = { pglite: {}, postgres: {} };

  log('PGlite (data directory on disk)');
  const pglite = await openDatabase({ kind: 'pglite', dataDir: path.join(tmp, 'pglite') });
  try {
    byBackend.pglite = await benchBackend(pglite);
  } finally {
    await pglite.close();
    await rm(tmp, { recursive: true, force: true });
  }

  log('PostgreSQL server');
  const server = await openScratchPostgres(undefined, 'factlog_bench');
  let serverVersion = 'PostgreSQL';
  try {
    const version = await server.knex.raw('SHOW server_version');
    serverVersion = `PostgreSQL ${String((version as { rows: Array<{ server_version: string }> }).rows[0].server_version).split(' ')[0]}`;
    byBackend.postgres = await benchBackend(server);
  } finally {
    await server.close();
  }

  const rows: Row[] = [
    { label: 'append, 1 event per append (sequential)', unit: 'events/s', pglite: byBackend.pglite.single, postgres: byBackend.postgres.single },
    { label: 'append, 100 events per append (sequential)', unit: 'events/s', pglite: byBackend.pglite.batched, postgres: byBackend.postgres.batched },
    { label: `append, 1 event per append, ${concurrentWriters} concurrent writers`, unit: 'events/s', pglite: byBackend.pglite.concurrent, postgres: byBackend.postgres.concurrent },
    { label: 'projection catch-up (1 upsert per event, 500 per transaction)', unit: 'events/s', pglite: byBackend.pglite.catchUp, postgres: byBackend.postgres.catchUp },
    { label: 'ceiling: raw INSERT, 1 row per statement', unit: 'rows/s', pglite: byBackend.pglite.rawSingle, postgres: byBackend.postgres.rawSingle },
    { label: 'ceiling: raw INSERT, 100 rows per statement', unit: 'rows/s', pglite: byBackend.pglite.rawMulti, postgres: byBackend.postgres.rawMulti },
  ];
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  const section = [
    '## Event store',
    '',
    `Machine: ${os.availableParallelism()} CPUs (nproc), ${cpu}, ${Math.round(os.totalmem() / 2 ** 30)} GiB RAM; Node ${process.version}; ${serverVersion} on 127.0.0.1.`,
    `Load average at start / end: ${loadAtStart} / ${os.loadavg()[0].toFixed(2)} (the machine is shared: expect ±30% between runs).`,
    `Date: ${started.toISOString()}. Command: \`node --import=tsx bench/eventstore.ts\` (each phase ${phaseMs / 1000} s or its operation cap).`,
    '',
    `| measurement | unit | PGlite (on disk) | ${serverVersion} |`,
    '|---|---|---:|---:|',
    ...rows.map((row) => `| ${row.label} | ${row.unit} | ${formatRate(row.pglite)} | ${formatRate(row.postgres)} |`),
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

await main();
