import { randomUUID } from 'node:crypto';
import t, { type Test } from 'tap';
import { sourceDecider } from '../../../src/domain/source/decider.js';
import { handleCommand, loadStream } from '../../../src/eventstore/commandHandler.js';
import { streamName, type RecordedEvent } from '../../../src/eventstore/envelope.js';
import { createEventStoreDbStore } from '../../../src/eventstore/eventstoredb.js';
import { EventSchemaRegistry } from '../../../src/eventstore/schemas.js';
import { unpackVector } from '../../../src/interchange/vectors.js';
import type { Embedder } from '../../../src/providers/embeddings/port.js';
import { createDeduplicateFactsStage } from '../../../src/pipeline/stages/deduplicateFacts.js';
import { createEmbedFactsStage, FACTS_EMBEDDED_PART_BYTES } from '../../../src/pipeline/stages/embedFacts.js';
import { factIdFor } from '../../../src/pipeline/stages/sourceDecomposition.js';
import { contentHash } from '../../../src/interchange/hashing.js';
import { facts } from '../../../src/search/collections/index.js';
import type { FactDocument } from '../../../src/search/collections/facts.js';
import type { KnnQuery } from '../../../src/search/port.js';
import { withOverrides } from '../../eventstore/contract.js';
import { DEFAULT_MAX_APPEND_SIZE, startFakeEventStoreDb } from '../../eventstore/fake-esdb/server.js';
import { axisVector, openStageFixture, testMetadata } from '../stageFixture.js';

t.setTimeout(600_000);

const DIMENSIONS = 1536;
const FACTS = 400;
const MODEL = 'test/axes-1536';

/** Fact texts whose number is the axis of their vector: every two facts are orthogonal, none merges. */
const contents = Array.from({ length: FACTS }, (_, index) => `Fact number ${index}.`);

/** A deterministic embedder: `Fact number N.` is the unit vector along axis N; counts the texts it embeds. */
function axesEmbedder(): Embedder & { texts: number } {
  const embedder = {
    modelId: MODEL,
    dimensions: DIMENSIONS,
    texts: 0,
    async embed(texts: readonly string[]) {
      embedder.texts += texts.length;
      return texts.map((text) => axisVector(DIMENSIONS, Number(/\d+/.exec(text)?.[0])));
    },
  };
  return embedder;
}

type Vectors = Array<{ fact_id: string; vector: string }>;
const vectorsOf = (event: RecordedEvent) => event.data.vectors as Vectors;

/** The parts are each within the budget, and together hold every fact once. */
function checkParts(t: Test, parts: readonly RecordedEvent[], factIds: readonly string[]): void {
  for (const [index, part] of parts.entries()) {
    const vectorBytes = JSON.stringify(part.data.vectors).length;
    t.ok(vectorBytes <= FACTS_EMBEDDED_PART_BYTES, `part ${index} holds ${vectorBytes} bytes of vectors, within the budget`);
    t.match(part.data, { model: MODEL, dimensions: DIMENSIONS });
  }
  const recorded = parts.flatMap((part) => vectorsOf(part).map((entry) => entry.fact_id));
  t.equal(recorded.length, new Set(recorded).size, 'no fact is recorded twice');
  t.same([...recorded].sort(), [...factIds].sort(), 'every fact has its vector');
}

t.test('embed_facts records a large source in several FactsEmbedded, each within the budget', async (t) => {
  const fixture = await openStageFixture(t, { dimensions: DIMENSIONS });
  const repositoryId = await fixture.createRepository();
  const embedder = axesEmbedder();
  const stage = createEmbedFactsStage({ store: fixture.store, embedder, batchSize: 32, maxAttempts: 3 });
  // The k-NN queries deduplication asks, by fact.
  const searched: Array<{ vector: number[]; exclude: string[] }> = [];
  const search = new Proxy(fixture.search, {
    get(target, property, receiver) {
      if (property === 'knnMany') {
        return (collection: typeof facts, queries: readonly KnnQuery<FactDocument>[]) => {
          for (const query of queries) searched.push({ vector: query.vector, exclude: [...(query.exclude ?? [])] });
          return target.knnMany(collection, queries);
        };
      }
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  const dedup = createDeduplicateFactsStage({
    store: fixture.store,
    knex: fixture.db.knex,
    search,
    embedderModelId: MODEL,
    threshold: 0.94,
    catchupMaxAgeMs: 3_600_000,
  });

  t.test('all parts in one run; the search index and deduplication see every vector', async (t) => {
    const source = await fixture.addSource(repositoryId, contents);
    const stream = streamName('source', source.sourceId);
    await stage.run(fixture.contextFor(stage, source.extracted));
    const parts = await fixture.eventsOf(stream, 'FactsEmbedded');
    // 8,255 bytes a vector at 1,536 dimensions: 63 to a part of 512 KiB.
    t.equal(parts.length, Math.ceil(FACTS / 63), `${parts.length} parts`);
    checkParts(t, parts, source.factIds);
    t.ok((await loadStream(fixture.store, stream, sourceDecider)).state.status === 'processed');
    t.equal(embedder.texts, FACTS, 'each fact embedded once');
    const head = await fixture.store.headPosition();
    await stage.run(fixture.contextFor(stage, source.extracted));
    t.equal(await fixture.store.headPosition(), head, 'a rerun records nothing');

    await fixture.settle();
    // The embedded tier's index keeps the vectors in fact_vectors (src/search/collections/facts.ts).
    const indexed: Array<{ fact_id: string }> = await fixture.db.knex('fact_vectors').whereIn('fact_id', source.factIds).select('fact_id');
    t.same(indexed.map((row) => row.fact_id).sort(), [...source.factIds].sort(), 'the search index holds the vector of every fact, from every part');
    const models: Array<{ embedding_model: string | null }> = await fixture.db.knex('facts').whereIn('id', source.factIds).select('embedding_model');
    t.same(models.map((row) => row.embedding_model), source.factIds.map(() => MODEL), 'the facts read model names the model of every fact');

    // Each part triggers a job; the first one finds every part recorded and decides every fact,
    // asking the index for the neighbours of every fact's vector, whichever part holds it.
    searched.length = 0;
    await dedup.run(fixture.contextFor(dedup, parts[0]));
    const done = await fixture.last(stream, 'SourceFactsDeduplicated');
    t.equal((done.data.stable_fact_ids as string[]).length, FACTS, 'every fact decided (orthogonal: all stable)');
    const vectors = new Map(parts.flatMap(vectorsOf).map((entry) => [entry.fact_id, unpackVector(entry.vector)]));
    t.same(searched.map((query) => query.exclude[0]).sort(), [...vectors.keys()].sort(), 'deduplication compares the vector of every fact');
    t.ok(searched.every((query) => query.vector.every((value, index) => value === vectors.get(query.exclude[0])?.[index])), 'each with its own vector');
    for (const part of parts.slice(1)) await dedup.run(fixture.contextFor(dedup, part));
    t.equal((await fixture.eventsOf(stream, 'SourceFactsDeduplicated')).length, 1, 'the other parts’ jobs record nothing');
  });

  t.test('an append failing after the first part: the retry embeds and records only the rest', async (t) => {
    const source = await fixture.addSource(repositoryId, contents.map((text) => `${text} Again.`));
    const stream = streamName('source', source.sourceId);
    let embeddings = 0;
    const failing = withOverrides(fixture.store, {
      append: (async (streamId, events, expected) => {
        if (streamId === stream && events.some((event) => event.type === 'FactsEmbedded') && ++embeddings === 2) {
          throw new Error('connection reset');
        }
        return fixture.store.append(streamId, events, expected);
      }) as typeof fixture.store.append,
    });
    const crashing = axesEmbedder();
    const first = createEmbedFactsStage({ store: failing, embedder: crashing, batchSize: 32, maxAttempts: 3 });
    await t.rejects(first.run(fixture.contextFor(first, source.extracted, { attempts: 1 })), /connection reset/, 'a transient failure, retried by the runtime');
    const [recorded] = await fixture.eventsOf(stream, 'FactsEmbedded');
    t.equal((await fixture.eventsOf(stream, 'FactsEmbedded')).length, 1, 'the first part is recorded');
    const state = (await loadStream(fixture.store, stream, sourceDecider)).state;
    t.ok(state.status !== 'none' && !state.embeddedWith.includes(MODEL), 'the source is not embedded yet');
    t.same(await fixture.eventsOf(stream, 'SourceFailed'), [], 'nor failed');

    // deduplicate_facts, triggered by the first part, waits for the last.
    await dedup.run(fixture.contextFor(dedup, recorded));
    t.same(await fixture.eventsOf(stream, 'SourceFactsDeduplicated'), [], 'no deduplication on a part of the vectors');

    const retrying = axesEmbedder();
    const retry = createEmbedFactsStage({ store: fixture.store, embedder: retrying, batchSize: 32, maxAttempts: 3 });
    await retry.run(fixture.contextFor(retry, source.extracted, { attempts: 2 }));
    const firstPart = vectorsOf(recorded).length;
    t.equal(retrying.texts, FACTS - firstPart, `the retry embeds the ${FACTS - firstPart} facts still missing`);
    const parts = await fixture.eventsOf(stream, 'FactsEmbedded');
    t.same(parts[0].eventId, recorded.eventId);
    checkParts(t, parts, source.factIds);
    const after = (await loadStream(fixture.store, stream, sourceDecider)).state;
    t.ok(after.status !== 'none' && after.embeddedWith.includes(MODEL), 'done: every fact has a vector');

    await fixture.settle();
    await dedup.run(fixture.contextFor(dedup, parts[parts.length - 1]));
    const done = await fixture.last(stream, 'SourceFactsDeduplicated');
    t.equal((done.data.stable_fact_ids as string[]).length + (done.data.merged as unknown[]).length, FACTS, 'the last part’s job decides every fact');
  });

  t.test('a small source still records one FactsEmbedded, as before', async (t) => {
    const source = await fixture.addSource(repositoryId, contents.slice(0, 5).map((text) => `${text} Small.`));
    await stage.run(fixture.contextFor(stage, source.extracted));
    const parts = await fixture.eventsOf(streamName('source', source.sourceId), 'FactsEmbedded');
    t.equal(parts.length, 1);
    t.same(Object.keys(parts[0].data).sort(), ['dimensions', 'model', 'vectors'], 'the same fields as ever');
    t.same(vectorsOf(parts[0]).map((entry) => entry.fact_id), source.factIds);
  });

  t.test('a source without facts records its one empty FactsEmbedded', async (t) => {
    const source = await fixture.addSource(repositoryId, []);
    await stage.run(fixture.contextFor(stage, source.extracted));
    const parts = await fixture.eventsOf(streamName('source', source.sourceId), 'FactsEmbedded');
    t.same(parts.map((part) => part.data), [{ model: MODEL, dimensions: DIMENSIONS, vectors: [] }]);
  });
});

t.test('on EventStoreDB (the fake server, 1 MiB limit) no part of a large source is refused', async (t) => {
  const fake = await startFakeEventStoreDb();
  t.teardown(() => fake.close());
  const store = createEventStoreDbStore({ connectionString: fake.connectionString, schemas: await EventSchemaRegistry.load() });
  t.teardown(() => store.close());
  const repositoryId = randomUUID();
  const sourceId = randomUUID();
  const stream = streamName('source', sourceId);
  const metadata = testMetadata(repositoryId);
  await handleCommand(store, stream, sourceDecider, { type: 'RegisterSource', origin: 'url', url: 'https://example.org/paper' }, metadata);
  const fetched = { final_url: null, content_type: 'text/plain', body_sha256: 'a'.repeat(64), body_bytes: 1, document_kind: 'text', title: null, published_at: null };
  await handleCommand(store, stream, sourceDecider, { type: 'RecordFetch', fetched: { ...fetched, text_sha256: 'b'.repeat(64), markdown_sha256: 'c'.repeat(64), text_chars: 1 } }, metadata);
  const extractedFacts = contents.map((content) => ({ fact_id: factIdFor(repositoryId, contentHash(content)), content, content_hash: contentHash(content), source_text: content, chunk_index: 0 }));
  await handleCommand(store, stream, sourceDecider, { type: 'RecordFacts', modelId: 'm', facts: extractedFacts }, metadata);
  const extracted = (await store.readStream(stream)).find((event) => event.type === 'FactsExtracted') as RecordedEvent;

  const stage = createEmbedFactsStage({ store, embedder: axesEmbedder(), batchSize: 32, maxAttempts: 3 });
  const fixtureContext = {
    job: {
      id: randomUUID(), kind: stage.kind, repositoryId, subjectId: sourceId, sourceId, reportId: null, triggerEventId: extracted.eventId,
      triggerPosition: extracted.globalPosition, correlationId: null, state: 'running' as const, attempts: 1, lastError: null,
      createdAt: new Date().toISOString(), updatedAt: new Date().toISOString(),
    },
    trigger: extracted,
    scheduled: false,
    signal: new AbortController().signal,
    actor: 'system:embed_facts',
    coverQueued: async () => 0,
  };
  await stage.run(fixtureContext);
  const parts = (await store.readStream(stream)).filter((event) => event.type === 'FactsEmbedded');
  t.ok(parts.length > 1, `${parts.length} parts`);
  for (const part of fake.log.stream(stream) ?? []) {
    t.ok(part.data.length + part.customMetadata.length < DEFAULT_MAX_APPEND_SIZE / 2 + 4096, `${part.type}: ${part.data.length} bytes, well within the server's limit`);
  }
  checkParts(t, parts, extractedFacts.map((fact) => fact.fact_id));
});
