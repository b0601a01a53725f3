import { projection, each } from '../src/projection/types.js';
import type { InvestigationEvent } from '../src/domain/investigation/decider.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';

/**
 * Read models `investigations` (one row per investigation, deleted ones kept with `deleted_at`)
 * and `investigation_sources` (which sources each gathers, in the order they were added).
 */
export const investigationsProjection = projection<InvestigationEvent | Extract<SourceEvent, { type: 'SourceDeleted' }>>({
  name: 'investigations',
  tables: ['investigations', 'investigation_sources'],
  handlers: {
    InvestigationCreated: each(async (trx, event) => {
      await trx('investigations')
        .insert({
          id: parseStreamName(event.streamId).id,
          repository_id: event.repositoryId,
          title: event.data.title,
          topic: event.data.topic,
          created_by: event.actor,
          created_at: event.occurredAt,
          updated_at: event.occurredAt,
        })
        .onConflict('id')
        .ignore();
    }),
    InvestigationUpdated: each(async (trx, event) => {
      const changes: Record<string, unknown> = { updated_at: event.occurredAt };
      if (event.data.title !== null) changes.title = event.data.title;
      if (event.data.topic !== null) changes.topic = event.data.topic;
      await trx('investigations').where({ id: parseStreamName(event.streamId).id }).update(changes);
    }),
    InvestigationDeleted: each(async (trx, event) => {
      await trx('investigations')
        .where({ id: parseStreamName(event.streamId).id })
        .update({ deleted_at: event.occurredAt, updated_at: event.occurredAt });
    }),
    InvestigationSourceAdded: each(async (trx, event) => {
      const investigationId = parseStreamName(event.streamId).id;
      await trx('investigation_sources')
        .insert({ investigation_id: investigationId, source_id: event.data.source_id, repository_id: event.repositoryId, added_at: event.occurredAt, position: event.globalPosition })
        .onConflict(['investigation_id', 'source_id'])
        .ignore();
      await trx('investigations').where({ id: investigationId }).update({ updated_at: event.occurredAt });
    }),
    InvestigationSourceRemoved: each(async (trx, event) => {
      const investigationId = parseStreamName(event.streamId).id;
      await trx('investigation_sources').where({ investigation_id: investigationId, source_id: event.data.source_id }).delete();
      await trx('investigations').where({ id: investigationId }).update({ updated_at: event.occurredAt });
    }),
    // A deleted source leaves every investigation that gathered it.
    SourceDeleted: each(async (trx, event) => {
      await trx('investigation_sources').where({ source_id: parseStreamName(event.streamId).id }).delete();
    }),
  },
});
