import type { Projection } from '../src/projection/types.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';

/** Read model `sources`: status and extracted metadata of every source. */
export const sourcesProjection: Projection = {
  name: 'sources',
  eventTypes: [
    'SourceRegistered',
    'SourceFetchStarted',
    'SourceFetched',
    'SourceDecompositionStarted',
    'FactsExtracted',
    'SourceFailed',
    'SourceRetryRequested',
  ],
  tables: ['sources'],
  async apply(trx, recorded) {
    const event = recorded as unknown as SourceEvent & typeof recorded;
    const id = parseStreamName(recorded.streamId).id;
    const update = (changes: Record<string, unknown>) =>
      trx('sources').where({ id }).update({ ...changes, updated_at: recorded.occurredAt });
    switch (event.type) {
      case 'SourceRegistered':
        await trx('sources')
          .insert({
            id,
            repository_id: recorded.repositoryId,
            origin: event.data.origin,
            url: event.data.url,
            doi: event.data.doi,
            filename: event.data.filename,
            content_type: event.data.content_type,
            body_sha256: event.data.body_sha256,
            body_bytes: event.data.body_bytes,
            status: 'pending',
            created_by: recorded.actor,
            created_at: recorded.occurredAt,
            updated_at: recorded.occurredAt,
          })
          .onConflict('id')
          .ignore();
        return;
      case 'SourceFetchStarted':
        await update({ status: 'fetching' });
        return;
      case 'SourceFetched':
        await update({
          status: 'fetched',
          final_url: event.data.final_url,
          content_type: event.data.content_type,
          body_sha256: event.data.body_sha256,
          body_bytes: event.data.body_bytes,
          document_kind: event.data.document_kind,
          title: event.data.title,
          published_at: event.data.published_at,
          text_sha256: event.data.text_sha256,
          markdown_sha256: event.data.markdown_sha256,
          text_chars: event.data.text_chars,
        });
        return;
      case 'SourceDecompositionStarted':
        await update({ status: 'decomposing', model_id: event.data.model_id });
        return;
      case 'FactsExtracted':
        await update({ status: 'processed', model_id: event.data.model_id, fact_count: event.data.facts.length, failure: null });
        return;
      case 'SourceFailed':
        await update({ status: 'failed', failure: `${event.data.stage}: ${event.data.reason}` });
        return;
      case 'SourceRetryRequested':
        await trx('sources')
          .where({ id })
          .update({
            status: trx.raw(`CASE WHEN text_sha256 IS NULL THEN 'pending' ELSE 'fetched' END`),
            failure: null,
            updated_at: recorded.occurredAt,
          });
        return;
    }
  },
};
