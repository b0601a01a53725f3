/**
 * Summaries and syntheses benchmark (bench/RESULTS.md, "Summaries and syntheses"): the time
 * summarize_concepts and synthesize_concept spend beside the model's own time, on the embedded
 * tier (PGlite, every projection running) with the OpenAI-compatible client against the local
 * test model server answering every call after BENCH_LATENCY_MS (300 ms).
 *
 * BENCH_CONCEPTS concepts (10) get BENCH_FACTS_PER_CONCEPT facts each (45: two frozen slices of
 * 20 and an open one of 5). One summarize run, then one synthesis per concept, all sequential:
 * model time = calls × latency; overhead = wall time − model time (reading streams and read
 * models, planning, checking citations, appending, projecting).
 *
 *   node --import=tsx bench/summaries.ts
 */
import { performance } from 'node:perf_hooks';
import type { Test } from 'tap';
import { conceptDecider, conceptIdFor } from '../src/domain/concept/decider.js';
import { handleCommand } from '../src/eventstore/commandHandler.js';
import { streamName } from '../src/eventstore/envelope.js';
import { createOpenAIChatModel } from '../src/providers/llm/openai.js';
import { createSummarizeConceptsStage } from '../src/pipeline/stages/summarizeConcepts.js';
import { createSynthesizeConceptStage } from '../src/pipeline/stages/synthesizeConcept.js';
import { startOpenAIServer } from '../test/helpers/openaiServer.js';
import { openStageFixture, testMetadata } from '../test/pipeline/stageFixture.js';

const envNumber = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const concepts = envNumber('BENCH_CONCEPTS', 10);
const factsPerConcept = envNumber('BENCH_FACTS_PER_CONCEPT', 45);
const latencyMs = envNumber('BENCH_LATENCY_MS', 300);

const cleanups: Array<() => Promise<void> | void> = [];
// The stage fixture is written for tap tests and needs only their teardown: this stands in for it.
const harness = { teardown: (fn: () => Promise<void> | void) => cleanups.push(fn) } as unknown as Test;

const fixture = await openStageFixture(harness);
const repositoryId = await fixture.createRepository();
const server = await startOpenAIServer();
server.setStandingFault('chat', { delayMs: latencyMs });
const chat = createOpenAIChatModel({ baseUrl: server.baseUrl, model: 'bench-model', retry: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, perCallTimeoutMs: latencyMs * 20 } });

// The graph: facts of one source, each concept linked to its own facts (ConceptCreated + ConceptsExtracted as extraction records them).
const contents = Array.from({ length: concepts * factsPerConcept }, (_, i) => `Element ${Math.floor(i / factsPerConcept)} has measured property number ${i} of value ${i * 7}.`);
const source = await fixture.addSource(repositoryId, contents);
const conceptIds: string[] = [];
const links: Array<{ fact_id: string; concept_ids: string[] }> = [];
for (let c = 0; c < concepts; c++) {
  const id = conceptIdFor(repositoryId, `Element ${c}`, 'chemical');
  conceptIds.push(id);
  await handleCommand(fixture.store, streamName('concept', id), conceptDecider, { type: 'CreateConcept', canonicalName: `Element ${c}`, context: 'chemical', ontologyClass: null, aliases: [], sourceId: source.sourceId }, testMetadata(repositoryId));
  for (const factId of source.factIds.slice(c * factsPerConcept, (c + 1) * factsPerConcept)) links.push({ fact_id: factId, concept_ids: [id] });
}
// Straight to the store, as extract_concepts would record it (the source is not deduplicated here).
await fixture.store.append(
  streamName('source', source.sourceId),
  [{ type: 'ConceptsExtracted', data: { model_id: 'bench', promptset_hash: '', batch_index: 0, batch_count: 1, links }, metadata: testMetadata(repositoryId) }],
  'any',
);
await fixture.settle();

const summarize = createSummarizeConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, settings: { enabled: true, batch_size: 20, max_concepts_per_run: concepts, max_tokens: 600 } });
const synthesize = createSynthesizeConceptStage({
  store: fixture.store,
  knex: fixture.db.knex,
  chat,
  settings: { enabled: true, max_tokens: 10_000, thinking_level: 'low', max_images: 10, max_image_candidates: 50, max_related_concepts: 10, max_related_syntheses: 3 },
  summarization: { batchSize: 20 },
});

const measure = async (what: string, work: () => Promise<void>) => {
  const callsBefore = server.requests.chat;
  const started = performance.now();
  await work();
  const wallMs = performance.now() - started;
  const calls = server.requests.chat - callsBefore;
  const modelMs = calls * latencyMs;
  const overheadMs = wallMs - modelMs;
  console.log(`${what}: ${calls} model calls, wall ${wallMs.toFixed(0)} ms, model ${modelMs} ms, overhead ${overheadMs.toFixed(0)} ms = ${((overheadMs / modelMs) * 100).toFixed(1)} % of model time`);
};

await measure('summarize_concepts', () => summarize.run(fixture.scheduledContextFor(summarize, repositoryId)));
await fixture.settle();
await measure('synthesize_concept', async () => {
  for (const id of conceptIds) {
    const context = fixture.scheduledContextFor(synthesize, repositoryId);
    await synthesize.run({ ...context, job: { ...context.job, subjectId: id } });
  }
});

await server.close();
for (const cleanup of cleanups.reverse()) await cleanup();
