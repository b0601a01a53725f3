import t, { type Test } from 'tap';
import type { NewEvent } from '../../src/eventstore/envelope.js';
import { createPostgresEventStore, migrateEventStore } from '../../src/eventstore/postgres.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';
import { ProjectionRunner } from '../../src/projection/runner.js';
import { hostHealthProjection } from '../../projections/hostHealth.js';
import { migrateReadModels } from '../../projections/migrations/index.js';
import { openMemoryPglite } from '../eventstore/contract.js';

const metadata = { repositoryId: 'repo-1', actor: 'system:test', causationId: null, correlationId: null };
const event = (type: string, data: Record<string, unknown>): NewEvent => ({ type, data, metadata });
const registered = (url: string | null, origin = 'url') =>
  event('SourceRegistered', { origin, url, doi: null, filename: null, content_type: null, body_sha256: null, body_bytes: null });
const fetched = event('SourceFetched', {
  final_url: null,
  content_type: 'text/html',
  body_sha256: 'b',
  body_bytes: 1,
  document_kind: 'html',
  title: null,
  published_at: null,
  text_sha256: 't',
  markdown_sha256: 'm',
  text_chars: 1,
});
const failed = (stage: string, reason: string) => event('SourceFailed', { stage, reason });

/** An in-memory database with the event store's and the read models' schemas, and a store on it; closed when `t` ends. */
async function openMigratedStore(t: Test) {
  const db = await openMemoryPglite();
  t.teardown(() => db.close());
  await migrateEventStore(db.knex);
  await migrateReadModels(db.knex);
  const store = createPostgresEventStore(db, { schemas: await EventSchemaRegistry.load() });
  t.teardown(() => store.close());
  return { db, store };
}

t.test('host-health counts by the host of the registered URL, with no other read model', async (t) => {
  const { db, store } = await openMigratedStore(t);
  await store.append('source-a', [registered('https://Example.org/a'), event('SourceFetchStarted', { attempt: 1 }), fetched], 'no_stream');
  await store.append('source-b', [registered('https://example.org/b'), failed('retrieve_source', 'fetching https://example.org/b failed (transient, http 503, 3 attempts)')], 'no_stream');
  // A missing page: the host answered (an attempt, no failure of the host).
  await store.append('source-b2', [registered('https://example.org/gone'), failed('retrieve_source', 'fetching https://example.org/gone failed (permanent, http 404, 1 attempt)')], 'no_stream');
  await store.append('source-c', [registered('https://example.org/c'), failed('retrieve_source', 'auto-skipped: host example.org is failing')], 'no_stream');
  await store.append('source-d', [registered('https://other.net/d'), failed('source_decomposition', 'model failed')], 'no_stream');
  const last = (await store.append('source-e', [registered(null, 'upload'), fetched], 'no_stream')).lastPosition;

  // Only this projection runs: there is no `sources` row to look the host up in.
  const runner = new ProjectionRunner(store, db, [hostHealthProjection]);
  t.teardown(() => runner.stop());
  await runner.start();
  await runner.waitFor(last, 10_000);
  const expected = [{ host: 'example.org', attempts: 3, failures: 1, last_error: 'fetching https://example.org/b failed (transient, http 503, 3 attempts)' }];
  const hosts = () => db.knex('host_health').select('host', 'attempts', 'failures', 'last_error').orderBy('host');
  t.same(await hosts(), expected, 'a fetch, a missing page and a failure of example.org; skips, other stages and uploads do not count');
  t.same(await db.knex('sources').count({ n: '*' }).then((rows) => Number(rows[0].n)), 0, 'the sources read model is empty');

  await runner.rebuild('host-health');
  t.same(await hosts(), expected, 'a rebuild counts the same');
});

t.test('host-health keeps a failure reason of 2,000 characters whole, an emoji at unit 2,000 included', async (t) => {
  // A source's failure reason is at most 2,000 characters (code points, boundedErrorMessage), so
  // one with emoji is longer than 2,000 UTF-16 units: cutting it at 2,000 units halved the pair at
  // the cut, and jsonb refused the lone half, which stopped the projection.
  const { db, store } = await openMigratedStore(t);
  const head = 'fetching https://example.org/e failed (transient, http 503, 3 attempts): ';
  const prefix = head.length % 2 === 1 ? head : `${head}x`;
  const reason = `${prefix}${'😀'.repeat(1000)}`;
  t.ok([...reason].length <= 2000 && reason.length > 2000, 'a reason within 2,000 characters, over 2,000 units, an emoji across unit 2,000');
  const last = (await store.append('source-e', [registered('https://example.org/e'), failed('retrieve_source', reason)], 'no_stream')).lastPosition;
  const runner = new ProjectionRunner(store, db, [hostHealthProjection]);
  t.teardown(() => runner.stop());
  await runner.start();
  await runner.waitFor(last, 10_000);
  t.same(await db.knex('host_health').select('host', 'failures', 'last_error'), [{ host: 'example.org', failures: 1, last_error: reason }], 'the reason is kept whole');
});
