import t from 'tap';
import { MAX_CONCEPT_FILTER } from '../../src/read/facts.js';
import type { Principal } from '../../src/auth/rbac.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';
import { contentHash } from '../../src/interchange/hashing.js';
import { appendEvents, createConcept, embedFacts, extractFacts, linkFacts, stabilize, type SeededFact } from '../api/seedGraph.js';

let harness: TestApplication;
let owner: Principal;
let stranger: Principal;
let repository: string;
let facts: Record<string, SeededFact>;
const concepts: Record<string, string> = {};

t.before(async () => {
  harness = await startTestApplication({ name: 'Kitchen' });
  ({ owner, stranger, repository } = harness);
  const { source } = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/kitchen' });
  const sourceId = source.id;
  const seeded = await extractFacts(harness.service, repository, sourceId, ['Bread needs yeast.', 'Ovens bake bread.', 'Knives cut bread.', 'Bread requires yeast.']);
  facts = { yeast: seeded[0], oven: seeded[1], knife: seeded[2], twin: seeded[3] };
  await stabilize(harness.service, repository, sourceId, [facts.yeast, facts.oven, facts.knife]);
  // `twin` was merged into `yeast`, which was later merged into `oven`: a chain of two.
  await appendEvents(harness.service, repository, `fact-${facts.twin.id}`, [
    { type: 'FactMergedInto', data: { survivor_id: facts.yeast.id, similarity: 0.97, source_id: sourceId, catchup: false } },
  ]);
  concepts.bread = await createConcept(harness.service, repository, 'Bread', 'product');
  concepts.breadTopic = await createConcept(harness.service, repository, 'Bread', 'topic');
  concepts.oven = await createConcept(harness.service, repository, 'Oven', 'technology', ['Stove']);
  await linkFacts(harness.service, repository, sourceId, {
    [facts.yeast.id]: [concepts.bread],
    [facts.oven.id]: [concepts.bread, concepts.oven],
    [facts.knife.id]: [concepts.breadTopic],
  });
});
t.teardown(() => harness.close());

const contents = <Item extends { content: unknown }>(result: { items: Item[] }) => result.items.map((item) => String(item.content)).sort();

t.test('search: lexical without a query, narrowed by concepts by id, name or alias', async (t) => {
  const all = await harness.app.facts.search(owner, { repository });
  t.equal(all.total, 3, 'the merged fact is not listed');
  t.match(all, { mode: 'lexical', query: '' });
  t.same(contents(await harness.app.facts.search(owner, { repository, concept: concepts.oven })), ['Ovens bake bread.']);
  t.same(contents(await harness.app.facts.search(owner, { repository, concept: 'stove' })), ['Ovens bake bread.'], 'by alias');
});

t.test('search: an ambiguous name lists its contexts; a context picks one', async (t) => {
  await t.rejects(harness.app.facts.search(owner, { repository, concept: 'bread' }), { name: 'DomainError', code: 'conflict', contexts: ['product', 'topic'] });
  t.same(contents(await harness.app.facts.search(owner, { repository, concept: 'bread', context: 'Product' })), ['Bread needs yeast.', 'Ovens bake bread.']);
  t.same(contents(await harness.app.facts.search(owner, { repository, context: 'topic' })), ['Knives cut bread.'], 'a context alone narrows too');
  t.same(contents(await harness.app.facts.search(owner, { repository, concepts: `Stove,${concepts.bread}` })), ['Ovens bake bread.'], 'all named concepts');
});

t.test('search: bad input and denied access', async (t) => {
  await rejectsWith(t, harness.app.facts.search(owner, { repository, concepts: ' , ' }), 'invalid', /at least one concept/);
  const many = Array.from({ length: MAX_CONCEPT_FILTER + 1 }, (_, index) => `c${index}`).join(',');
  await rejectsWith(t, harness.app.facts.search(owner, { repository, concepts: many }), 'invalid', /at most/);
  await rejectsWith(t, harness.app.facts.search(owner, { repository, concept: '  ' }), 'invalid', /must not be empty/);
  await rejectsWith(t, harness.app.facts.search(owner, { repository, concept: 'no such concept' }), 'not_found');
  await rejectsWith(t, harness.app.facts.search(owner, { repository, limit: 0 }), 'invalid', /limit/);
  await rejectsWith(t, harness.app.facts.search(owner, { repository, offset: -1 }), 'invalid', /offset/);
  await rejectsWith(t, harness.app.facts.search(stranger, { repository }), 'not_found', /^repository not found$/);
  await rejectsWith(t, harness.app.facts.search({ ...owner, scopes: ['sources:read'] }, { repository }), 'forbidden', /facts:read/);
  await rejectsWith(t, harness.app.facts.search(owner, { repository: 'elsewhere' }), 'not_found');
});

t.test('one fact, with its sources', async (t) => {
  const fact = await harness.app.facts.get(owner, { repository, fact: facts.oven.id });
  t.match(fact, { id: facts.oven.id, content: 'Ovens bake bread.', status: 'stable', created_at: /^\d{4}-\d\d-\d\dT/ });
  t.match(fact.sources, [{ url: 'http://127.0.0.1:9/kitchen', source_text: 'Ovens bake bread.' }]);
  await rejectsWith(t, harness.app.facts.get(owner, { repository, fact: 'f00dbabe-0000-4000-8000-000000000000' }), 'not_found', /fact not found/);
  await rejectsWith(t, harness.app.facts.get(stranger, { repository, fact: facts.oven.id }), 'not_found', /^repository not found$/);
});

t.test("a fact's concepts; a merged fact answers with its survivor's along the whole chain", async (t) => {
  const own = await harness.app.facts.concepts(owner, { repository, fact: facts.oven.id });
  t.same(own.items.map((concept) => concept.canonical_name), ['Bread', 'Oven']);
  t.same(own.items.find((concept) => concept.canonical_name === 'Oven')?.aliases, ['Stove']);
  t.match(own, { fact_id: facts.oven.id, merged_from: null, total: 2 });
  await appendEvents(harness.service, repository, `fact-${facts.yeast.id}`, [
    { type: 'FactMergedInto', data: { survivor_id: facts.oven.id, similarity: 0.95, source_id: null, catchup: true } },
  ]);
  const merged = await harness.app.facts.concepts(owner, { repository, fact: facts.twin.id });
  t.match(merged, { fact_id: facts.oven.id, merged_from: facts.twin.id, total: 2 });
  await rejectsWith(t, harness.app.facts.concepts(owner, { repository, fact: 'f00dbabe-0000-4000-8000-000000000000' }), 'not_found');

  // cleanup_facts removes merged facts' rows seconds after the merge: their ids still lead to the survivor.
  for (const gone of [facts.twin.id, facts.yeast.id]) {
    await appendEvents(harness.service, repository, `fact-${gone}`, [{ type: 'FactRemoved', data: { survivor_id: facts.oven.id } }]);
  }
  t.notOk(await harness.service.context.db.knex('facts').where({ id: facts.twin.id }).first(), 'the merged row is gone');
  t.match(await harness.app.facts.concepts(owner, { repository, fact: facts.twin.id }), { fact_id: facts.oven.id, merged_from: facts.twin.id, total: 2 });
  t.match(await harness.app.facts.get(owner, { repository, fact: facts.twin.id }), { id: facts.oven.id, merged_from: facts.twin.id, content: 'Ovens bake bread.' });
  t.match(await harness.app.facts.get(owner, { repository, fact: facts.oven.id }), { id: facts.oven.id, merged_from: null });
  t.match(await harness.app.facts.get(owner, { repository, fact: facts.twin.id.toUpperCase() }), { id: facts.oven.id, merged_from: facts.twin.id }, 'ids in any case');
  const elsewhere = await harness.app.repositories.create(owner, { name: 'Elsewhere' });
  await rejectsWith(t, harness.app.facts.get(await harness.refreshed(owner), { repository: elsewhere.id, fact: facts.twin.id }), 'not_found', /fact/);
});

/** FactsExtracted of a fact seeded before (same id and content) by another source. */
async function extractAgain(sourceId: string, fact: SeededFact): Promise<void> {
  const data = { fact_id: fact.id, content: fact.content, content_hash: contentHash(fact.content), source_text: fact.content, chunk_index: 0, fact_kind: 'text', image_id: null, sentence_index: 0 };
  await appendEvents(harness.service, repository, `source-${sourceId}`, [{ type: 'FactsExtracted', data: { model_id: 'local', promptset_hash: '', facts: [data] } }]);
}

t.test("a deleted source's facts leave every search, listing and read at once, before cleanup_facts retracts them", async (t) => {
  // No workers here: cleanup_facts never runs, so what answers is the deletion alone.
  const { embedder } = harness.service.context;
  if (embedder === null) throw new Error('the test service has an embedder');
  const kept = (await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/orchard' })).source.id;
  const doomed = (await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/orchard-gone' })).source.id;
  const [apple] = await extractFacts(harness.service, repository, kept, ['Apple trees blossom in spring orchards.']);
  const [pear] = await extractFacts(harness.service, repository, doomed, ['Pear trees blossom in spring orchards.']);
  await extractAgain(doomed, apple);
  await embedFacts(harness.service, repository, kept, embedder, [apple]);
  await embedFacts(harness.service, repository, doomed, embedder, [pear]);
  await linkFacts(harness.service, repository, doomed, { [pear.id]: [concepts.oven] });
  t.equal((await harness.app.facts.get(owner, { repository, fact: apple.id })).sources.length, 2, 'the apple fact has both sources');
  const found = async (mode: 'lexical' | 'hybrid', extra: Record<string, string> = {}) =>
    (await harness.app.facts.search(owner, { repository, query: 'blossom orchards', mode, limit: 100, ...extra })).items.map((item) => item.id);
  t.ok((await found('lexical')).includes(pear.id), 'found before the deletion');

  await harness.app.sources.remove(owner, { repository, source: doomed });
  for (const mode of ['lexical', 'hybrid'] as const) {
    const ids = await found(mode);
    t.notOk(ids.includes(pear.id), `${mode}: the deleted source's own fact is not found`);
    t.ok(ids.includes(apple.id), `${mode}: a fact another source has still is`);
  }
  const hybrid = await harness.app.facts.search(owner, { repository, query: 'pear blossom', limit: 100 });
  t.equal(hybrid.mode, 'hybrid', 'the vector side answered');
  t.notOk(hybrid.items.some((item) => item.id === pear.id), 'nor by its vector');
  const listed = await harness.app.facts.search(owner, { repository, limit: 100 });
  t.notOk(listed.items.some((item) => item.id === pear.id), 'nor listed');
  t.notOk((await found('lexical', { concept: concepts.oven })).includes(pear.id), 'nor through a concept');
  t.equal(listed.total, listed.items.length, 'and the total does not count it');
  await rejectsWith(t, harness.app.facts.get(owner, { repository, fact: pear.id }), 'not_found', /fact not found/);
  await rejectsWith(t, harness.app.facts.concepts(owner, { repository, fact: pear.id }), 'not_found');
  const conceptFacts = await harness.app.concepts.facts(owner, { repository, concept: concepts.oven });
  t.notOk(conceptFacts.items.some((item: { id: string }) => item.id === pear.id), "nor in its concept's facts");

  // Extracted again by a source that stays, before cleanup ran: found again.
  const again = (await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/orchard-again' })).source.id;
  await extractAgain(again, pear);
  t.ok((await found('lexical')).includes(pear.id), 'a fact extracted again is found again');
  t.match(await harness.app.facts.get(owner, { repository, fact: pear.id }), { id: pear.id, sources: [{ url: 'http://127.0.0.1:9/orchard-again' }] });

  // Unsourced again; then a sourced fact merged into it brings it its sources, and it is found again.
  await harness.app.sources.remove(owner, { repository, source: again });
  t.notOk((await found('lexical')).includes(pear.id), 'unsourced again');
  await appendEvents(harness.service, repository, `fact-${apple.id}`, [{ type: 'FactMergedInto', data: { survivor_id: pear.id, similarity: 0.96, source_id: kept, catchup: false } }]);
  t.ok((await found('lexical')).includes(pear.id), 'a merge that moves a source to it brings it back');
  t.match(await harness.app.facts.get(owner, { repository, fact: apple.id }), { id: pear.id, merged_from: apple.id, sources: [{ url: 'http://127.0.0.1:9/orchard' }] });
});
