import type { Knex } from 'knex';
import { conceptDecider, conceptIdFor, conceptName, conceptNameKey, conceptUnreadData, distinctConceptNames } from '../../domain/concept/decider.js';
import type { ConceptCommand, ConceptEvent, ConceptState } from '../../domain/concept/events.js';
import { followMergeChain, MAX_MERGE_CHAIN } from '../../domain/mergeChain.js';
import { sourceDecider, type SourceEvent } from '../../domain/source/decider.js';
import { streamName, type EventMetadata } from '../../eventstore/envelope.js';
import { FoldedStates } from '../../eventstore/commandHandler.js';
import type { EventStore } from '../../eventstore/port.js';
import type { ChatModel, ConceptCandidate, ConceptContextChoice } from '../../providers/llm/port.js';
import type { JobContext, Stage, StageDefinition } from '../types.js';
import { extractedFactsOf } from './embedFacts.js';
import { mapWithConcurrency } from '../../util/concurrency.js';
import {
  FOLDED_CONCEPTS,
  failSourceOfDeadJob,
  loadStream,
  recordingSourceFailure,
  requireRepositoryId,
  sharedCommandFrom,
  SharedStreamWriter,
  sharedCommandsFrom,
  sourceSubject,
  stageMetadata,
  StreamCache,
  throwIfAborted,
  type LoadedStream,
} from './common.js';
import { loadRepositorySettings } from './repositorySettings.js';
import { chunked } from '../../util/chunked.js';

export interface ExtractConceptsDeps {
  store: EventStore;
  /** The read-model database: repository settings and the alias lookup. */
  knex: Knex;
  chat: ChatModel;
  /** `providers.decomposition.concept.fact_batch_size`. */
  batchSize: number;
  /** `providers.decomposition.concurrency.concept`: batches of one source in flight at once. */
  concurrency: number;
  maxAttempts: number;
}

type SourceFactsDeduplicated = Extract<SourceEvent, { type: 'SourceFactsDeduplicated' }>;

/**
 * The concept a merged concept's chain ends at, with its state (`none` when the stream is empty)
 * and its stream as read (to decide on without reading it again).
 */
export async function finalConcept(store: EventStore, conceptId: string): Promise<{ id: string; state: ConceptState; stream: LoadedStream<ConceptState> }> {
  const load = async (id: string) => {
    const stream = await loadStream(store, streamName('concept', id), conceptDecider);
    return { id, state: stream.state, stream };
  };
  const { node, ended } = await followMergeChain(await load(conceptId), async ({ state }) =>
    state.status === 'merged' && state.survivorId ? load(state.survivorId) : null,
  );
  if (!ended) throw new Error(`merge chain of concept ${conceptId} is longer than ${MAX_MERGE_CHAIN}: a cycle?`);
  return node;
}

/** The model's names that are strings, as distinctConceptNames keeps them (first spelling of each key). */
function cleanNames(names: readonly unknown[]): string[] {
  return distinctConceptNames(names.filter((name): name is string => typeof name === 'string'));
}

/**
 * An existing concept of the repository and context that a candidate names: one whose canonical
 * name or alias is the candidate's canonical name (`names[0]`), else one whose canonical name is
 * among the candidate's aliases; the smallest id among equals. Alias-to-alias matches are not
 * used: short aliases such as a surname are shared by different concepts ("Curie" of Marie and
 * of Pierre Curie), and matching them would fold those concepts into one. Null when none is known.
 * All candidates' look-ups go in one statement; the answers come in the order asked.
 */
async function lookupConcepts(knex: Knex, repositoryId: string, asked: readonly { context: string; names: readonly string[] }[]): Promise<Array<string | null>> {
  if (asked.length === 0) return [];
  // One row per name: the first of each candidate matches aliases, the others canonical names.
  const names = asked.flatMap(({ context, names }, index) =>
    names.map((name, position) => ({ i: index, context_lower: context.toLowerCase(), name_lower: conceptNameKey(name), canonical: position === 0 })),
  );
  const { rows } = await knex.raw<{ rows: Array<{ i: number; concept_id: string; by: number }> }>(
    // One index probe per name (LATERAL ... LIMIT 1, the smallest id): joined as sets, the planner
    // hashed the repository's whole concepts and aliases for a few names, a scan that grew with it.
    // Names meet by the keys conceptNameKey made (alias_lower, name_key), never by SQL lower():
    // in a C-ctype database that lower-cases ASCII only, so `ÉMILE ZOLA` missed `Émile Zola`.
    `WITH q AS (SELECT * FROM jsonb_to_recordset(?::jsonb) AS q(i integer, context_lower text, name_lower text, canonical boolean))
     SELECT q.i, a.concept_id, 0 AS by FROM q CROSS JOIN LATERAL (
         SELECT a.concept_id FROM concept_aliases a
          WHERE a.repository_id = ? AND a.context_lower = q.context_lower AND a.alias_lower = q.name_lower
          ORDER BY a.concept_id COLLATE "C" LIMIT 1) a
      WHERE q.canonical
     UNION ALL
     SELECT q.i, c.id AS concept_id, 1 AS by FROM q CROSS JOIN LATERAL (
         SELECT c.id FROM concepts c
          WHERE c.repository_id = ? AND c.name_key = q.name_lower AND lower(c.context) = q.context_lower
          ORDER BY c.id COLLATE "C" LIMIT 1) c
      WHERE NOT q.canonical`,
    [JSON.stringify(names), repositoryId, repositoryId],
  );
  return asked.map((_, index) => {
    const mine = rows.filter((row) => Number(row.i) === index);
    for (const by of [0, 1]) {
      const matches = mine.filter((row) => Number(row.by) === by);
      if (matches.length > 0) return matches.map((match) => match.concept_id).sort()[0] as string;
    }
    return null;
  });
}

/** Concept streams of one job (StreamCache): a concept's chain goes on while it is merged. */
function conceptStreamsOf(store: EventStore, folded: FoldedStates<ConceptState, ConceptEvent>): StreamCache<ConceptState, ConceptEvent> {
  return new StreamCache(
    store,
    'concept',
    conceptDecider,
    (state) => (state.status === 'merged' && state.survivorId ? state.survivorId : null),
    { omitData: conceptUnreadData },
    folded,
  );
}

/**
 * extract_concepts: the concepts the source's stable facts mention, in batches of
 * `fact_batch_size` facts with up to `concurrency` batches in flight. Each candidate is resolved
 * to an existing concept of the same context (lookupConcepts; merges followed), which gains the
 * candidate's names as aliases; otherwise it is created on
 * its derived id (racing twins meet on that stream). Each batch then records its links in one
 * ConceptsExtracted on the source, once per batch index, so a rerun redoes only missing batches.
 *
 * Alias resolution reads the `concept_aliases` read model, so a concept created moments ago by
 * a concurrent batch may not be found by an alias yet; refine_concepts merges such twins.
 */
export function createExtractConceptsStage(deps: ExtractConceptsDeps): Stage {
  if (!Number.isInteger(deps.batchSize) || deps.batchSize < 1) throw new RangeError('batchSize must be a positive integer');
  if (!Number.isInteger(deps.concurrency) || deps.concurrency < 1) throw new RangeError('concurrency must be a positive integer');
  const foldedConcepts = new FoldedStates<ConceptState, ConceptEvent>(conceptDecider, FOLDED_CONCEPTS);

  /** The context and clean names of a candidate, or null for model output to drop, not to fail on. */
  function usable(candidate: ConceptCandidate, contexts: readonly ConceptContextChoice[]): { context: ConceptContextChoice; names: string[] } | null {
    const context = contexts.find((choice) => choice.name.toLowerCase() === String(candidate.context ?? '').trim().toLowerCase());
    const names = cleanNames([candidate.canonicalName, ...(Array.isArray(candidate.aliases) ? candidate.aliases : [])]);
    // A context the repository does not allow, or no usable name.
    if (!context || names.length === 0 || names[0] !== conceptName(String(candidate.canonicalName))) return null;
    return { context, names };
  }

  /** What a candidate asks of the concept it resolved to, given that concept's state. */
  function commandFor(state: ConceptState, sourceId: string, candidate: ConceptCandidate, context: ConceptContextChoice, names: string[]): ConceptCommand {
    return state.status === 'none'
      ? { type: 'CreateConcept', canonicalName: names[0], context: context.name, ontologyClass: candidate.ontologyClass ?? null, aliases: names.slice(1), sourceId }
      : { type: 'AddAliases', aliases: names };
  }

  /**
   * Resolves a batch's candidates together: one look-up statement for all (lookupConcepts), their
   * concept streams and merge chains read together, every creation and alias appended in one
   * multi-stream append. Candidates are decided in order, each on the concept as the batch's
   * earlier candidates left it, as one at a time would be. Returns each candidate's concept id.
   */
  async function resolveCandidates(
    repositoryId: string,
    sourceId: string,
    candidates: ReadonlyArray<{ candidate: ConceptCandidate; context: ConceptContextChoice; names: string[] }>,
    metadata: EventMetadata,
  ): Promise<string[]> {
    const known = await lookupConcepts(deps.knex, repositoryId, candidates.map(({ context, names }) => ({ context: context.name, names })));
    const starts = candidates.map(({ context, names }, index) => known[index] ?? conceptIdFor(repositoryId, names[0], context.name));
    const concepts = conceptStreamsOf(deps.store, foldedConcepts);
    const finals = await concepts.finals(starts);
    const targets = starts.map((start) => (finals.get(start) as { id: string }).id);
    const states = new Map<string, ConceptState>();
    const commands = candidates.map(({ candidate, context, names }, index) => {
      const target = targets[index];
      const loaded = concepts.get(target);
      const command = commandFor(states.get(target) ?? loaded.state, sourceId, candidate, context, names);
      let state = states.get(target) ?? loaded.state;
      for (const event of conceptDecider.decide(command, state)) state = conceptDecider.evolve(state, event);
      states.set(target, state);
      return { streamId: streamName('concept', target), loaded, command };
    });
    const results = await sharedCommandsFrom(deps.store, conceptDecider, commands, metadata);
    const resolved: string[] = [];
    for (const [index, result] of results.entries()) {
      // Merged meanwhile (refinement, migration): record on the survivor instead, one at a time.
      resolved.push(result.state.status === 'merged' ? await recordOnSurvivor(targets[index], sourceId, candidates[index], metadata) : targets[index]);
    }
    return resolved;
  }

  /** A candidate whose concept was merged under it: follows the chain and records there, a few times at most. */
  async function recordOnSurvivor(
    mergedId: string,
    sourceId: string,
    { candidate, context, names }: { candidate: ConceptCandidate; context: ConceptContextChoice; names: string[] },
    metadata: EventMetadata,
  ): Promise<string> {
    let target = await finalConcept(deps.store, mergedId);
    for (let attempt = 0; attempt < 2; attempt++) {
      const command = commandFor(target.state, sourceId, candidate, context, names);
      const result = await sharedCommandFrom(deps.store, streamName('concept', target.id), conceptDecider, target.stream, command, metadata);
      if (result.state.status !== 'merged') return target.id;
      target = await finalConcept(deps.store, target.id);
    }
    return target.id;
  }

  return {
    kind: 'extract_concepts',
    onDead: failSourceOfDeadJob(deps.store, 'extract_concepts'),
    triggers: ['SourceFactsDeduplicated'],
    subjectOf: sourceSubject,
    // Reads its subject's stream; of the trigger only the row's id, repository and correlation.
    triggerFromJob: true,
    async run(context: JobContext) {
      const repositoryId = requireRepositoryId(context);
      const sourceId = context.job.subjectId;
      const stream = streamName('source', sourceId);
      const metadata = stageMetadata(context);
      const loaded = await loadStream(deps.store, stream, sourceDecider);
      const { state } = loaded;
      if (state.status !== 'processed' || !state.deduplicated || state.deleted) return;
      const deduplicated = loaded.events.find((event) => event.type === 'SourceFactsDeduplicated');
      const stableIds = [...new Set((deduplicated?.data as SourceFactsDeduplicated['data'] | undefined)?.stable_fact_ids ?? [])];
      if (stableIds.length === 0) return;
      const content = new Map(extractedFactsOf(loaded.events).map((fact) => [fact.fact_id, fact.content]));
      const batches = chunked(stableIds, deps.batchSize).map((ids) => ids.map((id) => ({ id, content: content.get(id) ?? '' })));
      const done = new Set(state.conceptBatches);
      if (batches.every((_, index) => done.has(index))) return;
      const settings = await loadRepositorySettings(deps.knex, repositoryId);
      const sourceWriter = new SharedStreamWriter(deps.store, stream, sourceDecider, loaded, metadata);
      await recordingSourceFailure(context, { store: deps.store, stream, stage: 'extract_concepts', maxAttempts: deps.maxAttempts }, async () => {
        await mapWithConcurrency(batches, deps.concurrency, async (facts, batchIndex) => {
          if (done.has(batchIndex)) return;
          throwIfAborted(context.signal);
          const candidates = await deps.chat.extractConcepts({ facts, contexts: settings.contexts, promptset: settings.promptset }, context.signal);
          const batchFactIds = new Set(facts.map((fact) => fact.id));
          const links = new Map<string, Set<string>>(facts.map((fact) => [fact.id, new Set<string>()]));
          const kept = candidates.flatMap((candidate) => {
            const mentioned = (Array.isArray(candidate.factIds) ? candidate.factIds : []).filter((id) => batchFactIds.has(id));
            const named = mentioned.length === 0 ? null : usable(candidate, settings.contexts);
            return named ? [{ candidate, mentioned, ...named }] : [];
          });
          throwIfAborted(context.signal);
          const conceptIds = await resolveCandidates(repositoryId, sourceId, kept, metadata);
          kept.forEach(({ mentioned }, index) => {
            for (const factId of mentioned) links.get(factId)?.add(conceptIds[index]);
          });
          throwIfAborted(context.signal);
          // Batches of this job append to one source stream, one after another; the decider
          // records each batch index once, so a twin's batch wins quietly.
          await sourceWriter.execute({
            type: 'RecordConceptBatch',
            modelId: deps.chat.modelId,
            promptsetHash: settings.promptset.hash,
            batchIndex,
            batchCount: batches.length,
            links: [...links].map(([factId, conceptIds]) => ({ fact_id: factId, concept_ids: [...conceptIds].sort() })),
          });
        });
      });
    },
  };
}

/** The registry's entry: batch size and concurrency from `providers.decomposition`. */
export const extractConceptsStage: StageDefinition = {
  kind: 'extract_concepts',
  enabled: () => true,
  create: ({ config, store, knex, chat }) =>
    createExtractConceptsStage({
      store,
      knex,
      chat,
      batchSize: config.providers.decomposition.concept.fact_batch_size,
      concurrency: config.providers.decomposition.concurrency.concept,
      maxAttempts: config.task.retry.max_attempts,
    }),
};
