/**
 * Report annotation at scale (issue 9): the time `annotate_report` takes for a report of
 * BENCH_SENTENCES (1000) sentences in a repository of BENCH_FACTS (100000) facts, with the
 * built-in models (local embedder, rule-based posture), on the embedded tier (PGlite, pgvector).
 *
 *   node --import=tsx bench/reports.ts            # prints a Markdown section to stdout
 *
 * The facts go straight into the `facts` read model and `fact_vectors` (then the HNSW index is
 * built), as bench/pipeline.ts's search part does: the bench times annotation, not ingestion.
 * Half the report's sentences restate a fact in other words, half are about nothing stored.
 * Three runs: the first annotation, a full re-annotation (`POST .../annotate`), and an edit of
 * 1% of the sentences (only those are annotated anew).
 */
import os from 'node:os';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { createHybridSearch, hybridSettingsOf } from '../src/search/hybrid.js';
import type { SearchIndex } from '../src/search/port.js';
import type { Embedder } from '../src/providers/embeddings/port.js';
import { createAnnotateReportStage } from '../src/pipeline/stages/annotateReport.js';
import type { JobContext, Stage } from '../src/pipeline/types.js';
import { streamName, type RecordedEvent } from '../src/eventstore/envelope.js';
import { registerUser, startTestService } from '../test/helpers/service.js';
import { envNumber, int, log, prng, secs } from './common.js';
import { loadFacts, syntheticFacts, type FactParts, type SeededBenchFact } from './seedFacts.js';

const sizes = { facts: envNumber('BENCH_FACTS', 100_000), sentences: envNumber('BENCH_SENTENCES', 1000), seed: envNumber('BENCH_SEED', 7) };

/** The same fact in other words (order and framing), at least 40 runes. */
const restated = (p: FactParts) => `In ${p.year}, in ${p.place}, ${p.first} ${p.last} ${p.verb} ${p.object}, the records say.`;
const unrelated = (random: () => number, index: number) =>
  `Sentence ${index} of the report talks about ${['weather', 'music', 'cooking', 'sailing', 'gardening'][Math.floor(random() * 5)]} and about nothing the repository holds.`;

async function main(): Promise<void> {
  const loadStart = os.loadavg();
  const service = await startTestService({ workers: false });
  try {
    const { context } = service;
    const knex = context.db.knex;
    const user = await registerUser(service, 'bench@example.org');
    const repositoryId = (await service.call('POST', '/api/v1/repositories', { token: user.token, body: { name: 'Reports at scale' } })).body.id as string;
    const embedder = context.embedder;
    if (!embedder) throw new Error('the bench needs the local embedder');

    const random = prng(sizes.seed);
    const facts = syntheticFacts(random, sizes.facts);
    await loadFacts(service, repositoryId, facts);

    const sentences = Array.from({ length: sizes.sentences }, (_, index) =>
      index % 2 === 0 ? restated((facts[Math.floor(random() * facts.length)] as SeededBenchFact).parts) : unrelated(random, index),
    );
    const reportsUrl = `/api/v1/repositories/${repositoryId}/reports`;
    const created = await service.call('POST', reportsUrl, { token: user.token, body: { title: 'Bench', text: sentences.join(' ') } });
    if (created.status !== 201) throw new Error(`report: ${created.status} ${JSON.stringify(created.body)}`);
    const reportId = created.body.id as string;

    const { reports } = context.config.providers;
    // Time spent in each port, to say where an annotation's time goes.
    const spent = { lexical: 0, knn: 0, embed: 0, posture: 0 };
    const timing = async <T>(key: keyof typeof spent, work: () => Promise<T>): Promise<T> => {
      const started = performance.now();
      try {
        return await work();
      } finally {
        spent[key] += performance.now() - started;
      }
    };
    const index = context.search;
    const timedIndex: SearchIndex = { ...index, search: (collection, query) => timing('lexical', () => index.search(collection, query)), knn: (collection, query) => timing('knn', () => index.knn(collection, query)), knnMany: (collection, queries) => timing('knn', () => index.knnMany(collection, queries)) };
    const timedEmbedder: Embedder = { modelId: embedder.modelId, dimensions: embedder.dimensions, embed: (texts, signal) => timing('embed', () => embedder.embed(texts, signal)) };
    const chat = context.chat;
    const timedChat = { ...chat, judgePostures: (input: Parameters<typeof chat.judgePostures>[0], signal?: AbortSignal) => timing('posture', () => chat.judgePostures(input, signal)) };
    const hybrid = createHybridSearch({ search: timedIndex, embedder: timedEmbedder, settings: hybridSettingsOf(context.config.search.hybrid) });
    const stage = createAnnotateReportStage({ store: context.store, knex, hybrid, chat: timedChat, settings: { ...reports }, maxAttempts: 3 });
    const timed = async (label: string): Promise<{ label: string; seconds: number; annotated: number; carried: number; facts: number; spent: string }> => {
      for (const key of Object.keys(spent) as Array<keyof typeof spent>) spent[key] = 0;
      const events = await context.store.readStream(streamName('report', reportId));
      const trigger = events.at(-1) as RecordedEvent;
      const started = performance.now();
      await stage.run(jobContext(stage, trigger, repositoryId));
      const seconds = (performance.now() - started) / 1000;
      const last = (await context.store.readStream(streamName('report', reportId))).at(-1) as RecordedEvent;
      const annotated = (last.data as { sentences: Array<{ carried: boolean; facts: unknown[] }> }).sentences;
      log(`${label}: ${secs(seconds)}`);
      // Sentences run 4 at a time: the port times add up to more than the wall time.
      const breakdown = (Object.keys(spent) as Array<keyof typeof spent>).map((key) => `${key} ${secs(spent[key] / 1000)}`).join(', ');
      return { label, seconds, spent: breakdown, annotated: annotated.length, carried: annotated.filter((sentence) => sentence.carried).length, facts: annotated.reduce((sum, sentence) => sum + sentence.facts.length, 0) };
    };
    const runs = [await timed('first annotation')];
    await service.call('POST', `${reportsUrl}/${reportId}/annotate`, { token: user.token });
    runs.push(await timed('full re-annotation'));
    const edited = sentences.map((sentence, index) => (index % 100 === 0 ? unrelated(random, index + 100_000) : sentence));
    await service.call('PUT', `${reportsUrl}/${reportId}`, { token: user.token, body: { text: edited.join(' ') } });
    runs.push(await timed('edit of 1% of the sentences'));

    const hits = runs[0]?.facts ?? 0;
    process.stdout.write(
      [
        `## Report annotation (bench/reports.ts, ${new Date().toISOString().slice(0, 10)})`,
        '',
        `${int(sizes.facts)} facts (local embedder, HNSW on PGlite), a report of ${int(sizes.sentences)} sentences (half restate a fact in other words, half match nothing), built-in models, \`providers.reports\` defaults. Load average at start ${loadStart.map((value) => value.toFixed(2)).join(' ')}, at end ${os.loadavg().map((value) => value.toFixed(2)).join(' ')} (${os.cpus().length} cores).`,
        '',
        '| run | time | sentences annotated | carried | facts linked | time in the ports (summed over 4 sentences at a time) |',
        '|---|---|---|---|---|---|',
        ...runs.map((run) => `| ${run.label} | ${secs(run.seconds)} | ${int(run.annotated)} | ${int(run.carried)} | ${int(run.facts)} | ${run.spent} |`),
        '',
        `Facts linked in the first run: ${int(hits)} (${(hits / Math.max(1, sizes.sentences / 2)).toFixed(2)} per restating sentence).`,
        '',
      ].join('\n'),
    );
  } finally {
    await service.close();
  }
}

function jobContext(stage: Stage, trigger: RecordedEvent, repositoryId: string): JobContext {
  const now = new Date().toISOString();
  return {
    job: {
      id: randomUUID(),
      kind: stage.kind,
      repositoryId,
      subjectId: stage.subjectOf(trigger) ?? '',
      sourceId: null,
      reportId: stage.subjectOf(trigger),
      triggerEventId: trigger.eventId,
      triggerPosition: trigger.globalPosition,
      correlationId: trigger.correlationId,
      state: 'running',
      attempts: 1,
      lastError: null,
      createdAt: now,
      updatedAt: now,
    },
    trigger,
    scheduled: false,
    signal: new AbortController().signal,
    actor: `system:${stage.kind}`,
    // The bench runs the stage by hand: no queue behind it.
    coverQueued: async () => 0,
  };
}

await main();
