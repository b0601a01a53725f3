import type { Projection } from '../src/projection/types.js';
import type { RecordedEvent } from '../src/eventstore/envelope.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';
import type { FactDocument, SearchIndex } from '../src/search/port.js';

type FactsExtracted = Extract<SourceEvent, { type: 'FactsExtracted' }>;

/**
 * The documents a FactsExtracted event puts in the search index: the same ids, content, hashes
 * and created_at as the `facts` read model (projections/facts.ts), which also sets no kind or
 * status yet. A fact listed twice in one event is indexed once (the first listing, as the facts
 * read model keeps the first row). No vector: embeddings arrive with later events, and an
 * omitted vector leaves a stored one alone.
 */
export function factDocumentsOf(recorded: RecordedEvent): FactDocument[] {
  const event = recorded as unknown as FactsExtracted & RecordedEvent;
  if (recorded.repositoryId === null) throw new Error(`FactsExtracted ${recorded.eventId} carries no repository id`);
  const documents = new Map<string, FactDocument>();
  for (const fact of event.data.facts) {
    if (documents.has(fact.fact_id)) continue;
    documents.set(fact.fact_id, {
      id: fact.fact_id,
      repository_id: recorded.repositoryId,
      content: fact.content,
      content_hash: fact.content_hash,
      fact_kind: 'text',
      status: 'stable',
      created_at: recorded.occurredAt,
    });
  }
  return [...documents.values()];
}

/**
 * Keeps a SearchIndex in step with the log: FactsExtracted indexes the facts, RepositoryDeleted
 * removes the repository's documents.
 *
 * An index outside the read-model database (OpenSearch) is written outside the projection's
 * transaction, so an event may be applied again after a crash between the write and the
 * checkpoint. Both writes are idempotent (upsert by fact id keeping the earliest created_at;
 * delete by repository), so re-applying an event leaves the index as it was. An index inside
 * the database joins the transaction (`withinTransaction`) and commits with the checkpoint.
 *
 * `tables` is empty: nothing in the read-model database is this projection's to truncate. To
 * rebuild the OpenSearch index from the log, replay into a new index with
 * `OpenSearchSearchIndex.rebuildIndex` (docs/search.md) rather than over the live one.
 */
export function createSearchIndexProjection(index: SearchIndex): Projection {
  return {
    name: 'search-index',
    eventTypes: ['FactsExtracted', 'RepositoryDeleted'],
    tables: [],
    async apply(trx, recorded) {
      const target = index.withinTransaction?.(trx) ?? index;
      switch (recorded.type) {
        case 'FactsExtracted': {
          const documents = factDocumentsOf(recorded);
          if (documents.length > 0) await target.indexFacts(documents);
          return;
        }
        case 'RepositoryDeleted':
          await target.removeRepository(parseStreamName(recorded.streamId).id);
          return;
      }
    },
  };
}
