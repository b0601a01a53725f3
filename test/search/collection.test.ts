import t, { type Test } from 'tap';
import { randomUUID } from 'node:crypto';
import { defineCollection, field, type CollectionDefinition } from '../../src/search/collection.js';
import { facts } from '../../src/search/collections/index.js';
import { createHybridSearch } from '../../src/search/hybrid.js';
import { createOpenSearchIndex } from '../../src/search/opensearch.js';
import { createPostgresSearchIndex } from '../../src/search/postgres.js';
import { collectionRegistry, type SearchIndex } from '../../src/search/port.js';
import type { Embedder } from '../../src/providers/embeddings/port.js';
import { DIMENSIONS } from './contract.js';
import { deleteIndices, ensureOpenSearch, getJson, uniquePrefix } from './helpers.js';
import { withServers } from '../helpers/servers.js';
import { openMigratedDatabase } from '../helpers/migratedDatabase.js';

/**
 * A searchable collection defined here, in the test, and served by both adapters with no change
 * to the port or to either adapter: what docs/search.md ("Adding a searchable collection") says
 * a new kind (summaries, reports) needs.
 */

t.setTimeout(600_000);

interface NoteDocument {
  id: string;
  repository_id: string;
  title: string;
  body: string;
  topic: string;
  status: string;
  written_at: string;
  vector?: number[] | null;
}

const notesDefinition: CollectionDefinition<NoteDocument> = {
  name: 'notes',
  language: 'english',
  fields: {
    title: field.text({ sort: true }),
    body: field.text(),
    topic: field.keyword({ filter: true }),
    status: field.keyword({ filter: true }),
    written_at: field.date({ sort: true }),
  },
  vectors: true,
  versioned: false,
  tombstones: false,
  hidden: { field: 'status', values: ['retracted'] },
  order: { ranked: [{ field: 'written_at', order: 'desc' }], listed: [{ field: 'title', order: 'asc' }] },
  postgres: { table: 'test_notes', vectors: { table: 'test_note_vectors', key: 'note_id' } },
  opensearch: { mappingVersion: 1, completeField: 'title' },
};
const notes = defineCollection(notesDefinition);

/** What a notes projection and its migration would provide on Postgres: the read model, with its tsvector. */
const notesTable = `CREATE TABLE test_notes (
  id text PRIMARY KEY,
  repository_id text NOT NULL,
  title text NOT NULL,
  body text NOT NULL,
  topic text NOT NULL,
  status text NOT NULL,
  written_at timestamptz NOT NULL,
  search tsvector GENERATED ALWAYS AS (to_tsvector('english', title || ' ' || body)) STORED
)`;

interface NotesHarness {
  index: SearchIndex;
  /** The service's way: on Postgres a projection writes the rows and the index the vectors; OpenSearch takes it all. */
  load(docs: NoteDocument[]): Promise<void>;
  remove(repositoryId: string, ids: string[]): Promise<void>;
}

let clock = Date.parse('2025-01-01T00:00:00.000Z');
function note(repositoryId: string, title: string, body: string, extra: Partial<NoteDocument> = {}): NoteDocument {
  clock += 60_000;
  return { id: randomUUID(), repository_id: repositoryId, title, body, topic: 'general', status: 'published', written_at: new Date(clock).toISOString(), ...extra };
}

const ids = (items: { id: string }[]) => items.map((item) => item.id);

/** Two meanings (water, rock) and a constant, so no vector is all zeros. */
const embedder: Embedder = {
  modelId: 'two-meanings',
  dimensions: DIMENSIONS,
  async embed(texts) {
    return texts.map((text) => [/river|lake|water/i.test(text) ? 1 : 0, /rock|stone|granite/i.test(text) ? 1 : 0, 0, 0.05]);
  },
};

function notesContract(t: Test, open: (t: Test) => Promise<NotesHarness>): void {
  t.test('indexes, searches, filters, sorts and pages a collection defined in the test', async (t) => {
    const { index, load } = await open(t);
    const repo = `repo-${randomUUID()}`;
    const rivers = note(repo, 'Rivers', 'Rivers carve valleys over millennia.', { topic: 'geology', vector: [1, 0, 0, 0.05] });
    const granite = note(repo, 'Granite', 'Granite cools slowly below ground.', { topic: 'geology', vector: [0, 1, 0, 0.05] });
    const lakes = note(repo, 'Lakes', 'Lakes fill basins that rivers left.', { topic: 'hydrology', vector: [1, 0.1, 0, 0.05] });
    const retracted = note(repo, 'Old rivers', 'Rivers were thought to be eternal.', { status: 'retracted', vector: [1, 0, 0, 0.05] });
    const elsewhere = note(`repo-${randomUUID()}`, 'Rivers', 'Rivers of another repository.');
    await load([rivers, granite, lakes, retracted, elsewhere]);

    const byWord = await index.search(notes, { repositoryId: repo, query: 'river', limit: 10, offset: 0 });
    t.same(ids(byWord.items).sort(), [rivers.id, lakes.id].sort(), 'stemmed words in the title or body; hidden and other repositories left out');
    const hit = byWord.items.find((item) => item.id === rivers.id);
    t.match(hit, { title: 'Rivers', body: rivers.body, topic: 'geology', status: 'published', written_at: rivers.written_at });
    t.ok((hit?.score ?? 0) > 0, 'a lexical score');
    t.notOk(hit !== undefined && 'repository_id' in hit, 'hits carry the declared fields, not the repository');

    const listing = await index.search(notes, { repositoryId: repo, query: '', limit: 10, offset: 0 });
    t.same(ids(listing.items), [granite.id, lakes.id, rivers.id], 'a listing in the collection\'s order: by title');
    const oldestFirst = await index.search(notes, { repositoryId: repo, query: '', limit: 2, offset: 1, sort: [{ field: 'written_at', order: 'asc' }] });
    t.same({ total: oldestFirst.total, ids: ids(oldestFirst.items) }, { total: 3, ids: [granite.id, lakes.id] }, 'a sort of the query\'s own, paged');

    t.same(ids((await index.search(notes, { repositoryId: repo, query: '', limit: 10, offset: 0, filters: { topic: 'geology' } })).items), [granite.id, rivers.id], 'a filter');
    t.same(ids((await index.search(notes, { repositoryId: repo, query: 'river', limit: 10, offset: 0, filters: { topic: ['hydrology', 'climate'] } })).items), [lakes.id], 'a filter of several values');
    t.same(await index.search(notes, { repositoryId: repo, query: '', limit: 10, offset: 0, filters: { topic: [] } }), { total: 0, items: [] }, 'an empty filter list matches nothing');
    t.same(ids((await index.search(notes, { repositoryId: repo, query: '', limit: 10, offset: 0, filters: { status: 'retracted' } })).items), [], 'a filter cannot reveal hidden documents');

    const nearest = await index.knn(notes, { repositoryId: repo, vector: [1, 0, 0, 0.05], k: 5 });
    t.same(ids(nearest.items), [rivers.id, lakes.id, granite.id], 'k-NN: nearest first, hidden left out');
    t.ok(Math.abs(nearest.items[0].score - 1) < 1e-3, 'the score is the cosine');
    t.same(ids((await index.knn(notes, { repositoryId: repo, vector: [1, 0, 0, 0.05], k: 5, filters: { topic: 'geology' } })).items), [rivers.id, granite.id], 'k-NN with a filter');

    const hybrid = createHybridSearch({ search: index, embedder, settings: { enabled: true, rrfK: 60, minScore: 0, overFetchMultiplier: 3 } });
    const fused = await hybrid.search(notes, { repositoryId: repo, query: 'water', limit: 10, offset: 0 });
    t.equal(fused.mode, 'hybrid', 'hybrid search works over the collection');
    t.same(ids(fused.items).slice(0, 2).sort(), [rivers.id, lakes.id].sort(), '"water" is in no note: the vector side finds rivers and lakes');

    const bad = { name: 'InvalidSearchRequestError' };
    await t.rejects(index.search(notes, { repositoryId: repo, query: '', limit: 10, offset: 0, filters: { body: 'x' } }), bad, 'a field that is not filterable');
    await t.rejects(index.search(notes, { repositoryId: repo, query: '', limit: 10, offset: 0, sort: [{ field: 'topic', order: 'asc' }] }), bad, 'a field that is not sortable');
    await t.rejects(index.search(notes, { repositoryId: repo, query: '', limit: 10, offset: 0, sort: [{ field: 'title', order: 'up' as 'asc' }] }), bad, 'an unknown order');
    await t.rejects(index.index(notes, [{ ...note(repo, '', 'An empty title.') }]), bad, 'a document breaking its declaration');
    await t.rejects(index.index(notes, [{ ...note(repo, 'Dated', 'Badly.'), written_at: 'soon' }]), bad, 'a bad date');
  });

  t.test('updates, removals and repository removal reach the collection', async (t) => {
    const { index, load, remove } = await open(t);
    const repo = `repo-${randomUUID()}`;
    const a = note(repo, 'Deltas', 'Deltas form where rivers slow.', { vector: [1, 0, 0, 0.05] });
    const b = note(repo, 'Basalt', 'Basalt is volcanic rock.');
    await load([a, b]);
    await index.update(notes, [{ id: b.id, repository_id: repo, vector: [0, 1, 0, 0.05] }]);
    t.same(ids((await index.knn(notes, { repositoryId: repo, vector: [0, 1, 0, 0.05], k: 1 })).items), [b.id], 'a vector set by an update');
    const bad = { name: 'InvalidSearchRequestError' };
    await t.rejects(index.update(notes, [{ id: b.id, repository_id: repo, set: { topic: '' } }]), bad, 'a field value breaking its declaration');
    await t.rejects(index.update(notes, [{ id: b.id, repository_id: repo, version: -1 }]), bad, 'a negative version');
    await t.rejects(index.update(notes, [{ id: b.id, repository_id: repo, vector: [1, 0] }]), bad, 'a vector of another dimension');
    await remove(repo, [a.id]);
    t.same(ids((await index.search(notes, { repositoryId: repo, query: '', limit: 10, offset: 0 })).items), [b.id], 'removed');
    t.same(ids((await index.knn(notes, { repositoryId: repo, vector: [1, 0, 0, 0.05], k: 5 })).items), [b.id], 'its vector too');
    await t.resolves(index.remove(notes, repo, [a.id]), 'removing again is harmless');
    await index.removeRepository(repo);
    t.same((await index.knn(notes, { repositoryId: repo, vector: [0, 1, 0, 0.05], k: 5 })).items, [], 'removeRepository reaches every collection');
    await t.rejects(index.search(facts, { repositoryId: repo, query: '', limit: 1, offset: 0 }), /not registered/, 'a collection the index was not given');
  });
}

t.test('on the Postgres adapter (PGlite with pgvector)', async (t) =>
  notesContract(t, async (t) => {
    const db = await openMigratedDatabase();
    t.teardown(() => db.close());
    await db.knex.raw(notesTable);
    const index = createPostgresSearchIndex(db.knex, { hasVector: true, vectorDimensions: DIMENSIONS, collections: [notes] });
    return {
      index,
      async load(docs) {
        await db.knex('test_notes').insert(docs.map(({ vector: _vector, ...row }) => row));
        await index.index(notes, docs);
      },
      async remove(repositoryId, removed) {
        await db.knex('test_notes').where({ repository_id: repositoryId }).whereIn('id', removed).delete();
        await index.remove(notes, repositoryId, removed);
      },
    };
  }),
);

// The OpenSearch half needs the server: `make test-unit` (FACTLOG_TEST_SERVERS=none) runs the PostgreSQL-dialect half only.
if (withServers) t.test('on the OpenSearch adapter', async (t) => {
  const node = await ensureOpenSearch();
  notesContract(t, async (t) => {
    const prefix = uniquePrefix('notes');
    const index = createOpenSearchIndex({ node, indexPrefix: prefix, dimensions: DIMENSIONS, refresh: true, collections: [notes] });
    t.teardown(async () => {
      await index.close();
      await deleteIndices(node, prefix);
    });
    t.equal(index.aliasOf(notes), `${prefix}-notes`, 'the collection gets its own alias');
    return { index, load: (docs) => index.index(notes, docs), remove: (repositoryId, removed) => index.remove(notes, repositoryId, removed) };
  });

  t.test('its mapping is derived from the declared fields', async (t) => {
    const prefix = uniquePrefix('notes-mapping');
    const index = createOpenSearchIndex({ node, indexPrefix: prefix, dimensions: DIMENSIONS, collections: [notes] });
    t.teardown(async () => {
      await index.close();
      await deleteIndices(node, prefix);
    });
    t.same(await index.ensureIndices(), { notes: `${prefix}-notes-v1` });
    const { mappings } = (await getJson(`${node}/${prefix}-notes-v1/_mapping`)).body[`${prefix}-notes-v1`];
    t.same(mappings.properties.title, { type: 'text', analyzer: 'english', fields: { raw: { type: 'keyword' } } }, 'sortable text keeps a raw keyword');
    t.same(mappings.properties.topic, { type: 'keyword' });
    t.same(mappings.properties.written_at, { type: 'date' });
    t.equal(mappings.properties.version, undefined, 'not versioned: no version field');
    t.match(mappings.properties.embedding, { type: 'knn_vector', dimension: DIMENSIONS });
  });
});

t.test('definitions that cannot work are refused where they are made', async (t) => {
  const refused = (change: Partial<CollectionDefinition<NoteDocument>>, why: RegExp, what: string) =>
    t.throws(() => defineCollection<NoteDocument>({ ...notesDefinition, ...change }), why, what);
  refused({ name: 'Notes' }, /name must be lowercase/, 'an uppercase name');
  refused({ order: { ranked: [{ field: 'topic', order: 'asc' }], listed: [] } }, /topic, which is not a sortable field/, 'an order on a field that is not sortable');
  refused({ hidden: { field: 'written_at', values: ['x'] } }, /hidden field written_at must be a keyword/, 'a hidden date');
  refused({ tombstones: true, hidden: undefined }, /tombstones need a hidden field/, 'tombstones with nothing to mark them');
  refused({ postgres: { table: 'test_notes' } }, /postgres.vectors must be given/, 'vectors without a vector table');
  refused({ postgres: { table: 'test notes; drop', vectors: { table: 'v', key: 'k' } } }, /SQL identifier/, 'a table name that is no identifier');
  refused({ opensearch: { mappingVersion: 1, completeField: 'summary' } }, /completeField summary is no declared field/, 'an unknown complete field');
  t.throws(() => collectionRegistry([notes, defineCollection(notesDefinition)]), /registered twice/, 'one name, two registrations');
});
