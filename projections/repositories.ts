import type { Projection } from '../src/projection/types.js';
import type { RepositoryEvent } from '../src/domain/repository/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';

/**
 * Read model `repositories`: one row per repository, deleted ones kept with `deleted_at`, with
 * its prompt overrides (phase → text) and custom concept contexts.
 */
export const repositoriesProjection: Projection = {
  name: 'repositories',
  eventTypes: ['RepositoryCreated', 'RepositoryUpdated', 'RepositoryDeleted', 'RepositoryPromptsChanged', 'RepositoryContextsChanged'],
  tables: ['repositories'],
  async apply(trx, recorded) {
    const event = recorded as unknown as RepositoryEvent & typeof recorded;
    const id = parseStreamName(recorded.streamId).id;
    switch (event.type) {
      case 'RepositoryCreated':
        await trx('repositories')
          .insert({
            id,
            name: event.data.name,
            slug: event.data.slug,
            description: event.data.description,
            preset: event.data.preset,
            tier: event.data.tier,
            accepted_promptset_hashes: JSON.stringify(event.data.accepted_promptset_hashes),
            registry_id: event.data.registry_id,
            created_by: recorded.actor,
            created_at: recorded.occurredAt,
            updated_at: recorded.occurredAt,
          })
          .onConflict('id')
          .ignore();
        return;
      case 'RepositoryUpdated': {
        const changes: Record<string, unknown> = { updated_at: recorded.occurredAt };
        if (event.data.name !== null) changes.name = event.data.name;
        if (event.data.slug !== null) changes.slug = event.data.slug;
        if (event.data.description !== null) changes.description = event.data.description;
        if (event.data.accepted_promptset_hashes !== null)
          changes.accepted_promptset_hashes = JSON.stringify(event.data.accepted_promptset_hashes);
        await trx('repositories').where({ id }).update(changes);
        return;
      }
      case 'RepositoryDeleted':
        await trx('repositories').where({ id }).update({ deleted_at: recorded.occurredAt, updated_at: recorded.occurredAt });
        return;
      case 'RepositoryPromptsChanged':
        // The event carries the full map after the change: it replaces the column.
        await trx('repositories')
          .where({ id })
          .update({ prompt_overrides: JSON.stringify(event.data.prompts), updated_at: recorded.occurredAt });
        return;
      case 'RepositoryContextsChanged':
        await trx('repositories')
          .where({ id })
          .update({ custom_contexts: JSON.stringify(event.data.custom_contexts), updated_at: recorded.occurredAt });
        return;
    }
  },
};
