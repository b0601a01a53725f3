import type { Knex } from 'knex';
import { projection, each, type RecordedOf } from '../src/projection/types.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import { referenceKeyOfRegistered } from '../src/domain/source/reference.js';
import { parseStreamName } from '../src/eventstore/envelope.js';
import { updateRows } from './batchWrites.js';

type Handled = Extract<
  SourceEvent,
  { type: 'SourceRegistered' | 'SourceFetchStarted' | 'SourceFetched' | 'SourceDecompositionStarted' | 'FactsExtracted' | 'SourceFailed' | 'SourceRetryRequested' | 'SourceDeleted' }
>;

type SourceGroupType = 'SourceRegistered' | 'SourceFetchStarted' | 'SourceFetched' | 'SourceDecompositionStarted' | 'FactsExtracted';
type SourceGroupEvent = RecordedOf<Extract<Handled, { type: SourceGroupType }>>;
type PipelineEvent = Exclude<SourceGroupEvent, { type: 'SourceRegistered' }>;

/** What an event sets on its source's row: the columns (by PostgreSQL type) and their values, updated_at included. */
interface SourceRowChange {
  columns: Readonly<Record<string, string>>;
  values: Record<string, unknown>;
}

/** What each event of a source's pipeline after its registration sets on its row. */
function changeOf(event: PipelineEvent): SourceRowChange {
  const change = (columns: Record<string, string>, values: Record<string, unknown>): SourceRowChange => ({
    columns: { ...columns, updated_at: 'timestamptz' },
    values: { ...values, updated_at: event.occurredAt },
  });
  switch (event.type) {
    case 'SourceFetchStarted':
      return change({ status: 'text' }, { status: 'fetching' });
    case 'SourceFetched': {
      const { data } = event;
      return change(
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
        {
          status: 'fetched',
          final_url: data.final_url,
          content_type: data.content_type,
          body_sha256: data.body_sha256,
          body_bytes: data.body_bytes,
          document_kind: data.document_kind,
          title: data.title,
          published_at: data.published_at,
          text_sha256: data.text_sha256,
          markdown_sha256: data.markdown_sha256,
          text_chars: data.text_chars,
        },
      );
    }
    case 'SourceDecompositionStarted':
      return change({ status: 'text', model_id: 'text' }, { status: 'decomposing', model_id: event.data.model_id });
    case 'FactsExtracted':
      return change(
        { status: 'text', model_id: 'text', fact_count: 'int', failure: 'text' },
        { status: 'processed', model_id: event.data.model_id, fact_count: event.data.facts.length, failure: null },
      );
  }
}

/** Applies a run of one pipeline change: one statement for the run. */
function updateSources(trx: Knex.Transaction, events: ReadonlyArray<PipelineEvent>): Promise<void> {
  return applyUpdates(trx, events.map((event) => ({ id: parseStreamName(event.streamId).id, ...changeOf(event) })));
}

/** Sets each source's changed columns: one statement per set of columns. */
async function applyUpdates(trx: Knex.Transaction, changes: ReadonlyArray<SourceRowChange & { id: string }>): Promise<void> {
  const byColumns = new Map<string, { columns: Readonly<Record<string, string>>; rows: Array<Record<string, unknown>> }>();
  for (const change of changes) {
    const signature = Object.keys(change.columns).sort().join(',');
    const same = byColumns.get(signature) ?? { columns: change.columns, rows: [] };
    same.rows.push({ id: change.id, ...change.values });
    byColumns.set(signature, same);
  }
  for (const { columns, rows } of byColumns.values()) await updateRows(trx, 'sources', 'id', columns, rows);
}

/**
 * A run of the pipeline group: each source's row written once, as its events in the run leave it
 * (the types' handlers, one after the other, would write it once per event type). A source
 * registered in the run is inserted with its later columns; one stored before (or whose
 * registration was applied already) is updated with them.
 */
async function applySourcesRun(trx: Knex.Transaction, events: ReadonlyArray<RecordedOf<Handled>>): Promise<void> {
  const folded = new Map<string, { registered: Extract<SourceGroupEvent, { type: 'SourceRegistered' }> | null; columns: Record<string, string>; values: Record<string, unknown> }>();
  for (const event of events) {
    const id = parseStreamName(event.streamId).id;
    const source = folded.get(id) ?? { registered: null, columns: {}, values: {} };
    folded.set(id, source);
    if (event.type === 'SourceRegistered') {
      source.registered = event;
      continue;
    }
    if (event.type === 'SourceFailed' || event.type === 'SourceRetryRequested' || event.type === 'SourceDeleted') {
      throw new Error(`sources: ${event.type} is not in the SourceRegistered group`);
    }
    // Later events of a stream come later in the run (batchTogether's order): their values win.
    const change = changeOf(event);
    Object.assign(source.columns, change.columns);
    Object.assign(source.values, change.values);
  }
  const inserted = new Set<string>();
  const fresh = [...folded.values()].flatMap(({ registered, values }) => (registered ? [{ ...registeredSourceRow(registered), ...values }] : []));
  if (fresh.length > 0) {
    const rows: Array<{ id: string }> = await trx('sources').insert(fresh).onConflict('id').ignore().returning('id');
    for (const row of rows) inserted.add(row.id);
  }
  const stored = [...folded].filter(([id, source]) => !inserted.has(id) && Object.keys(source.columns).length > 0);
  await applyUpdates(trx, stored.map(([id, { columns, values }]) => ({ id, columns, values })));
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
  batchTogether: [{ types: ['SourceRegistered', 'SourceFetchStarted', 'SourceFetched', 'SourceDecompositionStarted', 'FactsExtracted'], handler: applySourcesRun }],
  handlers: {
    async SourceRegistered(trx, events) {
      await trx('sources').insert(events.map(registeredSourceRow)).onConflict('id').ignore();
    },
    SourceFetchStarted: updateSources,
    SourceFetched: updateSources,
    SourceDecompositionStarted: updateSources,
    FactsExtracted: updateSources,
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
