import type { Knex } from 'knex';
import { parseDuration } from '../../config/duration.js';
import { factDecider } from '../../domain/fact/decider.js';
import type { FactCommand, FactEvent, FactState } from '../../domain/fact/events.js';
import type { UnreadData } from '../../domain/decider.js';
import { sourceDecider, type SourceEvent } from '../../domain/source/decider.js';
import { streamName, type RecordedEvent } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import { unpackVector } from '../../interchange/vectors.js';
import { facts } from '../../search/collections/index.js';
import type { SearchIndex } from '../../search/port.js';
import { embeddingsConfigured, type JobContext, type Stage, type StageDefinition } from '../types.js';
import { extractedFactsOf } from './embedFacts.js';
import {
  commandFrom,
  loadStream,
  requireRepositoryId,
  sharedCommandsFrom,
  StreamCache,
  sourceSubject,
  stageMetadata,
  throwIfAborted,
  type BatchCommand,
  type LoadedStream,
} from './common.js';

/** Facts the catch-up pass compares per step (streams read, k-NN asked and merges appended together). */
const CATCH_UP_SLICE = 200;

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
  /** Facts the catch-up pass compares per step, about (whole sources); default CATCH_UP_SLICE. */
  catchUpSlice?: number;
}

/** Where a fact stands after following its merge chain to the end. */
interface FinalFact {
  id: string;
  status: 'new' | 'stable';
}

type FactsEmbedded = Extract<SourceEvent, { type: 'FactsEmbedded' }>;

/** The fact a merged (or removed) fact's chain ends at, with that fact's status. A longer chain than MAX_MERGE_CHAIN means a cycle, which the rule never creates. */
export async function finalFact(store: EventStore, factId: string): Promise<FinalFact> {
  const end = (await factStreamsOf(store).finals([factId])).get(factId) as { id: string; stream: LoadedStream<FactState> };
  const { status } = end.stream.state;
  // A retracted fact that is extracted again is decided about as a new one.
  if (status === 'retracted') return { id: end.id, status: 'new' };
  if (status !== 'new' && status !== 'stable') throw new Error(`unreachable: the chain of fact ${factId} ended at a ${status} fact`);
  return { id: end.id, status };
}

/** Fact streams of one job (StreamCache): a fact's chain goes on while it is merged or removed. */
function factStreamsOf(store: EventStore): StreamCache<FactState, FactEvent> {
  return new StreamCache(store, 'fact', factDecider, (state) => (state.status === 'merged' || state.status === 'removed' ? state.survivorId : null));
}

/**
 * The vectors of `model` among a source's events, by fact id: every FactsEmbedded of the model
 * (a large source's vectors come in several parts), a later vector of a fact replacing an earlier.
 */
function vectorsOf(events: readonly RecordedEvent[], model: string): Map<string, number[]> {
  const vectors = new Map<string, number[]>();
  for (const event of events) {
    if (event.type !== 'FactsEmbedded') continue;
    const data = event.data as FactsEmbedded['data'];
    if (data.model !== model) continue;
    for (const entry of data.vectors) vectors.set(entry.fact_id, unpackVector(entry.vector));
  }
  return vectors;
}

/** What a reader of a source's vectors leaves out: the facts' text and the concept links (most of a stream's other bytes). */
const vectorReadOmits = {
  FactsExtracted: ['facts'],
  ConceptsExtracted: ['links'],
} as const satisfies UnreadData<SourceEvent>;

/**
 * The catch-up's facts in slices of about `size`, a source's facts never split: facts go by
 * their first source (`sourcesOf` lists each fact's sources by id), in fact-id order within it. A fact with no source has no vector
 * to compare and is left out.
 */
export function slicesBySource(sourcesOf: ReadonlyMap<string, readonly string[]>, size: number): string[][] {
  const bySource = new Map<string, string[]>();
  for (const [factId, sources] of sourcesOf) {
    const [first] = sources;
    if (first === undefined) continue;
    const facts = bySource.get(first) ?? [];
    facts.push(factId);
    bySource.set(first, facts);
  }
  const slices: string[][] = [];
  let current: string[] = [];
  for (const source of [...bySource.keys()].sort()) {
    const facts = (bySource.get(source) ?? []).sort();
    if (current.length > 0 && current.length + facts.length > size) {
      slices.push(current);
      current = [];
    }
    current.push(...facts);
  }
  if (current.length > 0) slices.push(current);
  return slices;
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

  /** k-NN hits of each vector, or null when vector search is unavailable. */
  async function nearestOf(repositoryId: string, vectors: ReadonlyArray<readonly [string, number[]]>): Promise<Map<string, Array<{ id: string; score: number }>> | null> {
    if (vectors.length === 0) return new Map();
    try {
      // Only other facts at the threshold count (below): the index need not bring the others. The
      // fact itself was one of the k nearest (its own vector, similarity 1), so k - 1 others.
      const others = Math.max(1, k - 1);
      const answers = await deps.search.knnMany(facts, vectors.map(([factId, vector]) => ({ repositoryId, vector, k: others, minScore: deps.threshold, exclude: [factId] })));
      return new Map(vectors.map(([factId], index) => [factId, answers[index].items]));
    } catch (error) {
      if (isVectorSearchUnavailable(error)) return null;
      throw error;
    }
  }

  /**
   * The source's facts in a few statements whatever their number: their streams in one read, the
   * k-NN of every new fact's vector in one query, the merge chains of the neighbours followed
   * together, every decision appended in one multi-stream append. Facts are decided in id order,
   * each on the streams as this job's earlier decisions left them, as one fact at a time would be.
   */
  async function perSource(context: JobContext): Promise<void> {
    const repositoryId = requireRepositoryId(context);
    const sourceId = context.job.subjectId;
    const stream = streamName('source', sourceId);
    const metadata = stageMetadata(context);
    const loaded = await loadStream(deps.store, stream, sourceDecider);
    const { state } = loaded;
    if (state.status !== 'processed' || state.deduplicated || state.deleted) return;
    // A part of the source's vectors while embed_facts still records the others: the job of the
    // part that completes them deduplicates the source, with every vector.
    const model = deps.embedderModelId;
    if (model !== null && state.embeddedFactIds[model] !== undefined && !state.embeddedWith.includes(model)) return;
    const vectors = model === null ? new Map<string, number[]>() : vectorsOf(loaded.events, model);
    const factIds = [...new Set(extractedFactsOf(loaded.events).map((fact) => fact.fact_id))].sort();
    const factStreams = factStreamsOf(deps.store);
    await factStreams.load(factIds);
    throwIfAborted(context.signal);
    // A retracted fact here was extracted again (the source deleted before this one was not its last).
    const undecided = factIds.filter((factId) => ['new', 'retracted'].includes(factStreams.get(factId).state.status));
    const searched = deps.embedderModelId === null ? [] : undecided.flatMap((factId) => (vectors.has(factId) ? [[factId, vectors.get(factId) as number[]] as const] : []));
    const nearest = (await nearestOf(repositoryId, searched)) ?? new Map<string, Array<{ id: string; score: number }>>();
    const close = new Map<string, Array<{ id: string; score: number }>>();
    for (const [factId, hits] of nearest) close.set(factId, hits.filter((hit) => hit.id !== factId && hit.score >= deps.threshold));
    // Every neighbour's stream and chain, read before any decision; decisions below update them.
    await factStreams.finals([...new Set([...close.values()].flat().map((hit) => hit.id))]);
    throwIfAborted(context.signal);
    const decisions: Array<BatchCommand<FactState, FactCommand>> = [];
    for (const factId of undecided) {
      const resolved = new Map<string, FinalFact & { similarity: number }>();
      const hits = close.get(factId) ?? [];
      const finals = await factStreams.finals(hits.map((hit) => hit.id));
      for (const hit of hits) {
        const end = finals.get(hit.id) as { id: string; stream: LoadedStream<FactState> };
        const { status } = end.stream.state;
        if (end.id === factId || (status !== 'new' && status !== 'stable')) continue;
        const final: FinalFact = { id: end.id, status };
        const known = resolved.get(final.id);
        if (!known || known.similarity < hit.score) resolved.set(final.id, { ...final, similarity: hit.score });
      }
      const candidates = [...resolved.values()];
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
      const factStream = factStreams.get(factId);
      decisions.push({ streamId: streamName('fact', factId), loaded: factStream, command });
      // What later facts of this job see: the decision as if it were appended already.
      let decided = factStream.state;
      for (const event of factDecider.decide(command, decided)) decided = factDecider.evolve(decided, event);
      factStreams.set(factId, { ...factStream, state: decided });
    }
    // Decided on the streams as read; a stream that moved meanwhile is re-read and re-decided.
    const results = await sharedCommandsFrom(deps.store, factDecider, decisions, metadata);
    const outcomes = new Map(decisions.map((decision, index) => [decision.streamId, results[index].state]));
    const stable: string[] = [];
    const merged: Array<{ fact_id: string; survivor_id: string }> = [];
    for (const factId of factIds) {
      const outcome = outcomes.get(streamName('fact', factId)) ?? factStreams.get(factId).state;
      if (outcome.status === 'stable') stable.push(factId);
      else if (outcome.status === 'merged' || outcome.status === 'removed') merged.push({ fact_id: factId, survivor_id: outcome.survivorId });
    }
    throwIfAborted(context.signal);
    await commandFrom(
      deps.store,
      stream,
      sourceDecider,
      loaded,
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
    // One source with a vector is enough per fact.
    const sourcesOf = new Map<string, string[]>();
    for (const row of rows) {
      const list = sourcesOf.get(row.id) ?? [];
      if (row.source_id) list.push(row.source_id);
      sourcesOf.set(row.id, list);
    }
    for (const list of sourcesOf.values()) list.sort();
    const factStreams = factStreamsOf(deps.store);
    // In slices, so a long window neither holds every stream at once nor sends one huge query.
    // A slice holds whole sources (the facts by their first source): each source's vectors are
    // read once a pass, where slices in fact-id order read every source in nearly every slice.
    for (const slice of slicesBySource(sourcesOf, deps.catchUpSlice ?? CATCH_UP_SLICE)) {
      throwIfAborted(context.signal);
      const selves = await factStreams.finals(slice);
      const live = slice.filter((factId) => selves.get(factId)?.id === factId && selves.get(factId)?.stream.state.status === 'stable');
      // The vector of each fact from its first source that has one: the first sources read
      // together (only their vectors), a fact's other sources only when its first has none.
      const vectorsBySource = new Map<string, Map<string, number[]>>();
      const readVectors = async (sourceIds: Iterable<string>) => {
        const unread = [...new Set(sourceIds)].filter((id) => !vectorsBySource.has(id));
        if (unread.length === 0) return;
        const streams = await deps.store.readStreams(unread.map((id) => streamName('source', id)), { omitData: vectorReadOmits });
        for (const id of unread) vectorsBySource.set(id, vectorsOf(streams.get(streamName('source', id)) ?? [], model));
      };
      const vectorOf = (factId: string) => {
        for (const sourceId of sourcesOf.get(factId) ?? []) {
          const vector = vectorsBySource.get(sourceId)?.get(factId);
          if (vector) return vector;
        }
        return undefined;
      };
      await readVectors(live.flatMap((factId) => (sourcesOf.get(factId) ?? []).slice(0, 1)));
      await readVectors(live.filter((factId) => !vectorOf(factId)).flatMap((factId) => sourcesOf.get(factId) ?? []));
      const searched = live.flatMap((factId) => {
        const vector = vectorOf(factId);
        return vector ? [[factId, vector] as const] : [];
      });
      const nearest = await nearestOf(repositoryId, searched);
      if (nearest === null) return;
      const close = [...nearest].map(([factId, hits]) => [factId, hits.filter((hit) => hit.id !== factId && hit.score >= deps.threshold)] as const);
      await factStreams.finals([...new Set(close.flatMap(([, hits]) => hits.map((hit) => hit.id)))]);
      const merges: Array<BatchCommand<FactState, FactCommand>> = [];
      for (const [factId, hits] of close) {
        // Resolved to chain ends, the most similar first.
        const finals = await factStreams.finals(hits.map((hit) => hit.id));
        const neighbours = new Map<string, { id: string; similarity: number }>();
        for (const hit of hits) {
          const end = finals.get(hit.id) as { id: string };
          if (end.id === factId) continue;
          const known = neighbours.get(end.id);
          if (!known || known.similarity < hit.score) neighbours.set(end.id, { id: end.id, similarity: hit.score });
        }
        const bySimilarity = [...neighbours.values()].sort((a, b) => b.similarity - a.similarity || (a.id < b.id ? -1 : 1));
        for (const neighbour of bySimilarity) {
          // Both ends may have moved: an earlier merge of this pass may have folded either.
          const ends = await factStreams.finals([factId, neighbour.id]);
          const [mine, theirs] = [ends.get(factId), ends.get(neighbour.id)] as Array<{ id: string; stream: LoadedStream<FactState> }>;
          if (mine.id === theirs.id || mine.stream.state.status !== 'stable' || theirs.stream.state.status !== 'stable') continue;
          const [survivor, loser] = mine.id < theirs.id ? [mine, theirs] : [theirs, mine];
          const command: FactCommand = { type: 'MergeFact', survivorId: survivor.id, similarity: neighbour.similarity, sourceId: null, catchup: true };
          merges.push({ streamId: streamName('fact', loser.id), loaded: factStreams.get(loser.id), command });
          let state = loser.stream.state;
          for (const event of factDecider.decide(command, state)) state = factDecider.evolve(state, event);
          factStreams.set(loser.id, { ...factStreams.get(loser.id), state });
        }
      }
      // Decided on the streams as read; a stream that moved meanwhile is re-read and re-decided.
      await sharedCommandsFrom(deps.store, factDecider, merges, metadata);
    }
  }

  return {
    kind: 'deduplicate_facts',
    triggers: deps.embedderModelId === null ? ['FactsExtracted'] : ['FactsEmbedded'],
    subjectOf: sourceSubject,
    // Reads its subject's stream; of the trigger only the row's id, repository and correlation.
    triggerFromJob: true,
    run: (context) => (context.scheduled ? catchUp(context) : perSource(context)),
  };
}

/** The registry's entry; the periodic catch-up compares vectors, so it runs only with an embedder. */
export const deduplicateFactsStage: StageDefinition = {
  kind: 'deduplicate_facts',
  enabled: () => true,
  create: ({ config, store, knex, search, embedder }) =>
    createDeduplicateFactsStage({
      store,
      knex,
      search,
      embedderModelId: embedder?.modelId ?? null,
      threshold: config.providers.dedup.threshold,
      catchupMaxAgeMs: parseDuration(config.providers.dedup.catchup_max_age),
    }),
  periodicIntervalMs: (config) => (embeddingsConfigured(config) ? parseDuration(config.providers.dedup.catchup_interval) : null),
};
