import type { Knex } from 'knex';
import { parseDuration } from '../../config/duration.js';
import { repositoryDecider } from '../../domain/repository/decider.js';
import { handleCommand } from '../../eventstore/commandHandler.js';
import { streamName } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { JobContext, Stage, StageDefinition } from '../types.js';
import { requireRepositoryId, stageMetadata, throwIfAborted } from './common.js';
import { isLiveRepository } from './repositorySettings.js';

export interface RefreshConceptRelationsDeps {
  store: EventStore;
  knex: Knex;
}

/** One changed pair, as ConceptRelationsRefreshed records it (concept_a < concept_b; 0 = no longer related). */
export interface RelationChange {
  concept_a: string;
  concept_b: string;
  shared_fact_count: number;
}

/**
 * Pairs of concepts that share facts now, by shared fact count, against the relations the read
 * model holds; only differences are returned, in (concept_a, concept_b) order. Facts merged
 * into another (and their links, which moved to the survivor) do not count; ids compare
 * byte-wise (COLLATE "C") so "a < b" means the same here and in JavaScript.
 */
export async function relationChanges(knex: Knex, repositoryId: string): Promise<RelationChange[]> {
  const current = await knex.raw<{ rows: Array<{ concept_a: string; concept_b: string; shared: number }> }>(
    `SELECT a.concept_id AS concept_a, b.concept_id AS concept_b, count(DISTINCT a.fact_id)::integer AS shared
       FROM fact_concepts a
       JOIN fact_concepts b ON b.fact_id = a.fact_id AND a.concept_id COLLATE "C" < b.concept_id COLLATE "C"
       JOIN facts f ON f.id = a.fact_id AND f.repository_id = a.repository_id AND f.status <> 'merged'
      WHERE a.repository_id = ? AND b.repository_id = ?
      GROUP BY a.concept_id, b.concept_id`,
    [repositoryId, repositoryId],
  );
  const stored: Array<{ concept_a: string; concept_b: string; shared_fact_count: number }> = await knex('concept_relations')
    .where({ repository_id: repositoryId })
    .where('shared_fact_count', '>', 0)
    .select('concept_a', 'concept_b', 'shared_fact_count');
  const key = (a: string, b: string): string => `${a}\u0000${b}`;
  const before = new Map(stored.map((row) => [key(row.concept_a, row.concept_b), Number(row.shared_fact_count)]));
  const changes: RelationChange[] = [];
  const seen = new Set<string>();
  for (const row of current.rows) {
    const pair = key(row.concept_a, row.concept_b);
    seen.add(pair);
    if (before.get(pair) !== Number(row.shared)) {
      changes.push({ concept_a: row.concept_a, concept_b: row.concept_b, shared_fact_count: Number(row.shared) });
    }
  }
  for (const row of stored) {
    if (!seen.has(key(row.concept_a, row.concept_b))) changes.push({ concept_a: row.concept_a, concept_b: row.concept_b, shared_fact_count: 0 });
  }
  const byPair = (x: RelationChange, y: RelationChange): number =>
    x.concept_a < y.concept_a ? -1 : x.concept_a > y.concept_a ? 1 : x.concept_b < y.concept_b ? -1 : x.concept_b > y.concept_b ? 1 : 0;
  return changes.sort(byPair);
}

/**
 * refresh_concept_relations (scheduled per repository every task.refresh_concept_relations_interval):
 * records in ConceptRelationsRefreshed the concept pairs whose shared fact count changed since
 * the read model's last refresh; nothing when nothing changed. A version conflict on the
 * repository stream ends the run as done: the next interval computes from the read model again.
 */
export function createRefreshConceptRelationsStage(deps: RefreshConceptRelationsDeps): Stage {
  return {
    kind: 'refresh_concept_relations',
    deferred: true,
    triggers: [],
    subjectOf: () => null,
    async run(context: JobContext) {
      const repositoryId = requireRepositoryId(context);
      if (!(await isLiveRepository(deps.knex, repositoryId))) return;
      const changes = await relationChanges(deps.knex, repositoryId);
      if (changes.length === 0) return;
      throwIfAborted(context.signal);
      await handleCommand(
        deps.store,
        streamName('repository', repositoryId),
        repositoryDecider,
        { type: 'RecordRelationChanges', changes },
        stageMetadata(context),
        { retries: 0 },
      );
    },
  };
}

/** The registry's entry: scheduled every `task.refresh_concept_relations_interval`. */
export const refreshConceptRelationsStage: StageDefinition = {
  kind: 'refresh_concept_relations',
  enabled: () => true,
  create: ({ store, knex }) => createRefreshConceptRelationsStage({ store, knex }),
  periodicIntervalMs: (config) => parseDuration(config.task.refresh_concept_relations_interval),
};
