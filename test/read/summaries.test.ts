import t from 'tap';
import type { Principal } from '../../src/auth/rbac.js';
import { startTestApplication, type TestApplication } from '../helpers/application.js';
import { appendEvents, createConcept, linkFacts, seedBakeryFacts, type SeededFact } from '../api/seedGraph.js';

let harness: TestApplication;
let owner: Principal;
let repository: string;
let sourceId: string;
let facts: Record<string, SeededFact>;
const ids: Record<string, string> = {};

/**
 * A synthesis is kept as written until it is made again; the merges and the retraction below
 * come after it, as deduplication and a source's deletion do, so its citations are stale.
 */
t.before(async () => {
  harness = await startTestApplication({ name: 'Bakery' });
  ({ owner, repository } = harness);
  const { source } = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/bakery' });
  sourceId = source.id;
  facts = await seedBakeryFacts(harness.service, repository, sourceId);
  ids.bread = await createConcept(harness.service, repository, 'Bread', 'product');
  ids.oven = await createConcept(harness.service, repository, 'Oven', 'technology');
  ids.stove = await createConcept(harness.service, repository, 'Stove', 'technology');
  ids.knife = await createConcept(harness.service, repository, 'Knife', 'tool');
  ids.loaf = await createConcept(harness.service, repository, 'Loaf', 'product');
  await linkFacts(harness.service, repository, sourceId, Object.fromEntries(Object.values(facts).map((fact) => [fact.id, [ids.bread]])));
  await appendEvents(harness.service, repository, `concept-${ids.bread}`, [
    {
      type: 'ConceptSynthesized',
      data: {
        synthesis_id: 'synthesis-bread',
        content: `[a](<fact:${facts.twin.id}>) [b](<fact:${facts.yeast.id}>) [c](<fact:${facts.oven.id}>) [d](<fact:${facts.knife.id}>) [e](<fact:${facts.gone.id}>)`,
        fact_ids: [facts.twin.id, facts.yeast.id, facts.oven.id, facts.knife.id, facts.gone.id],
        slice_ids: [],
        related_concept_ids: [ids.stove, ids.oven, ids.knife, ids.loaf],
        related_synthesis_ids: [],
        image_fact_ids: [facts.twin.id, facts.gone.id],
        model_id: 'local',
        inputs_hash: 'h',
        reason: 'inputs_changed',
      },
    },
  ]);
  // Deduplication: twin → yeast, then yeast → oven (a chain of two); refinement: Stove → Oven, Loaf → Bread itself.
  await appendEvents(harness.service, repository, `fact-${facts.twin.id}`, [
    { type: 'FactMergedInto', data: { survivor_id: facts.yeast.id, similarity: 0.97, source_id: sourceId, catchup: false } },
  ]);
  await appendEvents(harness.service, repository, `fact-${facts.yeast.id}`, [
    { type: 'FactMergedInto', data: { survivor_id: facts.oven.id, similarity: 0.95, source_id: null, catchup: true } },
  ]);
  await appendEvents(harness.service, repository, `concept-${ids.stove}`, [{ type: 'ConceptMergedInto', data: { survivor_id: ids.oven, reason: 'same' } }]);
  await appendEvents(harness.service, repository, `concept-${ids.loaf}`, [{ type: 'ConceptMergedInto', data: { survivor_id: ids.bread, reason: 'same' } }]);
  // The source of `gone` alone was deleted: cleanup_facts retracted it.
  await appendEvents(harness.service, repository, `fact-${facts.gone.id}`, [{ type: 'FactRetracted', data: { source_id: sourceId, reason: 'source deleted' } }]);
});
t.teardown(() => harness.close());

/** What the definition says of its citations, in its own order (`?? null`: a stale read lacked the redirect fields, and its diff shows what it listed). */
async function citations() {
  const definition = await harness.app.summaries.definition(owner, { repository, concept: ids.bread });
  return {
    facts: definition.facts.map((fact) => ({ id: fact.id, status: fact.status, merged_from: fact.merged_from ?? null })),
    images: definition.images.map((image) => ({ fact_id: image.fact_id, merged_from: image.merged_from ?? null })),
    related: definition.related_concepts.map((concept) => ({ id: concept.id, redirected_from: concept.redirected_from?.map((from) => from.id) ?? null })),
    fact_ids: definition.synthesis?.fact_ids,
  };
}

t.test('a definition follows merges of the facts and concepts it cites, before and after cleanup', async (t) => {
  const expected = {
    // twin and yeast both lead to oven: listed once, at the first citation, saying which ids led there.
    facts: [
      { id: facts.oven.id, status: 'stable', merged_from: [facts.twin.id, facts.yeast.id] },
      { id: facts.knife.id, status: 'stable', merged_from: [] },
    ],
    images: [{ fact_id: facts.oven.id, merged_from: [facts.twin.id] }],
    // Stove is shown as Oven, once; Loaf merged into Bread itself and is no longer related.
    related: [
      { id: ids.oven, redirected_from: [ids.stove] },
      { id: ids.knife, redirected_from: [] },
    ],
    // The synthesis as written: its content's links name these ids.
    fact_ids: [facts.twin.id, facts.yeast.id, facts.oven.id, facts.knife.id, facts.gone.id],
  };
  t.same(await citations(), expected, 'merged rows still present');

  // cleanup_facts removes merged facts' rows seconds after the merge: their redirects stay.
  for (const gone of [facts.twin.id, facts.yeast.id]) {
    await appendEvents(harness.service, repository, `fact-${gone}`, [{ type: 'FactRemoved', data: { survivor_id: facts.oven.id } }]);
  }
  t.notOk(await harness.service.context.db.knex('facts').where({ id: facts.twin.id }).first(), 'the merged row is gone');
  t.same(await citations(), expected, 'merged rows removed');

  // REST answers the same, the fields it adds included (a response schema drops what it does not list).
  const { token } = await harness.service.context.identity.login({ email: 'owner@example.org', password: 'correct horse battery' });
  const rest = await harness.service.call('GET', `/api/v1/repositories/${repository}/concepts/${ids.bread}/definition`, { token });
  t.equal(rest.status, 200);
  const direct = await harness.app.summaries.definition(owner, { repository, concept: ids.bread });
  t.same(rest.body.facts.map((fact: { id: string; merged_from: string[] }) => [fact.id, fact.merged_from]), direct.facts.map((fact) => [fact.id, fact.merged_from]));
  t.same(rest.body.images, direct.images);
  t.same(rest.body.related_concepts, direct.related_concepts);
});

t.test('summary search matches the prose, not the citations: neither "fact" nor a piece of a cited id finds a slice', async (t) => {
  const cited = facts.knife.id;
  await appendEvents(harness.service, repository, `concept-${ids.knife}`, [
    {
      type: 'SummarySliceWritten',
      data: {
        slice_id: `slice-${cited}`,
        slice_number: 0,
        is_open: true,
        fact_ids: [cited],
        // The link form, and the bare form a model may write.
        content: `Knives cut loaves [cleanly](<fact:${cited}>) and crusts (fact:${cited}).`,
        model_id: 'local',
        reason: 'facts_added',
      },
    },
  ]);
  const found = async (query: string) => (await harness.app.summaries.search(owner, { repository, query, mode: 'lexical' })).items.map((item: { id: string }) => item.id);
  t.same(await found('crusts'), [`slice-${cited}`], 'the prose is found');
  t.same(await found('fact'), [], 'not the word of the citations');
  t.same(await found(cited.split('-')[0]!), [], 'nor a piece of the id');
  t.same(await found(cited), [], 'nor the id');
});
