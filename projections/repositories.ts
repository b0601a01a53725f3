import { projection, each } from '../src/projection/types.js';
import type { RepositoryEvent } from '../src/domain/repository/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';

type Handled = Exclude<RepositoryEvent, { type: 'ConceptRelationsRefreshed' | 'ContextMigrationRequested' }>;

/**
 * Read model `repositories`: one row per repository, deleted ones kept with `deleted_at`, with
 * its prompt overrides (phase → text) and custom concept contexts.
 */
export const repositoriesProjection = projection<Handled>({
  name: 'repositories',
  tables: ['repositories'],
  handlers: {
    RepositoryCreated: each(async (trx, event) => {
      await trx('repositories')
        .insert({
          id: parseStreamName(event.streamId).id,
          name: event.data.name,
          slug: event.data.slug,
          description: event.data.description,
          preset: event.data.preset,
          tier: event.data.tier,
          accepted_promptset_hashes: JSON.stringify(event.data.accepted_promptset_hashes),
          registry_id: event.data.registry_id,
          created_by: event.actor,
          created_at: event.occurredAt,
          updated_at: event.occurredAt,
        })
        .onConflict('id')
        .ignore();
    }),
    RepositoryUpdated: each(async (trx, event) => {
      const changes: Record<string, unknown> = { updated_at: event.occurredAt };
      if (event.data.name !== null) changes.name = event.data.name;
      if (event.data.slug !== null) changes.slug = event.data.slug;
      if (event.data.description !== null) changes.description = event.data.description;
      if (event.data.accepted_promptset_hashes !== null) changes.accepted_promptset_hashes = JSON.stringify(event.data.accepted_promptset_hashes);
      await trx('repositories').where({ id: parseStreamName(event.streamId).id }).update(changes);
    }),
    RepositoryDeleted: each(async (trx, event) => {
      await trx('repositories')
        .where({ id: parseStreamName(event.streamId).id })
        .update({ deleted_at: event.occurredAt, updated_at: event.occurredAt });
    }),
    // The event carries the full map after the change: it replaces the column.
    RepositoryPromptsChanged: each(async (trx, event) => {
      await trx('repositories')
        .where({ id: parseStreamName(event.streamId).id })
        .update({ prompt_overrides: JSON.stringify(event.data.prompts), updated_at: event.occurredAt });
    }),
    RepositoryContextsChanged: each(async (trx, event) => {
      await trx('repositories')
        .where({ id: parseStreamName(event.streamId).id })
        .update({ custom_contexts: JSON.stringify(event.data.custom_contexts), updated_at: event.occurredAt });
    }),
  },
});
