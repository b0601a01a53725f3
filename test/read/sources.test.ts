import t from 'tap';
import type { Principal } from '../../src/auth/rbac.js';
import { MAX_SOURCE_QUERY_CHARS } from '../../src/read/sources.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';
import { extractFacts } from '../api/seedGraph.js';

let harness: TestApplication;
let owner: Principal;
let stranger: Principal;
let repository: string;
let sourceIds: string[];
/** Enough facts that listing them by their (random) ids would almost never give this order. */
const SOURCE_FACTS = ['First fact.', 'Second fact.', 'Third fact.', 'Fourth fact.', 'Fifth fact.', 'Sixth fact.'];

t.before(async () => {
  harness = await startTestApplication({ name: 'Archive' });
  ({ owner, stranger, repository } = harness);
  sourceIds = [];
  for (const path of ['one', 'two', 'three']) sourceIds.push((await harness.app.sources.add(owner, { repository, url: `http://127.0.0.1:9/${path}` })).source.id);
  await extractFacts(harness.service, repository, sourceIds[0], SOURCE_FACTS, 'unknown');
});
t.teardown(() => harness.close());

t.test('list: newest first, paged, by status', async (t) => {
  const page = await harness.app.sources.list(owner, { repository, limit: 2 });
  t.equal(page.total, 3);
  t.same(page.items.map((source) => source.id), [sourceIds[2], sourceIds[1]], 'newest first');
  const pending = await harness.app.sources.list(owner, { repository, status: 'pending' });
  t.same(pending.items.map((source) => source.id).sort(), [sourceIds[1], sourceIds[2]].sort(), 'the one with facts has moved on');
  t.equal((await harness.app.sources.list(owner, { repository, status: 'failed' })).total, 0);
  await rejectsWith(t, harness.app.sources.list(owner, { repository, limit: 1.5 }), 'invalid', /limit/);
});

t.test('one source and its facts, in source order', async (t) => {
  t.match(await harness.app.sources.get(owner, { repository, source: sourceIds[1] }), { id: sourceIds[1], url: 'http://127.0.0.1:9/two', kind: null, body_bytes: null });
  const facts = await harness.app.sources.facts(owner, { repository, source: sourceIds[0] });
  t.same(facts.items.map((fact) => [fact.content, fact.chunk_index]), SOURCE_FACTS.map((content) => [content, 0]), 'in the order of the source, not of the facts\' ids');
  t.equal(facts.total, SOURCE_FACTS.length);
  const second = await harness.app.sources.facts(owner, { repository, source: sourceIds[0], limit: 2, offset: 2 });
  t.same(second.items.map((fact) => fact.content), SOURCE_FACTS.slice(2, 4), 'pages keep the order');
});

t.test('denied, or not there', async (t) => {
  await rejectsWith(t, harness.app.sources.get(stranger, { repository, source: sourceIds[0] }), 'not_found', /^repository not found$/);
  await rejectsWith(t, harness.app.sources.facts({ ...owner, scopes: ['sources:read'] }, { repository, source: sourceIds[0] }), 'forbidden', /facts:read/);
  await rejectsWith(t, harness.app.sources.get(owner, { repository, source: 'f00dbabe-0000-4000-8000-000000000000' }), 'not_found');
  const other = (await harness.app.repositories.create(owner, { name: 'Other' })).id;
  await rejectsWith(t, harness.app.sources.get(await harness.refreshed(owner), { repository: other, source: sourceIds[0] }), 'not_found', /source/);
});

t.test('search pages by where the last one ended: a source deleted or added between pages is neither skipped nor repeated', async (t) => {
  const added: string[] = [];
  for (const path of ['walk-a', 'walk-b', 'walk-c', 'walk-d', 'walk-e']) added.push((await harness.app.sources.add(owner, { repository, url: `http://127.0.0.1:9/${path}` })).source.id);
  const newestFirst = [...added].reverse();
  const first = await harness.app.sources.search(owner, { repository, query: 'walk', limit: 2 });
  t.same(first.items.map((source) => source.id), newestFirst.slice(0, 2));
  // One of the first page goes before the next page is asked for (by an offset, that skipped one).
  await harness.app.sources.remove(owner, { repository, source: newestFirst[0]! });
  const second = await harness.app.sources.search(owner, { repository, query: 'walk', limit: 2, cursor: first.next_cursor ?? undefined });
  t.same(second.items.map((source) => source.id), newestFirst.slice(2, 4), 'on from the last one shown');
  // A newer source comes before the third (by an offset, that repeated one).
  const newer = (await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/walk-f' })).source.id;
  const third = await harness.app.sources.search(owner, { repository, query: 'walk', limit: 2, cursor: second.next_cursor ?? undefined });
  t.same(third.items.map((source) => source.id), newestFirst.slice(4), 'the rest');
  t.equal(third.next_cursor, null, 'the last page');
  t.notOk([...first.items, ...second.items, ...third.items].some((source) => source.id === newer), 'the newer source is before the walk began');
  await rejectsWith(t, harness.app.sources.search(owner, { repository, query: 'walk', cursor: 'bm9uc2Vuc2U' }), 'invalid', /cursor/);
  await rejectsWith(t, harness.app.sources.search(owner, { repository, query: 'walk', cursor: Buffer.from('k:["not a time","x"]').toString('base64url') }), 'invalid', /cursor/);
  // Each of these went on to PostgreSQL, which refused it: a 500, not the caller's error.
  for (const values of [
    ['2030-02-30T00:00:00.000000Z', '00000000-0000-4000-8000-000000000000'],
    ['March 7', '00000000-0000-4000-8000-000000000000'],
    ['2026-11-30T12:00:00.000000Z', 'not-a-uuid'],
  ]) {
    const cursor = Buffer.from(`k:${JSON.stringify(values)}`).toString('base64url');
    await rejectsWith(t, harness.app.sources.search(owner, { repository, query: 'walk', cursor }), 'invalid', /cursor/);
  }
});

t.test('search bounds its query in characters (code points), as every text bound: an emoji is one', async (t) => {
  // 500 emoji are 1,000 UTF-16 units.
  const found = await harness.app.sources.search(owner, { repository, query: '🧪'.repeat(MAX_SOURCE_QUERY_CHARS) });
  t.equal(found.total, 0);
  await rejectsWith(t, harness.app.sources.search(owner, { repository, query: '🧪'.repeat(MAX_SOURCE_QUERY_CHARS + 1) }), 'invalid', /at most 500 characters/);
});
