import t from 'tap';
import { relationBand } from '../../src/read/concepts.js';
import { AmbiguousConceptError } from '../../src/app/errors.js';
import type { Principal } from '../../src/auth/rbac.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';
import { relationChanges } from '../../src/pipeline/stages/refreshConceptRelations.js';
import { appendEvents, createConcept, extractFacts, linkFacts, refreshRelations, stabilize } from '../api/seedGraph.js';
import { contentHash } from '../../src/interchange/hashing.js';

let harness: TestApplication;
let owner: Principal;
let reader: Principal;
let repository: string;
const ids: Record<string, string> = {};

t.before(async () => {
  harness = await startTestApplication({ name: 'Physics' });
  ({ owner, stranger: reader, repository: repository } = harness);
  const { source } = await harness.app.sources.add(owner, { repository, doi: '10.1000/physics' });
  const seeded = await extractFacts(harness.service, repository, source.id, ['Curie studied radium.', 'Radium glows.', 'Curie won a prize.']);
  await stabilize(harness.service, repository, source.id, seeded);
  ids.curie = await createConcept(harness.service, repository, 'Marie Curie', 'person', ['Curie']);
  ids.radium = await createConcept(harness.service, repository, 'Radium', 'chemical');
  ids.prize = await createConcept(harness.service, repository, 'Nobel Prize', 'topic');
  // Two merges in a row: M. Curie → Maria Skłodowska → Marie Curie.
  ids.oldest = await createConcept(harness.service, repository, 'M. Curie', 'person');
  ids.older = await createConcept(harness.service, repository, 'Maria Sklodowska', 'person');
  await appendEvents(harness.service, repository, `concept-${ids.oldest}`, [{ type: 'ConceptMergedInto', data: { survivor_id: ids.older, reason: 'same' } }]);
  await appendEvents(harness.service, repository, `concept-${ids.older}`, [{ type: 'ConceptMergedInto', data: { survivor_id: ids.curie, reason: 'same' } }]);
  await linkFacts(harness.service, repository, source.id, {
    [seeded[0].id]: [ids.curie, ids.radium],
    [seeded[1].id]: [ids.radium],
    [seeded[2].id]: [ids.curie, ids.prize],
  });
  await refreshRelations(harness.service, repository, [
    [ids.curie, ids.radium, 5],
    [ids.curie, ids.prize, 1],
  ]);
});
t.teardown(() => harness.close());

t.test('one concept by id, name or alias; a merged one answers with the end of its chain', async (t) => {
  const byId = await harness.app.concepts.get(owner, { repository, concept: ids.curie });
  t.match(byId, { id: ids.curie, canonical_name: 'Marie Curie', aliases: ['Curie'], redirected_from: null, fact_count: 2 });
  t.equal((await harness.app.concepts.get(owner, { repository, concept: 'marie curie' })).id, ids.curie, 'by name, any case');
  t.equal((await harness.app.concepts.get(owner, { repository, concept: 'Curie', context: 'person' })).id, ids.curie, 'by alias in a context');
  const redirected = await harness.app.concepts.get(owner, { repository, concept: ids.oldest });
  t.match(redirected, { id: ids.curie, redirected_from: { id: ids.oldest, canonical_name: 'M. Curie', context: 'person' } });
  t.equal((await harness.app.concepts.get(owner, { repository, concept: 'Maria Sklodowska' })).id, ids.curie, 'a merged name answers with its survivor');
});

t.test('relations in bands, strongest first; small ones only when asked', async (t) => {
  const shown = await harness.app.concepts.relations(owner, { repository, concept: ids.curie });
  t.same(shown.items.map((item) => [item.concept?.canonical_name, item.shared_fact_count]), [['Radium', 5]]);
  const all = await harness.app.concepts.relations(owner, { repository, concept: ids.curie, show_insignificant: true });
  const { min_shared_fact_count: minShared, stable_shared_fact_count: stableShared } = harness.service.config.concepts;
  t.same(all.items.map((item) => item.band), [relationBand(5, { minShared, stableShared }), 'insignificant']);
  t.equal(relationBand(5, { minShared: 3, stableShared: 6 }), 'weak', 'between the thresholds');
  t.equal(all.total, 2);
  const pair = await harness.app.concepts.relation(owner, { repository, concept: 'Radium', other: ids.curie });
  t.match(pair, { shared_fact_count: 5, total: 1, concept: { id: ids.radium }, other: { id: ids.curie } });
  t.same(pair.facts.map((fact) => String(fact.content)), ['Curie studied radium.']);
});

t.test("a concept's facts and sources", async (t) => {
  const facts = await harness.app.concepts.facts(owner, { repository, concept: ids.curie, limit: 1 });
  t.equal(facts.total, 2);
  t.equal(facts.items.length, 1, 'paged');
  const sources = await harness.app.concepts.sources(owner, { repository, concept: ids.radium });
  t.match(sources, { total: 1, items: [{ doi: '10.1000/physics', fact_count: 2 }] });
});

t.test('search: lexical without a query; small concepts only when asked', async (t) => {
  const small = await harness.app.concepts.search(owner, { repository, show_small: true });
  t.equal(small.total, 3, 'the merged concepts are not listed');
  const big = await harness.app.concepts.search(owner, { repository, context: 'PERSON', show_small: true });
  t.same(big.items.map((item) => item.id), [ids.curie], 'one context');
});

t.test('bad input and denied access', async (t) => {
  await rejectsWith(t, harness.app.concepts.relation(owner, { repository, concept: ids.curie, other: 'Marie Curie' }), 'invalid', /no relation to itself/);
  await rejectsWith(t, harness.app.concepts.get(owner, { repository, concept: '' }), 'invalid');
  await rejectsWith(t, harness.app.concepts.get(owner, { repository, concept: 'Curie', context: 'chemical' }), 'not_found', /concept not found/);
  await rejectsWith(t, harness.app.concepts.facts(owner, { repository, concept: ids.curie, limit: 501 }), 'invalid', /limit/);
  await rejectsWith(t, harness.app.concepts.get(reader, { repository, concept: ids.curie }), 'not_found', /^repository not found$/);
  await rejectsWith(t, harness.app.concepts.migrateContext(reader, { repository, from_context: 'person', to_context: 'topic' }), 'not_found', /^repository not found$/);
});

t.test('an id with a context that is not its own is refused, not answered for another context', async (t) => {
  for (const read of [
    () => harness.app.concepts.get(owner, { repository, concept: ids.curie, context: 'chemical' }),
    () => harness.app.concepts.relations(owner, { repository, concept: ids.curie, context: 'chemical' }),
    () => harness.app.concepts.facts(owner, { repository, concept: ids.curie, context: 'chemical' }),
    () => harness.app.summaries.summaries(owner, { repository, concept: ids.curie, context: 'chemical' }),
    () => harness.app.summaries.definition(owner, { repository, concept: ids.curie, context: 'chemical' }),
  ]) {
    await rejectsWith(t, read(), 'invalid', new RegExp(`concept ${ids.curie} is in context person, not chemical`));
  }
  await rejectsWith(t, harness.app.concepts.relation(owner, { repository, concept: ids.radium, other: ids.curie, other_context: 'chemical' }), 'invalid', /other_context=/);
  t.equal((await harness.app.concepts.get(owner, { repository, concept: ids.curie, context: ' PERSON ' })).id, ids.curie, 'its own context, in any case, is fine');
  t.equal((await harness.app.concepts.get(owner, { repository, concept: ids.oldest, context: 'person' })).id, ids.curie, 'a merged id with its own context');
});

t.test('a migration request names its task', async (t) => {
  const requested = await harness.app.concepts.migrateContext(owner, { repository, from_context: 'topic', to_context: 'event' }, { correlationId: 'migrate-1' });
  t.match(requested, { task_id: /^[0-9a-f-]{36}$/, from_context: 'topic', to_context: 'event' });
  const [event] = (await harness.app.events.list(owner, { repository, types: ['ContextMigrationRequested'] })).events;
  t.match(event, { actor: owner.userId, correlation_id: 'migrate-1' }, 'the principal acts; the trace correlates');
});

t.test('an alias two concepts of one context share: both listed, to be asked for by name or id', async (t) => {
  const pierre = await createConcept(harness.service, repository, 'Pierre Curie', 'person', ['Curie']);
  for (const context of ['person', undefined]) {
    const refused = await harness.app.concepts.get(owner, { repository, concept: 'curie', context }).catch((error: unknown) => error);
    t.ok(refused instanceof AmbiguousConceptError, `refused (context ${context ?? 'not given'})`);
    if (!(refused instanceof AmbiguousConceptError)) continue;
    t.same(refused.candidates, [
      { id: ids.curie, canonical_name: 'Marie Curie', context: 'person' },
      { id: pierre, canonical_name: 'Pierre Curie', context: 'person' },
    ]);
    t.same(refused.contexts, ['person']);
    t.equal(refused.message, "'curie' names several concepts in context person (Marie Curie, Pierre Curie): ask for one by its canonical name or id", 'no advice to pass a context, which cannot help');
  }
  t.equal((await harness.app.concepts.get(owner, { repository, concept: 'Pierre Curie' })).id, pierre, 'the canonical name picks one');
});

t.test('a name spelt with a combining mark finds the concept spelt composed', async (t) => {
  const zurich = await createConcept(harness.service, repository, 'Zürich', 'place');
  const decomposed = 'ZU\u0308RICH';
  t.not(decomposed, 'ZÜRICH');
  t.equal((await harness.app.concepts.get(owner, { repository, concept: decomposed })).id, zurich);
});

t.test('a concept recorded with a decomposed name, before names were composed, is found by either spelling', async (t) => {
  // The event as an older release recorded it; the projection spells and keys its alias rows composed.
  const cafe = await createConcept(harness.service, repository, 'Cafe\u0301 de Flore', 'place', ['Le Cafe\u0301']);
  for (const asked of ['Café de Flore', 'Cafe\u0301 de Flore', 'CAFÉ DE FLORE', 'le café', 'LE CAFE\u0301']) {
    t.equal((await harness.app.concepts.get(owner, { repository, concept: asked })).id, cafe, asked);
  }
  t.same((await harness.app.concepts.get(owner, { repository, concept: cafe })).aliases, ['Le Café'], 'its canonical name is not listed as an alias');
});

t.test('a merge chain that ends at no active concept (two merges into each other) is not found, as a fact\'s is', async (t) => {
  const xi = await createConcept(harness.service, repository, 'Xi', 'topic');
  const ypsilon = await createConcept(harness.service, repository, 'Ypsilon', 'topic');
  await appendEvents(harness.service, repository, `concept-${xi}`, [{ type: 'ConceptMergedInto', data: { survivor_id: ypsilon, reason: 'raced' } }]);
  await appendEvents(harness.service, repository, `concept-${ypsilon}`, [{ type: 'ConceptMergedInto', data: { survivor_id: xi, reason: 'raced' } }]);
  for (const concept of [xi, ypsilon, 'Xi', 'ypsilon']) {
    await rejectsWith(t, harness.app.concepts.get(owner, { repository, concept }), 'not_found', /concept not found/);
    await rejectsWith(t, harness.app.concepts.facts(owner, { repository, concept }), 'not_found', /concept not found/);
  }
  const listed = (await harness.app.concepts.search(owner, { repository, show_small: true, limit: 500 })).items.map((item) => item.id);
  t.notOk(listed.includes(xi) || listed.includes(ypsilon), 'nor listed');
});

t.test("after a merge the survivor's relations hold the merged concept's at once, without the merged concept itself", async (t) => {
  const { source } = await harness.app.sources.add(owner, { repository, doi: '10.1000/bakery' });
  const [bread, flour, shared] = await extractFacts(harness.service, repository, source.id, ['Bakers bake bread daily.', 'Bakeries mill their own flour.', 'A bakery is a baker\'s shop.']);
  await stabilize(harness.service, repository, source.id, [bread, flour, shared]);
  const baker = await createConcept(harness.service, repository, 'Baker', 'topic');
  const bakery = await createConcept(harness.service, repository, 'Bakery', 'topic');
  const breadConcept = await createConcept(harness.service, repository, 'Bread', 'topic');
  const flourConcept = await createConcept(harness.service, repository, 'Flour', 'topic');
  await linkFacts(harness.service, repository, source.id, {
    [bread.id]: [baker, breadConcept],
    [flour.id]: [bakery, flourConcept],
    [shared.id]: [baker, bakery],
  });
  // The relations as the periodic refresh records them from those links.
  const counted = await relationChanges(harness.service.context.db.knex, repository);
  await refreshRelations(harness.service, repository, counted.map((change) => [change.concept_a, change.concept_b, change.shared_fact_count]));
  const related = async (concept: string) =>
    (await harness.app.concepts.relations(owner, { repository, concept, show_insignificant: true })).items.map((item) => [item.concept?.canonical_name, item.shared_fact_count]);
  t.same(await related(baker), [['Bakery', 1], ['Bread', 1]], 'before: the baker shares a fact with the bakery and one with bread');

  await appendEvents(harness.service, repository, `concept-${bakery}`, [{ type: 'ConceptMergedInto', data: { survivor_id: baker, reason: 'same trade' } }]);
  t.same(await related(baker), [['Bread', 1], ['Flour', 1]], "the bakery's flour is the baker's now, and the bakery is no relation of itself");
  t.same(await related(flourConcept), [['Baker', 1]], 'seen from the other side too');
  const asked = await harness.app.concepts.relations(owner, { repository, concept: bakery, show_insignificant: true });
  t.match(asked, { concept: { id: baker }, redirected_from: { id: bakery }, total: 2 }, 'the merged concept asked for answers with the survivor');
  t.same(await relationChanges(harness.service.context.db.knex, repository), [], 'the next periodic refresh finds nothing left to change');
});

t.test("a fact's retraction shrinks the relations it made at once, and a pair whose last shared fact goes is gone", async (t) => {
  // Given concepts A and B that share the facts f1 and f2, as the periodic refresh counted them.
  const { source } = await harness.app.sources.add(owner, { repository, doi: '10.1000/retractions' });
  const [f1, f2] = await extractFacts(harness.service, repository, source.id, ['Alpha meets Beta on Mondays.', 'Alpha writes to Beta.']);
  await stabilize(harness.service, repository, source.id, [f1, f2]);
  const alpha = await createConcept(harness.service, repository, 'Alpha', 'topic');
  const beta = await createConcept(harness.service, repository, 'Beta', 'topic');
  await linkFacts(harness.service, repository, source.id, { [f1.id]: [alpha, beta], [f2.id]: [alpha, beta] });
  const counted = await relationChanges(harness.service.context.db.knex, repository);
  await refreshRelations(harness.service, repository, counted.map((change) => [change.concept_a, change.concept_b, change.shared_fact_count]));
  const related = async (concept: string) =>
    (await harness.app.concepts.relations(owner, { repository, concept, show_insignificant: true })).items.map((item) => [item.concept?.canonical_name, item.shared_fact_count]);
  t.same(await related(alpha), [['Beta', 2]], 'given: Alpha and Beta share two facts');
  const retract = (fact: { id: string }) =>
    appendEvents(harness.service, repository, `fact-${fact.id}`, [{ type: 'FactRetracted', data: { source_id: source.id, reason: 'source deleted' } }]);

  // When f1 is retracted, then the pair shares one fact.
  await retract(f1);
  t.same(await related(alpha), [['Beta', 1]], 'one shared fact left');
  t.same(await related(beta), [['Alpha', 1]], 'seen from the other side too');
  // When f2 too, then the pair is gone.
  await retract(f2);
  t.same(await related(alpha), [], 'no shared fact left: no relation');
  t.same(await related(beta), []);
  t.same(await relationChanges(harness.service.context.db.knex, repository), [], 'the next periodic refresh changes nothing');
});

t.test("a fact merged into another moves its concepts' relations to the survivor's facts at once", async (t) => {
  // f3 links A, C and E; f4 links A, C and D: A and C share both, E and D none.
  const { source } = await harness.app.sources.add(owner, { repository, doi: '10.1000/fact-merges' });
  const [f3, f4] = await extractFacts(harness.service, repository, source.id, ['Gamma orbits Delta.', 'Gamma circles Delta.']);
  await stabilize(harness.service, repository, source.id, [f3, f4]);
  const [a, c, d, e] = await Promise.all(['Gamma', 'Delta', 'Orbit', 'Moon'].map((name) => createConcept(harness.service, repository, name, 'topic')));
  await linkFacts(harness.service, repository, source.id, { [f3.id]: [a, c, e], [f4.id]: [a, c, d] });
  const counted = await relationChanges(harness.service.context.db.knex, repository);
  await refreshRelations(harness.service, repository, counted.map((change) => [change.concept_a, change.concept_b, change.shared_fact_count]));
  const related = async (concept: string) =>
    (await harness.app.concepts.relations(owner, { repository, concept, show_insignificant: true })).items.map((item) => [item.concept?.canonical_name, item.shared_fact_count]);
  t.same(await related(a), [['Delta', 2], ['Moon', 1], ['Orbit', 1]], 'before: Gamma and Delta share two facts');
  t.same(await related(e), [['Delta', 1], ['Gamma', 1]], 'the moon is no relation of the orbit');

  await appendEvents(harness.service, repository, `fact-${f3.id}`, [
    { type: 'FactMergedInto', data: { survivor_id: f4.id, similarity: 0.97, source_id: source.id, catchup: false } },
  ]);
  t.same(await related(a), [['Delta', 1], ['Moon', 1], ['Orbit', 1]], 'one fact now where there were two');
  t.same(await related(e), [['Delta', 1], ['Gamma', 1], ['Orbit', 1]], 'the moon now shares the survivor with the orbit');
  t.same(await relationChanges(harness.service.context.db.knex, repository), [], 'the next periodic refresh changes nothing');
});

t.test("a deleted source's facts leave the counts at once: fact_count, the size filter, relations, before cleanup_facts retracts them", async (t) => {
  const orchard = (await harness.app.repositories.create(owner, { name: 'Orchard counts' })).id;
  const me = await harness.refreshed(owner);
  const kept = (await harness.app.sources.add(me, { repository: orchard, url: 'http://127.0.0.1:9/kept' })).source.id;
  const doomed = (await harness.app.sources.add(me, { repository: orchard, url: 'http://127.0.0.1:9/doomed' })).source.id;
  const [k1, k2, k3, both] = await extractFacts(harness.service, orchard, kept, ['Kiwis like lime soil.', 'Kiwis climb.', 'Kiwis ripen late.', 'Kiwis and limes share a shed.']);
  const [d1, d2] = await extractFacts(harness.service, orchard, doomed, ['Kiwis grow beside limes.', 'Limes are sour.']);
  // `both` is a fact of either source: it keeps a source and is counted after the deletion.
  await appendEvents(harness.service, orchard, `source-${doomed}`, [
    { type: 'FactsExtracted', data: { model_id: 'local', promptset_hash: '', facts: [{ fact_id: both.id, content: both.content, content_hash: contentHash(both.content), source_text: both.content, chunk_index: 0, fact_kind: 'text', image_id: null, sentence_index: 2 }] } },
  ]);
  const kiwi = await createConcept(harness.service, orchard, 'Kiwi', 'topic');
  const lime = await createConcept(harness.service, orchard, 'Lime', 'topic');
  await linkFacts(harness.service, orchard, kept, { [k1.id]: [kiwi, lime], [k2.id]: [kiwi], [k3.id]: [kiwi], [both.id]: [kiwi, lime] });
  await linkFacts(harness.service, orchard, doomed, { [d1.id]: [kiwi, lime], [d2.id]: [lime] });
  const counted = await relationChanges(harness.service.context.db.knex, orchard);
  await refreshRelations(harness.service, orchard, counted.map((change) => [change.concept_a, change.concept_b, change.shared_fact_count]));
  const minFacts = harness.service.config.concepts.min_concept_fact_count;
  t.equal(minFacts, 5, 'the test counts around the default size filter');
  const factCount = async (concept: string) => (await harness.app.concepts.get(me, { repository: orchard, concept })).fact_count;
  const listed = async () => (await harness.app.concepts.search(me, { repository: orchard, limit: 50 })).items.map((item) => [item.canonical_name, item.fact_count]);
  const related = async (concept: string) =>
    (await harness.app.concepts.relations(me, { repository: orchard, concept, show_insignificant: true })).items.map((item) => [item.concept?.canonical_name, item.shared_fact_count]);
  t.same([await factCount(kiwi), await factCount(lime)], [5, 4], 'given: Kiwi has five facts, Lime four');
  t.same(await listed(), [['Kiwi', 5]], 'Kiwi is big enough to be listed');
  t.same(await related(kiwi), [['Lime', 3]], 'they share three facts');

  await harness.app.sources.remove(me, { repository: orchard, source: doomed });
  t.same([await factCount(kiwi), await factCount(lime)], [4, 2], "the deleted source's own facts are not counted");
  t.same(await listed(), [], 'Kiwi is below the size filter now');
  t.same(
    (await harness.app.concepts.search(me, { repository: orchard, show_small: true, limit: 50 })).items.map((item) => [item.canonical_name, item.fact_count]),
    [['Kiwi', 4], ['Lime', 2]],
    'listed with show_small, counted as read',
  );
  t.same(await related(kiwi), [['Lime', 2]], 'the pair shares two facts now');
  t.same(await related(lime), [['Kiwi', 2]], 'seen from the other side too');
  t.match(await harness.app.concepts.relation(me, { repository: orchard, concept: kiwi, other: lime }), { shared_fact_count: 2, total: 2 }, 'the count agrees with the facts listed');
  t.equal((await harness.app.concepts.facts(me, { repository: orchard, concept: kiwi })).concept.fact_count, 4, "and with a concept's facts");
  const onFact = await harness.app.facts.concepts(me, { repository: orchard, fact: k1.id });
  t.same(onFact.items.map((item: { fact_count: number }) => item.fact_count).sort(), [2, 4], "a fact's concepts are counted as read");

  // cleanup_facts retracts them: the counts stay as they were read, and the periodic refresh changes nothing.
  for (const fact of [d1, d2]) {
    await appendEvents(harness.service, orchard, `fact-${fact.id}`, [{ type: 'FactRetracted', data: { source_id: doomed, reason: 'source deleted' } }]);
  }
  t.same([await factCount(kiwi), await factCount(lime)], [4, 2], 'retracted: the same counts');
  t.same(await related(kiwi), [['Lime', 2]]);
  t.same(await relationChanges(harness.service.context.db.knex, orchard), [], 'the next periodic refresh changes nothing');
});
