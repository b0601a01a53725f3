import t from 'tap';
import { sourceDecider } from '../../../src/domain/source/decider.js';
import { loadStream } from '../../../src/eventstore/commandHandler.js';
import { streamName } from '../../../src/eventstore/envelope.js';
import { createOpenAIEmbedder } from '../../../src/providers/embeddings/openai.js';
import { createDeduplicateFactsStage } from '../../../src/pipeline/stages/deduplicateFacts.js';
import { createEmbedFactsStage } from '../../../src/pipeline/stages/embedFacts.js';
import { startOpenAIServer } from '../../helpers/openaiServer.js';
import { axisVector, openStageFixture } from '../stageFixture.js';

t.setTimeout(600_000);

/**
 * A source's vectors in parts, through the OpenAI wire format (the fake server): a later part
 * that fails for good leaves the earlier ones for the retry, and no part of another dimension
 * than the model's earlier parts is recorded (k-NN compares vectors of one length).
 */
const MODEL = 'text-embedding-shifting';
const DIMENSIONS = 1536;
const SHORTER = 768;
// 63 vectors of 1,536 dimensions to a part: 70 facts make two, the second after the third batch of 32.
const FACTS = 70;
const contents = Array.from({ length: FACTS }, (_, index) => `Fact number ${index}.`);

t.test('embed_facts: a part failing for good keeps the earlier parts for the retry, and a part of another dimension is refused', async (t) => {
  const fixture = await openStageFixture(t, { dimensions: DIMENSIONS });
  const repositoryId = await fixture.createRepository();
  // A server whose vectors have the length asked for (text-embedding-3 models shorten them), else `native`.
  let native = DIMENSIONS;
  const server = await startOpenAIServer({
    embed: (texts, request) =>
      texts.map((text) => axisVector(typeof request.dimensions === 'number' ? request.dimensions : native, Number(/\d+/.exec(text)?.[0]))),
  });
  t.teardown(server.close);
  const embedderOf = (dimensions: number) =>
    createOpenAIEmbedder({ baseUrl: server.baseUrl, model: MODEL, dimensions, retry: { maxAttempts: 1, baseDelayMs: 5, maxDelayMs: 50, perCallTimeoutMs: 10_000 } });
  const stageOf = (dimensions: number) => createEmbedFactsStage({ store: fixture.store, embedder: embedderOf(dimensions), batchSize: 32, maxAttempts: 3 });
  const dedup = createDeduplicateFactsStage({ store: fixture.store, knex: fixture.db.knex, search: fixture.search, embedderModelId: MODEL, threshold: 0.94, catchupMaxAgeMs: 3_600_000 });

  const source = await fixture.addSource(repositoryId, contents);
  const stream = streamName('source', source.sourceId);
  const state = async () => (await loadStream(fixture.store, stream, sourceDecider)).state;

  // The server's vectors shrink mid-source: the third batch, after the first part was recorded.
  server.queueFault('embeddings', { pass: true }, { pass: true }, { wrongDimensions: SHORTER });
  const first = stageOf(DIMENSIONS);
  await t.rejects(first.run(fixture.contextFor(first, source.extracted, { attempts: 1 })), { name: 'PermanentJobError', message: /768/ }, 'the adapter refuses the shorter vectors for good');
  const [kept, ...others] = await fixture.eventsOf(stream, 'FactsEmbedded');
  t.same(others, [], 'one part recorded');
  t.match(kept?.data, { model: MODEL, dimensions: DIMENSIONS });
  t.equal((kept?.data.vectors as unknown[]).length, 63);
  const half = await state();
  t.ok(half.status === 'processed' && !half.embeddedWith.includes(MODEL), 'the source stays processed, its model not complete: the task is what failed');
  t.same(await fixture.eventsOf(stream, 'SourceFailed'), [], 'a failure after decomposition fails the task, not the source');
  // The kept part's vectors are searched as they came (each a vector of the model, of its
  // dimension); deduplication waits for every fact's.
  await fixture.settle();
  t.equal(Number((await fixture.db.knex('fact_vectors').whereIn('fact_id', source.factIds).count<{ n: string }[]>('* as n'))[0]?.n), 63, 'the kept part is in the index');
  await dedup.run(fixture.contextFor(dedup, kept!));
  t.same(await fixture.eventsOf(stream, 'SourceFactsDeduplicated'), [], 'no deduplication on a part of the vectors');

  // The operator follows the server: the model's vectors are 768 long now. The retry would mix
  // 768 with the earlier part's 1,536 under one model: refused for good, before any model call.
  native = SHORTER;
  const calls = server.requests.embeddings;
  const shorter = stageOf(SHORTER);
  await t.rejects(
    shorter.run(fixture.contextFor(shorter, source.extracted, { attempts: 1 })),
    { name: 'PermanentJobError', message: /earlier vectors of text-embedding-shifting have 1536 dimensions, the embedder's have 768/ },
    'a part of another dimension than the earlier parts is refused',
  );
  t.equal(server.requests.embeddings, calls, 'nothing was embedded for it');
  t.equal((await fixture.eventsOf(stream, 'FactsEmbedded')).length, 1, 'nothing recorded');

  // Back at the model's dimension: the retry embeds and records only the facts still missing.
  native = DIMENSIONS;
  const before = server.requests.embeddings;
  const retry = stageOf(DIMENSIONS);
  await retry.run(fixture.contextFor(retry, source.extracted, { attempts: 1 }));
  t.equal(server.requests.embeddings - before, 1, 'one request: the seven facts still missing');
  const parts = await fixture.eventsOf(stream, 'FactsEmbedded');
  t.same(parts.map((part) => [part.data.dimensions, (part.data.vectors as unknown[]).length]), [[DIMENSIONS, 63], [DIMENSIONS, 7]]);
  const done = await state();
  t.ok(done.status === 'processed' && done.embeddedWith.includes(MODEL), 'every fact has its vector');
  await fixture.settle();
  await dedup.run(fixture.contextFor(dedup, parts[1]!));
  t.equal((await fixture.eventsOf(stream, 'SourceFactsDeduplicated')).length, 1, 'deduplicated once complete');
});
