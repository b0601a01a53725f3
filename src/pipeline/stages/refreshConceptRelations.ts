import type { Knex } from 'knex';
import { parseDuration } from '../../config/duration.js';
import { repositoryDecider, type RepositoryCommand, type RepositoryState } from '../../domain/repository/decider.js';
import { loadStream, type LoadedStream } from '../../eventstore/commandHandler.js';
import { streamName } from '../../eventstore/envelope.js';
import type { EventStore } from '../../eventstore/port.js';
import type { JobContext, Stage, StageDefinition } from '../types.js';
import { commandFrom, requireRepositoryId, stageMetadata, throwIfAborted } from './common.js';
import { isLiveRepository } from './repositorySettings.js';

export interface RefreshConceptRelationsDeps {
  store: EventStore;
  knex: Knex;
  /** Concepts per statement of the pair count (default RELATION_WINDOW_CONCEPTS). */
  windowConcepts?: number;
  /** Changes per ConceptRelationsRefreshed (default RELATION_CHANGES_PER_EVENT). */
  changesPerEvent?: number;
}

/** One changed pair, as ConceptRelationsRefreshed records it (concept_a < concept_b; 0 = no longer related). */
export interface RelationChange {
  concept_a: string;
  concept_b: string;
  shared_fact_count: number;
}

/**
 * Concepts (as the pair's `concept_a`) one statement of a refresh looks at. The whole
 * repository's pairs in one statement held PGlite's one connection 340 ms at 1,000 pages (and
 * the upsert of their rows 580 ms more), while requests waited behind it, and it grows with the
 * repository; windows of 50 concepts still took up to 136 ms where a popular concept fell
 * (docs/performance.md, "Twenty-fourth round").
 */
export const RELATION_WINDOW_CONCEPTS = 20;

/**
 * Changes one ConceptRelationsRefreshed carries at most. A refresh records its changes as several
 * events, appended one after another, so the read model applies them in short transactions.
 */
export const RELATION_CHANGES_PER_EVENT = 500;

/**
 * The ids of the repository's concepts in windows of `windowConcepts`, in byte-wise id order.
 * Every concept a link or a stored relation names has a row in `concepts` (rows are never
 * deleted; a merged concept keeps its row), so the windows cover every pair's `concept_a`.
 */
async function* conceptWindows(knex: Knex, repositoryId: string, windowConcepts: number): AsyncGenerator<string[]> {
  for (let after = ''; ; ) {
    const { rows } = await knex.raw<{ rows: Array<{ id: string }> }>(
      `SELECT id FROM concepts WHERE repository_id = ? AND id > ? COLLATE "C" ORDER BY id COLLATE "C" LIMIT ?`,
      [repositoryId, after, windowConcepts],
    );
    if (rows.length > 0) yield rows.map((row) => row.id);
    if (rows.length < windowConcepts) return;
    after = rows[rows.length - 1].id;
  }
}

/**
 * Of the pairs whose `concept_a` is one of `conceptIds`: those that share facts now, by shared
 * fact count, against the relations the read model holds; only differences, in (concept_a,
 * concept_b) order. Facts merged into another (and their links, which moved to the survivor) do
 * not count; ids compare byte-wise (COLLATE "C") so "a < b" means the same here and in JavaScript.
 */
async function windowChanges(knex: Knex, repositoryId: string, conceptIds: readonly string[]): Promise<RelationChange[]> {
  const current = await knex.raw<{ rows: Array<{ concept_a: string; concept_b: string; shared: number }> }>(
    `SELECT a.concept_id AS concept_a, b.concept_id AS concept_b, count(DISTINCT a.fact_id)::integer AS shared
       FROM fact_concepts a
       JOIN fact_concepts b ON b.fact_id = a.fact_id AND a.concept_id COLLATE "C" < b.concept_id COLLATE "C"
       JOIN facts f ON f.id = a.fact_id AND f.repository_id = a.repository_id AND f.status <> 'merged'
      WHERE a.concept_id = ANY(?::text[]) AND a.repository_id = ? AND b.repository_id = ?
      GROUP BY a.concept_id, b.concept_id`,
    [[...conceptIds], repositoryId, repositoryId],
  );
  const stored: Array<{ concept_a: string; concept_b: string; shared_fact_count: number }> = await knex('concept_relations')
    .where({ repository_id: repositoryId })
    .whereIn('concept_a', [...conceptIds])
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

/** The repository's relation changes window by window (each window's in pair order); windows with none are left out. */
async function* relationChangeWindows(knex: Knex, repositoryId: string, windowConcepts = RELATION_WINDOW_CONCEPTS): AsyncGenerator<RelationChange[]> {
  for await (const conceptIds of conceptWindows(knex, repositoryId, windowConcepts)) {
    const changes = await windowChanges(knex, repositoryId, conceptIds);
    if (changes.length > 0) yield changes;
  }
}

/** Every pair of the repository whose shared fact count differs from the read model's, in (concept_a, concept_b) order. */
export async function relationChanges(knex: Knex, repositoryId: string, windowConcepts = RELATION_WINDOW_CONCEPTS): Promise<RelationChange[]> {
  const changes: RelationChange[] = [];
  for await (const window of relationChangeWindows(knex, repositoryId, windowConcepts)) changes.push(...window);
  return changes;
}

/**
 * refresh_concept_relations (scheduled per repository every task.refresh_concept_relations_interval):
 * records in ConceptRelationsRefreshed the concept pairs whose shared fact count changed since
 * the read model's last refresh; nothing when nothing changed. The pairs are computed a window of
 * concepts at a time and recorded in events of at most RELATION_CHANGES_PER_EVENT changes, each
 * its own append, so no statement of a refresh (nor the read model's transaction applying one
 * event) grows with the repository. The repository stream is read once and each event appended
 * on the version that read left (commandFrom); a stream that moved meanwhile is read and decided
 * again once, and a second conflict ends the run as done (what was appended stays): the next
 * interval computes the rest from the read model again.
 */
export function createRefreshConceptRelationsStage(deps: RefreshConceptRelationsDeps): Stage {
  const windowConcepts = deps.windowConcepts ?? RELATION_WINDOW_CONCEPTS;
  const changesPerEvent = deps.changesPerEvent ?? RELATION_CHANGES_PER_EVENT;
  for (const [name, value] of Object.entries({ windowConcepts, changesPerEvent })) {
    if (!Number.isInteger(value) || value < 1) throw new RangeError(`refresh_concept_relations: ${name} must be a positive integer, not ${value}`);
  }
  return {
    kind: 'refresh_concept_relations',
    deferred: true,
    triggers: [],
    subjectOf: () => null,
    async run(context: JobContext) {
      const repositoryId = requireRepositoryId(context);
      if (!(await isLiveRepository(deps.knex, repositoryId))) return;
      const streamId = streamName('repository', repositoryId);
      let repository: LoadedStream<RepositoryState> | null = null;
      const record = async (changes: RelationChange[]): Promise<void> => {
        throwIfAborted(context.signal);
        repository ??= await loadStream(deps.store, streamId, repositoryDecider);
        const command: RepositoryCommand = { type: 'RecordRelationChanges', changes };
        ({ after: repository } = await commandFrom(deps.store, streamId, repositoryDecider, repository, command, stageMetadata(context), { retries: 0 }));
      };
      const pending: RelationChange[] = [];
      for await (const window of relationChangeWindows(deps.knex, repositoryId, windowConcepts)) {
        pending.push(...window);
        while (pending.length >= changesPerEvent) await record(pending.splice(0, changesPerEvent));
      }
      if (pending.length > 0) await record(pending);
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
