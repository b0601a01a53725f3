import type { Knex } from 'knex';
import type { Config } from '../../config/types.js';
import { parseDuration } from '../../config/duration.js';
import { DomainError } from '../../domain/decider.js';
import { conceptDecider, type ConceptCommand, type ConceptState, type SliceWrite } from '../../domain/concept/decider.js';
import { citationProblem, planSlices, summarySliceId } from '../../domain/concept/summaries.js';
import { streamName, type RecordedEvent } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { ChatModel, ConceptIdentity } from '../../providers/llm/port.js';
import type { Promptset } from '../../providers/llm/promptsets.js';
import { mapWithConcurrency } from '../../util/concurrency.js';
import { PermanentJobError, type JobContext, type Stage, type StageDefinition } from '../types.js';
import { foldStream, requireRepositoryId, sharedCommandsFrom, stageMetadata, throwIfAborted, type BatchCommand } from './common.js';
import { conceptsProjection } from '../../../projections/concepts.js';
import { factsProjection } from '../../../projections/facts.js';
import { awaitApplied, awaitReadModels, lastEventOf, type AwaitedEvent } from './readModelLag.js';
import { summariesProjection } from '../../../projections/summaries.js';
import { isLiveRepository, loadRepositorySettings } from './repositorySettings.js';

export type SummarizationSettings = Config['providers']['summarization'];

export interface SummarizeConceptsDeps {
  store: EventStore;
  knex: Knex;
  chat: ChatModel;
  settings: SummarizationSettings;
  /** How long a triggered run waits for the read models to apply its trigger (default 30 s). */
  readModelWaitMs?: number;
  /**
   * Concepts of a page summarised side by side (default 8; the registry passes the kind's
   * worker count, `task.queues.summarize_concepts`): a run is one at a time per repository, so
   * its model calls are what would otherwise have run in separate jobs.
   */
  concurrency?: number;
}

/** Model answers per slice: the first, and one retry when its citations are refused. */
export const SUMMARY_ATTEMPTS = 2;

/**
 * Concepts of the repository whose slices do not cover exactly the facts linked to them now: a
 * fact no slice covers, or a slice fact that left the concept (a source deleted, a fact merged
 * away). By id, at most `limit`, after the id `after` when given (the next page).
 */
export async function staleConcepts(knex: Knex, repositoryId: string, limit: number, after = ''): Promise<string[]> {
  const result = (await knex.raw(
    `SELECT c.id FROM concepts c
      WHERE c.repository_id = ? AND c.status = 'active' AND c.id > ? COLLATE "C" AND (
        EXISTS (SELECT 1 FROM fact_concepts fc JOIN facts f ON f.id = fc.fact_id AND f.status <> 'merged'
                 WHERE fc.concept_id = c.id
                   AND NOT EXISTS (SELECT 1 FROM concept_summary_facts s WHERE s.concept_id = c.id AND s.fact_id = fc.fact_id))
        OR EXISTS (SELECT 1 FROM concept_summary_facts s
                    WHERE s.concept_id = c.id
                      AND NOT EXISTS (SELECT 1 FROM fact_concepts fc JOIN facts f ON f.id = fc.fact_id AND f.status <> 'merged'
                                       WHERE fc.concept_id = c.id AND fc.fact_id = s.fact_id)))
      ORDER BY c.id COLLATE "C"
      LIMIT ?`,
    [repositoryId, after, limit],
  )) as { rows: Array<{ id: string }> };
  return result.rows.map((row) => row.id);
}

/** A fact linked to a concept, as summaries and syntheses are made from it. */
export interface LinkedFact {
  id: string;
  content: string;
  fact_kind: string;
  image_id: string | null;
}

/**
 * The facts linked to each of `conceptIds` now, in the stable order of its slices (oldest first,
 * then by id), in one statement; a concept with none has no entry.
 */
export async function linkedFactsOf(knex: Knex, conceptIds: readonly string[]): Promise<Map<string, LinkedFact[]>> {
  const byConcept = new Map<string, LinkedFact[]>();
  if (conceptIds.length === 0) return byConcept;
  const result = (await knex.raw(
    `SELECT fc.concept_id, f.id, f.content, f.fact_kind, f.image_id FROM fact_concepts fc JOIN facts f ON f.id = fc.fact_id
      WHERE fc.concept_id = ANY(?::text[]) AND f.status <> 'merged'
      ORDER BY fc.concept_id, f.created_at, f.id COLLATE "C"`,
    [[...conceptIds]],
  )) as { rows: Array<LinkedFact & { concept_id: string }> };
  for (const { concept_id: conceptId, ...fact } of result.rows) {
    const facts = byConcept.get(conceptId) ?? [];
    facts.push(fact);
    byConcept.set(conceptId, facts);
  }
  return byConcept;
}

/** A model answer that was refused twice: nothing of its concept is recorded. */
interface Refusal {
  conceptId: string;
  sliceNumber: number;
  problem: string;
}

/**
 * Asks the model for a slice's Markdown and checks every citation against the slice's facts;
 * an answer citing anything else (another slice's fact, another concept's or repository's, an
 * invented id) is asked again once, then refused: the problem is returned and nothing stored.
 */
export async function summarizeSlice(
  chat: ChatModel,
  input: { concept: ConceptIdentity; facts: ReadonlyArray<{ id: string; content: string }>; maxTokens: number; promptset?: Promptset },
  signal: AbortSignal,
): Promise<{ content: string } | { problem: string }> {
  const allowed = new Set(input.facts.map((fact) => fact.id));
  let problem = '';
  for (let attempt = 1; attempt <= SUMMARY_ATTEMPTS; attempt++) {
    throwIfAborted(signal);
    const { content } = await chat.summarizeFacts(input, signal);
    const found = citationProblem(content, allowed);
    if (found === null) return { content };
    problem = found;
  }
  return { problem };
}

/**
 * summarize_concepts: for up to `max_concepts_per_run` concepts of the repository whose slices
 * are stale, plans the slices (src/domain/concept/summaries.ts, planSlices), asks the chat model
 * for each slice to write, and records them on the concept's stream in one append. Triggered by
 * ConceptsExtracted (new links), a catch-up FactMergedInto and ConceptMergedInto (links moved),
 * and scheduled every task.refresh_concept_relations_interval as a safety net (also for a run
 * whose read models lagged past its wait). A refused answer
 * leaves its concept unrecorded and fails the job, naming the concept and why.
 */
export function createSummarizeConceptsStage(deps: SummarizeConceptsDeps): Stage {
  const { batch_size: batchSize, max_concepts_per_run: maxConcepts, max_tokens: maxTokens } = deps.settings;
  const readModelWaitMs = deps.readModelWaitMs ?? 30_000;
  const runs = new RepositoryRuns();
  return {
    kind: 'summarize_concepts',
    // FactRetracted: a deleted source's fact left its concepts, whose slices are rewritten or reopened.
    triggers: ['ConceptsExtracted', 'FactMergedInto', 'ConceptMergedInto', 'FactRetracted'],
    subjectOf(event: RecordedEvent) {
      // A merge during deduplication comes before concept extraction links the fact: nothing to summarise again.
      if (event.type === 'FactMergedInto' && (event.data as { catchup?: unknown }).catchup !== true) return null;
      return event.repositoryId;
    },
    async run(context: JobContext) {
      const repositoryId = requireRepositoryId(context);
      await runs.one(repositoryId, context, async (triggers, progress) => {
        if (!(await isLiveRepository(deps.knex, repositoryId))) return;
        // The facts and their links must be in the read models before a run decides what is stale,
        // for its own trigger and those of the runs that left their work to it. Still behind after
        // the wait (a bus consumer far behind): nothing to do now; the next trigger or the
        // scheduled run finds the concepts stale then. A failed task would say something went
        // wrong, and nothing did.
        for (const trigger of triggers) {
          if (!(await awaitReadModels(deps.knex, [factsProjection, conceptsProjection], trigger, { timeoutMs: readModelWaitMs }))) return;
        }
        // And the slices this process wrote last must be in `concept_summary_facts`, or the run
        // would find those concepts stale again and plan them once more.
        if (progress.lastWrite && !(await awaitApplied(deps.knex, [summariesProjection], progress.lastWrite, context.signal, { timeoutMs: readModelWaitMs }))) return;
        const { promptset } = await loadRepositorySettings(deps.knex, repositoryId);
        const refusals: Refusal[] = [];
        // Pages of max_concepts_per_run stale concepts in id order, going on from where the last
        // run of the repository stopped, so that during a burst of sources every concept gets its
        // turn. A full page is followed by the next one unless a run is queued behind this one
        // (that run goes on from here); the end of the ids wraps around to the start once.
        let wrapped = progress.cursor === '';
        for (;;) {
          const page = await staleConcepts(deps.knex, repositoryId, maxConcepts, progress.cursor);
          const done = await summarizePage(deps, context, page, { batchSize, maxTokens, promptset });
          refusals.push(...done.refusals);
          progress.lastWrite = done.lastWrite ?? progress.lastWrite;
          progress.cursor = page.at(-1) ?? progress.cursor;
          if (page.length < maxConcepts) {
            progress.cursor = '';
            if (wrapped) break;
            wrapped = true;
          }
          if (runs.queuedBehind(repositoryId)) break;
        }
        if (refusals.length > 0) {
          const listed = refusals.map((refusal) => `concept ${refusal.conceptId} slice ${refusal.sliceNumber}: ${refusal.problem}`).join('; ');
          throw new PermanentJobError(`summaries refused after ${SUMMARY_ATTEMPTS} answers (nothing recorded for these): ${listed}`);
        }
      });
    },
  };
}

/** Where the summarize runs of a repository in this process are: their last write, and the id the next page starts after. */
interface RunProgress {
  lastWrite: AwaitedEvent | null;
  cursor: string;
}

/**
 * The summarize runs of each repository in this process: one at a time, and a run that finds
 * another queued behind it leaves its work to that one. Runs are triggered per document (each
 * ConceptsExtracted) and would find the same stale concepts and plan them again one after
 * another; the last run in the queue starts after the others and waits for all their triggers
 * to be applied, so it finds everything they would have found. Across processes the concept
 * stream's version check keeps one of two writes.
 */
class RepositoryRuns {
  private readonly byRepository = new Map<string, { tail: Promise<void>; queued: number; triggers: JobContext[]; progress: RunProgress }>();

  /** Whether a run of the repository waits for the one running now. */
  queuedBehind(repositoryId: string): boolean {
    return (this.byRepository.get(repositoryId)?.queued ?? 0) > 0;
  }

  async one(repositoryId: string, context: JobContext, work: (triggers: JobContext[], progress: RunProgress) => Promise<void>): Promise<void> {
    let entry = this.byRepository.get(repositoryId);
    if (!entry) {
      entry = { tail: Promise.resolve(), queued: 0, triggers: [], progress: { lastWrite: null, cursor: '' } };
      this.byRepository.set(repositoryId, entry);
    }
    const previous = entry.tail;
    let release = () => {};
    entry.tail = new Promise<void>((resolve) => (release = resolve));
    entry.queued += 1;
    entry.triggers.push(context);
    try {
      await previous;
      entry.queued -= 1;
      if (entry.queued > 0) return;
      await work(entry.triggers.splice(0), entry.progress);
    } finally {
      release();
    }
  }
}

/**
 * Plans and writes the slices of a page of concepts: their streams in one read, their linked
 * facts in one statement, the model asked slice by slice, and every concept's slices in one
 * multi-stream append (a stream that moved meanwhile is re-decided alone). A refused answer
 * leaves its concept out; the others are written.
 */
async function summarizePage(
  deps: SummarizeConceptsDeps,
  context: JobContext,
  conceptIds: readonly string[],
  options: { batchSize: number; maxTokens: number; promptset: Promptset },
): Promise<{ refusals: Refusal[]; lastWrite: AwaitedEvent | null }> {
  const refusals: Refusal[] = [];
  if (conceptIds.length === 0) return { refusals, lastWrite: null };
  const streams = await deps.store.readStreams(conceptIds.map((conceptId) => streamName('concept', conceptId)));
  const linked = await linkedFactsOf(deps.knex, conceptIds);
  const commands: Array<BatchCommand<ConceptState, ConceptCommand>> = [];
  const planned = await mapWithConcurrency(conceptIds, deps.concurrency ?? 8, async (conceptId) => {
    throwIfAborted(context.signal);
    const stream = streamName('concept', conceptId);
    const loaded = foldStream(streams.get(stream) ?? [], conceptDecider);
    return { stream, loaded, plan: await plannedSlices(deps, context, conceptId, loaded.state, linked.get(conceptId) ?? [], options) };
  });
  for (const { stream, loaded, plan } of planned) {
    if (plan === null) continue;
    if ('problem' in plan) refusals.push(plan);
    else commands.push({ streamId: stream, loaded, command: plan });
  }
  throwIfAborted(context.signal);
  if (commands.length === 0) return { refusals, lastWrite: null };
  try {
    const results = await sharedCommandsFrom(deps.store, conceptDecider, commands, stageMetadata(context));
    const write = results.findLast((result) => result.write !== null)?.write;
    return { refusals, lastWrite: write ? lastEventOf(write) : null };
  } catch (error) {
    // Only a re-decision gets here with a DomainError: a stream moved (a twin wrote slices
    // first) and the plan no longer fits it. The next run plans from the stream as it is now.
    if (error instanceof DomainError) return { refusals, lastWrite: null };
    throw error;
  }
}

/** The slices a concept's command writes and removes, a refusal, or null when its slices are current. */
async function plannedSlices(
  deps: SummarizeConceptsDeps,
  context: JobContext,
  conceptId: string,
  state: ConceptState,
  facts: readonly LinkedFact[],
  options: { batchSize: number; maxTokens: number; promptset: Promptset },
): Promise<Refusal | Extract<ConceptCommand, { type: 'WriteSummarySlices' }> | null> {
  if (state.status !== 'active') return null;
  const plan = planSlices(state.slices, facts.map((fact) => fact.id), options.batchSize);
  if (plan.writes.length === 0 && plan.removeFrom === null) return null;
  const byId = new Map(facts.map((fact) => [fact.id, fact]));
  const concept: ConceptIdentity = { id: conceptId, canonicalName: state.canonicalName, context: state.context, aliases: state.aliases };
  const slices: SliceWrite[] = [];
  for (const planned of plan.writes) {
    const sliceFacts = planned.factIds.map((id) => ({ id, content: byId.get(id)?.content ?? '' }));
    const answer = await summarizeSlice(deps.chat, { concept, facts: sliceFacts, maxTokens: options.maxTokens, promptset: options.promptset }, context.signal);
    if ('problem' in answer) return { conceptId, sliceNumber: planned.sliceNumber, problem: answer.problem };
    slices.push({ sliceId: summarySliceId(conceptId, planned.sliceNumber), ...planned, content: answer.content });
  }
  const lastNumber = state.slices.at(-1)?.sliceNumber ?? 0;
  const removed = [];
  for (let number = plan.removeFrom ?? lastNumber + 1; number <= lastNumber; number++) removed.push({ sliceId: summarySliceId(conceptId, number), sliceNumber: number });
  const command = { type: 'WriteSummarySlices' as const, batchSize: options.batchSize, modelId: deps.chat.modelId, slices, removed, removeReason: 'facts_removed' };
  // Decided once on the stream as read: a plan the slice rules refuse is a bug, and fails the job.
  conceptDecider.decide(command, state);
  return command;
}

/** The registry's entry: `providers.summarization.enabled`; periodic as a safety net for a trigger whose read models lagged past its retries. */
export const summarizeConceptsStage: StageDefinition = {
  kind: 'summarize_concepts',
  enabled: (config) => config.providers.summarization.enabled,
  create: ({ store, knex, chat, config }) =>
    createSummarizeConceptsStage({ store, knex, chat, settings: config.providers.summarization, concurrency: config.task.queues.summarize_concepts }),
  periodicIntervalMs: (config) => parseDuration(config.task.refresh_concept_relations_interval),
};
