import type { Knex } from 'knex';
import { conceptDecider, conceptIdFor, MAX_CONCEPT_NAME_CHARS } from '../../domain/concept/decider.js';
import type { ConceptState } from '../../domain/concept/events.js';
import { sourceDecider, type SourceEvent } from '../../domain/source/decider.js';
import { loadState } from '../../eventstore/commandHandler.js';
import { streamName, type EventMetadata } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { ChatModel, ConceptCandidate, ConceptContextChoice } from '../../providers/llm/port.js';
import type { JobContext, Stage } from '../types.js';
import { extractedFactsOf } from './embedFacts.js';
import { commandOnSharedStream, mapWithConcurrency, recordingSourceFailure, requireRepositoryId, sourceSubject, stageMetadata, throwIfAborted } from './common.js';
import { loadRepositorySettings } from './repositorySettings.js';

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

/** Longest merge chain followed; a longer one means a cycle. */
const MAX_CHAIN = 64;

/** The concept a merged concept's chain ends at, with its state (`none` when the stream is empty). */
export async function finalConcept(store: EventStore, conceptId: string): Promise<{ id: string; state: ConceptState }> {
  let id = conceptId;
  for (let step = 0; step < MAX_CHAIN; step++) {
    const { state } = await loadState(store, streamName('concept', id), conceptDecider);
    if (state.status !== 'merged' || !state.survivorId) return { id, state };
    id = state.survivorId;
  }
  throw new Error(`merge chain of concept ${conceptId} is longer than ${MAX_CHAIN}: a cycle?`);
}

/** Trimmed, non-empty, not over-long names, deduplicated case-insensitively (first spelling kept). */
function cleanNames(names: readonly string[]): string[] {
  const seen = new Set<string>();
  const clean: string[] = [];
  for (const raw of names) {
    if (typeof raw !== 'string') continue;
    const name = raw.trim();
    if (name === '' || name.length > MAX_CONCEPT_NAME_CHARS || seen.has(name.toLowerCase())) continue;
    seen.add(name.toLowerCase());
    clean.push(name);
  }
  return clean;
}

/**
 * An existing concept of the repository and context that a candidate names: one whose canonical
 * name or alias is the candidate's canonical name (`names[0]`), else one whose canonical name is
 * among the candidate's aliases; the smallest id among equals. Alias-to-alias matches are not
 * used: short aliases such as a surname are shared by different concepts ("Curie" of Marie and
 * of Pierre Curie), and matching them would fold those concepts into one. Null when none is known.
 */
async function lookupConcept(knex: Knex, repositoryId: string, context: string, names: readonly string[]): Promise<string | null> {
  const lowers = names.map((name) => name.toLowerCase());
  const contextLower = context.toLowerCase();
  const byCanonical: Array<{ concept_id: string }> = await knex('concept_aliases')
    .where({ repository_id: repositoryId, context_lower: contextLower, alias_lower: lowers[0] })
    .select('concept_id');
  const byAlias: Array<{ concept_id: string }> = await knex('concepts')
    .where({ repository_id: repositoryId })
    .whereRaw('lower(context) = ?', [contextLower])
    .whereRaw('lower(canonical_name) = ANY(?::text[])', [lowers.slice(1)])
    .select(knex.raw('id AS concept_id'));
  for (const matches of [byCanonical, byAlias]) {
    if (matches.length > 0) return matches.map((match) => match.concept_id).sort()[0];
  }
  return null;
}

/**
 * extract_concepts: the concepts the source's stable facts mention, in batches of
 * `fact_batch_size` facts with up to `concurrency` batches in flight. Each candidate is resolved
 * to an existing concept of the same context (lookupConcept; merges followed), which gains the
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

  async function resolveCandidate(
    repositoryId: string,
    sourceId: string,
    candidate: ConceptCandidate,
    contexts: readonly ConceptContextChoice[],
    metadata: EventMetadata,
  ): Promise<string | null> {
    const context = contexts.find((choice) => choice.name.toLowerCase() === String(candidate.context ?? '').trim().toLowerCase());
    const names = cleanNames([candidate.canonicalName, ...(Array.isArray(candidate.aliases) ? candidate.aliases : [])]);
    // A context the repository does not allow, or no usable name: model output to drop, not to fail on.
    if (!context || names.length === 0 || names[0] !== String(candidate.canonicalName).trim()) return null;
    const known = await lookupConcept(deps.knex, repositoryId, context.name, names);
    const start = known ?? conceptIdFor(repositoryId, names[0], context.name);
    let target = await finalConcept(deps.store, start);
    for (let attempt = 0; attempt < 3; attempt++) {
      const stream = streamName('concept', target.id);
      const result =
        target.state.status === 'none'
          ? await commandOnSharedStream(
              deps.store,
              stream,
              conceptDecider,
              {
                type: 'CreateConcept',
                canonicalName: names[0],
                context: context.name,
                ontologyClass: candidate.ontologyClass ?? null,
                aliases: names.slice(1),
                sourceId,
              },
              metadata,
            )
          : await commandOnSharedStream(deps.store, stream, conceptDecider, { type: 'AddAliases', aliases: names }, metadata);
      // Merged meanwhile (refinement, migration): record on the survivor instead.
      if (result.state.status !== 'merged') return target.id;
      target = await finalConcept(deps.store, target.id);
    }
    return target.id;
  }

  return {
    kind: 'extract_concepts',
    triggers: ['SourceFactsDeduplicated'],
    subjectOf: sourceSubject,
    async run(context: JobContext) {
      const repositoryId = requireRepositoryId(context);
      const sourceId = context.job.subjectId;
      const stream = streamName('source', sourceId);
      const metadata = stageMetadata(context);
      const { state } = await loadState(deps.store, stream, sourceDecider);
      if (state.status !== 'processed' || !state.deduplicated) return;
      const deduplicated = (await deps.store.readStream(stream)).find((event) => event.type === 'SourceFactsDeduplicated');
      const stableIds = [...new Set((deduplicated?.data as SourceFactsDeduplicated['data'] | undefined)?.stable_fact_ids ?? [])];
      if (stableIds.length === 0) return;
      const content = new Map((await extractedFactsOf(deps.store, sourceId)).map((fact) => [fact.fact_id, fact.content]));
      const batches: Array<Array<{ id: string; content: string }>> = [];
      for (let start = 0; start < stableIds.length; start += deps.batchSize) {
        batches.push(stableIds.slice(start, start + deps.batchSize).map((id) => ({ id, content: content.get(id) ?? '' })));
      }
      const done = new Set(state.conceptBatches);
      if (batches.every((_, index) => done.has(index))) return;
      const settings = await loadRepositorySettings(deps.knex, repositoryId);
      await recordingSourceFailure(context, { store: deps.store, stream, stage: 'extract_concepts', maxAttempts: deps.maxAttempts }, async () => {
        await mapWithConcurrency(batches, deps.concurrency, async (facts, batchIndex) => {
          if (done.has(batchIndex)) return;
          throwIfAborted(context.signal);
          const candidates = await deps.chat.extractConcepts({ facts, contexts: settings.contexts, promptset: settings.promptset }, context.signal);
          const batchFactIds = new Set(facts.map((fact) => fact.id));
          const links = new Map<string, Set<string>>(facts.map((fact) => [fact.id, new Set<string>()]));
          for (const candidate of candidates) {
            throwIfAborted(context.signal);
            const mentioned = (Array.isArray(candidate.factIds) ? candidate.factIds : []).filter((id) => batchFactIds.has(id));
            if (mentioned.length === 0) continue;
            const conceptId = await resolveCandidate(repositoryId, sourceId, candidate, settings.contexts, metadata);
            if (conceptId === null) continue;
            for (const factId of mentioned) links.get(factId)?.add(conceptId);
          }
          throwIfAborted(context.signal);
          // Batches of this job append to one source stream: a conflict with a sibling batch is
          // retried; the decider records each batch index once, so a twin's batch wins quietly.
          await commandOnSharedStream(
            deps.store,
            stream,
            sourceDecider,
            {
              type: 'RecordConceptBatch',
              modelId: deps.chat.modelId,
              promptsetHash: settings.promptset.hash,
              batchIndex,
              batchCount: batches.length,
              links: [...links].map(([factId, conceptIds]) => ({ fact_id: factId, concept_ids: [...conceptIds].sort() })),
            },
            metadata,
          );
        });
      });
    },
  };
}
