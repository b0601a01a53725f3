import t from 'tap';
import { v5 as uuidv5 } from 'uuid';
import { CONCEPT_ID_NAMESPACE } from '../../src/domain/concept/decider.js';
import { CONCEPT_TWIN_MERGE_REASON, mergeConceptTwins } from '../../src/app/conceptTwins.js';
import { startTestApplication, type TestApplication } from '../helpers/application.js';
import { eventually } from '../helpers/service.js';
import { appendEvents, createConcept, extractFacts, linkFacts } from '../api/seedGraph.js';

/**
 * Concepts that releases before names were composed (NFC) recorded twice, once per spelling of
 * one name, are merged into the oldest at start-up, by the merge event the concept decider records.
 */

let harness: TestApplication;
t.before(async () => {
  harness = await startTestApplication({ name: 'Cafés' });
});
t.teardown(() => harness.close());

/** A concept as a release before the NFC change created it: its id keyed by the name as spelt, lower-cased. */
async function createConceptAsBefore(repository: string, canonicalName: string, context: string): Promise<string> {
  const id = uuidv5(`${repository}:${canonicalName.trim().toLowerCase()}:${context.trim().toLowerCase()}`, CONCEPT_ID_NAMESPACE);
  await appendEvents(harness.service, repository, `concept-${id}`, [
    { type: 'ConceptCreated', data: { canonical_name: canonicalName, context, ontology_class: null, aliases: [], source_id: null } },
  ]);
  return id;
}

t.test('twins under the composed name key merge into the oldest, once', async (t) => {
  const { repository, owner, service } = harness;
  const knex = service.context.db.knex;
  // Given: Café de Flore spelt decomposed by an older release, and composed by this one, in one context.
  const decomposed = await createConceptAsBefore(repository, 'Cafe\u0301 de Flore', 'place');
  const composed = await createConcept(service, repository, 'Café de Flore', 'place');
  const elsewhere = await createConcept(service, repository, 'Café de Flore', 'topic');
  t.not(decomposed, composed, 'two concepts, as the older release left them');
  const { source } = await harness.app.sources.add(owner, { repository, doi: '10.1000/flore' });
  const [fact] = await extractFacts(service, repository, source.id, ['Sartre wrote at the Café de Flore.']);
  await linkFacts(service, repository, source.id, { [fact.id]: [composed] });

  // When: the start-up step runs.
  t.equal(await mergeConceptTwins(knex, service.context.store), 1);

  // Then: the younger twin merged into the oldest with its fact; the other context's concept stays.
  const [merge] = (await harness.app.events.list(owner, { repository, types: ['ConceptMergedInto'] })).events;
  t.match(merge, { stream_id: `concept-${composed}`, data: { survivor_id: decomposed, reason: CONCEPT_TWIN_MERGE_REASON }, actor: 'system:concept-twins' });
  await eventually(async () => (await knex('concepts').where({ id: composed }).first('status'))?.status === 'merged');
  for (const asked of ['Café de Flore', 'Cafe\u0301 de Flore', composed]) {
    const found = await harness.app.concepts.get(owner, { repository, concept: asked, context: 'place' });
    t.match(found, { id: decomposed, fact_count: 1 }, asked);
  }
  t.equal((await harness.app.concepts.get(owner, { repository, concept: elsewhere })).id, elsewhere, 'another context is another concept');

  // And again: nothing left to merge.
  t.equal(await mergeConceptTwins(knex, service.context.store), 0);
  t.equal((await harness.app.events.list(owner, { repository, types: ['ConceptMergedInto'] })).events.length, 1, 'no second merge recorded');
});

t.test('twins under the folded (NFKC) name key merge too: ＡＩ recorded by an older release and AI', async (t) => {
  const { repository, owner, service } = harness;
  const knex = service.context.db.knex;
  const wide = await createConceptAsBefore(repository, 'ＡＩ', 'field');
  const plain = await createConcept(service, repository, 'AI', 'field');
  t.not(wide, plain, 'two concepts, as the older release left them');
  await eventually(async () => (await knex('concepts').whereIn('id', [wide, plain]).pluck('id')).length === 2);
  t.equal(await mergeConceptTwins(knex, service.context.store), 1);
  await eventually(async () => (await knex('concepts').where({ id: plain }).first('status'))?.status === 'merged');
  for (const asked of ['AI', 'ＡＩ', 'ai']) t.match(await harness.app.concepts.get(owner, { repository, concept: asked, context: 'field' }), { id: wide }, asked);
});
