import t from 'tap';
import { conceptDecider, conceptIdFor } from '../../../src/domain/concept/decider.js';
import { handleCommand } from '../../../src/eventstore/commandHandler.js';
import { streamName } from '../../../src/eventstore/envelope.js';
import { cosineSimilarity, unpackVector } from '../../../src/interchange/vectors.js';
import { createLocalEmbedder } from '../../../src/providers/embeddings/local.js';
import type { Embedder } from '../../../src/providers/embeddings/port.js';
import { ModelCallError } from '../../../src/providers/llm/port.js';
import { PermanentJobError } from '../../../src/pipeline/types.js';
import { createEmbedFactsStage } from '../../../src/pipeline/stages/embedFacts.js';
import { facts } from '../../../src/search/collections/index.js';
import { createDeduplicateFactsStage } from '../../../src/pipeline/stages/deduplicateFacts.js';
import { conceptEmbeddingText, createEmbedConceptsStage } from '../../../src/pipeline/stages/embedConcepts.js';
import { openStageFixture, racedStore, testMetadata } from '../stageFixture.js';

t.setTimeout(600_000);

/** The local embedder behind a switch that fails on cue, counting calls. */
function failingEmbedder(base: Embedder, failure: () => Error | null): Embedder & { calls: number } {
  const wrapped = {
    modelId: base.modelId,
    dimensions: base.dimensions,
    calls: 0,
    async embed(texts: readonly string[], signal?: AbortSignal) {
      wrapped.calls += 1;
      const error = failure();
      if (error) throw error;
      return base.embed(texts, signal);
    },
  };
  return wrapped;
}

t.test('embed_facts and embed_concepts with the local embedder', async (t) => {
  const embedder = createLocalEmbedder();
  const fixture = await openStageFixture(t, { dimensions: embedder.dimensions });
  const repositoryId = await fixture.createRepository();
  const stage = createEmbedFactsStage({ store: fixture.store, embedder, batchSize: 2, maxAttempts: 3 });
  t.same(stage.triggers, ['FactsExtracted']);

  t.test('every fact gets one vector of the model; a rerun records nothing', async (t) => {
    const source = await fixture.addSource(repositoryId, [
      'The Eiffel Tower stands in Paris.',
      'The Eiffel Tower is located in Paris.',
      'Bananas are rich in potassium.',
      'The Eiffel Tower stands in Paris.',
    ]);
    await stage.run(fixture.contextFor(stage, source.extracted));
    const [embedded] = await fixture.eventsOf(streamName('source', source.sourceId), 'FactsEmbedded');
    t.match(embedded.data, { model: embedder.modelId, dimensions: embedder.dimensions });
    const vectors = embedded.data.vectors as Array<{ fact_id: string; vector: string }>;
    const unique = [...new Set(source.factIds)];
    t.same(vectors.map((entry) => entry.fact_id), unique, 'a fact listed twice is embedded once, in order');
    const [tower, located, bananas] = vectors.map((entry) => unpackVector(entry.vector));
    t.equal(tower.length, embedder.dimensions);
    const [expected] = await embedder.embed(['The Eiffel Tower stands in Paris.']);
    t.ok(cosineSimilarity(tower, expected) > 0.9999, 'the recorded vector is the model’s (float32)');
    t.ok(cosineSimilarity(tower, located) > cosineSimilarity(tower, bananas), 'related facts are nearer than unrelated ones');
    const head = await fixture.store.headPosition();
    await stage.run(fixture.contextFor(stage, source.extracted));
    t.equal(await fixture.store.headPosition(), head);

    // The vectors reach the search index, and deduplication reads them from there.
    await fixture.settle();
    const hits = await fixture.search.knn(facts, { repositoryId, vector: tower, k: 3 });
    t.equal(hits.items[0]?.id, unique[0], 'the nearest fact to a vector is its own');
    const dedup = createDeduplicateFactsStage({
      store: fixture.store,
      knex: fixture.db.knex,
      search: fixture.search,
      embedderModelId: embedder.modelId,
      threshold: 0.94,
      catchupMaxAgeMs: 3_600_000,
    });
    await dedup.run(fixture.contextFor(dedup, embedded));
    const done = await fixture.last(streamName('source', source.sourceId), 'SourceFactsDeduplicated');
    const decided = (done.data.stable_fact_ids as string[]).length + (done.data.merged as unknown[]).length;
    t.equal(decided, unique.length, 'every fact of the source is decided');
  });

  t.test('a source that is not processed is left alone', async (t) => {
    const source = await fixture.addSource(repositoryId, ['Lonely fact.']);
    const head = await fixture.store.headPosition();
    const elsewhere = { ...source.extracted, streamId: streamName('source', '00000000-0000-4000-8000-000000000000') };
    await stage.run(fixture.contextFor(stage, elsewhere));
    t.equal(await fixture.store.headPosition(), head);
  });

  t.test('model failures: transient is retried, permanent or last attempt is final', async (t) => {
    const source = await fixture.addSource(repositoryId, ['Failing fact one.', 'Failing fact two.']);
    const transient = failingEmbedder(embedder, () => new ModelCallError('429 too many requests', false, 429));
    const flaky = createEmbedFactsStage({ store: fixture.store, embedder: transient, batchSize: 10, maxAttempts: 3 });
    const error = await flaky.run(fixture.contextFor(flaky, source.extracted, { attempts: 1 })).catch((caught: unknown) => caught);
    t.type(error, ModelCallError);
    t.notOk(error instanceof PermanentJobError);
    await t.rejects(flaky.run(fixture.contextFor(flaky, source.extracted, { attempts: 3 })), PermanentJobError, 'out of attempts');
    const permanent = failingEmbedder(embedder, () => new ModelCallError('401 invalid key', true, 401));
    const broken = createEmbedFactsStage({ store: fixture.store, embedder: permanent, batchSize: 10, maxAttempts: 3 });
    await t.rejects(broken.run(fixture.contextFor(broken, source.extracted, { attempts: 1 })), PermanentJobError);
    const wrongSize: Embedder = { modelId: 'test/short', dimensions: 3, embed: async (texts) => texts.map(() => [1, 0]) };
    const bad = createEmbedFactsStage({ store: fixture.store, embedder: wrongSize, batchSize: 10, maxAttempts: 3 });
    await t.rejects(bad.run(fixture.contextFor(bad, source.extracted, { attempts: 1 })), PermanentJobError, 'a vector of the wrong length');
    t.same(await fixture.eventsOf(streamName('source', source.sourceId), 'FactsEmbedded'), [], 'nothing recorded');
    const working = createEmbedFactsStage({ store: fixture.store, embedder, batchSize: 10, maxAttempts: 3 });
    await working.run(fixture.contextFor(working, source.extracted, { attempts: 2 }));
    t.equal((await fixture.eventsOf(streamName('source', source.sourceId), 'FactsEmbedded')).length, 1, 'the retry records them');
    t.throws(() => createEmbedFactsStage({ store: fixture.store, embedder, batchSize: 0, maxAttempts: 3 }), RangeError);
  });

  t.test('embed_concepts embeds the name with its context, once, and skips merged concepts', async (t) => {
    const concepts = createEmbedConceptsStage({ store: fixture.store, embedder });
    t.same(concepts.triggers, ['ConceptCreated']);
    const metadata = testMetadata(repositoryId);
    const mercury = conceptIdFor(repositoryId, 'Mercury', 'chemical');
    await handleCommand(fixture.store, streamName('concept', mercury), conceptDecider, {
      type: 'CreateConcept', canonicalName: 'Mercury', context: 'chemical', ontologyClass: null, aliases: ['Hg'], sourceId: null,
    }, metadata);
    const created = await fixture.last(streamName('concept', mercury), 'ConceptCreated');
    t.equal(concepts.subjectOf(created), mercury);
    await concepts.run(fixture.contextFor(concepts, created));
    await concepts.run(fixture.contextFor(concepts, created));
    const embedded = await fixture.eventsOf(streamName('concept', mercury), 'ConceptEmbedded');
    t.equal(embedded.length, 1, 'embedded once');
    t.match(embedded[0].data, { model: embedder.modelId, dimensions: embedder.dimensions });
    const [expected] = await embedder.embed([conceptEmbeddingText('Mercury', 'chemical')]);
    t.ok(cosineSimilarity(unpackVector(embedded[0].data.vector as string), expected) > 0.9999);
    t.equal(conceptEmbeddingText('Mercury', 'chemical'), 'Mercury (chemical)');

    const planet = conceptIdFor(repositoryId, 'Mercury', 'location');
    await handleCommand(fixture.store, streamName('concept', planet), conceptDecider, {
      type: 'CreateConcept', canonicalName: 'Mercury', context: 'location', ontologyClass: null, aliases: [], sourceId: null,
    }, metadata);
    const planetCreated = await fixture.last(streamName('concept', planet), 'ConceptCreated');
    await handleCommand(fixture.store, streamName('concept', planet), conceptDecider, { type: 'MergeConcept', survivorId: mercury, reason: 'test' }, metadata);
    const failing = failingEmbedder(embedder, () => new Error('must not be called'));
    await createEmbedConceptsStage({ store: fixture.store, embedder: failing }).run(fixture.contextFor(concepts, planetCreated));
    t.equal(failing.calls, 0, 'a merged concept is not embedded');
  });

  t.test('embed_concepts records the vector when extraction adds an alias meanwhile', async (t) => {
    // Before, the lost race ended the job as "done by a twin" and the concept never got a vector.
    const metadata = testMetadata(repositoryId);
    const cobalt = conceptIdFor(repositoryId, 'Cobalt', 'chemical');
    await handleCommand(fixture.store, streamName('concept', cobalt), conceptDecider, {
      type: 'CreateConcept', canonicalName: 'Cobalt', context: 'chemical', ontologyClass: null, aliases: [], sourceId: null,
    }, metadata);
    const created = await fixture.last(streamName('concept', cobalt), 'ConceptCreated');
    const store = racedStore(
      fixture.store,
      (streamId) => streamId === streamName('concept', cobalt),
      async (streamId) => {
        await handleCommand(fixture.store, streamId, conceptDecider, { type: 'AddAliases', aliases: ['Co'] }, metadata);
      },
      1,
    );
    const stage = createEmbedConceptsStage({ store, embedder });
    await stage.run(fixture.contextFor(stage, created));
    t.equal(store.races, 1, 'the first append lost a race');
    const events = await fixture.eventsOf(streamName('concept', cobalt));
    t.same(events.map((event) => event.type), ['ConceptCreated', 'ConceptAliasAdded', 'ConceptEmbedded'], 'the alias and the vector are both kept');
  });

  t.test('embed_concepts runMany: the concepts of a group in one embedding call, each decided as run would', async (t) => {
    const metadata = testMetadata(repositoryId);
    const create = async (name: string): Promise<{ id: string; created: Awaited<ReturnType<typeof fixture.last>> }> => {
      const id = conceptIdFor(repositoryId, name, 'organization');
      await handleCommand(fixture.store, streamName('concept', id), conceptDecider, {
        type: 'CreateConcept', canonicalName: name, context: 'organization', ontologyClass: null, aliases: [], sourceId: null,
      }, metadata);
      return { id, created: await fixture.last(streamName('concept', id), 'ConceptCreated') };
    };
    const [acme, globex, initech, hooli] = await Promise.all(['Acme', 'Globex', 'Initech', 'Hooli'].map(create));
    await handleCommand(fixture.store, streamName('concept', initech.id), conceptDecider, { type: 'MergeConcept', survivorId: acme.id, reason: 'test' }, metadata);
    // Hooli gains an alias between the read and the append: its part is re-decided alone.
    const store = racedStore(
      fixture.store,
      (streamId) => streamId === streamName('concept', hooli.id),
      async (streamId) => {
        await handleCommand(fixture.store, streamId, conceptDecider, { type: 'AddAliases', aliases: ['Hooli Inc'] }, metadata);
      },
      1,
    );
    const counting = failingEmbedder(embedder, () => null);
    const stage = createEmbedConceptsStage({ store, embedder: counting });
    const contexts = [acme, globex, initech, hooli, globex].map(({ created }) => fixture.contextFor(stage, created));
    const outcomes = await (stage.runMany as NonNullable<typeof stage.runMany>)(contexts, new AbortController().signal);
    t.same(outcomes, contexts.map(() => ({ ok: true })), 'every job is done');
    t.equal(counting.calls, 1, 'one embedding call for the group (Globex listed twice is already embedded when it runs again)');
    t.equal(store.races, 1);
    for (const { id } of [acme, globex, hooli]) {
      const embedded = await fixture.eventsOf(streamName('concept', id), 'ConceptEmbedded');
      t.equal(embedded.length, 1, `${id} embedded once`);
    }
    const [expected] = await embedder.embed([conceptEmbeddingText('Globex', 'organization')]);
    const [globexEmbedded] = await fixture.eventsOf(streamName('concept', globex.id), 'ConceptEmbedded');
    t.ok(cosineSimilarity(unpackVector(globexEmbedded.data.vector as string), expected) > 0.9999, 'the vector of its own text');
    t.same(globexEmbedded.causationId, globex.created.eventId, 'each append carries its own job’s metadata');
    t.same((await fixture.eventsOf(streamName('concept', hooli.id))).map((event) => event.type), ['ConceptCreated', 'ConceptAliasAdded', 'ConceptEmbedded']);
    t.same(await fixture.eventsOf(streamName('concept', initech.id), 'ConceptEmbedded'), [], 'a merged concept is not embedded');
  });

  t.test('embed_concepts runMany: a missing vector fails that job only; a failed call fails the group', async (t) => {
    const metadata = testMetadata(repositoryId);
    const ids = ['Umbrella', 'Cyberdyne'].map((name) => conceptIdFor(repositoryId, name, 'organization'));
    for (const [index, name] of ['Umbrella', 'Cyberdyne'].entries()) {
      await handleCommand(fixture.store, streamName('concept', ids[index]), conceptDecider, {
        type: 'CreateConcept', canonicalName: name, context: 'organization', ontologyClass: null, aliases: [], sourceId: null,
      }, metadata);
    }
    const triggers = await Promise.all(ids.map((id) => fixture.last(streamName('concept', id), 'ConceptCreated')));
    const short: Embedder = { ...embedder, embed: async (texts) => [(await embedder.embed(texts))[0]] };
    const stage = createEmbedConceptsStage({ store: fixture.store, embedder: short });
    const outcomes = await Promise.all(await (stage.runMany as NonNullable<typeof stage.runMany>)(triggers.map((trigger) => fixture.contextFor(stage, trigger)), new AbortController().signal));
    t.same(outcomes[0], { ok: true });
    t.equal(outcomes[1].ok, false);
    t.ok(!outcomes[1].ok && outcomes[1].error instanceof PermanentJobError, 'no vector is permanent, as in run');
    t.equal((await fixture.eventsOf(streamName('concept', ids[1]), 'ConceptEmbedded')).length, 0);
    const down = failingEmbedder(embedder, () => new ModelCallError('HTTP 503', false, 503));
    const failing = createEmbedConceptsStage({ store: fixture.store, embedder: down });
    await t.rejects(
      (failing.runMany as NonNullable<typeof failing.runMany>)([fixture.contextFor(failing, triggers[1])], new AbortController().signal),
      ModelCallError,
      'a failed call is every job’s error (the runtime ends each with it)',
    );
  });
});
