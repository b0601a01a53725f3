import type { Projection } from '../src/projection/types.js';
import type { RecordedEvent } from '../src/eventstore/envelope.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import type { SourcePipelineEvent } from '../src/domain/source/pipelineEvents.js';
import type { ConceptEvent } from '../src/domain/concept/events.js';
import { parseStreamName } from '../src/eventstore/envelope.js';
import { unpackVector } from '../src/interchange/vectors.js';
import type { FactDocument, SearchIndex } from '../src/search/port.js';

type FactsExtracted = Extract<SourceEvent, { type: 'FactsExtracted' }>;
type FactsEmbedded = Extract<SourcePipelineEvent, { type: 'FactsEmbedded' }>;
type EventData<Union extends { type: string; data: unknown }, Type extends Union['type']> = Extract<Union, { type: Type }>['data'];

function repositoryOf(recorded: RecordedEvent): string {
  if (recorded.repositoryId === null) throw new Error(`${recorded.type} ${recorded.eventId} carries no repository id`);
  return recorded.repositoryId;
}

/**
 * The documents a FactsExtracted event puts in the search index: the same ids, content, hashes,
 * kinds and created_at as the `facts` read model (projections/facts.ts), status `new` (the
 * index never moves a `stable` fact back to `new`, so a fact extracted again from a second
 * source stays stable). A fact listed twice in one event is indexed once (the first listing, as
 * the facts read model keeps the first row). No vector: embeddings arrive with FactsEmbedded,
 * and an omitted vector leaves a stored one alone.
 */
export function factDocumentsOf(recorded: RecordedEvent): FactDocument[] {
  const event = recorded as unknown as FactsExtracted & RecordedEvent;
  const repositoryId = repositoryOf(recorded);
  const documents = new Map<string, FactDocument>();
  for (const fact of event.data.facts) {
    if (documents.has(fact.fact_id)) continue;
    documents.set(fact.fact_id, {
      id: fact.fact_id,
      repository_id: repositoryId,
      content: fact.content,
      content_hash: fact.content_hash,
      fact_kind: fact.fact_kind ?? 'text',
      status: 'new',
      created_at: recorded.occurredAt,
    });
  }
  return [...documents.values()];
}

export interface SearchIndexProjectionOptions {
  /**
   * The index's vector dimension. Vectors of another length (recorded under another embedding
   * model) are left out instead of failing the projection for ever; re-embedding brings them.
   * Without it every vector is passed on.
   */
  vectorDimensions?: number;
}

const handledEvents = [
  'FactsExtracted',
  'FactsEmbedded',
  'FactStabilized',
  'FactMergedInto',
  'FactRemoved',
  'ConceptCreated',
  'ConceptAliasAdded',
  'ConceptAliasRemoved',
  'ConceptEmbedded',
  'ConceptMergedInto',
  'RepositoryDeleted',
] as const;

/**
 * Keeps a SearchIndex in step with the log (docs/search.md, "The search-index projection"):
 * facts are indexed on extraction, get their vectors and status from the pipeline, and leave
 * the index when merged or removed; concepts are indexed on creation, follow their aliases and
 * vector, and leave when merged; RepositoryDeleted removes everything of the repository.
 *
 * An index outside the read-model database (OpenSearch) is written outside the projection's
 * transaction, so an event may be applied again after a crash between the write and the
 * checkpoint. Every write is idempotent (upserts by id, removals by id or repository; concept
 * writes carry their stream version and older ones are ignored), so re-applying an event leaves
 * the index as it was. An index inside the database (Postgres) joins the transaction
 * (`withinTransaction`) and commits with the checkpoint; there text writes are no-ops, since
 * the `facts` and `concepts` read models are the lexical index, and vectors go to its tables.
 *
 * `tables` is empty: nothing in the read-model database is this projection's to truncate. To
 * rebuild the OpenSearch index from the log, replay into a new index with
 * `OpenSearchSearchIndex.rebuildIndex` (docs/search.md) rather than over the live one.
 */
export function createSearchIndexProjection(index: SearchIndex, options: SearchIndexProjectionOptions = {}): Projection {
  const fits = (vector: number[]) => options.vectorDimensions === undefined || vector.length === options.vectorDimensions;
  return {
    name: 'search-index',
    eventTypes: handledEvents,
    tables: [],
    async apply(trx, recorded) {
      const target = index.withinTransaction?.(trx) ?? index;
      const streamId = parseStreamName(recorded.streamId).id;
      switch (recorded.type) {
        case 'FactsExtracted': {
          const documents = factDocumentsOf(recorded);
          if (documents.length > 0) await target.indexFacts(documents);
          return;
        }
        case 'FactsEmbedded': {
          const repositoryId = repositoryOf(recorded);
          const data = recorded.data as FactsEmbedded['data'];
          const updates = data.vectors
            .map((entry) => ({ id: entry.fact_id, repository_id: repositoryId, vector: unpackVector(entry.vector) }))
            .filter((update) => fits(update.vector));
          if (updates.length > 0) await target.updateFacts(updates);
          return;
        }
        case 'FactStabilized':
          await target.updateFacts([{ id: streamId, repository_id: repositoryOf(recorded), status: 'stable' }]);
          return;
        case 'FactMergedInto':
        case 'FactRemoved':
          // A merged fact is never found again; its sources and links moved to the survivor.
          await target.removeFacts(repositoryOf(recorded), [streamId]);
          return;
        case 'ConceptCreated': {
          const data = recorded.data as EventData<ConceptEvent, 'ConceptCreated'>;
          await target.indexConcepts([
            {
              id: streamId,
              repository_id: repositoryOf(recorded),
              canonical_name: data.canonical_name,
              context: data.context,
              aliases: data.aliases,
              fact_count: 0,
              status: 'active',
              version: recorded.streamVersion,
            },
          ]);
          return;
        }
        case 'ConceptAliasAdded': {
          const data = recorded.data as EventData<ConceptEvent, 'ConceptAliasAdded'>;
          await target.updateConcepts([{ id: streamId, repository_id: repositoryOf(recorded), addAliases: [data.alias], version: recorded.streamVersion }]);
          return;
        }
        case 'ConceptAliasRemoved': {
          const data = recorded.data as EventData<ConceptEvent, 'ConceptAliasRemoved'>;
          await target.updateConcepts([{ id: streamId, repository_id: repositoryOf(recorded), removeAliases: [data.alias], version: recorded.streamVersion }]);
          return;
        }
        case 'ConceptEmbedded': {
          const data = recorded.data as EventData<ConceptEvent, 'ConceptEmbedded'>;
          const vector = unpackVector(data.vector);
          if (!fits(vector)) return;
          await target.updateConcepts([{ id: streamId, repository_id: repositoryOf(recorded), vector, version: recorded.streamVersion }]);
          return;
        }
        case 'ConceptMergedInto':
          await target.removeConcepts(repositoryOf(recorded), [streamId]);
          return;
        case 'RepositoryDeleted':
          await target.removeRepository(streamId);
          return;
      }
    },
  };
}
