import type { Knex } from 'knex';
import { projection, each, type RecordedOf } from '../src/projection/types.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import { referenceKeyOfRegistered } from '../src/domain/source/reference.js';
import { parseStreamName, type RecordedEvent } from '../src/eventstore/envelope.js';
import { updateRows } from './batchWrites.js';

type Handled = Extract<
  SourceEvent,
  { type: 'SourceRegistered' | 'SourceFetchStarted' | 'SourceFetched' | 'SourceDecompositionStarted' | 'FactsExtracted' | 'SourceFailed' | 'SourceRetryRequested' | 'SourceDeleted' }
>;

/** Sets `columns` (and updated_at) of each event's source, one statement for the run. */
function updateSources<Event extends RecordedEvent<string, unknown>>(
  trx: Knex.Transaction,
  events: readonly Event[],
  columns: Readonly<Record<string, string>>,
  values: (event: Event) => Record<string, unknown>,
): Promise<void> {
  return updateRows(
    trx,
    'sources',
    'id',
    { ...columns, updated_at: 'timestamptz' },
    events.map((event) => ({ id: parseStreamName(event.streamId).id, ...values(event), updated_at: event.occurredAt })),
  );
}

/**
 * The row a SourceRegistered inserts (the other columns keep their defaults): also what adding a
 * source answers when the read model has not applied its registration within the command's wait.
 */
export function registeredSourceRow(event: RecordedOf<Extract<Handled, { type: 'SourceRegistered' }>>) {
  return {
    id: parseStreamName(event.streamId).id,
    repository_id: event.repositoryId,
    origin: event.data.origin,
    url: event.data.url,
    doi: event.data.doi,
    // What adding a URL or DOI looks up: today's key of the spelling the event holds.
    reference_key: referenceKeyOfRegistered(event.data),
    filename: event.data.filename,
    content_type: event.data.content_type,
    body_sha256: event.data.body_sha256,
    body_bytes: event.data.body_bytes,
    status: 'pending',
    created_by: event.actor,
    created_at: event.occurredAt,
    updated_at: event.occurredAt,
  };
}

/** Read model `sources`: status and extracted metadata of every source, and the reference key of each URL or DOI source. */
export const sourcesProjection = projection<Handled>({
  name: 'sources',
  tables: ['sources'],
  // A source's events come in this order (a retry starts over after SourceFailed/SourceRetryRequested).
  batchTogether: [['SourceRegistered', 'SourceFetchStarted', 'SourceFetched', 'SourceDecompositionStarted', 'FactsExtracted']],
  handlers: {
    async SourceRegistered(trx, events) {
      await trx('sources').insert(events.map(registeredSourceRow)).onConflict('id').ignore();
    },
    SourceFetchStarted: (trx, events) => updateSources(trx, events, { status: 'text' }, () => ({ status: 'fetching' })),
    SourceFetched: (trx, events) =>
      updateSources(
        trx,
        events,
        {
          status: 'text',
          final_url: 'text',
          content_type: 'text',
          body_sha256: 'text',
          body_bytes: 'bigint',
          document_kind: 'text',
          title: 'text',
          published_at: 'text',
          text_sha256: 'text',
          markdown_sha256: 'text',
          text_chars: 'bigint',
        },
        (event) => ({
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
        }),
      ),
    SourceDecompositionStarted: (trx, events) =>
      updateSources(trx, events, { status: 'text', model_id: 'text' }, (event) => ({ status: 'decomposing', model_id: event.data.model_id })),
    FactsExtracted: (trx, events) =>
      updateSources(trx, events, { status: 'text', model_id: 'text', fact_count: 'int', failure: 'text' }, (event) => ({
        status: 'processed',
        model_id: event.data.model_id,
        fact_count: event.data.facts.length,
        failure: null,
      })),
    SourceFailed: each(async (trx, event) => {
      await trx('sources')
        .where({ id: parseStreamName(event.streamId).id })
        .update({ status: 'failed', failure: `${event.data.stage}: ${event.data.reason}`, updated_at: event.occurredAt });
    }),
    SourceRetryRequested: each(async (trx, event) => {
      await trx('sources')
        .where({ id: parseStreamName(event.streamId).id })
        .update({ status: trx.raw(`CASE WHEN text_sha256 IS NULL THEN 'pending' ELSE 'fetched' END`), failure: null, updated_at: event.occurredAt });
    }),
    // Gone from every read; its stream stays for audit, and adding its URL again registers a new source.
    SourceDeleted: each(async (trx, event) => {
      await trx('sources').where({ id: parseStreamName(event.streamId).id }).delete();
    }),
  },
});
