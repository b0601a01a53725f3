import type { Knex } from 'knex';
import type { Config } from '../../config/types.js';
import { parseDuration } from '../../config/duration.js';
import { DomainError } from '../../domain/decider.js';
import { conceptDecider, conceptUnreadData, type ConceptCommand, type ConceptEvent, type ConceptState, type SliceWrite } from '../../domain/concept/decider.js';
import { citationProblem, planSlices, summarySliceId, type SlicePlan } from '../../domain/concept/summaries.js';
import { streamName, type RecordedEvent } from '../../eventstore/envelope.js';
import { FoldedStates } from '../../eventstore/commandHandler.js';
import type { EventStore } from '../../eventstore/port.js';
import type { ChatModel, ConceptIdentity } from '../../providers/llm/port.js';
import type { Promptset } from '../../providers/llm/promptsets.js';
import { Doorbell, Semaphore } from '../../util/concurrency.js';
import { PermanentJobError, type JobContext, type Stage, type StageDefinition } from '../types.js';
import { FOLDED_CONCEPTS, requireRepositoryId, type LoadedStream, sharedCommandsFrom, stageMetadata, throwIfAborted, type BatchCommand } from './common.js';
import { conceptsProjection } from '../../../projections/concepts.js';
import { factsProjection } from '../../../projections/facts.js';
import { appliedThrough, awaitApplied, awaitReadModels, lastEventOf, type AwaitedEvent } from './readModelLag.js';
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
 * Concepts one statement of the stale search looks at. Once the summaries have caught up a search
 * finds few stale concepts and so reads every concept's links; in one statement that was the
 * longest of an ingest (94 ms on average at 1,000 pages, 230 ms at 2,000), and every API call
 * that came meanwhile waited for it on PGlite's one connection. A window of concepts a statement
 * keeps each statement short (docs/performance.md, "Nineteenth round").
 */
const STALE_SEARCH_WINDOW = 50;

/**
 * Concepts of the repository whose slices do not cover exactly the facts linked to them now: a
 * fact no slice covers, or a slice fact that left the concept (a source deleted, a fact merged
 * away). By id, at most `limit`, after the id `after` when given (the next page), leaving out
 * `excluding` (concepts being summarised now).
 */
export async function staleConcepts(knex: Knex, repositoryId: string, limit: number, after = '', excluding: readonly string[] = []): Promise<string[]> {
  const found: string[] = [];
  for (let cursor = after; found.length < limit; ) {
    // One hash full join per concept: its live links against its slices' facts, a row missing on
    // either side makes it stale. (Two anti-joins, the first form, were planned as nested loops
    // with a join filter: quadratic in a concept's size, 290 ms at 400 pages against 48 ms.)
    const result = (await knex.raw(
      `WITH scanned AS (
         SELECT c.id FROM concepts c
          WHERE c.repository_id = ? AND c.status = 'active' AND c.id > ? COLLATE "C" AND NOT (c.id = ANY(?::text[]))
          ORDER BY c.id COLLATE "C"
          LIMIT ?)
       SELECT s.id, EXISTS (
           SELECT 1 FROM (SELECT fc.fact_id FROM fact_concepts fc JOIN facts f ON f.id = fc.fact_id AND f.status <> 'merged'
                           WHERE fc.concept_id = s.id) AS linked
             FULL JOIN (SELECT cs.fact_id FROM concept_summary_facts cs WHERE cs.concept_id = s.id) AS covered USING (fact_id)
            WHERE linked.fact_id IS NULL OR covered.fact_id IS NULL) AS stale
         FROM scanned s
        ORDER BY s.id COLLATE "C"`,
      [repositoryId, cursor, [...excluding], STALE_SEARCH_WINDOW],
    )) as { rows: Array<{ id: string; stale: boolean }> };
    for (const row of result.rows) if (row.stale && found.length < limit) found.push(row.id);
    if (result.rows.length < STALE_SEARCH_WINDOW) break;
    cursor = result.rows[result.rows.length - 1].id;
  }
  return found;
}

/** A fact linked to a concept, as summaries and syntheses are made from it. */
export interface LinkedFact {
  id: string;
  content: string;
  fact_kind: string;
  image_id: string | null;
}

/**
 * Rows of the facts linked to each of `conceptIds` now (the `f.` columns named), in the stable
 * order of its slices (oldest first, then by id), in one statement; a concept with none has no entry.
 */
async function linkedRowsOf<Row>(knex: Knex, conceptIds: readonly string[], factColumns: string): Promise<Map<string, Row[]>> {
  const byConcept = new Map<string, Row[]>();
  if (conceptIds.length === 0) return byConcept;
  const result = (await knex.raw(
    `SELECT fc.concept_id, ${factColumns} FROM fact_concepts fc JOIN facts f ON f.id = fc.fact_id
      WHERE fc.concept_id = ANY(?::text[]) AND f.status <> 'merged'
      ORDER BY fc.concept_id, f.created_at, f.id COLLATE "C"`,
    [[...conceptIds]],
  )) as { rows: Array<Row & { concept_id: string }> };
  for (const { concept_id: conceptId, ...row } of result.rows) {
    const rows = byConcept.get(conceptId) ?? [];
    // The row without its concept_id is the Row asked for.
    rows.push(row as Row);
    byConcept.set(conceptId, rows);
  }
  return byConcept;
}

/** The facts linked to each of `conceptIds` now, as linkedRowsOf orders them. */
export function linkedFactsOf(knex: Knex, conceptIds: readonly string[]): Promise<Map<string, LinkedFact[]>> {
  return linkedRowsOf<LinkedFact>(knex, conceptIds, 'f.id, f.content, f.fact_kind, f.image_id');
}

/**
 * The ids of the facts linked to each of `conceptIds` now, as linkedFactsOf orders them. Planning
 * needs only the ids: the content is read for the facts of the slices to write (factContentsOf),
 * a few of a large concept's hundreds.
 */
export async function linkedFactIdsOf(knex: Knex, conceptIds: readonly string[]): Promise<Map<string, string[]>> {
  const rows = await linkedRowsOf<{ id: string }>(knex, conceptIds, 'f.id');
  return new Map([...rows].map(([conceptId, facts]) => [conceptId, facts.map((fact) => fact.id)]));
}

/** The content of each of `factIds` that exists, by id. */
export async function factContentsOf(knex: Knex, factIds: readonly string[]): Promise<Map<string, string>> {
  if (factIds.length === 0) return new Map();
  const result = (await knex.raw(`SELECT id, content FROM facts WHERE id = ANY(?::text[])`, [[...new Set(factIds)]])) as { rows: Array<{ id: string; content: string }> };
  return new Map(result.rows.map((row) => [row.id, row.content]));
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
async function summarizeSlice(
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
 * summarize_concepts: plans the slices of the repository's concepts whose slices are stale
 * (src/domain/concept/summaries.ts, planSlices), asks the chat model for each slice to write, and
 * records a page of concepts' slices in one append. Triggered by ConceptsExtracted (new links), a
 * catch-up FactMergedInto and ConceptMergedInto (links moved), and scheduled every
 * task.refresh_concept_relations_interval as a safety net (also for a trigger whose read models
 * lagged past the wait). A refused answer leaves its concept unrecorded and fails the job,
 * naming the concept and why.
 */
export function createSummarizeConceptsStage(deps: SummarizeConceptsDeps): Stage {
  const readModelWaitMs = deps.readModelWaitMs ?? 30_000;
  const concurrency = deps.concurrency ?? 8;
  // One limit on model calls in flight for the stage, whichever repository's summaries ask.
  const calls = new Semaphore(concurrency);
  const summarizers = new Map<string, RepositorySummarizer>();
  const foldedConcepts = new FoldedStates<ConceptState, ConceptEvent>(conceptDecider, FOLDED_CONCEPTS);
  return {
    kind: 'summarize_concepts',
    deferred: true,
    // FactRetracted: a deleted source's fact left its concepts, whose slices are rewritten or reopened.
    triggers: ['ConceptsExtracted', 'FactMergedInto', 'ConceptMergedInto', 'FactRetracted'],
    subjectOf(event: RecordedEvent) {
      // A merge during deduplication comes before concept extraction links the fact: nothing to summarise again.
      if (event.type === 'FactMergedInto' && (event.data as { catchup?: unknown }).catchup !== true) return null;
      return event.repositoryId;
    },
    async run(context: JobContext) {
      const repositoryId = requireRepositoryId(context);
      // The facts and their links must be in the read models before the stale concepts are
      // looked for. Still behind after the wait (a bus consumer far behind): nothing to do now;
      // the next trigger or the scheduled run finds the concepts stale then. A failed task would
      // say something went wrong, and nothing did.
      // A source's links name its facts, which the stale search and the plan join with the facts
      // read model: fed from the bus, where that model may lag the links, wait for the source's
      // facts too (its FactsExtracted, an earlier event of the trigger's stream).
      const facts = { ...factsProjection, earlierOnTriggerStream: context.trigger.type === 'ConceptsExtracted' };
      if (!(await awaitReadModels(deps.knex, [facts, conceptsProjection], context, { timeoutMs: readModelWaitMs }))) return;
      let summarizer = summarizers.get(repositoryId);
      if (!summarizer) {
        summarizer = new RepositorySummarizer(deps, repositoryId, calls, foldedConcepts, { concurrency, readModelWaitMs });
        summarizers.set(repositoryId, summarizer);
      }
      await summarizer.request(context);
    },
  };
}

/**
 * A stale concept found by a search, its stream folded and its slices planned from the ids of its
 * linked facts, waiting for a place in the model. Only the state and version are kept, and the
 * content of the facts of the slices to write: a concept's stream holds every slice ever written
 * for it, and a large concept has hundreds of facts of which a plan writes a few (tens of MB for
 * a search's forty large concepts at 1,000 pages).
 */
interface QueuedConcept {
  conceptId: string;
  streamId: string;
  loaded: Pick<LoadedStream<ConceptState>, 'state' | 'version'>;
  /** null: nothing to write (merged meanwhile, or its slices current). */
  plan: SlicePlan | null;
  contents: ReadonlyMap<string, string>;
}

/**
 * The summaries of one repository in this process. Runs are triggered per document (each
 * ConceptsExtracted) and would find the same stale concepts and plan them again side by side, so
 * one job at a time carries the work: a job that finds it carried hands its (applied) trigger to
 * the carrier, which searches for stale concepts again, and succeeds at once.
 *
 * The carrier keeps up to `concurrency` concepts in the model. A search takes up to
 * `max_concepts_per_run` stale concepts by id, going on from where the last one stopped (so
 * during a burst of sources every concept gets its turn), reads their streams and facts in one
 * statement each, and queues them; the next search comes as soon as the queue is empty and a
 * place is free, not when the slowest concept of the last search is done. Planned concepts are
 * written together: in one append per `concurrency` of them, or when nothing else is in the
 * model. A concept is left out of every search from the search that found it until its slices
 * are written. Across processes the concept stream's version check keeps one of two writes.
 */
class RepositorySummarizer {
  /** The job carrying the work now, if any. */
  private carrier: symbol | null = null;
  /** A trigger came (applied) since the carrier last searched. */
  private triggered = false;
  private readonly bell = new Doorbell();
  /** The last write of this process, which a search must find applied. */
  private lastWrite: AwaitedEvent | null = null;
  /** The id the next search starts after. */
  private cursor = '';

  constructor(
    private readonly deps: SummarizeConceptsDeps,
    private readonly repositoryId: string,
    private readonly calls: Semaphore,
    /** Concept states kept across runs, read on from their versions (shared by the stage's repositories). */
    private readonly folded: FoldedStates<ConceptState, ConceptEvent>,
    private readonly options: { concurrency: number; readModelWaitMs: number },
  ) {}

  async request(context: JobContext): Promise<void> {
    this.triggered = true;
    if (this.carrier !== null) {
      this.bell.poke();
      return;
    }
    const me = Symbol('carrier');
    this.carrier = me;
    try {
      await this.carry(context);
    } finally {
      if (this.carrier === me) this.carrier = null;
    }
  }

  private async carry(context: JobContext): Promise<void> {
    const { deps, repositoryId, bell } = this;
    const { concurrency, readModelWaitMs } = this.options;
    if (!(await isLiveRepository(deps.knex, repositoryId))) return;
    const { promptset } = await loadRepositorySettings(deps.knex, repositoryId);
    const { batch_size: batchSize, max_concepts_per_run: maxConcepts, max_tokens: maxTokens } = deps.settings;
    const sliceOptions = { batchSize, maxTokens, promptset };
    const queue: QueuedConcept[] = [];
    const held = new Set<string>();
    const ready: Array<{ conceptId: string; write: BatchCommand<ConceptState, ConceptCommand> }> = [];
    const running = new Set<Promise<void>>();
    const refusals: Refusal[] = [];
    let failure: { error: unknown } | null = null;
    let planning = 0;
    let writing = false;
    let search = false;
    let wrapped = false;
    // A search that left out held concepts is repeated once they are written: they may be stale again.
    let searchWhenIdle = false;
    // A pass that triggers started ends the queued jobs its first search covers (below).
    let coverBeforeSearch = false;
    const track = (work: Promise<void>): void => {
      const tracked = work
        .catch((error: unknown) => {
          failure ??= { error };
        })
        .finally(() => {
          running.delete(tracked);
          bell.poke();
        });
      running.add(tracked);
    };
    for (;;) {
      if (this.triggered) {
        this.triggered = false;
        search = true;
        coverBeforeSearch = true;
        wrapped = this.cursor === '';
      }
      if (failure !== null || context.signal.aborted) break;
      while (queue.length > 0 && planning < concurrency) {
        const concept = queue.shift() as QueuedConcept;
        planning += 1;
        track(
          plannedSlices(deps, context, concept, { ...sliceOptions, calls: this.calls })
            .then((plan) => {
              if (plan !== null && !('problem' in plan)) ready.push({ conceptId: concept.conceptId, write: { streamId: concept.streamId, loaded: concept.loaded, command: plan } });
              else {
                if (plan !== null) refusals.push(plan);
                held.delete(concept.conceptId);
              }
            })
            .finally(() => (planning -= 1)),
        );
      }
      if (!writing && ready.length > 0 && (ready.length >= concurrency || (planning === 0 && queue.length === 0))) {
        const batch = ready.splice(0);
        writing = true;
        track(
          this.write(context, batch.map((planned) => planned.write)).finally(() => {
            for (const { conceptId } of batch) held.delete(conceptId);
            writing = false;
          }),
        );
      }
      const idle = running.size === 0 && queue.length === 0 && ready.length === 0;
      if (!search && idle) {
        if (!searchWhenIdle) {
          // In the same turn as the check of `triggered` above: a job that comes after this carries the work itself.
          this.carrier = null;
          break;
        }
        searchWhenIdle = false;
        search = true;
        wrapped = this.cursor === '';
      }
      if (!search || queue.length > 0 || planning >= concurrency) {
        await bell.wait();
        continue;
      }
      // The slices this process wrote last must be in `concept_summary_facts`, or the search would
      // find those concepts stale again. Still behind after the wait: the next trigger or the
      // scheduled run searches again.
      if (this.lastWrite && !(await awaitApplied(deps.knex, [summariesProjection], this.lastWrite, context.signal, { timeoutMs: readModelWaitMs }))) {
        search = false;
        searchWhenIdle = false;
        continue;
      }
      if (coverBeforeSearch) {
        coverBeforeSearch = false;
        // This pass searches every concept once more, in read models that have applied the log up
        // to `through`: the queued jobs of triggers up to there would find nothing this pass does
        // not. A burst of sources queues a job per page, which would otherwise each be claimed,
        // wait for the read models and hand its trigger over (thousands after a large import).
        const through = await appliedThrough(deps.knex, [factsProjection, conceptsProjection]);
        if (through !== null) await context.coverQueued(through);
      }
      const found = await staleConcepts(deps.knex, repositoryId, maxConcepts, this.cursor, [...held]);
      if (held.size > 0) searchWhenIdle = true;
      this.cursor = found.at(-1) ?? this.cursor;
      if (found.length < maxConcepts) {
        // The end of the ids: round to the first once.
        this.cursor = '';
        if (wrapped) search = false;
        wrapped = true;
      }
      if (found.length === 0) continue;
      for (const conceptId of found) held.add(conceptId);
      queue.push(...(await this.read(found, batchSize)));
    }
    await Promise.all(running);
    if (failure !== null) throw (failure as { error: unknown }).error;
    context.signal.throwIfAborted();
    if (refusals.length > 0) {
      const listed = refusals.map((refusal) => `concept ${refusal.conceptId} slice ${refusal.sliceNumber}: ${refusal.problem}`).join('; ');
      throw new PermanentJobError(`summaries refused after ${SUMMARY_ATTEMPTS} answers (nothing recorded for these): ${listed}`);
    }
  }

  /**
   * The streams of the concepts found in one read, the ids of their linked facts in one
   * statement, their slices planned, and the content of the facts those slices need in one more.
   */
  private async read(conceptIds: readonly string[], batchSize: number): Promise<QueuedConcept[]> {
    const streams = await this.folded.load(
      this.deps.store,
      conceptIds.map((conceptId) => streamName('concept', conceptId)),
      { omitData: conceptUnreadData },
    );
    const linked = await linkedFactIdsOf(this.deps.knex, conceptIds);
    const planned = conceptIds.map((conceptId) => {
      const streamId = streamName('concept', conceptId);
      const { state, version } = streams.get(streamId) as LoadedStream<ConceptState>;
      const plan = state.status === 'active' ? planSlices(state.slices, linked.get(conceptId) ?? [], batchSize) : null;
      const due = plan !== null && (plan.writes.length > 0 || plan.removeFrom !== null);
      return { conceptId, streamId, loaded: { state, version }, plan: due ? plan : null };
    });
    const contents = await factContentsOf(
      this.deps.knex,
      planned.flatMap(({ plan }) => plan?.writes.flatMap((slice) => slice.factIds) ?? []),
    );
    return planned.map((concept) => ({ ...concept, contents }));
  }

  /** The planned concepts' slices in one multi-stream append (a stream that moved meanwhile is re-decided alone). */
  private async write(context: JobContext, commands: Array<BatchCommand<ConceptState, ConceptCommand>>): Promise<void> {
    try {
      const results = await sharedCommandsFrom(this.deps.store, conceptDecider, commands, stageMetadata(context));
      const write = results.findLast((result) => result.write !== null)?.write;
      if (write) this.lastWrite = lastEventOf(write);
    } catch (error) {
      // Only a re-decision gets here with a DomainError: a stream moved (a twin wrote slices
      // first) and the plan no longer fits it. The next search plans from the stream as it is now.
      if (!(error instanceof DomainError)) throw error;
    }
  }
}

/**
 * The slices a concept's command writes and removes, a refusal, or null when its slices are
 * current. Its slices are asked for side by side, each taking a place among the stage's calls in
 * flight: a large concept's slices one after another kept the model's places empty at the end of
 * a pass, when few concepts were left (docs/performance.md, "Fifteenth round"). A refused slice
 * refuses the concept (the first in slice order is named).
 */
async function plannedSlices(
  deps: SummarizeConceptsDeps,
  context: JobContext,
  { conceptId, loaded: { state }, plan, contents }: QueuedConcept,
  options: { batchSize: number; maxTokens: number; promptset: Promptset; calls: Semaphore },
): Promise<Refusal | Extract<ConceptCommand, { type: 'WriteSummarySlices' }> | null> {
  if (state.status !== 'active' || plan === null) return null;
  const concept: ConceptIdentity = { id: conceptId, canonicalName: state.canonicalName, context: state.context, aliases: state.aliases };
  const answers = await Promise.all(
    plan.writes.map((planned) => {
      const sliceFacts = planned.factIds.map((id) => ({ id, content: contents.get(id) ?? '' }));
      return options.calls.run(() => summarizeSlice(deps.chat, { concept, facts: sliceFacts, maxTokens: options.maxTokens, promptset: options.promptset }, context.signal));
    }),
  );
  const slices: SliceWrite[] = [];
  for (const [index, planned] of plan.writes.entries()) {
    const answer = answers[index];
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
