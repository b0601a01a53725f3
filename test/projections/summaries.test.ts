import t from 'tap';
import { migrateReadModels } from '../../projections/migrations/index.js';
import { summariesProjection } from '../../projections/summaries.js';
import type { Database } from '../../src/db/database.js';
import { createPostgresEventStore, migrateEventStore } from '../../src/eventstore/postgres.js';
import { EventSchemaRegistry } from '../../src/eventstore/schemas.js';
import { ProjectionRunner } from '../../src/projection/runner.js';
import { openMemoryPglite } from '../eventstore/contract.js';

const REPO = 'repo-1';
const tables: Record<string, string[]> = {
  concept_summaries: ['id'],
  concept_summary_facts: ['concept_id', 'fact_id'],
  concept_syntheses: ['concept_id'],
};

async function snapshot(db: Database): Promise<Record<string, unknown[]>> {
  const result: Record<string, unknown[]> = {};
  for (const [table, order] of Object.entries(tables)) {
    const rows = (await db.knex(table).select('*').orderBy(order)) as Array<Record<string, unknown>>;
    result[table] = rows.map((row) => Object.fromEntries(Object.entries(row).map(([key, value]) => [key, value instanceof Date ? value.toISOString() : value])));
  }
  return result;
}

const slice = (sliceNumber: number, factIds: string[], content = `Slice ${sliceNumber}: ${factIds.join(', ')}.`) => ({
  type: 'SummarySliceWritten',
  data: { slice_id: `slice-${sliceNumber}`, slice_number: sliceNumber, is_open: factIds.length < 3, fact_ids: factIds, content, model_id: 'test-model', reason: 'facts_added' },
});
const synthesis = (content: string) => ({
  type: 'ConceptSynthesized',
  data: {
    synthesis_id: 'synthesis',
    content,
    fact_ids: [],
    slice_ids: [],
    related_concept_ids: [],
    related_synthesis_ids: [],
    image_fact_ids: [],
    model_id: 'test-model',
    inputs_hash: content,
    reason: 'slices_changed',
  },
});

t.test('summaries: runs of slice writes and syntheses applied together leave what applying them one by one leaves', async (t) => {
  const db = await openMemoryPglite();
  await migrateEventStore(db.knex);
  await migrateReadModels(db.knex);
  const store = createPostgresEventStore(db, { schemas: await EventSchemaRegistry.load(), pollIntervalMs: 20 });
  const oneByOne = new ProjectionRunner(store, db, [summariesProjection], { batchSize: 1 });
  t.teardown(async () => {
    await oneByOne.stop();
    await store.close();
    await db.close();
  });
  const metadata = { repositoryId: REPO, actor: 'system:test', causationId: null, correlationId: null };
  // Concept C's slices change within a run of writes: facts move between slices, are dropped
  // again, a fact that had a slice before the run moves and is dropped, and one (h) moves from a
  // slice the run does not write; concept D cites the same fact ids, one of them (k) as C's
  // rewrite of slice 6 leaves it out. A synthesis between the
  // writes ends the first run; two syntheses of C follow.
  const concept = [
    slice(4, ['g']),
    slice(5, ['h']),
    slice(1, ['a', 'b']),
    slice(2, ['c']),
    slice(6, ['k']),
    synthesis('First.'),
    slice(1, ['a', 'c']),
    slice(6, ['m']),
    slice(2, ['d']),
    slice(3, ['b']),
    slice(3, ['e']),
    slice(1, ['a', 'c', 'f']),
    slice(2, ['d', 'g']),
    slice(2, ['d', 'h']),
    synthesis('Second.'),
    synthesis('Third.'),
  ];
  let position = 0;
  for (const [index, event] of concept.entries()) {
    position = (await store.append('concept-C', [{ ...event, metadata }], 'any')).lastPosition;
    if (index === 9) position = (await store.append('concept-D', [{ ...slice(1, ['a', 'k'], 'D.'), data: { ...slice(1, ['a', 'k'], 'D.').data, slice_id: 'd-slice-1' }, metadata }], 'any')).lastPosition;
  }
  await oneByOne.start();
  await oneByOne.waitFor(position, 20_000);
  const live = await snapshot(db);
  t.same(
    (live.concept_summary_facts as Array<{ concept_id: string; fact_id: string; slice_number: number }>).map((row) => `${row.concept_id}:${row.fact_id}:${row.slice_number}`),
    ['C:a:1', 'C:c:1', 'C:d:2', 'C:e:3', 'C:f:1', 'C:h:2', 'C:m:6', 'D:a:1', 'D:k:1'],
    'one by one: each fact in the slice that claimed it last; b, g and k dropped with the slice rewrites that left them out (D claiming k keeps only its own)',
  );
  t.same(
    (live.concept_syntheses as Array<{ content: string }>).map((row) => row.content),
    ['Third.'],
    'the last synthesis',
  );
  await oneByOne.stop();
  const together = new ProjectionRunner(store, db, [summariesProjection], { batchSize: 10_000 });
  await together.rebuild(summariesProjection.name);
  t.same(await snapshot(db), live, 'rebuilt in one batch (runs of 5 and 10 writes, 1 and 2 syntheses), the read models equal the ones applied one by one');
});
