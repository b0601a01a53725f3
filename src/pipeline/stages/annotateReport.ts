import type { Knex } from 'knex';
import { reportDecider, type AnnotatedFact, type AnnotatedSentence, type AnnotationSettings, type LiveReport, type ReportCommand, type ReportState } from '../../domain/report/decider.js';
import { sentenceRunes, splitSentences, type ReportSentence } from '../../domain/report/sentences.js';
import { streamName } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import { STOP_WORDS, wordSimilarity } from '../../providers/llm/localPosture.js';
import type { ChatModel } from '../../providers/llm/port.js';
import type { Promptset } from '../../providers/llm/promptsets.js';
import { facts as factCollection } from '../../search/collections/index.js';
import { createHybridSearch, hybridSettingsOf, type HybridSearch } from '../../search/hybrid.js';
import { runeLength } from '../../util/codePoints.js';
import { mapWithConcurrency } from '../../util/concurrency.js';
import { boundedErrorMessage } from '../../util/errorMessage.js';
import type { JobContext, Stage, StageDefinition } from '../types.js';
import { commandFrom, loadStream, recordingFailure, requireRepositoryId, stageMetadata, streamSubject, throwIfAborted, type LoadedStream } from './common.js';
import { loadRepositorySettings } from './repositorySettings.js';
import { chunked } from '../../util/chunked.js';
import { liveFacts, unsourcedFacts } from '../../read/facts.js';

/**
 * annotate_report: links each sentence of a report (of at least `min_sentence_runes` runes, a CJK
 * character counting as 2 or 3: sentenceRunes) to
 * the facts behind it. Candidates are the sentence's nearest facts by vector (sentences searched
 * in batches: one embedding call and one k-NN statement per batch), or, where the repository has
 * no vectors, a lexical search for its words OR-ed (`HybridSearch.nearestMany`); a candidate is kept
 * when its similarity to the sentence reaches `similarity_threshold` (the cosine of the two
 * vectors; the cosine of their word sets when search answered lexically), at most
 * `max_facts_per_sentence` per sentence, best first. The chat model then labels each pair
 * `supports`, `contradicts` or `related`, and drops the irrelevant ones.
 *
 * After an edit, sentences whose text did not change keep their facts from the previous
 * annotation (same settings and model); only the others are searched and judged again. An
 * explicit annotation request re-annotates every sentence.
 */

export interface AnnotateReportDeps {
  store: EventStore;
  knex: Knex;
  /** Over the facts collection; without an embedder or vectors it answers lexically. */
  hybrid: HybridSearch;
  chat: ChatModel;
  settings: AnnotationSettings;
  maxAttempts: number;
  /** Posture calls in flight at once. */
  concurrency?: number;
}

/** Candidates each sentence's search ranks before the threshold and the per-sentence limit apply. */
function candidatePool(settings: AnnotationSettings): number {
  return Math.max(20, settings.max_facts_per_sentence * 4);
}

/**
 * The lexical side's query for a sentence: its names and numbers (capitalised words that are
 * not function words, words with a digit) OR-ed, or all its words of 3 letters or more when it
 * has none. OR, because a plain websearch query ANDs its words and a sentence restating a fact
 * in other words would match nothing; names and numbers, because every match is ranked and
 * common words match much of a repository (bench/RESULTS.md, "Report annotation").
 */
export function lexicalQueryOf(sentence: string): string {
  const words = [...new Set(sentence.match(/[\p{L}\p{N}]+/gu) ?? [])];
  const named = words.filter((word) => /\p{N}/u.test(word) || (/^\p{Lu}/u.test(word) && !STOP_WORDS.has(word.toLowerCase())));
  const chosen = named.length > 0 ? named : words.filter((word) => runeLength(word) >= 3);
  return [...new Set(chosen.map((word) => word.toLowerCase()))]
    .filter((word) => word !== 'or')
    .slice(0, 32)
    .join(' OR ');
}

/** Whether the previous annotation's sentences may stand for this run's: same settings and model. */
function reusable(report: LiveReport, settings: AnnotationSettings, modelId: string): AnnotatedSentence[] {
  const previous = report.annotation;
  if (!previous || report.fullRequested || previous.modelId !== modelId) return [];
  const same =
    previous.similarity_threshold === settings.similarity_threshold &&
    previous.max_facts_per_sentence === settings.max_facts_per_sentence &&
    previous.min_sentence_runes === settings.min_sentence_runes;
  return same ? previous.sentences : [];
}

const reportSubject = streamSubject('report');

/** Sentences searched together: one embedding call and one k-NN statement per batch. */
const SEARCH_BATCH = 100;

const roundScore = (score: number) => Math.round(score * 1e6) / 1e6;

export function createAnnotateReportStage(deps: AnnotateReportDeps): Stage {
  const { settings } = deps;
  const pool = candidatePool(settings);

  /** The candidates of a batch of sentences at or above the threshold, most similar first, at most the limit each. */
  async function candidates(repositoryId: string, sentences: readonly ReportSentence[]): Promise<Array<Array<{ id: string; content: string; similarity: number }>>> {
    // Facts of deleted sources are no evidence, also before cleanup_facts retracts them.
    const hide = await unsourcedFacts(deps.knex, repositoryId);
    const queries = sentences.map((sentence) => ({
      repositoryId,
      hide,
      query: lexicalQueryOf(sentence.text) || sentence.text,
      vectorText: sentence.text,
      limit: pool,
      offset: 0,
      mode: 'hybrid' as const,
    }));
    // Only candidates with a cosine at or above the threshold are kept, and only the vector side
    // gives one: the nearest alone, the lexical side only where vectors cannot answer.
    const replies = await deps.hybrid.nearestMany(factCollection, queries);
    return replies.map((reply, position) => {
      const sentence = sentences[position];
      const scored = reply.items.flatMap((hit) => {
        // Vectors answered: their cosine. Lexical (no vectors): the word-set cosine.
        const similarity = reply.mode === 'hybrid' ? reply.similarities.get(hit.id) : wordSimilarity(sentence.text, hit.content ?? '');
        return similarity !== undefined && similarity >= settings.similarity_threshold ? [{ id: hit.id, content: hit.content ?? '', similarity }] : [];
      });
      scored.sort((a, b) => b.similarity - a.similarity || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
      return scored.slice(0, settings.max_facts_per_sentence);
    });
  }

  /** The kept candidates of one sentence, labelled by the chat model; irrelevant ones dropped. */
  async function judge(sentence: ReportSentence, kept: ReadonlyArray<{ id: string; content: string; similarity: number }>, promptset: Promptset, signal: AbortSignal): Promise<AnnotatedFact[]> {
    if (kept.length === 0) return [];
    throwIfAborted(signal);
    const judgements = await deps.chat.judgePostures({ sentence: sentence.text, facts: kept.map(({ id, content }) => ({ id, content })), promptset }, signal);
    const postures = new Map(judgements.map((judgement) => [judgement.factId, judgement.posture]));
    return kept.flatMap((fact) => {
      const posture = postures.get(fact.id);
      return posture === undefined ? [] : [{ fact_id: fact.id, score: roundScore(fact.similarity), posture }];
    });
  }

  /** Every annotated sentence of the report's text; unchanged sentences carried from `previous`. */
  async function annotate(repositoryId: string, report: LiveReport, signal: AbortSignal): Promise<AnnotatedSentence[]> {
    const eligible = splitSentences(report.text).filter((sentence) => sentenceRunes(sentence.text) >= settings.min_sentence_runes);
    // Unchanged sentences by text: a repeated sentence takes the previous ones in order.
    const previous = new Map<string, AnnotatedSentence[]>();
    for (const sentence of reusable(report, settings, deps.chat.modelId)) previous.set(sentence.text, [...(previous.get(sentence.text) ?? []), sentence]);
    const carried = new Map<number, AnnotatedFact[]>();
    for (const sentence of eligible) {
      const match = previous.get(sentence.text)?.shift();
      if (match) carried.set(sentence.index, match.facts);
    }
    // A carried sentence keeps the facts that still lead to a live fact, as they were cited: one
    // merged since stays (the reads show its survivor, as they did before the edit), one
    // retracted or removed since (its source deleted), or whose survivor was, is left out as the
    // reads leave it out, instead of being recorded again and counted (and back should its
    // source be added again).
    const carriedIds = [...new Set([...carried.values()].flatMap((facts) => facts.map((fact) => fact.fact_id)))];
    if (carriedIds.length > 0) {
      const live = new Set<string>();
      for (const ids of chunked(carriedIds, 1000)) for (const id of (await liveFacts(deps.knex, repositoryId, ids)).keys()) live.add(id);
      for (const [index, facts] of carried) carried.set(index, facts.filter((fact) => live.has(fact.fact_id)));
    }
    const fresh = eligible.filter((sentence) => !carried.has(sentence.index));
    if (fresh.length === 0) return eligible.map((sentence) => ({ ...sentence, facts: carried.get(sentence.index) ?? [], carried: true }));
    const { promptset } = await loadRepositorySettings(deps.knex, repositoryId);
    const annotated: AnnotatedFact[][] = [];
    for (const batch of chunked(fresh, SEARCH_BATCH)) {
      throwIfAborted(signal);
      const found = await candidates(repositoryId, batch);
      annotated.push(...(await mapWithConcurrency(batch, deps.concurrency ?? 4, (sentence, position) => judge(sentence, found[position], promptset, signal))));
    }
    const freshFacts = new Map(fresh.map((sentence, position) => [sentence.index, annotated[position]]));
    return eligible.map((sentence) => {
      const kept = carried.get(sentence.index);
      return { ...sentence, facts: kept ?? freshFacts.get(sentence.index) ?? [], carried: kept !== undefined };
    });
  }

  return {
    kind: 'annotate_report',
    triggers: ['ReportCreated', 'ReportUpdated', 'ReportAnnotationRequested'],
    // A title, topic or parent change leaves the annotation as it is: no job for it.
    subjectOf: (event) => (event.type === 'ReportUpdated' && event.data.text_changed === false ? null : reportSubject(event)),
    // A report job works for no source.
    sourceOf: () => null,
    triggerFromJob: true,
    async run(context: JobContext) {
      const stream = streamName('report', context.job.subjectId);
      const metadata = stageMetadata(context);
      let loaded: LoadedStream<ReportState> = await loadStream(deps.store, stream, reportDecider);
      const initial = loaded.state;
      // Deleted, or this revision is annotated already (a title-only edit, a twin): nothing to do.
      if (initial.status === 'none' || initial.status === 'deleted' || initial.status === 'annotated') return;
      const revision = initial.revision;
      const command = (next: ReportCommand) => commandFrom(deps.store, stream, reportDecider, loaded, next, metadata);
      // A failure that ends the job fails this revision's annotation, so the report shows it.
      const failAnnotation = async (error: unknown) => {
        const reason = boundedErrorMessage(error);
        await commandFrom(deps.store, stream, reportDecider, await loadStream(deps.store, stream, reportDecider), { type: 'FailAnnotation', revision, reason }, metadata);
      };
      await recordingFailure(context, deps.maxAttempts, failAnnotation, async () => {
        loaded = (await command({ type: 'StartAnnotation', revision })).after;
        const report = loaded.state;
        // The text changed again meanwhile: that change's own job annotates it.
        if (report.status !== 'processing' || report.revision !== revision) return;
        const sentences = await annotate(requireRepositoryId(context), report, context.signal);
        throwIfAborted(context.signal);
        await command({ type: 'RecordAnnotation', revision, modelId: deps.chat.modelId, sentences, ...settings });
      });
    },
  };
}

/** The registry's entry: always on; settings from `providers.reports`, search from `search.hybrid`. */
export const annotateReportStage: StageDefinition = {
  kind: 'annotate_report',
  enabled: () => true,
  create: ({ config, store, knex, search, embedder, chat }) =>
    createAnnotateReportStage({
      store,
      knex,
      hybrid: createHybridSearch({ search, embedder, settings: hybridSettingsOf(config.search.hybrid) }),
      chat,
      settings: { ...config.providers.reports },
      maxAttempts: config.task.retry.max_attempts,
    }),
};
