import type { Knex } from 'knex';
import { conceptDecider, conceptIdFor, conceptIdOfReturn } from '../../domain/concept/decider.js';
import { streamName } from '../../eventstore/envelope.js';
import type { NamedLocks } from '../../db/namedLock.js';
import type { EventStore } from '../../eventstore/port.js';
import { PermanentJobError, type JobContext, type Stage, type StageDefinition } from '../types.js';
import { commandOnSharedStream, repositorySubject, requireRepositoryId, stageMetadata, throwIfAborted } from './common.js';
import { finalConcept } from './extractConcepts.js';
import { loadRepositorySettings } from './repositorySettings.js';
import { awaitApplied, awaitReadModels, lastEventOf, type AwaitedEvent } from './readModelLag.js';
import { conceptsProjection } from '../../../projections/concepts.js';

export interface MigrateContextDeps {
  store: EventStore;
  knex: Knex;
  locks: NamedLocks;
  /** How long to wait for the concepts read model (default 30 s); a wait that runs out fails the job, which is retried. */
  readModelWaitMs?: number;
}

/**
 * migrate_context: every active concept of `from_context` moves to `to_context`. The concept of
 * the same canonical name in the target context is created (or, if it exists, gains the
 * aliases), then the old concept is merged into it, so its facts and aliases follow. A rerun
 * finds the moved concepts merged and skips them. A repository's migrations run one at a time:
 * side by side, A → B and B → A each moved the concepts it had listed and swapped the two
 * contexts, which no order of the two requests gives.
 */
export function createMigrateContextStage(deps: MigrateContextDeps): Stage {
  const readModelWaitMs = deps.readModelWaitMs ?? 30_000;
  return {
    kind: 'migrate_context',
    triggers: ['ContextMigrationRequested'],
    subjectOf: repositorySubject,
    run: (context: JobContext) => deps.locks.exclusive(`factlog.migrate-context.${requireRepositoryId(context)}`, () => migrate(context)),
  };

  async function migrate(context: JobContext): Promise<void> {
    const repositoryId = requireRepositoryId(context);
    const data = context.trigger.data as { from_context?: unknown; to_context?: unknown };
    const from = typeof data.from_context === 'string' ? data.from_context.trim() : '';
    const to = typeof data.to_context === 'string' ? data.to_context.trim() : '';
    if (from === '' || to === '') throw new PermanentJobError('a context migration needs from_context and to_context');
    const { contexts } = await loadRepositorySettings(deps.knex, repositoryId);
    const target = contexts.find((choice) => choice.name.toLowerCase() === to.toLowerCase());
    if (!target) throw new PermanentJobError(`context ${to} is not allowed in repository ${repositoryId}`);
    if (from.toLowerCase() === target.name.toLowerCase()) return;
    const metadata = stageMetadata(context);
    const reason = `context migrated from ${from} to ${target.name}`;
    // The concepts the request found: those of events before it, as the read model has them.
    if (!(await awaitReadModels(deps.knex, [conceptsProjection], context, { timeoutMs: readModelWaitMs }))) {
      throw new Error(`the concepts read model did not reach the migration request within ${readModelWaitMs} ms`);
    }
    let lastWrite: AwaitedEvent | null = null;
    const rows: Array<{ id: string; ontology_class: string | null }> = await deps.knex('concepts')
      .where({ repository_id: repositoryId, status: 'active' })
      .whereRaw('lower(context) = ?', [from.toLowerCase()])
      .orderBy('id')
      .select('id', 'ontology_class');
    for (const row of rows) {
      throwIfAborted(context.signal);
      const old = await finalConcept(deps.store, row.id);
      // Merged meanwhile, or not in the source context any more (the read model lags the log).
      if (old.id !== row.id || old.state.status !== 'active' || old.state.context.toLowerCase() !== from.toLowerCase()) continue;
      const targetId = conceptIdFor(repositoryId, old.state.canonicalName, target.name);
      let survivor = await finalConcept(deps.store, targetId);
      if (survivor.id === row.id) survivor = await finalConcept(deps.store, conceptIdOfReturn(targetId, row.id));
      const survivorStream = streamName('concept', survivor.id);
      if (survivor.state.status === 'none') {
        await commandOnSharedStream(
          deps.store,
          survivorStream,
          conceptDecider,
          {
            type: 'CreateConcept',
            canonicalName: old.state.canonicalName,
            context: target.name,
            ontologyClass: row.ontology_class,
            aliases: old.state.aliases,
            sourceId: null,
          },
          metadata,
        );
      } else {
        await commandOnSharedStream(
          deps.store,
          survivorStream,
          conceptDecider,
          { type: 'AddAliases', aliases: [old.state.canonicalName, ...old.state.aliases] },
          metadata,
        );
      }
      const merged = await commandOnSharedStream(
        deps.store,
        streamName('concept', row.id),
        conceptDecider,
        { type: 'MergeConcept', survivorId: survivor.id, reason },
        metadata,
      );
      if (merged.write) lastWrite = lastEventOf(merged.write);
    }
    // Held until the concepts read model has the moves: the next migration lists from it.
    if (lastWrite && !(await awaitApplied(deps.knex, [conceptsProjection], lastWrite, context.signal, { timeoutMs: readModelWaitMs }))) {
      throw new Error(`the concepts read model did not apply this migration's merges within ${readModelWaitMs} ms`);
    }
  }
}

/** The registry's entry. */
export const migrateContextStage: StageDefinition = {
  kind: 'migrate_context',
  enabled: () => true,
  create: ({ store, knex, locks }) => createMigrateContextStage({ store, knex, locks }),
};
