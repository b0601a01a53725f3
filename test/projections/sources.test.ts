import fc from 'fast-check';
import t from 'tap';
import { migrateReadModels } from '../../projections/migrations/index.js';
import { sourcesProjection } from '../../projections/sources.js';
import { openScratchPostgres, type Database } from '../../src/db/database.js';
import type { NewEvent, RecordedEvent } from '../../src/eventstore/envelope.js';
import { createPostgresEventStore, migrateEventStore } from '../../src/eventstore/postgres.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';
import { ProjectionRunner } from '../../src/projection/runner.js';
import { applyEvents } from '../../src/projection/types.js';
import { withServers } from '../helpers/servers.js';
import { openMemoryPglite } from '../eventstore/contract.js';

const backends: Array<{ name: string; open: () => Promise<Database> }> = [
  { name: 'pglite', open: openMemoryPglite },
  ...(withServers ? [{ name: 'postgres', open: () => openScratchPostgres(undefined, 'factlog_sources_projection') }] : []),
];

const metadata = { repositoryId: 'repo-1', actor: 'system:test', causationId: null, correlationId: null };
const registered = (data: { origin: 'url' | 'doi' | 'upload'; url?: string; doi?: string; filename?: string }): NewEvent => ({
  type: 'SourceRegistered',
  data: { url: null, doi: null, filename: null, content_type: null, body_sha256: null, body_bytes: null, ...data },
  metadata,
});

/** SourceRegistered events as releases before and after the canonical spelling wrote them, with the key each source gets. */
const sources: Array<[id: string, event: NewEvent, key: string | null]> = [
  ['empty-query', registered({ origin: 'url', url: 'http://h/k02.html?' }), 'url:http://h/k02.html'],
  ['escaped', registered({ origin: 'url', url: 'http://h/%6b04.html' }), 'url:http://h/k04.html'],
  ['escape-case', registered({ origin: 'url', url: 'http://h/a%2fb?q=%c3%a9' }), 'url:http://h/a%2Fb?q=%C3%A9'],
  ['fragment', registered({ origin: 'url', url: 'http://h/page#section-2' }), 'url:http://h/page'],
  ['trailing-dot', registered({ origin: 'url', url: 'http://h.example./a' }), 'url:http://h.example/a'],
  ['canonical', registered({ origin: 'url', url: 'http://h/k05.html' }), 'url:http://h/k05.html'],
  ['doi-url', registered({ origin: 'url', url: 'https://doi.org/10.1000/QA-DOI-URL' }), 'doi:10.1000/qa-doi-url'],
  ['doi', registered({ origin: 'doi', doi: '10.1000/Mixed-Case' }), 'doi:10.1000/mixed-case'],
  ['doi-scheme', registered({ origin: 'doi', doi: 'doi:10.1000/Scheme' }), 'doi:10.1000/scheme'],
  // Refused by today's rules, kept in the log: keyed as written, without the fragment, never an error.
  ['refused-url', registered({ origin: 'url', url: 'http://user:pw@h/private#part' }), 'url:http://user:pw@h/private'],
  ['refused-doi', registered({ origin: 'doi', doi: 'Not A DOI' }), 'doi:not a doi'],
  ['upload', registered({ origin: 'upload', filename: 'notes.md' }), null],
];

for (const backend of backends) {
  t.test(`${backend.name}: each source's reference key is today's, from any release's spelling; a rebuild keys them alike`, async (t) => {
    const db = await backend.open();
    t.teardown(() => db.close());
    await migrateEventStore(db.knex);
    await migrateReadModels(db.knex);
    const store = createPostgresEventStore(db, { schemas: await EventSchemaRegistry.load(), pollIntervalMs: 20 });
    t.teardown(() => store.close());
    let last = 0;
    for (const [id, event] of sources) last = (await store.append(`source-${id}`, [event], 'no_stream')).lastPosition;
    const runner = new ProjectionRunner(store, db, [sourcesProjection], { batchSize: 3 });
    t.teardown(() => runner.stop());
    await runner.start();
    await runner.waitFor(last, 60_000); // on the server, other test files' transactions can hold the appends back from readers

    const keys = async () => Object.fromEntries((await db.knex('sources').orderBy('id').select('id', 'reference_key')).map((row: { id: string; reference_key: string | null }) => [row.id, row.reference_key]));
    const expected = Object.fromEntries([...sources].sort(([a], [b]) => (a < b ? -1 : 1)).map(([id, , key]) => [id, key]));
    t.same(await keys(), expected, 'live');
    t.same(
      await db.knex('sources').where({ id: 'doi-url' }).first('origin', 'url', 'doi'),
      { origin: 'url', url: 'https://doi.org/10.1000/QA-DOI-URL', doi: null },
      'the url as the event holds it; only the key is today’s',
    );

    const live = await db.knex('sources').orderBy('id').select('*');
    await db.knex('sources').update({ reference_key: 'stale' });
    await runner.rebuild('sources');
    t.same(await keys(), expected, 'rebuilt: the same keys');
    t.same(await db.knex('sources').orderBy('id').select('*'), live, 'rebuilt: the same rows');
    await runner.stop();
    const wide = new ProjectionRunner(store, db, [sourcesProjection], { batchSize: 10_000 });
    await wide.rebuild('sources');
    t.same(await keys(), expected, 'rebuilt in one batch: the same keys');
  });
}

/** One source's pipeline events after its registration, in the order they come. */
const pipeline = (n: number): NewEvent[] => [
  { type: 'SourceFetchStarted', data: { attempt: 1 }, metadata },
  {
    type: 'SourceFetched',
    data: {
      final_url: `http://h/final-${n}`,
      content_type: 'text/html',
      body_sha256: `body-${n}`,
      body_bytes: 100 + n,
      document_kind: 'html',
      title: `Title ${n}`,
      published_at: null,
      text_sha256: `text-${n}`,
      markdown_sha256: `markdown-${n}`,
      text_chars: 50 + n,
      images: [],
    },
    metadata,
  },
  { type: 'SourceDecompositionStarted', data: { model_id: `model-${n}` }, metadata },
  { type: 'FactsExtracted', data: { model_id: `model-${n}`, promptset_hash: 'p', facts: [] }, metadata },
];

/** What a source's stream may hold: a registration, a prefix of its pipeline, and perhaps a failure and a retry, or its deletion, then more. */
const sourceLog = fc.record({
  registered: fc.boolean(),
  before: fc.integer({ min: 0, max: 4 }),
  interruption: fc.constantFrom('none', 'failed', 'retried', 'deleted'),
  after: fc.integer({ min: 0, max: 4 }),
});

/**
 * Recorded events of several sources (`source-s<n>`), streams interleaved as `order` picks them
 * (an index modulo the number of streams; a stream already exhausted is skipped), a second apart.
 */
function recorded(streams: NewEvent[][], order: number[]): RecordedEvent[] {
  const cursors = streams.map(() => 0);
  const events: RecordedEvent[] = [];
  for (const pick of order) {
    const stream = pick % streams.length;
    const event = streams[stream][cursors[stream]];
    if (!event) continue;
    events.push({
      eventId: `event-${events.length}`,
      streamId: `source-s${stream}`,
      streamVersion: cursors[stream]++,
      globalPosition: events.length + 1,
      type: event.type,
      schemaVersion: 1,
      data: event.data,
      ...event.metadata,
      occurredAt: new Date(Date.UTC(2026, 0, 1, 0, 0, events.length)).toISOString(),
    });
  }
  return events;
}

for (const backend of backends) {
  t.test(`${backend.name}: a run of the pipeline's events writes each source's row once, and leaves what the events one at a time leave`, async (t) => {
    const db = await backend.open();
    t.teardown(() => db.close());
    await migrateReadModels(db.knex);
    const rows = async () => db.knex('sources').orderBy('id').select('*');
    await fc.assert(
      fc.asyncProperty(fc.array(sourceLog, { minLength: 1, maxLength: 5 }), fc.array(fc.nat({ max: 40 }), { maxLength: 80 }), async (logs, order) => {
        const streams = logs.map(({ registered: isRegistered, before, interruption, after }, n) => [
          ...(isRegistered ? [registered({ origin: 'url', url: `http://h/${n}` })] : []),
          ...pipeline(n).slice(0, before),
          ...(interruption === 'failed' || interruption === 'retried' ? [{ type: 'SourceFailed', data: { stage: 'retrieve_source', reason: 'down' }, metadata }] : []),
          ...(interruption === 'retried' ? [{ type: 'SourceRetryRequested', data: { previous_failure: 'down' }, metadata }] : []),
          ...(interruption === 'deleted' ? [{ type: 'SourceDeleted', data: { reason: null }, metadata }] : []),
          // After a retry the pipeline starts over; a second registration of a stored source changes nothing.
          ...(interruption === 'none' ? [] : [...(isRegistered ? [] : [registered({ origin: 'url', url: `http://h/late-${n}` })]), ...pipeline(n + 10).slice(0, after)]),
        ]);
        // Every stream's events, then whichever the order leaves out.
        const events = recorded(streams, [...order, ...streams.flatMap((stream, n) => stream.map(() => n))]);
        await db.knex('sources').delete();
        await db.knex.transaction(async (trx) => {
          for (const event of events) await applyEvents(sourcesProjection, trx, [event]);
        });
        const oneAtATime = await rows();
        await db.knex('sources').delete();
        await db.knex.transaction((trx) => applyEvents(sourcesProjection, trx, events));
        t.same(await rows(), oneAtATime);
      }),
      { numRuns: 40 },
    );
  });

  t.test(`${backend.name}: three sources' whole pipelines in one run are one insert`, async (t) => {
    const db = await backend.open();
    t.teardown(() => db.close());
    await migrateReadModels(db.knex);
    const streams = [0, 1, 2].map((n) => [registered({ origin: 'url', url: `http://h/${n}` }), ...pipeline(n)]);
    // Stage by stage across the sources, as the pipeline interleaves them.
    const events = recorded(streams, Array.from({ length: 15 }, (_, i) => i % 3));
    const statements: string[] = [];
    const count = (query: { sql: string }) => statements.push(query.sql);
    db.knex.on('query', count);
    await db.knex.transaction((trx) => applyEvents(sourcesProjection, trx, events));
    db.knex.off('query', count);
    t.equal(statements.filter((sql) => /sources/.test(sql)).length, 1, 'one statement writes the three rows');
    t.match(await db.knex('sources').orderBy('id').select('id', 'status', 'title', 'model_id', 'fact_count', 'created_at', 'updated_at'), [
      { id: 's0', status: 'processed', title: 'Title 0', model_id: 'model-0', fact_count: 0 },
      { id: 's1', status: 'processed', title: 'Title 1', model_id: 'model-1', fact_count: 0 },
      { id: 's2', status: 'processed', title: 'Title 2', model_id: 'model-2', fact_count: 0 },
    ]);
    const s2 = await db.knex('sources').where({ id: 's2' }).first('created_at', 'updated_at');
    t.same([new Date(s2.created_at).toISOString(), new Date(s2.updated_at).toISOString()], [events[2].occurredAt, events[14].occurredAt], 'created at its registration, updated at its last event');
  });
}
