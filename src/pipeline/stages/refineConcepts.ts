import type { Knex } from 'knex';
import { parseDuration } from '../../config/duration.js';
import { conceptDecider, conceptNameKey } from '../../domain/concept/decider.js';
import { streamName } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { ChatModel, RefinementInput } from '../../providers/llm/port.js';
import type { JobContext, Stage, StageDefinition } from '../types.js';
import { mapWithConcurrency } from '../../util/concurrency.js';
import { commandOnSharedStream, requireRepositoryId, stageMetadata, throwIfAborted } from './common.js';
import { finalConcept } from './extractConcepts.js';
import { isLiveRepository, loadRepositorySettings } from './repositorySettings.js';

export interface RefineConceptsDeps {
  store: EventStore;
  knex: Knex;
  chat: ChatModel;
  /** `providers.refinement.max_candidates_per_run`: concepts per context shown to the model. */
  maxCandidates: number;
  /** `providers.refinement.prune_threshold`: concepts with this many aliases get them pruned. */
  pruneThreshold: number;
  /** `providers.refinement.max_concurrency`: contexts refined at once. */
  maxConcurrency: number;
}

type Candidate = RefinementInput['concepts'][number];

/**
 * The concepts of each context worth a look, per context (the read model keeps the canonical
 * name as an alias row too, told apart by its key `name_key`; it is not counted or shown as an alias): those carrying at least
 * `pruneThreshold` aliases first, then the most recently changed, up to `limit` per context.
 */
async function candidatesByContext(knex: Knex, repositoryId: string, limit: number, pruneThreshold: number): Promise<Candidate[][]> {
  const rows: Array<{ id: string; canonical_name: string; context: string; fact_count: number; alias_count: number; updated_at: unknown }> =
    await knex('concepts as c')
      .leftJoin('concept_aliases as a', 'a.concept_id', 'c.id')
      .where('c.repository_id', repositoryId)
      .where('c.status', 'active')
      .groupBy('c.id', 'c.canonical_name', 'c.context', 'c.fact_count', 'c.updated_at')
      .select('c.id', 'c.canonical_name', 'c.context', 'c.fact_count', 'c.updated_at', knex.raw(`(count(a.alias) FILTER (WHERE a.alias_lower <> c.name_key))::integer AS alias_count`))
      .orderBy([
        { column: 'c.context' },
        { column: 'c.updated_at', order: 'desc' },
        { column: 'c.id' },
      ]);
  const groups = new Map<string, typeof rows>();
  for (const row of rows) {
    const key = row.context.toLowerCase();
    const group = groups.get(key) ?? [];
    group.push(row);
    groups.set(key, group);
  }
  const aliasesOf = async (ids: string[]): Promise<Map<string, string[]>> => {
    const aliasRows: Array<{ concept_id: string; alias: string }> = await knex('concept_aliases').whereIn('concept_id', ids).orderBy(['concept_id', 'alias']).select('concept_id', 'alias');
    const map = new Map<string, string[]>();
    for (const row of aliasRows) map.set(row.concept_id, [...(map.get(row.concept_id) ?? []), row.alias]);
    return map;
  };
  const result: Candidate[][] = [];
  for (const group of groups.values()) {
    // A single concept can only have aliases pruned; without enough aliases there is nothing to ask.
    const heavy = group.filter((row) => row.alias_count >= pruneThreshold);
    const picked = [...heavy, ...group.filter((row) => row.alias_count < pruneThreshold)].slice(0, limit);
    if (picked.length < 2 && heavy.length === 0) continue;
    const aliases = await aliasesOf(picked.map((row) => row.id));
    result.push(
      picked.map((row) => ({
        id: row.id,
        canonicalName: row.canonical_name,
        context: row.context,
        aliases: (aliases.get(row.id) ?? []).filter((alias) => conceptNameKey(alias) !== conceptNameKey(row.canonical_name)),
        factCount: Number(row.fact_count),
      })),
    );
  }
  return result;
}

/**
 * refine_concepts (scheduled per repository when providers.refinement.enabled): per context,
 * asks the chat model which concepts name the same thing and which aliases to prune, then
 * records ConceptMergedInto and ConceptAliasRemoved. Decisions naming concepts outside the
 * candidates, or merging a concept into itself, are model output to drop; merges follow chains
 * so a survivor merged earlier in the run hands over to its own survivor.
 */
export function createRefineConceptsStage(deps: RefineConceptsDeps): Stage {
  return {
    kind: 'refine_concepts',
    deferred: true,
    triggers: [],
    subjectOf: () => null,
    async run(context: JobContext) {
      const repositoryId = requireRepositoryId(context);
      // Deleted after the scheduler enqueued this run: nothing to refine.
      if (!(await isLiveRepository(deps.knex, repositoryId))) return;
      const { promptset } = await loadRepositorySettings(deps.knex, repositoryId);
      const groups = await candidatesByContext(deps.knex, repositoryId, deps.maxCandidates, deps.pruneThreshold);
      const metadata = stageMetadata(context);
      await mapWithConcurrency(groups, Math.max(1, deps.maxConcurrency), async (concepts) => {
        throwIfAborted(context.signal);
        const decisions = await deps.chat.refineConcepts({ concepts, pruneThreshold: deps.pruneThreshold, promptset }, context.signal);
        const known = new Set(concepts.map((concept) => concept.id));
        for (const decision of decisions) {
          throwIfAborted(context.signal);
          if (decision.type === 'merge') {
            if (!known.has(decision.loserId) || !known.has(decision.survivorId) || decision.loserId === decision.survivorId) continue;
            const loser = await finalConcept(deps.store, decision.loserId);
            const survivor = await finalConcept(deps.store, decision.survivorId);
            if (loser.id !== decision.loserId || loser.state.status !== 'active' || survivor.id === loser.id || survivor.state.status !== 'active') continue;
            await commandOnSharedStream(
              deps.store,
              streamName('concept', loser.id),
              conceptDecider,
              { type: 'MergeConcept', survivorId: survivor.id, reason: decision.reason || 'refinement' },
              metadata,
            );
          } else if (decision.type === 'remove_alias') {
            if (!known.has(decision.conceptId)) continue;
            await commandOnSharedStream(
              deps.store,
              streamName('concept', decision.conceptId),
              conceptDecider,
              { type: 'RemoveAlias', alias: decision.alias, reason: decision.reason || 'refinement' },
              metadata,
            );
          }
        }
      });
    },
  };
}

/** The registry's entry: `providers.refinement`; scheduled at the relations' interval, never triggered by an event. */
export const refineConceptsStage: StageDefinition = {
  kind: 'refine_concepts',
  enabled: (config) => config.providers.refinement.enabled,
  create: ({ config, store, knex, chat }) =>
    createRefineConceptsStage({
      store,
      knex,
      chat,
      maxCandidates: config.providers.refinement.max_candidates_per_run,
      pruneThreshold: config.providers.refinement.prune_threshold,
      maxConcurrency: config.providers.refinement.max_concurrency,
    }),
  periodicIntervalMs: (config) => parseDuration(config.task.refresh_concept_relations_interval),
};
