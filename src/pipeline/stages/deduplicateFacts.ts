import type { Knex } from 'knex';
import { factDecider } from '../../domain/fact/decider.js';
import type { FactCommand, FactState } from '../../domain/fact/events.js';
import { sourceDecider, type SourceEvent } from '../../domain/source/decider.js';
import { handleCommand, loadState } from '../../eventstore/commandHandler.js';
import { streamName, type EventMetadata, type RecordedEvent } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import { unpackVector } from '../../interchange/vectors.js';
import type { SearchIndex } from '../../search/port.js';
import type { JobContext, Stage } from '../types.js';
import { extractedFactsOf } from './embedFacts.js';
import { commandOnSharedStream, requireRepositoryId, sourceSubject, stageMetadata, throwIfAborted } from './common.js';

/** How long a vector may take from its FactsEmbedded event to the search index, at most, for the catch-up window. */
export const CATCH_UP_INDEX_LAG_MARGIN_MS = 5 * 60_000;

export interface DeduplicateFactsDeps {
  store: EventStore;
  /** The read-model database: the catch-up pass lists recently stabilized facts from it. */
  knex: Knex;
  search: SearchIndex;
  /**
   * The embedder's model, or null without one. With an embedder the stage follows embed_facts
   * (trigger FactsEmbedded) and compares vectors of this model only; without one it follows
   * decomposition (trigger FactsExtracted) and stabilizes every new fact, since equal content
   * already means one fact id.
   */
  embedderModelId: string | null;
  /** `providers.dedup.threshold`: cosine similarity at or above which two facts are one. */
  threshold: number;
  /** `providers.dedup.catchup_max_age`: how far back the catch-up pass looks. */
  catchupMaxAgeMs: number;
  /** Neighbours fetched per fact; default 20. */
  neighbours?: number;
}

/** Where a fact stands after following its merge chain to the end. */
interface FinalFact {
  id: string;
  status: 'new' | 'stable';
}

/** Longest merge chain followed; a longer one means a cycle, which the rule never creates. */
const MAX_CHAIN = 64;

type FactsEmbedded = Extract<SourceEvent, { type: 'FactsEmbedded' }>;

async function factState(store: EventStore, factId: string): Promise<FactState> {
  return (await loadState(store, streamName('fact', factId), factDecider)).state;
}

/** The fact a merged (or removed) fact's chain ends at, with that fact's status. */
export async function finalFact(store: EventStore, factId: string): Promise<FinalFact> {
  let id = factId;
  for (let step = 0; step < MAX_CHAIN; step++) {
    const state = await factState(store, id);
    if (state.status === 'new' || state.status === 'stable') return { id, status: state.status };
    id = state.survivorId;
  }
  throw new Error(`merge chain of fact ${factId} is longer than ${MAX_CHAIN}: a cycle?`);
}

/** Vectors of `model` from a FactsEmbedded event, by fact id. */
function vectorsOf(event: RecordedEvent | undefined, model: string): Map<string, number[]> {
  const vectors = new Map<string, number[]>();
  if (!event || event.type !== 'FactsEmbedded') return vectors;
  const data = event.data as FactsEmbedded['data'];
  if (data.model !== model) return vectors;
  for (const entry of data.vectors) vectors.set(entry.fact_id, unpackVector(entry.vector));
  return vectors;
}

/** The source's FactsEmbedded of `model`, latest first wins. */
async function sourceVectors(store: EventStore, sourceId: string, model: string): Promise<Map<string, number[]>> {
  const events = await store.readStream(streamName('source', sourceId));
  for (let index = events.length - 1; index >= 0; index--) {
    const event = events[index];
    if (event.type === 'FactsEmbedded' && (event.data as FactsEmbedded['data']).model === model) return vectorsOf(event, model);
  }
  return new Map();
}

function isVectorSearchUnavailable(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { name?: unknown }).name === 'VectorSearchUnavailableError';
}

/**
 * deduplicate_facts (docs/pipeline.md, "Deduplication rule"). Per source (trigger FactsEmbedded,
 * or FactsExtracted without an embedder): every fact still `new` is merged into its most similar
 * stable neighbour, else into the smallest-id new neighbour with a smaller id, else stabilized;
 * then SourceFactsDeduplicated lists the outcome. Catch-up (scheduled per repository): stable
 * pairs at or above the threshold among recently created facts merge the larger id into the
 * smaller, repairing pairs whose jobs ran before each other's vectors were indexed.
 *
 * Each decision is appended to the fact's own stream with a re-read on a version conflict: the
 * fact decider records a decision once, so a twin (this source's or another source's job
 * deciding the same fact) leaves the first decision in place and this job reads it back.
 */
export function createDeduplicateFactsStage(deps: DeduplicateFactsDeps): Stage {
  if (!(deps.threshold > 0 && deps.threshold <= 1)) throw new RangeError('threshold must be in (0, 1]');
  const k = deps.neighbours ?? 20;

  /** Neighbours at or above the threshold, resolved to their chains' ends; null when vector search is unavailable. */
  async function similarFacts(repositoryId: string, selfId: string, vector: number[]): Promise<Map<string, FinalFact & { similarity: number }> | null> {
    let hits;
    try {
      ({ items: hits } = await deps.search.searchFactsByVector({ repositoryId, vector, k }));
    } catch (error) {
      if (isVectorSearchUnavailable(error)) return null;
      throw error;
    }
    const resolved = new Map<string, FinalFact & { similarity: number }>();
    for (const hit of hits) {
      if (hit.id === selfId || hit.score < deps.threshold) continue;
      const final = await finalFact(deps.store, hit.id);
      if (final.id === selfId) continue;
      const known = resolved.get(final.id);
      if (!known || known.similarity < hit.score) resolved.set(final.id, { ...final, similarity: hit.score });
    }
    return resolved;
  }

  async function decide(store: EventStore, factId: string, command: FactCommand, metadata: EventMetadata): Promise<FactState> {
    // Retries re-read the stream: after a twin's decision the decider decides nothing more.
    return (await commandOnSharedStream(store, streamName('fact', factId), factDecider, command, metadata)).state;
  }

  async function perSource(context: JobContext): Promise<void> {
    const repositoryId = requireRepositoryId(context);
    const sourceId = context.job.subjectId;
    const stream = streamName('source', sourceId);
    const metadata = stageMetadata(context);
    const { state } = await loadState(deps.store, stream, sourceDecider);
    if (state.status !== 'processed' || state.deduplicated) return;
    const vectors =
      deps.embedderModelId === null
        ? new Map<string, number[]>()
        : context.trigger.type === 'FactsEmbedded'
          ? vectorsOf(context.trigger, deps.embedderModelId)
          : await sourceVectors(deps.store, sourceId, deps.embedderModelId);
    const factIds = [...new Set((await extractedFactsOf(deps.store, sourceId)).map((fact) => fact.fact_id))].sort();
    const stable: string[] = [];
    const merged: Array<{ fact_id: string; survivor_id: string }> = [];
    let vectorSearch = deps.embedderModelId !== null;
    for (const factId of factIds) {
      throwIfAborted(context.signal);
      let outcome = await factState(deps.store, factId);
      if (outcome.status === 'new') {
        const vector = vectors.get(factId);
        const neighbours = vectorSearch && vector ? await similarFacts(repositoryId, factId, vector) : null;
        // The index has no vectors at all: the remaining facts need not ask again.
        if (vectorSearch && vector && neighbours === null) vectorSearch = false;
        const candidates = [...(neighbours?.values() ?? [])];
        const bestStable = candidates
          .filter((candidate) => candidate.status === 'stable')
          .sort((a, b) => b.similarity - a.similarity || (a.id < b.id ? -1 : 1))[0];
        const smallerNew = candidates
          .filter((candidate) => candidate.status === 'new' && candidate.id < factId)
          .sort((a, b) => (a.id < b.id ? -1 : 1))[0];
        const survivor = bestStable ?? smallerNew;
        const command: FactCommand = survivor
          ? { type: 'MergeFact', survivorId: survivor.id, similarity: survivor.similarity, sourceId, catchup: false }
          : { type: 'StabilizeFact', sourceId };
        outcome = await decide(deps.store, factId, command, metadata);
      }
      if (outcome.status === 'stable') stable.push(factId);
      else if (outcome.status !== 'new') merged.push({ fact_id: factId, survivor_id: outcome.survivorId });
    }
    throwIfAborted(context.signal);
    await handleCommand(
      deps.store,
      stream,
      sourceDecider,
      { type: 'RecordDeduplication', stableFactIds: stable, merged },
      metadata,
      { retries: 0 },
    );
  }

  /**
   * The oldest stabilization this pass must look at: `catchup_max_age` ago, or — when an earlier
   * pass of this repository succeeded — shortly before that pass was enqueued, whichever is later.
   * A pair that raced was stable by the time both dedup jobs finished, so an earlier pass saw it
   * unless one of its vectors was still on its way to the index: the margin covers that lag.
   * Each pass so compares only recent facts, not the whole window every interval.
   */
  async function catchUpWindowStart(context: JobContext, repositoryId: string): Promise<Date> {
    const now = Date.now();
    const oldest = now - deps.catchupMaxAgeMs;
    const previous: { created_at: Date | string } | undefined = await deps.knex('jobs')
      .where({ kind: 'deduplicate_facts', subject_id: repositoryId, state: 'succeeded', trigger_position: 0 })
      .whereNot('id', context.job.id)
      .orderBy('created_at', 'desc')
      .first('created_at');
    if (!previous) return new Date(oldest);
    const previousStart = new Date(previous.created_at).getTime() - CATCH_UP_INDEX_LAG_MARGIN_MS;
    return new Date(Math.max(oldest, previousStart));
  }

  async function catchUp(context: JobContext): Promise<void> {
    if (deps.embedderModelId === null) return;
    const model = deps.embedderModelId;
    const repositoryId = requireRepositoryId(context);
    const metadata = stageMetadata(context);
    const since = await catchUpWindowStart(context, repositoryId);
    const rows: Array<{ id: string; source_id: string | null }> = await deps.knex('facts')
      .leftJoin('fact_sources', 'fact_sources.fact_id', 'facts.id')
      .where('facts.repository_id', repositoryId)
      .where('facts.status', 'stable')
      .where('facts.stable_since', '>=', since)
      .select('facts.id', 'fact_sources.source_id')
      .orderBy([{ column: 'facts.id' }, { column: 'fact_sources.source_id' }]);
    // One source with a vector is enough per fact: read each source stream once.
    const sourcesOf = new Map<string, string[]>();
    for (const row of rows) {
      const list = sourcesOf.get(row.id) ?? [];
      if (row.source_id) list.push(row.source_id);
      sourcesOf.set(row.id, list);
    }
    const vectorsBySource = new Map<string, Map<string, number[]>>();
    const vectorOf = async (factId: string): Promise<number[] | undefined> => {
      for (const sourceId of sourcesOf.get(factId) ?? []) {
        let vectors = vectorsBySource.get(sourceId);
        if (!vectors) {
          vectors = await sourceVectors(deps.store, sourceId, model);
          vectorsBySource.set(sourceId, vectors);
        }
        const vector = vectors.get(factId);
        if (vector) return vector;
      }
      return undefined;
    };
    for (const factId of sourcesOf.keys()) {
      throwIfAborted(context.signal);
      const self = await finalFact(deps.store, factId);
      if (self.id !== factId || self.status !== 'stable') continue;
      const vector = await vectorOf(factId);
      if (!vector) continue;
      const neighbours = await similarFacts(repositoryId, factId, vector);
      if (neighbours === null) return;
      const bySimilarity = [...neighbours.values()].sort((a, b) => b.similarity - a.similarity || (a.id < b.id ? -1 : 1));
      for (const neighbour of bySimilarity) {
        // Both ends may have moved: an earlier merge of this pass may have folded either.
        const [mine, theirs] = [await finalFact(deps.store, factId), await finalFact(deps.store, neighbour.id)];
        if (mine.id === theirs.id || mine.status !== 'stable' || theirs.status !== 'stable') continue;
        const [survivor, loser] = mine.id < theirs.id ? [mine.id, theirs.id] : [theirs.id, mine.id];
        await decide(
          deps.store,
          loser,
          { type: 'MergeFact', survivorId: survivor, similarity: neighbour.similarity, sourceId: null, catchup: true },
          metadata,
        );
      }
    }
  }

  return {
    kind: 'deduplicate_facts',
    triggers: deps.embedderModelId === null ? ['FactsExtracted'] : ['FactsEmbedded'],
    subjectOf: sourceSubject,
    run: (context) => (context.scheduled ? catchUp(context) : perSource(context)),
  };
}
