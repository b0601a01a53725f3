import { createHash } from 'node:crypto';
import type { Knex } from 'knex';
import type { Config } from '../../config/types.js';
import { conceptDecider, conceptUnreadData, type ConceptCommand, type ConceptEvent, type ConceptState } from '../../domain/concept/decider.js';
import { citationProblem, citedFactIds, planSlices, synthesisId } from '../../domain/concept/summaries.js';
import { streamName } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { ChatModel, SynthesisInput, SynthesisOutput } from '../../providers/llm/port.js';
import { PermanentJobError, type JobContext, type JobRunOutcome, type Stage, type StageDefinition } from '../types.js';
import { conceptSubject, foldStream, repositoryIdOf, requireRepositoryId, sharedCommandsFrom, stageMetadata, throwIfAborted, type BatchCommand, type LoadedStream } from './common.js';
import { loadRepositorySettings } from './repositorySettings.js';
import { linkedFactsOf, type LinkedFact } from './summarizeConcepts.js';

export type SynthesisSettings = Config['providers']['synthesis'];

export interface SynthesizeConceptDeps {
  store: EventStore;
  knex: Knex;
  chat: ChatModel;
  settings: SynthesisSettings;
  /** `providers.summarization` when it runs: then a synthesis waits for the concept's slices to be current. */
  summarization: { batchSize: number } | null;
}

/** Model answers per synthesis: the first, and one retry when its citations are refused. */
const SYNTHESIS_ATTEMPTS = 2;

/**
 * Facts given to the model at most, in slice order: a concept with thousands of facts would make
 * a prompt no model takes; its slices' summaries still speak for the rest.
 */
export const MAX_SYNTHESIS_FACTS = 400;

/** Characters of a related concept's synthesis given as its summary. */
const RELATED_SUMMARY_CHARS = 400;

type SliceWritten = Extract<ConceptEvent, { type: 'SummarySliceWritten' }>['data'];

/** The concept's slices as its stream holds them (the read model may lag the trigger), in slice order. */
function slicesOf(events: ReadonlyArray<{ type: string; data: unknown }>): SliceWritten[] {
  const slices = new Map<number, SliceWritten>();
  for (const event of events) {
    if (event.type === 'SummarySliceWritten') {
      const data = event.data as SliceWritten;
      slices.set(data.slice_number, data);
    } else if (event.type === 'SummarySliceRemoved') {
      slices.delete((event.data as { slice_number: number }).slice_number);
    }
  }
  return [...slices.values()].sort((a, b) => a.slice_number - b.slice_number);
}

/** A concept related to another: sharing facts with it, with its synthesis when it has one. */
interface RelatedConcept {
  id: string;
  canonical_name: string;
  synthesis: string | null;
}

/** Related concepts of each of `conceptIds` in one statement: active ones sharing most facts with it, strongest first, at most `limit` each. */
async function relatedConceptsOf(knex: Knex, repositoryId: string, conceptIds: readonly string[], limit: number): Promise<Map<string, RelatedConcept[]>> {
  const related = new Map<string, RelatedConcept[]>();
  if (limit <= 0 || conceptIds.length === 0) return related;
  const result = (await knex.raw(
    `SELECT q.id AS concept_id, rel.id, rel.canonical_name, rel.synthesis
       FROM unnest(?::text[]) WITH ORDINALITY AS q(id, n)
       CROSS JOIN LATERAL (
         SELECT o.id, o.canonical_name, s.content AS synthesis
           FROM concept_relations r
           JOIN concepts o ON o.id = CASE WHEN r.concept_a = q.id THEN r.concept_b ELSE r.concept_a END AND o.status = 'active'
           LEFT JOIN concept_syntheses s ON s.concept_id = o.id
          WHERE r.repository_id = ? AND (r.concept_a = q.id OR r.concept_b = q.id) AND r.shared_fact_count > 0
          ORDER BY r.shared_fact_count DESC, o.canonical_name, o.id COLLATE "C"
          LIMIT ?) rel
      ORDER BY q.n`,
    [[...conceptIds], repositoryId, limit],
  )) as { rows: Array<RelatedConcept & { concept_id: string }> };
  for (const { concept_id: conceptId, ...concept } of result.rows) related.set(conceptId, [...(related.get(conceptId) ?? []), concept]);
  return related;
}

/**
 * What a synthesis is made from, and the hash that identifies it: the slices (ids and content),
 * the facts, the related concepts and which of them have a synthesis (not that synthesis's
 * content: otherwise two related concepts would re-synthesise each other in turn for ever),
 * the image candidates, the model and the settings that shape the answer.
 */
export function synthesisInputsHash(input: SynthesisInput, modelId: string): string {
  const key = {
    model: modelId,
    summaries: input.summaries.map((summary) => [summary.id, createHash('sha256').update(summary.content).digest('hex')]),
    facts: input.facts.map((fact) => fact.id),
    related: input.relatedConcepts.map((concept) => concept.id),
    related_syntheses: input.relatedSyntheses.map((synthesis) => synthesis.conceptId),
    images: input.images.map((image) => image.factId),
    settings: [input.maxImages, input.maxTokens, input.thinkingLevel],
  };
  return createHash('sha256').update(JSON.stringify(key)).digest('hex');
}

/** The model's synthesis, its citations checked against the facts given; asked again once, then refused. */
async function checkedSynthesis(chat: ChatModel, input: SynthesisInput, signal: AbortSignal): Promise<SynthesisOutput | { problem: string }> {
  const allowed = new Set(input.facts.map((fact) => fact.id));
  let problem = '';
  for (let attempt = 1; attempt <= SYNTHESIS_ATTEMPTS; attempt++) {
    throwIfAborted(signal);
    const output = await chat.synthesizeConcept(input, signal);
    const found = citationProblem(output.content, allowed);
    if (found === null) return output;
    problem = found;
  }
  return { problem };
}

/**
 * synthesize_concept: one synthesis per concept, made from its summary slices (their facts),
 * related concepts and related syntheses, recorded as ConceptSynthesized. Triggered by its
 * slices changing and by a request (POST .../resynthesize). Debounced: while the concept has
 * facts its slices do not cover yet, a summarize run is due and its slice writes trigger this
 * stage again, so nothing is made now; a job whose trigger is not the concept's last slice
 * change leaves it to the job of that change; and inputs that hash as the last synthesis's make
 * nothing either, unless a resynthesis was requested. Without summarization (disabled), the
 * concept's facts stand in for slices, and syntheses are made on request.
 */
export function createSynthesizeConceptStage(deps: SynthesizeConceptDeps): Stage {
  const settings = deps.settings;

  /**
   * What a job decides for its concept, from the stream and read models as read for its group:
   * a command (a synthesis, or its removal), or null when nothing is to be made. A refused model
   * answer throws, failing that job alone.
   */
  async function decideFor(context: JobContext, loaded: ConceptAsRead, linked: readonly LinkedFact[], inputs: GroupInputs): Promise<ConceptCommand | null> {
    const repositoryId = requireRepositoryId(context);
    const conceptId = context.job.subjectId;
    const { state } = loaded;
    // runGroup left out the jobs left to a later one (leftToLaterJob); the check narrows the state.
    if (state.status !== 'active') return null;
    const requested = state.resynthesisRequested;
    if (!requested && deps.summarization) {
      const due = planSlices(state.slices, linked.map((fact) => fact.id), deps.summarization.batchSize);
      if (due.writes.length > 0 || due.removeFrom !== null) return null;
    }
    const { slices } = loaded;
    const contents = new Map(linked.map((fact) => [fact.id, fact]));
    const factIds = slices.length > 0 ? slices.flatMap((slice) => slice.fact_ids) : linked.map((fact) => fact.id);
    // A fact that left the concept since its slice was written is not given (nor citable).
    const facts = factIds
      .flatMap((id) => {
        const fact = contents.get(id);
        return fact ? [fact] : [];
      })
      .slice(0, MAX_SYNTHESIS_FACTS);
    if (facts.length === 0) {
      // Every fact left the concept (their sources were deleted): a synthesis would cite what is gone.
      return linked.length === 0 && slices.length === 0 ? { type: 'RemoveSynthesis', synthesisId: synthesisId(conceptId), reason: 'no facts left' } : null;
    }
    const related = await inputs.related(repositoryId, conceptId);
    const { promptset } = await inputs.settings(repositoryId);
    const input: SynthesisInput = {
      concept: { id: conceptId, canonicalName: state.canonicalName, context: state.context, aliases: state.aliases },
      summaries: slices.map((slice) => ({ id: slice.slice_id, content: slice.content, factIds: slice.fact_ids })),
      facts: facts.map((fact) => ({ id: fact.id, content: fact.content })),
      relatedConcepts: related.map((concept) => ({
        id: concept.id,
        canonicalName: concept.canonical_name,
        summary: concept.synthesis === null ? null : concept.synthesis.slice(0, RELATED_SUMMARY_CHARS),
      })),
      relatedSyntheses: related
        .filter((concept) => concept.synthesis !== null)
        .slice(0, settings.max_related_syntheses)
        .map((concept) => ({ conceptId: concept.id, canonicalName: concept.canonical_name, content: concept.synthesis ?? '' })),
      images: facts
        .filter((fact) => fact.fact_kind === 'image' && fact.image_id)
        .slice(0, settings.max_image_candidates)
        .map((fact) => ({ factId: fact.id, imageId: fact.image_id ?? '', caption: fact.content })),
      maxImages: settings.max_images,
      maxTokens: settings.max_tokens,
      thinkingLevel: settings.thinking_level,
      promptset,
    };
    const inputsHash = synthesisInputsHash(input, deps.chat.modelId);
    if (!requested && inputsHash === state.synthesisInputs) return null;
    const output = await checkedSynthesis(deps.chat, input, context.signal);
    if ('problem' in output) {
      throw new PermanentJobError(`the synthesis of concept ${conceptId} was refused after ${SYNTHESIS_ATTEMPTS} answers (nothing recorded): ${output.problem}`);
    }
    const candidates = new Set(input.images.map((image) => image.factId));
    return {
      type: 'RecordSynthesis',
      synthesisId: synthesisId(conceptId),
      content: output.content,
      factIds: citedFactIds(output.content),
      sliceIds: slices.map((slice) => slice.slice_id),
      relatedConceptIds: input.relatedConcepts.map((concept) => concept.id),
      relatedSynthesisIds: input.relatedSyntheses.map((synthesis) => synthesisId(synthesis.conceptId)),
      imageFactIds: [...new Set(output.imageFactIds.filter((id) => candidates.has(id)))].slice(0, settings.max_images),
      modelId: deps.chat.modelId,
      inputsHash,
      allowedFactIds: input.facts.map((fact) => fact.id),
    };
  }

  const stage: Stage = {
    kind: 'synthesize_concept',
    deferred: true,
    triggers: ['SummarySliceWritten', 'SummarySliceRemoved', 'ConceptResynthesisRequested'],
    subjectOf: conceptSubject,
    triggerFromJob: true,
    async run(context: JobContext) {
      const [outcome] = await runGroup([context], context.signal);
      if (outcome && !outcome.ok) throw outcome.error;
    },
    runMany: (contexts, signal) => runGroup(contexts, signal),
  };

  /**
   * The jobs of a group (one job: `run`): their concept streams in one read, their linked facts in
   * one statement, each repository's settings once, a model call per synthesis (side by side),
   * and every command in one multi-stream append (a stream that moved meanwhile is re-decided alone). Of
   * a concept listed more than once, only the job of the latest trigger decides.
   */
  async function runGroup(contexts: readonly JobContext[], signal: AbortSignal): Promise<JobRunOutcome[]> {
    const outcomes: JobRunOutcome[] = contexts.map(() => ({ ok: true }));
    const streams = contexts.map((context) => streamName('concept', context.job.subjectId));
    // Of a concept's jobs in the group, the one of the latest trigger decides on the stream as it
    // is now, which holds every earlier trigger, and makes what any of them would (a synthesis is
    // made once, from the inputs of the last change): the others succeed without work (a failure
    // of that job is its own, and its retries do theirs). After a burst of slice writes a group
    // holds tens of jobs of the concepts every page touches.
    const latest = latestOfEachSubject(contexts);
    // The slices' Markdown is the synthesis's input; older syntheses and the vector are not read.
    const { SummarySliceWritten: _slices, ...unread } = conceptUnreadData;
    const read = await deps.store.readStreams(
      latest.map((index) => streams[index]),
      { omitData: unread },
    );
    // A stream that cannot be folded fails its job alone.
    const folded = latest.flatMap((index) => {
      try {
        return [{ index, loaded: asRead(foldStream(read.get(streams[index]) ?? [], conceptDecider)) }];
      } catch (error) {
        outcomes[index] = { ok: false, error };
        return [];
      }
    });
    // The events go: the group waits for facts, related concepts and model calls (at the lowest
    // priority, behind requests and ingest), and a busy concept's stream holds thousands.
    read.clear();
    // A job a later one (in another group) will decide for, or of a concept gone, reads no facts.
    const deciding = folded.filter(({ index, loaded }) => !leftToLaterJob(contexts[index], loaded));
    const linked = await linkedFactsOf(
      deps.knex,
      deciding.map(({ index }) => contexts[index].job.subjectId),
    );
    const conceptsByRepository = new Map<string, string[]>();
    for (const { index } of deciding) {
      const repositoryId = repositoryIdOf(contexts[index]);
      if (repositoryId) conceptsByRepository.set(repositoryId, [...(conceptsByRepository.get(repositoryId) ?? []), contexts[index].job.subjectId]);
    }
    const inputs = groupInputs(deps.knex, settings.max_related_concepts, conceptsByRepository);
    // The jobs' model calls run side by side, as separate jobs' would.
    const decided = await Promise.all(
      deciding.map(async ({ index, loaded }) => {
        const context = contexts[index];
        try {
          signal.throwIfAborted();
          const command = await decideFor(context, loaded, linked.get(context.job.subjectId) ?? [], inputs);
          return command ? [{ index, streamId: streams[index], loaded: { state: loaded.state, version: loaded.version }, command, metadata: stageMetadata(context) }] : [];
        } catch (error) {
          outcomes[index] = { ok: false, error };
          return [];
        }
      }),
    );
    const commands: Array<BatchCommand<ConceptState, ConceptCommand> & { index: number }> = decided.flat();
    if (commands.length > 0) {
      throwIfAborted(signal);
      try {
        await sharedCommandsFrom(deps.store, conceptDecider, commands, stageMetadata(contexts[commands[0].index]));
      } catch (error) {
        for (const { index } of commands) outcomes[index] = { ok: false, error };
      }
    }
    return outcomes;
  }

  return stage;
}

/**
 * Whether a job makes nothing on the concept's stream as read: the concept is not active, or a
 * later slice change has its own job, which will see this one's inputs too (only the last makes a
 * synthesis; a requested resynthesis and a scheduled run do not wait for it).
 */
function leftToLaterJob(context: JobContext, { state, lastSliceChange }: ConceptAsRead): boolean {
  if (state.status !== 'active') return true;
  if (state.resynthesisRequested || context.scheduled) return false;
  return lastSliceChange !== null && lastSliceChange > context.trigger.globalPosition;
}

/**
 * What a synthesis needs of a concept's stream as read: its state and version, its current
 * slices, and where its slices last changed. Kept instead of the events, which a group held
 * through all its waits (70 MB of 18,600 events in a heap snapshot under load).
 */
interface ConceptAsRead {
  state: ConceptState;
  version: number | null;
  slices: SliceWritten[];
  /** The global position of the last SummarySliceWritten or SummarySliceRemoved; null when none. */
  lastSliceChange: number | null;
}

function asRead({ state, version, events }: LoadedStream<ConceptState>): ConceptAsRead {
  const lastChange = events.findLast((event) => event.type === 'SummarySliceWritten' || event.type === 'SummarySliceRemoved');
  return { state, version, slices: slicesOf(events), lastSliceChange: lastChange?.globalPosition ?? null };
}

/** The index of each subject's job of the latest trigger in a group (a scheduled job's is 0), in the group's order. */
function latestOfEachSubject(contexts: readonly JobContext[]): number[] {
  const latest = new Map<string, number>();
  for (const [index, context] of contexts.entries()) {
    const kept = latest.get(context.job.subjectId);
    if (kept === undefined || context.trigger.globalPosition > contexts[kept].trigger.globalPosition) latest.set(context.job.subjectId, index);
  }
  return [...latest.values()].sort((a, b) => a - b);
}

/** Related concepts and repository settings of a group's jobs, each read once. */
interface GroupInputs {
  related(repositoryId: string, conceptId: string): Promise<RelatedConcept[]>;
  settings(repositoryId: string): ReturnType<typeof loadRepositorySettings>;
}

/** The group's inputs: the related concepts of all its concepts, one statement per repository, read on first use. */
function groupInputs(knex: Knex, maxRelated: number, conceptsByRepository: ReadonlyMap<string, readonly string[]>): GroupInputs {
  const settings = new Map<string, ReturnType<typeof loadRepositorySettings>>();
  const related = new Map<string, Promise<Map<string, RelatedConcept[]>>>();
  return {
    async related(repositoryId, conceptId) {
      const loaded = related.get(repositoryId) ?? relatedConceptsOf(knex, repositoryId, conceptsByRepository.get(repositoryId) ?? [conceptId], maxRelated);
      related.set(repositoryId, loaded);
      return (await loaded).get(conceptId) ?? [];
    },
    settings(repositoryId) {
      const loaded = settings.get(repositoryId) ?? loadRepositorySettings(knex, repositoryId);
      settings.set(repositoryId, loaded);
      return loaded;
    },
  };
}

/** The registry's entry: `providers.synthesis.enabled`. */
export const synthesizeConceptStage: StageDefinition = {
  kind: 'synthesize_concept',
  enabled: (config) => config.providers.synthesis.enabled,
  create: ({ store, knex, chat, config }) =>
    createSynthesizeConceptStage({
      store,
      knex,
      chat,
      settings: config.providers.synthesis,
      summarization: config.providers.summarization.enabled ? { batchSize: config.providers.summarization.batch_size } : null,
    }),
};
