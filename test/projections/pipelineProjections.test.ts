import { randomUUID } from 'node:crypto';
import t, { type Test } from 'tap';
import { conceptsProjection } from '../../projections/concepts.js';
import { factsProjection } from '../../projections/facts.js';
import { migrateReadModels } from '../../projections/migrations/index.js';
import { repositoriesProjection } from '../../projections/repositories.js';
import { conceptIdFor } from '../../src/domain/concept/decider.js';
import { MAX_MERGE_CHAIN } from '../../src/domain/mergeChain.js';
import { openScratchPostgres, type Database } from '../../src/db/database.js';
import { createPostgresEventStore, migrateEventStore } from '../../src/eventstore/postgres.js';
import type { EventStore } from '../../src/eventstore/port.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';
import { packVector } from '../../src/interchange/vectors.js';
import { ProjectionRunner } from '../../src/projection/runner.js';
import { openMigratedDatabase } from '../helpers/migratedDatabase.js';
import { withServers } from '../helpers/servers.js';

const backends: Array<{ name: string; open: () => Promise<Database> }> = [
  // Loaded from the migrated dump (or kept, emptied, from an earlier opener): the fixture's own
  // migrations find nothing to do, where a fresh database cost each test about 0.45 CPU-s.
  { name: 'pglite', open: openMigratedDatabase },
  ...(withServers ? [{ name: 'postgres', open: () => openScratchPostgres(undefined, 'factlog_pipeline_projection') }] : []),
];

const REPO = 'repo-1';
const OTHER_REPO = 'repo-2';
const projections = [repositoriesProjection, factsProjection, conceptsProjection];
/** Tables the projections under test own, with the columns that order their rows. */
const tables: Record<string, string[]> = {
  repositories: ['id'],
  facts: ['id'],
  fact_sources: ['fact_id', 'source_id'],
  fact_redirects: ['fact_id'],
  concepts: ['id'],
  concept_aliases: ['concept_id', 'alias_lower'],
  fact_concepts: ['fact_id', 'concept_id'],
  fact_concept_redirects: ['fact_id'],
  concept_relations: ['repository_id', 'concept_a', 'concept_b'],
};

interface Fixture {
  db: Database;
  store: EventStore;
  runner: ProjectionRunner;
  /** Appends one event and returns its global position. */
  emit(streamId: string, type: string, data: Record<string, unknown>, repositoryId?: string): Promise<number>;
  /** Appends and waits until every projection applied it. */
  settle(streamId: string, type: string, data: Record<string, unknown>, repositoryId?: string): Promise<void>;
}

async function openFixture(t: Test, open: () => Promise<Database>): Promise<Fixture> {
  const db = await open();
  await migrateEventStore(db.knex);
  await migrateReadModels(db.knex);
  const store = createPostgresEventStore(db, { schemas: await EventSchemaRegistry.load(), pollIntervalMs: 20 });
  const runner = new ProjectionRunner(store, db, projections, { batchSize: 7 });
  t.teardown(async () => {
    await runner.stop();
    await store.close();
    await db.close();
  });
  await runner.start();
  const emit = async (streamId: string, type: string, data: Record<string, unknown>, repositoryId = REPO) => {
    const metadata = { repositoryId, actor: 'system:test', causationId: null, correlationId: null };
    return (await store.append(streamId, [{ type, data, metadata }], 'any')).lastPosition;
  };
  return {
    db,
    store,
    runner,
    emit,
    // Long: on the server an append is read only once every older transaction there has ended, other test files' included.
    settle: async (streamId, type, data, repositoryId) => runner.waitFor(await emit(streamId, type, data, repositoryId), 60_000),
  };
}

async function snapshot(db: Database): Promise<Record<string, unknown[]>> {
  const result: Record<string, unknown[]> = {};
  for (const [table, order] of Object.entries(tables)) {
    const rows = (await db.knex(table).select('*').orderBy(order)) as Array<Record<string, unknown>>;
    result[table] = rows.map((row) =>
      Object.fromEntries(Object.entries(row).map(([key, value]) => [key, value instanceof Date ? value.toISOString() : value])),
    );
  }
  return result;
}

/**
 * Rebuilds `names` with a runner whose batch holds the whole log, so each handler gets the longest
 * runs its batchTogether groups allow (the fixture's 7-event batches cut them short), and checks
 * the result against the read models applied one event at a time.
 */
async function rebuildInOneBatch(t: Test, fixture: Pick<Fixture, 'db' | 'store' | 'runner'>, names: readonly string[], live: Record<string, unknown[]>): Promise<void> {
  await fixture.runner.stop();
  const wide = new ProjectionRunner(fixture.store, fixture.db, projections, { batchSize: 10_000 });
  for (const name of names) await wide.rebuild(name);
  t.same(await snapshot(fixture.db), live, 'rebuilt in one batch (the longest runs), the read models equal the live ones');
}

const fact = (id: string, extra: Record<string, unknown> = {}) => ({
  fact_id: id,
  content: `Fact ${id}.`,
  content_hash: `hash-${id}`,
  source_text: `Source text of ${id}.`,
  chunk_index: 0,
  ...extra,
});
const row = async (db: Database, table: string, where: Record<string, unknown>) => (await db.knex(table).where(where).first()) as Record<string, unknown> | undefined;
const count = async (db: Database, table: string, where: Record<string, unknown>) =>
  Number(((await db.knex(table).where(where).count({ n: '*' }).first()) as { n: string | number }).n);
const links = async (db: Database, where: Record<string, unknown>) =>
  ((await db.knex('fact_concepts').where(where).orderBy(['fact_id', 'concept_id']).select('fact_id', 'concept_id')) as Array<{ fact_id: string; concept_id: string }>).map(
    (link) => `${link.fact_id}:${link.concept_id}`,
  );

const curie = conceptIdFor(REPO, 'Marie Curie', 'person');
const radium = conceptIdFor(REPO, 'Radium', 'chemical');
const madame = conceptIdFor(REPO, 'Madame Curie', 'person');

for (const backend of backends) {
  t.test(backend.name, async (t) => {
    t.test('repositories keep prompt overrides and custom contexts', async (t) => {
      const { db, settle } = await openFixture(t, backend.open);
      await settle(`repository-${REPO}`, 'RepositoryCreated', {
        name: 'R', slug: 'r', description: '', preset: 'scientific', tier: 'shared', accepted_promptset_hashes: [], registry_id: null,
      });
      t.match(await row(db, 'repositories', { id: REPO }), { prompt_overrides: {}, custom_contexts: [] }, 'defaults');
      await settle(`repository-${REPO}`, 'RepositoryPromptsChanged', { prompts: { synthesis: 'Be brief.', posture: 'Neutral.' } });
      await settle(`repository-${REPO}`, 'RepositoryContextsChanged', { custom_contexts: [{ name: 'instrument', description: 'A device.' }] });
      t.match(await row(db, 'repositories', { id: REPO }), {
        prompt_overrides: { synthesis: 'Be brief.', posture: 'Neutral.' },
        custom_contexts: [{ name: 'instrument', description: 'A device.' }],
      });
      await settle(`repository-${REPO}`, 'RepositoryPromptsChanged', { prompts: { posture: 'Neutral.' } });
      t.same((await row(db, 'repositories', { id: REPO }))?.prompt_overrides, { posture: 'Neutral.' }, 'the full map replaces the old one');
    });

    t.test('facts: new, stable, merged, removed; links follow merges; rebuild equals live', async (t) => {
      const { db, store, emit, settle, runner } = await openFixture(t, backend.open);
      await settle('source-s1', 'FactsExtracted', {
        model_id: 'local',
        promptset_hash: 'p'.repeat(64),
        facts: [
          fact('fa', { sentence_index: 0 }),
          fact('fb', { sentence_index: 1 }),
          fact('fc', { fact_kind: 'image', image_id: 'img-1', chunk_index: 2 }),
        ],
      });
      t.match(await row(db, 'facts', { id: 'fa' }), { status: 'new', merged_into: null, promptset_hash: 'p'.repeat(64), fact_kind: 'text', image_id: null, embedding_model: null });
      t.match(await row(db, 'facts', { id: 'fc' }), { status: 'new', fact_kind: 'image', image_id: 'img-1' });
      t.match(await row(db, 'fact_sources', { fact_id: 'fb', source_id: 's1' }), { sentence_index: 1, chunk_index: 0 });
      t.match(await row(db, 'fact_sources', { fact_id: 'fc' }), { sentence_index: -1, chunk_index: 2 });

      await settle('source-s1', 'FactsEmbedded', { model: 'local-100d', dimensions: 1, vectors: ['fa', 'fb', 'fc'].map((id) => ({ fact_id: id, vector: packVector([1]) })) });
      t.equal((await row(db, 'facts', { id: 'fb' }))?.embedding_model, 'local-100d');

      await emit('fact-fa', 'FactStabilized', { source_id: 's1' });
      await settle('fact-fb', 'FactMergedInto', { survivor_id: 'fa', similarity: 0.97, source_id: 's1', catchup: false });
      t.match(await row(db, 'facts', { id: 'fa' }), { status: 'stable' });
      t.match(await row(db, 'facts', { id: 'fb' }), { status: 'merged', merged_into: 'fa' });
      t.same(await db.knex('fact_sources').where({ source_id: 's1' }).orderBy('fact_id').pluck('fact_id'), ['fa', 'fc'], 'the merged fact\'s source link moved to the survivor');

      await settle('fact-fb', 'FactStabilized', { source_id: 's9' });
      t.equal((await row(db, 'facts', { id: 'fb' }))?.status, 'merged', 'a late stabilization does not revive a merged fact');

      // A second source extracts the merged fact again and a new one.
      await settle('source-s2', 'FactsExtracted', { model_id: 'local', facts: [fact('fb', { chunk_index: 4 }), fact('fd')] });
      t.match(await row(db, 'fact_sources', { fact_id: 'fa', source_id: 's2' }), { chunk_index: 4 }, 'a link to a merged fact lands on its survivor');
      t.equal(await count(db, 'fact_sources', { fact_id: 'fb' }), 0);
      t.match(await row(db, 'facts', { id: 'fd' }), { status: 'new', promptset_hash: '' }, 'an old-shape event: empty promptset hash');

      await settle('fact-fb', 'FactRemoved', { survivor_id: 'fa' });
      t.equal(await row(db, 'facts', { id: 'fb' }), undefined, 'a removed fact loses its row');
      await settle('source-s3', 'FactsExtracted', { model_id: 'local', facts: [fact('fb')] });
      t.equal(await row(db, 'facts', { id: 'fb' }), undefined, 'a removed fact is not brought back');
      t.ok(await row(db, 'fact_sources', { fact_id: 'fa', source_id: 's3' }), 'its new source links to the survivor');

      // A chain: fa merges into fd later (catch-up); fb → fa → fd.
      await settle('fact-fa', 'FactMergedInto', { survivor_id: 'fd', similarity: 0.95, source_id: null, catchup: true });
      t.same(await db.knex('fact_sources').where({ fact_id: 'fd' }).orderBy('source_id').pluck('source_id'), ['s1', 's2', 's3']);
      await settle('source-s4', 'FactsExtracted', { model_id: 'local', facts: [fact('fb')] });
      t.ok(await row(db, 'fact_sources', { fact_id: 'fd', source_id: 's4' }), 'links follow the merge chain to the final survivor');
      t.match(await row(db, 'facts', { id: 'fa' }), { status: 'merged', merged_into: 'fd' });

      const live = await snapshot(db);
      await db.knex('facts').insert({ id: 'junk', repository_id: REPO, content: 'x', content_hash: 'junk', created_at: new Date() });
      await runner.rebuild('facts');
      t.same(await snapshot(db), live, 'rebuilt read models equal the live ones');
      await rebuildInOneBatch(t, { db, store, runner }, ['facts'], live);
    });

    t.test('facts: a merge chain as long as the read side follows (MAX_MERGE_CHAIN) leads links to its end', async (t) => {
      const { db, emit, settle } = await openFixture(t, backend.open);
      // Longer than the projections' own bound was (32), within the one the reads and stages follow.
      const length = 40;
      t.ok(length < MAX_MERGE_CHAIN);
      const ids = Array.from({ length: length + 1 }, (_, index) => `chain-${index}`);
      await emit('source-s1', 'FactsExtracted', { model_id: 'local', facts: ids.map((id) => fact(id)) });
      for (let index = 0; index < length - 1; index++) {
        await emit(`fact-${ids[index]}`, 'FactMergedInto', { survivor_id: ids[index + 1], similarity: 0.95, source_id: null, catchup: true });
      }
      await settle(`fact-${ids[length - 1]}`, 'FactMergedInto', { survivor_id: ids[length], similarity: 0.95, source_id: null, catchup: true });
      await settle('source-s2', 'FactsExtracted', { model_id: 'local', facts: [fact(ids[0]!)] });
      t.ok(await row(db, 'fact_sources', { fact_id: ids[length], source_id: 's2' }), 'the new link lands on the final survivor');
      t.equal(await count(db, 'fact_sources', { source_id: 's2' }), 1, 'and on no fact along the chain');
    });

    t.test('concepts: links that arrive before their concept (bus order) are counted when it is created', async (t) => {
      const { db, emit, settle } = await openFixture(t, backend.open);
      const early = randomUUID();
      await emit('source-s9', 'FactsExtracted', { model_id: 'local', facts: [fact('f9a'), fact('f9b')] });
      // Applied in a batch of its own, as a bus consumer of the source topic may apply it first.
      await settle('source-s9', 'ConceptsExtracted', {
        model_id: 'local', promptset_hash: '', batch_index: 0, batch_count: 1,
        links: [{ fact_id: 'f9a', concept_ids: [early] }, { fact_id: 'f9b', concept_ids: [early] }],
      });
      await settle(`concept-${early}`, 'ConceptCreated', { canonical_name: 'Polonium', context: 'chemical', ontology_class: null, aliases: [], source_id: 's9' });
      t.match(await row(db, 'concepts', { id: early }), { canonical_name: 'Polonium', fact_count: 2 });
    });

    t.test('concepts: aliases, links, merges, counts, relations; rebuild equals live', async (t) => {
      const { db, store, emit, settle, runner } = await openFixture(t, backend.open);
      await emit('source-s1', 'FactsExtracted', { model_id: 'local', facts: [fact('fa'), fact('fb'), fact('fc'), fact('fd')] });
      await emit(`concept-${curie}`, 'ConceptCreated', { canonical_name: 'Marie Curie', context: 'person', ontology_class: 'scientist', aliases: ['Curie'], source_id: 's1' });
      await emit(`concept-${radium}`, 'ConceptCreated', { canonical_name: 'Radium', context: 'chemical', ontology_class: null, aliases: [], source_id: 's1' });
      await emit(`concept-${madame}`, 'ConceptCreated', { canonical_name: 'Madame Curie', context: 'person', ontology_class: null, aliases: ['Mme Curie'], source_id: 's1' });
      // A twin with the same identity in another spelling changes nothing.
      await settle(`concept-${curie}`, 'ConceptCreated', { canonical_name: 'MARIE CURIE', context: 'Person', ontology_class: null, aliases: ['Other'], source_id: 's2' });
      t.match(await row(db, 'concepts', { id: curie }), {
        repository_id: REPO, canonical_name: 'Marie Curie', context: 'person', ontology_class: 'scientist', status: 'active',
        merged_into: null, source_id: 's1', fact_count: 0, alias_text: 'Curie',
      });
      t.same(await db.knex('concept_aliases').where({ concept_id: curie }).orderBy('alias_lower').pluck('alias'), ['Curie', 'Marie Curie'], 'the canonical name is an alias row too');
      t.match(await row(db, 'concept_aliases', { repository_id: REPO, context_lower: 'person', alias_lower: 'curie' }), { concept_id: curie });

      // fb merged before its concept links are recorded: they land on fa.
      await emit('fact-fb', 'FactMergedInto', { survivor_id: 'fa', similarity: 0.97, source_id: 's1', catchup: false });
      await settle('source-s1', 'ConceptsExtracted', {
        model_id: 'local', promptset_hash: '', batch_index: 0, batch_count: 1,
        links: [
          { fact_id: 'fa', concept_ids: [curie, radium] },
          { fact_id: 'fb', concept_ids: [curie] },
          { fact_id: 'fc', concept_ids: [radium] },
          { fact_id: 'fd', concept_ids: [madame] },
        ],
      });
      t.same(await links(db, {}), [`fa:${curie}`, `fa:${radium}`, `fc:${radium}`, `fd:${madame}`].sort());
      t.same(
        [(await row(db, 'concepts', { id: curie }))?.fact_count, (await row(db, 'concepts', { id: radium }))?.fact_count, (await row(db, 'concepts', { id: madame }))?.fact_count],
        [1, 2, 1],
      );
      t.match(await row(db, 'fact_concepts', { fact_id: 'fa', concept_id: curie }), { repository_id: REPO, source_id: 's1' });

      // The catch-up pass merges fc into fa after the links: radium now has one fact.
      await settle('fact-fc', 'FactMergedInto', { survivor_id: 'fa', similarity: 0.95, source_id: null, catchup: true });
      t.same(await links(db, { concept_id: radium }), [`fa:${radium}`]);
      t.equal((await row(db, 'concepts', { id: radium }))?.fact_count, 1, 'a merged fact is no longer counted');

      // Aliases.
      await emit(`concept-${curie}`, 'ConceptAliasAdded', { alias: 'Skłodowska' });
      await settle(`concept-${curie}`, 'ConceptAliasRemoved', { alias: 'CURIE', reason: 'too vague' });
      t.same(await db.knex('concept_aliases').where({ concept_id: curie }).orderBy('alias_lower').pluck('alias'), ['Marie Curie', 'Skłodowska']);
      t.equal((await row(db, 'concepts', { id: curie }))?.alias_text, 'Skłodowska');
      const bySearch = async (query: string) =>
        ((await db.knex.raw(`SELECT id FROM concepts WHERE search @@ websearch_to_tsquery('simple', ?) ORDER BY id`, [query])) as { rows: Array<{ id: string }> }).rows.map((r) => r.id);
      t.same(await bySearch('skłodowska'), [curie], 'lexical search finds a concept by alias');
      t.same(await bySearch('curie'), [madame, curie].sort(), 'and by canonical name');

      await settle(`concept-${curie}`, 'ConceptEmbedded', { model: 'local-100d', dimensions: 1, vector: packVector([0.5]) });
      t.equal((await row(db, 'concepts', { id: curie }))?.embedding_model, 'local-100d');

      // Madame Curie merges into Marie Curie: names and links move.
      await settle(`concept-${madame}`, 'ConceptMergedInto', { survivor_id: curie, reason: 'same person' });
      t.match(await row(db, 'concepts', { id: madame }), { status: 'merged', merged_into: curie, fact_count: 0, alias_text: '' });
      t.same(
        await db.knex('concept_aliases').where({ concept_id: curie }).orderBy('alias_lower').pluck('alias'),
        ['Madame Curie', 'Marie Curie', 'Mme Curie', 'Skłodowska'],
        'the loser\'s names (canonical included) resolve to the survivor',
      );
      t.equal(await count(db, 'concept_aliases', { concept_id: madame }), 0);
      t.same(await links(db, { concept_id: curie }), [`fa:${curie}`, `fd:${curie}`]);
      t.equal((await row(db, 'concepts', { id: curie }))?.fact_count, 2);
      t.same(await bySearch('mme'), [curie]);

      // A later link to the merged concept, from a merged fact, lands on both survivors.
      await emit('source-s2', 'FactsExtracted', { model_id: 'local', facts: [fact('fe')] });
      await settle('source-s2', 'ConceptsExtracted', {
        model_id: 'local', promptset_hash: '', batch_index: 0, batch_count: 1,
        links: [{ fact_id: 'fc', concept_ids: [madame] }, { fact_id: 'fe', concept_ids: [madame, radium] }],
      });
      t.same(await links(db, { concept_id: curie }), [`fa:${curie}`, `fd:${curie}`, `fe:${curie}`]);
      t.match(await row(db, 'fact_concepts', { fact_id: 'fe', concept_id: curie }), { source_id: 's2' });
      t.equal((await row(db, 'concepts', { id: curie }))?.fact_count, 3);
      t.equal((await row(db, 'concepts', { id: radium }))?.fact_count, 2);

      // Relations: upsert, reversed pair order, deletion at 0, per repository.
      await emit(`repository-${REPO}`, 'ConceptRelationsRefreshed', { changes: [{ concept_a: radium < curie ? radium : curie, concept_b: radium < curie ? curie : radium, shared_fact_count: 1 }] });
      await emit(`repository-${OTHER_REPO}`, 'ConceptRelationsRefreshed', { changes: [{ concept_a: 'x', concept_b: 'y', shared_fact_count: 5 }] }, OTHER_REPO);
      await settle(`repository-${REPO}`, 'ConceptRelationsRefreshed', { changes: [{ concept_a: radium < curie ? curie : radium, concept_b: radium < curie ? radium : curie, shared_fact_count: 2 }] });
      const [a, b] = [curie, radium].sort();
      t.match(await db.knex('concept_relations').where({ repository_id: REPO }).select('concept_a', 'concept_b', 'shared_fact_count'), [{ concept_a: a, concept_b: b, shared_fact_count: 2 }]);
      await settle(`repository-${REPO}`, 'ConceptRelationsRefreshed', { changes: [{ concept_a: a, concept_b: b, shared_fact_count: 0 }] });
      t.equal(await count(db, 'concept_relations', { repository_id: REPO }), 0, '0 shared facts: the pair is gone');
      t.equal(await count(db, 'concept_relations', { repository_id: OTHER_REPO }), 1);
      await settle(`repository-${REPO}`, 'ConceptRelationsRefreshed', { changes: [{ concept_a: a, concept_b: b, shared_fact_count: 3 }] });
      // A refresh of a large repository: more rows than one statement's 65,535 bind parameters
      // would take as a multi-row VALUES list (five columns a row), written in chunks.
      const many = Array.from({ length: 14_000 }, (_, i) => ({ concept_a: `m${String(i).padStart(5, '0')}`, concept_b: 'z', shared_fact_count: 1 + (i % 4) }));
      await settle(`repository-${OTHER_REPO}`, 'ConceptRelationsRefreshed', { changes: many }, OTHER_REPO);
      t.equal(await count(db, 'concept_relations', { repository_id: OTHER_REPO }), 14_001, 'every pair of a large refresh is stored');
      t.equal(Number((await db.knex('concept_relations').where({ repository_id: OTHER_REPO }).sum({ total: 'shared_fact_count' }))[0].total), 5 + 14_000 * 2.5);
      await settle(`repository-${OTHER_REPO}`, 'ConceptRelationsRefreshed', { changes: many.slice(0, 12_000).map((change) => ({ ...change, shared_fact_count: 0 })) }, OTHER_REPO);
      t.equal(await count(db, 'concept_relations', { repository_id: OTHER_REPO }), 2_001, 'and removed');

      // Both facts Marie Curie and radium share are retracted (one run): their pair is gone at once.
      await emit('fact-fa', 'FactRetracted', { source_id: 's1', reason: 'source deleted' });
      await settle('fact-fe', 'FactRetracted', { source_id: 's2', reason: 'source deleted' });
      t.same(await links(db, {}), [`fd:${curie}`], 'their links went');
      t.same([(await row(db, 'concepts', { id: curie }))?.fact_count, (await row(db, 'concepts', { id: radium }))?.fact_count], [1, 0]);
      t.equal(await count(db, 'concept_relations', { repository_id: REPO }), 0, 'no shared fact left: the pair is gone');

      const live = await snapshot(db);
      await db.knex('fact_concepts').insert({ fact_id: 'junk', concept_id: 'junk', repository_id: REPO });
      await runner.rebuild('concepts');
      await runner.rebuild('facts');
      t.same(await snapshot(db), live, 'rebuilt read models equal the live ones');
      await rebuildInOneBatch(t, { db, store, runner }, ['concepts', 'facts'], live);
      await rebuildInOneBatch(t, { db, store, runner }, ['facts'], live);
    });
  });
}
