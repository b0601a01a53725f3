import { randomUUID } from 'node:crypto';
import t from 'tap';
import { conceptDecider, conceptIdFor } from '../../../src/domain/concept/decider.js';
import { citedFactIds } from '../../../src/domain/concept/summaries.js';
import { factDecider } from '../../../src/domain/fact/decider.js';
import { handleCommand } from '../../../src/eventstore/commandHandler.js';
import { streamName, type RecordedEvent } from '../../../src/eventstore/envelope.js';
import { createLocalChatModel } from '../../../src/providers/llm/local.js';
import { createOpenAIChatModel } from '../../../src/providers/llm/openai.js';
import type { ChatModel, ConceptCandidate, SliceSummaryInput, SynthesisInput } from '../../../src/providers/llm/port.js';
import { createDeduplicateFactsStage } from '../../../src/pipeline/stages/deduplicateFacts.js';
import { createExtractConceptsStage } from '../../../src/pipeline/stages/extractConcepts.js';
import { createSummarizeConceptsStage, staleConcepts } from '../../../src/pipeline/stages/summarizeConcepts.js';
import { createRefreshConceptRelationsStage } from '../../../src/pipeline/stages/refreshConceptRelations.js';
import { createSynthesizeConceptStage } from '../../../src/pipeline/stages/synthesizeConcept.js';
import type { EventStore, ReadStreamOptions } from '../../../src/eventstore/port.js';
import { JobRepository } from '../../../src/pipeline/jobs.js';
import { PermanentJobError } from '../../../src/pipeline/types.js';
import { startOpenAIServer } from '../../helpers/openaiServer.js';
import { openStageFixture, testMetadata, type StageFixture } from '../stageFixture.js';
import { openMigratedDatabase } from '../../helpers/migratedDatabase.js';

t.setTimeout(300_000);

const synthesisSettings = {
  enabled: true,
  max_tokens: 10_000,
  thinking_level: 'low' as const,
  max_images: 10,
  max_image_candidates: 50,
  max_related_concepts: 10,
  max_related_syntheses: 3,
};
const summarization = { enabled: true, batch_size: 20, max_concepts_per_run: 40, max_tokens: 600 };

/** The local model, counting its summary and synthesis calls. */
function countingChat(base: ChatModel = createLocalChatModel()) {
  const calls = { summaries: [] as SliceSummaryInput[], syntheses: [] as SynthesisInput[] };
  const chat: ChatModel = {
    ...base,
    async summarizeFacts(input, signal) {
      calls.summaries.push(input);
      return base.summarizeFacts(input, signal);
    },
    async synthesizeConcept(input, signal) {
      calls.syntheses.push(input);
      return base.synthesizeConcept(input, signal);
    },
  };
  return { chat, calls };
}

type ExtractedConcept = ConceptCandidate;

/** Every fact linked to Marie Curie, and the first also to Paris. */
const marieAndParis = (factIds: string[]): ExtractedConcept[] => [
  { canonicalName: 'Marie Curie', context: 'person', aliases: ['Curie'], factIds },
  { canonicalName: 'Paris', context: 'location', aliases: [], factIds: factIds.slice(0, 1) },
];

/** A source whose facts are deduplicated and linked to the concepts `linked` names (Marie Curie and Paris unless told); returns the ConceptsExtracted trigger. */
async function linkedSource(fixture: StageFixture, repositoryId: string, contents: string[], linked: (factIds: string[]) => ExtractedConcept[] = marieAndParis) {
  const dedup = createDeduplicateFactsStage({ store: fixture.store, knex: fixture.db.knex, search: fixture.search, embedderModelId: null, threshold: 0.94, catchupMaxAgeMs: 3_600_000 });
  const source = await fixture.addSource(repositoryId, contents);
  await dedup.run(fixture.contextFor(dedup, source.extracted));
  const deduplicated = await fixture.last(streamName('source', source.sourceId), 'SourceFactsDeduplicated');
  await fixture.settle();
  const chat: ChatModel = {
    ...createLocalChatModel(),
    async extractConcepts(input) {
      return linked(input.facts.map((fact) => fact.id));
    },
  };
  const extract = createExtractConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, batchSize: 100, concurrency: 1, maxAttempts: 3 });
  await extract.run(fixture.contextFor(extract, deduplicated));
  await fixture.settle();
  const trigger = await fixture.last(streamName('source', source.sourceId), 'ConceptsExtracted');
  return { ...source, trigger };
}

/**
 * The store, counting the concept streams read (each a concept planned once more) and the appends
 * to concept streams; `onConceptAppend` hears each such append's streams once it is stored.
 */
function countingStore(base: EventStore, onConceptAppend: (streamIds: readonly string[]) => void = () => {}) {
  const conceptReads: string[] = [];
  const appends: string[][] = [];
  const concepts = (streamIds: readonly string[]) => streamIds.filter((streamId) => streamId.startsWith('concept-'));
  const store: EventStore = Object.create(base, {
    readStream: {
      value: (streamId: string, options?: ReadStreamOptions) => {
        conceptReads.push(...concepts([streamId]));
        return base.readStream(streamId, options);
      },
    },
    readStreams: {
      value: (...args: Parameters<EventStore['readStreams']>) => {
        conceptReads.push(...concepts(args[0]));
        return base.readStreams(...args);
      },
    },
    append: {
      value: async (...args: Parameters<EventStore['append']>) => {
        const streams = concepts([args[0]]);
        if (streams.length > 0) appends.push(streams);
        const result = await base.append(...args);
        if (streams.length > 0) onConceptAppend(streams);
        return result;
      },
    },
    appendToStreams: {
      value: async (writes: Parameters<EventStore['appendToStreams']>[0]) => {
        const streams = concepts(writes.map((write) => write.streamId));
        if (streams.length > 0) appends.push(streams);
        const outcomes = await base.appendToStreams(writes);
        if (streams.length > 0) onConceptAppend(streams);
        return outcomes;
      },
    },
  });
  return { store, conceptReads, appends };
}

const factsAbout = (from: number, count: number) =>
  Array.from({ length: count }, (_, i) => `Marie Curie wrote research note number ${from + i} about radioactivity in ${1890 + from + i}.`);

async function slicesOf(fixture: StageFixture, conceptId: string) {
  const rows: Array<{ slice_number: number; is_open: boolean; fact_ids: string[]; content: string; reason: string }> = await fixture.db
    .knex('concept_summaries')
    .where({ concept_id: conceptId })
    .orderBy('slice_number')
    .select('slice_number', 'is_open', 'fact_ids', 'content', 'reason');
  return rows;
}

t.test('summarize_concepts: slices freeze at exactly 20 facts, cite only their own facts, and a synthesis follows them', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const marie = conceptIdFor(repositoryId, 'Marie Curie', 'person');
  const { chat, calls } = countingChat();
  const summarize = createSummarizeConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, settings: summarization });
  const synthesize = createSynthesizeConceptStage({ store: fixture.store, knex: fixture.db.knex, chat, settings: synthesisSettings, summarization: { batchSize: 20 } });
  t.same(summarize.triggers, ['ConceptsExtracted', 'FactMergedInto', 'ConceptMergedInto', 'FactRetracted']);

  const first = await linkedSource(fixture, repositoryId, factsAbout(1, 25));
  t.same(await staleConcepts(fixture.db.knex, repositoryId, 40), [marie, conceptIdFor(repositoryId, 'Paris', 'location')].sort());
  await summarize.run(fixture.contextFor(summarize, first.trigger));
  await fixture.settle();
  let slices = await slicesOf(fixture, marie);
  t.same(slices.map((slice) => [slice.slice_number, slice.is_open, slice.fact_ids.length]), [[1, false, 20], [2, true, 5]], 'one frozen slice of exactly 20, one open');
  t.same([...slices[0].fact_ids, ...slices[1].fact_ids].sort(), [...first.factIds].sort(), 'every fact in exactly one slice');
  for (const slice of slices) {
    const cited = citedFactIds(slice.content);
    t.ok(cited.length > 0 && cited.every((id) => slice.fact_ids.includes(id)), `slice ${slice.slice_number} cites only its own facts`);
  }
  t.match(slices[0].content, /^\[Marie Curie wrote research note number \d+ .*\]\(<fact:[0-9a-f-]{36}>\)/, 'extractive: the facts themselves, cited');
  t.same(await staleConcepts(fixture.db.knex, repositoryId, 40), [], 'nothing stale after the run');

  const frozenWrites = (await fixture.eventsOf(streamName('concept', marie), 'SummarySliceWritten')).filter((event) => event.data.slice_number === 1).length;
  const trigger = await fixture.last(streamName('concept', marie), 'SummarySliceWritten');
  await synthesize.run(fixture.contextFor(synthesize, trigger));
  const [synthesized] = await fixture.eventsOf(streamName('concept', marie), 'ConceptSynthesized');
  t.ok(synthesized, 'a synthesis is made');
  const cited = citedFactIds(String(synthesized.data.content));
  t.ok(cited.length > 0 && cited.every((id) => first.factIds.includes(id)), 'the synthesis cites only facts of its concept');
  t.equal(calls.syntheses.length, 1);
  t.equal(calls.syntheses[0].summaries.length, 2, 'made from both slices');
  await synthesize.run(fixture.contextFor(synthesize, trigger));
  t.equal(calls.syntheses.length, 1, 'the same inputs are not synthesised again');

  // A second source adds 15 facts: the open slice fills to exactly 20 and freezes; slice 1 is not rewritten.
  const second = await linkedSource(fixture, repositoryId, factsAbout(100, 15));
  // Debounced: its facts are not summarised yet, so a synthesis now would be stale.
  await synthesize.run(fixture.contextFor(synthesize, trigger));
  t.equal(calls.syntheses.length, 1, 'no synthesis while slices are due');
  const summaryCalls = calls.summaries.length;
  await summarize.run(fixture.contextFor(summarize, second.trigger));
  await fixture.settle();
  slices = await slicesOf(fixture, marie);
  t.same(slices.map((slice) => [slice.slice_number, slice.is_open, slice.fact_ids.length]), [[1, false, 20], [2, false, 20]]);
  t.equal(calls.summaries.length, summaryCalls + 2, 'only the grown slice of each concept is asked for (Marie Curie slice 2, Paris slice 1)');
  t.equal(
    (await fixture.eventsOf(streamName('concept', marie), 'SummarySliceWritten')).filter((event) => event.data.slice_number === 1).length,
    frozenWrites,
    'the frozen slice is never rewritten',
  );
  await synthesize.run(fixture.contextFor(synthesize, trigger));
  t.equal(calls.syntheses.length, 1, 'the job of an older slice change leaves the synthesis to the job of the last one');
  await synthesize.run(fixture.contextFor(synthesize, await fixture.last(streamName('concept', marie), 'SummarySliceWritten')));
  const syntheses = await fixture.eventsOf(streamName('concept', marie), 'ConceptSynthesized');
  t.equal(syntheses.length, 2, 'the new facts re-made the synthesis');
  t.not(syntheses[1].data.inputs_hash, syntheses[0].data.inputs_hash);
  t.not(syntheses[1].data.content, syntheses[0].data.content, 'the synthesis changed');
  t.ok(citedFactIds(String(syntheses[1].data.content)).some((id) => second.factIds.includes(id)), 'and cites facts of the new source');

  // Asked for: made again from the same inputs.
  await handleCommand(fixture.store, streamName('concept', marie), conceptDecider, { type: 'RequestResynthesis', reason: 'test' }, testMetadata(repositoryId));
  await synthesize.run(fixture.contextFor(synthesize, await fixture.last(streamName('concept', marie), 'ConceptResynthesisRequested')));
  const again = await fixture.last(streamName('concept', marie), 'ConceptSynthesized');
  t.match(again.data, { reason: 'requested', inputs_hash: syntheses[1].data.inputs_hash });
  await fixture.settle();
  t.match(await fixture.db.knex('concept_syntheses').where({ concept_id: marie }).first('reason', 'inputs_hash'), { reason: 'requested' });
});

t.test('summarize_concepts: facts leaving a concept rewrite the slices that covered them, as events', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const marie = conceptIdFor(repositoryId, 'Marie Curie', 'person');
  const { chat } = countingChat();
  const summarize = createSummarizeConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, settings: { ...summarization, batch_size: 3 } });
  const source = await linkedSource(fixture, repositoryId, factsAbout(1, 7));
  await summarize.run(fixture.contextFor(summarize, source.trigger));
  await fixture.settle();
  const before = await slicesOf(fixture, marie);
  t.same(before.map((slice) => [slice.slice_number, slice.is_open, slice.fact_ids.length]), [[1, false, 3], [2, false, 3], [3, true, 1]]);

  // Two facts of the first slice merge away (a catch-up merge into a fact of the same concept).
  const [loserA, loserB] = before[0].fact_ids;
  const survivor = before[2].fact_ids[0];
  for (const loser of [loserA, loserB]) {
    await handleCommand(fixture.store, streamName('fact', loser), factDecider, { type: 'MergeFact', survivorId: survivor, similarity: 0.99, sourceId: null, catchup: true }, testMetadata(repositoryId));
  }
  await fixture.settle();
  t.ok((await staleConcepts(fixture.db.knex, repositoryId, 40)).includes(marie), 'Marie Curie lost facts: stale');
  // A resynthesis asked for before the slices are rewritten is made from the slices' facts that are still hers.
  await handleCommand(fixture.store, streamName('concept', marie), conceptDecider, { type: 'RequestResynthesis', reason: 'asked' }, testMetadata(repositoryId));
  await fixture.settle();
  const synthesisCalls = countingChat();
  const synthesize = createSynthesizeConceptStage({ store: fixture.store, knex: fixture.db.knex, chat: synthesisCalls.chat, settings: synthesisSettings, summarization: { batchSize: 3 } });
  const asked = await fixture.last(streamName('concept', marie), 'ConceptResynthesisRequested');
  t.same(await synthesize.runMany?.([fixture.contextFor(synthesize, asked)], new AbortController().signal), [{ ok: true }]);
  t.same(
    synthesisCalls.calls.syntheses[0]?.facts.map((fact) => fact.id),
    before.flatMap((slice) => slice.fact_ids).filter((id) => id !== loserA && id !== loserB),
    'the synthesis is given the slices’ facts but the two that merged away',
  );
  const merged = await fixture.last(streamName('fact', loserB), 'FactMergedInto');
  t.equal(summarize.subjectOf(merged), repositoryId, 'a catch-up merge triggers a run');
  await summarize.run(fixture.contextFor(summarize, merged));
  await fixture.settle();
  const after = await slicesOf(fixture, marie);
  t.same(after.map((slice) => [slice.slice_number, slice.is_open, slice.fact_ids.length]), [[1, false, 3], [2, true, 2]], 'five facts left: one frozen slice, one open');
  t.notOk(after.some((slice) => slice.fact_ids.includes(loserA) || slice.fact_ids.includes(loserB) || /<fact:(loserA|loserB)>/.test(slice.content)), 'the merged facts are gone');
  t.ok(after.every((slice) => citedFactIds(slice.content).every((id) => slice.fact_ids.includes(id))));
  const events = await fixture.eventsOf(streamName('concept', marie));
  const tail = events.slice(-3).map((event) => [event.type, event.data.slice_number, event.data.reason]);
  t.same(tail, [['SummarySliceRemoved', 3, 'facts_removed'], ['SummarySliceWritten', 1, 'facts_removed'], ['SummarySliceWritten', 2, 'facts_removed']], 'the history says which slices changed and why');
  t.equal(events.at(-1)?.actor, 'system:summarize_concepts');
});

t.test('summarize_concepts: an answer citing a fact of another slice or repository is asked again, then refused and never stored', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const other = await fixture.createRepository();
  const foreign = await fixture.addSource(other, ['Pierre Curie was born in Paris in 1859.']);
  const marie = conceptIdFor(repositoryId, 'Marie Curie', 'person');
  const source = await linkedSource(fixture, repositoryId, factsAbout(1, 4));

  let answer = (document: Record<string, unknown>): unknown => {
    const facts = (document.slice as { facts: Array<{ id: string }> }).facts;
    return { content: `[a](<fact:${facts[0].id}>) [b](<fact:${foreign.factIds[0]}>)` };
  };
  const server = await startOpenAIServer({ chat: (document) => answer(document) });
  t.teardown(() => server.close());
  const chat = createOpenAIChatModel({ baseUrl: server.baseUrl, model: 'test-model', retry: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, perCallTimeoutMs: 5_000 } });
  const summarize = createSummarizeConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, settings: { ...summarization, batch_size: 2 } });
  const head = await fixture.store.headPosition();
  await t.rejects(summarize.run(fixture.contextFor(summarize, source.trigger)), PermanentJobError);
  const error = await summarize.run(fixture.contextFor(summarize, source.trigger)).then(() => null, (caught: unknown) => caught as Error);
  t.match(error?.message, new RegExp(`concept ${marie} slice 1: the content cites facts outside its input: ${foreign.factIds[0]}`));
  t.equal(await fixture.store.headPosition(), head, 'nothing is stored');
  const asked = server.bodies.filter((received) => received.path === 'chat' && JSON.stringify(received.body).includes(marie));
  t.equal(asked.length, 8, "in each run each of Marie Curie's two slices (asked side by side) was asked twice; the first refused is named");

  // Another slice's fact is refused the same way.
  answer = (document) => {
    const facts = (document.slice as { facts: Array<{ id: string }> }).facts;
    const outside = source.factIds.find((id) => !facts.some((fact) => fact.id === id)) ?? 'none';
    return { content: `[a](<fact:${facts[0].id}>) [b](<fact:${outside}>)` };
  };
  await t.rejects(summarize.run(fixture.contextFor(summarize, source.trigger)), /cites facts outside its input/);
  t.same(await fixture.eventsOf(streamName('concept', marie), 'SummarySliceWritten'), []);

  // A model that cites its slice's facts only is stored.
  answer = (document) => ({ content: (document.slice as { facts: Array<{ id: string }> }).facts.map((fact) => `[x](<fact:${fact.id}>)`).join(' ') });
  await summarize.run(fixture.contextFor(summarize, source.trigger));
  t.equal((await fixture.eventsOf(streamName('concept', marie), 'SummarySliceWritten')).length, 2);
});

t.test('summarize_concepts waits for the read models to apply its trigger, and leaves the run to the schedule when they stay behind', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const summarize = createSummarizeConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat: createLocalChatModel(), settings: summarization, readModelWaitMs: 300 });
  const source = await linkedSource(fixture, repositoryId, factsAbout(1, 2));
  const ahead: RecordedEvent = { ...source.trigger, globalPosition: source.trigger.globalPosition + 1_000 };
  await summarize.run(fixture.contextFor(summarize, ahead));
  t.same(await fixture.eventsOfType('SummarySliceWritten'), [], 'a trigger the read models never applied: nothing decided from them');
  await summarize.run(fixture.scheduledContextFor(summarize, repositoryId));
  t.equal((await fixture.eventsOfType('SummarySliceWritten')).length, 2, 'a scheduled run does not wait');
});

t.test('summarize_concepts: overlapping runs ask the model once per slice', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const { chat, calls } = countingChat();
  const summarize = createSummarizeConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, settings: summarization });
  const source = await linkedSource(fixture, repositoryId, factsAbout(1, 25));
  await Promise.all([summarize.run(fixture.contextFor(summarize, source.trigger)), summarize.run(fixture.contextFor(summarize, source.trigger))]);
  t.equal(calls.summaries.length, 3, 'Marie Curie slices 1 and 2, Paris slice 1: once each');
  t.equal((await fixture.eventsOfType('SummarySliceWritten')).length, 3);
});

t.test('summarize_concepts: jobs that come while another carries the work hand it their triggers; the next job waits for the slices written to be applied', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const { chat, calls } = countingChat();
  const { store, conceptReads } = countingStore(fixture.store);
  // Pages of one concept: Marie Curie and Paris are stale.
  const summarize = createSummarizeConceptsStage({ store, knex: fixture.db.knex, chat, settings: { ...summarization, max_concepts_per_run: 1 } });
  const source = await linkedSource(fixture, repositoryId, factsAbout(1, 25));
  const contexts = Array.from({ length: 5 }, () => fixture.contextFor(summarize, source.trigger));
  await Promise.all(contexts.map((context) => summarize.run(context)));
  t.equal(conceptReads.length, 2, 'five jobs at once: one carries the work and plans both concepts, a search each; the four others hand it their triggers');
  t.equal(calls.summaries.length, 3, 'Marie Curie slices 1 and 2, Paris slice 1: once each');
  await summarize.run(fixture.contextFor(summarize, source.trigger));
  t.equal(conceptReads.length, 2, 'the next job waits for those slices to be applied and plans nothing again');
  await fixture.settle();
  t.same(await staleConcepts(fixture.db.knex, repositoryId, 40), [], 'nothing stale after the runs');
});

t.test('summarize_concepts: a run ends the queued jobs whose triggers the read models had applied when it searched, and no others', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const elsewhere = await fixture.createRepository();
  const summarize = createSummarizeConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat: createLocalChatModel(), settings: summarization });
  const first = await linkedSource(fixture, repositoryId, factsAbout(1, 3));
  const second = await linkedSource(fixture, repositoryId, factsAbout(4, 3));
  const jobs = new JobRepository(fixture.db.knex);
  const queued = (subjectId: string, triggerPosition: number) => ({
    kind: 'summarize_concepts',
    subjectId,
    repositoryId: subjectId,
    triggerEventId: randomUUID(),
    triggerPosition,
    correlationId: null,
  });
  const head = await fixture.store.headPosition();
  // The pages' jobs still queued behind the one that runs, a scheduled one, a trigger the read
  // models have not applied yet, and another repository's.
  const covered = [queued(repositoryId, first.trigger.globalPosition), queued(repositoryId, second.trigger.globalPosition), queued(repositoryId, 0)];
  const ahead = queued(repositoryId, head + 1_000);
  const otherRepository = queued(elsewhere, second.trigger.globalPosition);
  const ids = await jobs.enqueueMany([...covered, ahead, otherRepository]);
  await summarize.run(fixture.contextFor(summarize, first.trigger));
  t.equal((await fixture.eventsOfType('SummarySliceWritten')).length, 2, 'the run summarised Marie Curie and Paris, both pages’ facts');
  const states = await Promise.all(ids.map(async ({ id }) => (await jobs.get(id))?.state));
  t.same(states, ['succeeded', 'succeeded', 'succeeded', 'queued', 'queued'], 'covered: the applied triggers and the scheduled run; left: the trigger ahead, the other repository');
  t.match(await jobs.get(ids[0].id), { attempts: 0 }, 'never claimed: ended, not run');
});

t.test('summarize_concepts: a page of concepts is read in one statement and written in one append', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const { store, conceptReads, appends } = countingStore(fixture.store);
  const summarize = createSummarizeConceptsStage({ store, knex: fixture.db.knex, chat: createLocalChatModel(), settings: summarization });
  const source = await linkedSource(fixture, repositoryId, factsAbout(1, 3));
  await summarize.run(fixture.contextFor(summarize, source.trigger));
  const both = [conceptIdFor(repositoryId, 'Marie Curie', 'person'), conceptIdFor(repositoryId, 'Paris', 'location')].map((id) => streamName('concept', id)).sort();
  t.same([...conceptReads].sort(), both, 'each concept read once');
  t.same(appends.map((streams) => [...streams].sort()), [both], 'both concepts slices in one append');
});

t.test('synthesize_concept: jobs run together read their concepts once and append once, each with its own causation; a refused synthesis fails its job alone', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const marie = conceptIdFor(repositoryId, 'Marie Curie', 'person');
  const paris = conceptIdFor(repositoryId, 'Paris', 'location');
  const summarize = createSummarizeConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat: createLocalChatModel(), settings: summarization });
  const source = await linkedSource(fixture, repositoryId, factsAbout(1, 3));
  await summarize.run(fixture.contextFor(summarize, source.trigger));
  const relations = createRefreshConceptRelationsStage({ store: fixture.store, knex: fixture.db.knex });
  await relations.run(fixture.scheduledContextFor(relations, repositoryId));
  await fixture.settle();
  const { store, conceptReads, appends } = countingStore(fixture.store);
  const local = createLocalChatModel();
  const relatedAsked = new Map<string, string[]>();
  const chat: ChatModel = {
    ...local,
    async synthesizeConcept(input, signal) {
      relatedAsked.set(input.concept.id, input.relatedConcepts.map((concept) => concept.id));
      // Paris's answers cite a fact it was not given: refused twice.
      if (input.concept.id === paris) return { content: 'See [x](<fact:not-a-fact>).', imageFactIds: [] };
      return local.synthesizeConcept(input, signal);
    },
  };
  const synthesize = createSynthesizeConceptStage({ store, knex: fixture.db.knex, chat, settings: synthesisSettings, summarization: { batchSize: 20 } });
  const triggers = [await fixture.last(streamName('concept', marie), 'SummarySliceWritten'), await fixture.last(streamName('concept', paris), 'SummarySliceWritten')];
  const contexts = triggers.map((trigger) => fixture.contextFor(synthesize, trigger));
  const outcomes = await Promise.all((await synthesize.runMany?.(contexts, new AbortController().signal)) ?? []);
  t.same(outcomes?.[0], { ok: true }, 'Marie Curie: synthesised');
  t.ok(outcomes?.[1] && !outcomes[1].ok && outcomes[1].error instanceof PermanentJobError, 'Paris: its job fails with the refusal');
  t.same([...conceptReads].sort(), [streamName('concept', marie), streamName('concept', paris)].sort(), 'both concepts read in one statement');
  t.same(appends, [[streamName('concept', marie)]], 'one append, of the synthesis made');
  t.same(Object.fromEntries(relatedAsked), { [marie]: [paris], [paris]: [marie] }, 'each concept is given its own related concepts');
  const [synthesized] = await fixture.eventsOf(streamName('concept', marie), 'ConceptSynthesized');
  t.equal(synthesized?.causationId, triggers[0].eventId, "the synthesis is caused by its own job's trigger");
  t.same(await fixture.eventsOf(streamName('concept', paris), 'ConceptSynthesized'), [], 'nothing recorded for Paris');
});

t.test("synthesize_concept: of a concept's jobs in a group only the latest trigger's decides; the others succeed without reading", async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const marie = conceptIdFor(repositoryId, 'Marie Curie', 'person');
  const paris = conceptIdFor(repositoryId, 'Paris', 'location');
  const summarize = createSummarizeConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat: createLocalChatModel(), settings: summarization });
  // Two pages, each summarised: Marie Curie's slice is written twice, Paris's twice.
  for (const [from, count] of [[1, 3], [4, 3]]) {
    const source = await linkedSource(fixture, repositoryId, factsAbout(from, count));
    await summarize.run(fixture.contextFor(summarize, source.trigger));
    await fixture.settle();
  }
  const { chat, calls } = countingChat();
  const { store, conceptReads } = countingStore(fixture.store);
  const synthesize = createSynthesizeConceptStage({ store, knex: fixture.db.knex, chat, settings: synthesisSettings, summarization: { batchSize: 20 } });
  const marieChanges = await fixture.eventsOf(streamName('concept', marie), 'SummarySliceWritten');
  const parisChanges = await fixture.eventsOf(streamName('concept', paris), 'SummarySliceWritten');
  t.equal(marieChanges.length, 2);
  t.equal(parisChanges.length, 2);
  // In claim order: Marie's first change, a scheduled run of hers, her last change; Paris's first change only (its last is in a later group).
  const contexts = [
    fixture.contextFor(synthesize, marieChanges[0]),
    fixture.scheduledContextFor(synthesize, repositoryId),
    fixture.contextFor(synthesize, marieChanges[1]),
    fixture.contextFor(synthesize, parisChanges[0]),
  ];
  contexts[1] = { ...contexts[1], job: { ...contexts[1].job, subjectId: marie } };
  const outcomes = await synthesize.runMany?.(contexts, new AbortController().signal);
  t.same(outcomes, contexts.map(() => ({ ok: true })), 'every job succeeds');
  t.same(calls.syntheses.map((input) => input.concept.id), [marie], 'one synthesis: Marie Curie’s, by her last change; Paris’s is left to the job of its last change');
  t.same([...conceptReads].sort(), [streamName('concept', marie), streamName('concept', paris)].sort(), 'each concept read once, in one statement');
  const [synthesized, ...more] = await fixture.eventsOf(streamName('concept', marie), 'ConceptSynthesized');
  t.equal(more.length, 0);
  t.equal(synthesized?.causationId, marieChanges[1].eventId, 'made by the job of the latest trigger');
});

t.test('summarize_concepts: the concepts of a page and their slices are summarised side by side, at most `concurrency` at once', async (t) => {
  // A subtest each, so that the first's database is given back (and kept) before the second opens one.
  for (const concurrency of [1, 8]) await t.test(`concurrency ${concurrency}`, async (t) => {
    const fixture = await openStageFixture(t);
    const repositoryId = await fixture.createRepository();
    const local = createLocalChatModel();
    let inFlight = 0;
    let most = 0;
    const chat: ChatModel = {
      ...local,
      async summarizeFacts(input, signal) {
        inFlight += 1;
        most = Math.max(most, inFlight);
        await new Promise((resolve) => setTimeout(resolve, 50));
        inFlight -= 1;
        return local.summarizeFacts(input, signal);
      },
    };
    const summarize = createSummarizeConceptsStage({ store: fixture.store, knex: fixture.db.knex, chat, settings: summarization, concurrency });
    const source = await linkedSource(fixture, repositoryId, factsAbout(1, 25));
    await summarize.run(fixture.contextFor(summarize, source.trigger));
    t.equal(most, Math.min(concurrency, 3), `concurrency ${concurrency}: Marie Curie's two slices and Paris's first ${concurrency > 1 ? 'together' : 'one after the other'}`);
    t.equal((await fixture.eventsOfType('SummarySliceWritten')).length, 3, 'every slice written');
  });
});

t.test('summarize_concepts: a concept that became stale is taken up as soon as a place is free, not when the slowest concept in the model is done', async (t) => {
  const fixture = await openStageFixture(t);
  const repositoryId = await fixture.createRepository();
  const marie = conceptIdFor(repositoryId, 'Marie Curie', 'person');
  const pierre = conceptIdFor(repositoryId, 'Pierre Curie', 'person');
  const local = createLocalChatModel();
  let releaseMarie = () => {};
  const marieHeld = new Promise<void>((resolve) => (releaseMarie = resolve));
  const asked: string[] = [];
  const chat: ChatModel = {
    ...local,
    async summarizeFacts(input, signal) {
      asked.push(input.concept.canonicalName);
      // Marie Curie's answer is slow: it comes only once Pierre Curie's slices are written.
      if (input.concept.id === marie) await marieHeld;
      return local.summarizeFacts(input, signal);
    },
  };
  let pierreWritten = () => {};
  const pierreInStore = new Promise<void>((resolve) => (pierreWritten = resolve));
  const { store, appends } = countingStore(fixture.store, (streamIds) => {
    if (streamIds.includes(streamName('concept', pierre))) pierreWritten();
  });
  const summarize = createSummarizeConceptsStage({ store, knex: fixture.db.knex, chat, settings: summarization, concurrency: 2 });
  const first = await linkedSource(fixture, repositoryId, factsAbout(1, 3));
  const carrying = summarize.run(fixture.contextFor(summarize, first.trigger));
  const second = await linkedSource(fixture, repositoryId, ['Pierre Curie shared the 1903 Nobel Prize in Physics.'], (factIds) => [
    { canonicalName: 'Pierre Curie', context: 'person', aliases: [], factIds },
  ]);
  await summarize.run(fixture.contextFor(summarize, second.trigger));
  await pierreInStore;
  t.same(await fixture.eventsOf(streamName('concept', marie), 'SummarySliceWritten'), [], "Pierre Curie's slices are written while Marie Curie's answer is still awaited");
  releaseMarie();
  await carrying;
  await fixture.settle();
  t.equal((await fixture.eventsOf(streamName('concept', marie), 'SummarySliceWritten')).length, 1, "then Marie Curie's");
  t.same([...asked].sort(), ['Marie Curie', 'Paris', 'Pierre Curie'], 'each slice asked for once');
  t.same(await staleConcepts(fixture.db.knex, repositoryId, 40), [], 'nothing stale after the runs');
  t.ok(appends.length >= 2, 'written in more than one append: the slow concept did not hold the others back');
});

t.test('staleConcepts: the search looks at the concepts a window at a time and finds, in id order, what one pass over them all would', async (t) => {
  // A kept migrated database (as the stage fixtures take), not a new PGlite migrated here.
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const repositoryId = 'repo-windows';
  const now = new Date().toISOString();
  // 130 concepts, each with a fact of its own; every seventh has no slice covering it, and c050's
  // slices also cover a fact that is no longer linked to it. c007 is merged (never stale), c014
  // of another repository.
  const ids = Array.from({ length: 130 }, (_, i) => `c${String(i).padStart(3, '0')}`);
  await db.knex('concepts').insert(
    ids.map((id, i) => ({ id, repository_id: id === 'c014' ? 'repo-other' : repositoryId, canonical_name: id, name_key: id, context: 'general', status: id === 'c007' ? 'merged' : 'active', created_at: now, updated_at: now, fact_count: 1 + i })),
  );
  await db.knex('facts').insert([...ids, 'gone'].map((id) => ({ id: `f-${id}`, repository_id: repositoryId, content: `Fact ${id}.`, content_hash: id, status: 'stable', created_at: now })));
  await db.knex('fact_concepts').insert(ids.map((id) => ({ fact_id: `f-${id}`, concept_id: id, repository_id: repositoryId })));
  const covered = ids.filter((_, i) => i % 7 !== 0);
  await db.knex('concept_summary_facts').insert([
    ...covered.map((id) => ({ concept_id: id, fact_id: `f-${id}`, repository_id: repositoryId, slice_number: 1 })),
    { concept_id: 'c050', fact_id: 'f-gone', repository_id: repositoryId, slice_number: 1 },
  ]);
  const expected = ids.filter((id, i) => (i % 7 === 0 || id === 'c050') && id !== 'c007' && id !== 'c014').sort();
  t.same([expected.length, expected.at(-1)], [18, 'c126'], 'stale concepts in every window of 50');
  t.same(await staleConcepts(db.knex, repositoryId, 100), expected, 'all of them, in id order');
  t.same(await staleConcepts(db.knex, repositoryId, 5), expected.slice(0, 5), 'the first page');
  t.same(await staleConcepts(db.knex, repositoryId, 5, expected[4]), expected.slice(5, 10), 'the next page, after the last id found');
  t.same(await staleConcepts(db.knex, repositoryId, 100, 'c049'), expected.filter((id) => id > 'c049'), 'a page that starts inside a window');
  t.same(
    await staleConcepts(db.knex, repositoryId, 100, '', ['c000', 'c056', 'c126']),
    expected.filter((id) => !['c000', 'c056', 'c126'].includes(id)),
    'leaving out the concepts being summarised',
  );
  t.same(await staleConcepts(db.knex, repositoryId, 100, 'c126'), [], 'nothing after the last');
});
