import { withoutCitations } from '../src/domain/concept/summaries.js';
import type { Knex } from 'knex';
import { projection, each, type Projection, type RecordedOf } from '../src/projection/types.js';
import type { RecordedEvent } from '../src/eventstore/envelope.js';
import type { SourceEvent } from '../src/domain/source/decider.js';
import type { FactEvent } from '../src/domain/fact/events.js';
import type { ConceptEvent, ConceptIdentityEvent } from '../src/domain/concept/events.js';
import type { RepositoryEvent } from '../src/domain/repository/decider.js';
import { parseStreamName } from '../src/eventstore/envelope.js';
import { unpackVector } from '../src/interchange/vectors.js';
import { concepts, facts, summaries, type FactDocument } from '../src/search/collections/index.js';
import type { DocumentUpdate, SearchIndex } from '../src/search/port.js';

type FactsExtracted = Extract<SourceEvent, { type: 'FactsExtracted' }>;
type Handled =
  | Extract<SourceEvent, { type: 'FactsExtracted' | 'FactsEmbedded' }>
  | FactEvent
  | ConceptIdentityEvent
  | Extract<ConceptEvent, { type: 'SummarySliceWritten' | 'SummarySliceRemoved' }>
  | Extract<RepositoryEvent, { type: 'RepositoryDeleted' }>;

function repositoryOf(recorded: RecordedEvent<string, unknown>): string {
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
export function factDocumentsOf(event: RecordedOf<FactsExtracted>): FactDocument[] {
  const repositoryId = repositoryOf(event);
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
      created_at: event.occurredAt,
    });
  }
  return [...documents.values()];
}

/**
 * A slice's Markdown as its search matches it: without its citations' targets (`<fact:ID>`, bare
 * `(fact:ID)`: withoutCitations), which OpenSearch's analyzer read as words, so `facts` (stemmed
 * `fact`) or a piece of an id matched every slice. PostgreSQL's `concept_summaries.search` column
 * strips the same (migration 027). The read model keeps the Markdown; hits are shown from it.
 */
export function searchableSummaryText(markdown: string): string {
  return withoutCitations(markdown);
}

/** The last of each id: a run's updates of one document in one call, with the effect of applying them in turn. */
function lastOfEach<T extends { id: string }>(items: readonly T[]): T[] {
  return [...new Map(items.map((item) => [item.id, item])).values()];
}

/**
 * Consecutive lists joined while no id repeats: each chunk names a document at most once, and a
 * document listed again starts a new chunk after the one that listed it first.
 */
function distinctChunks<T extends { id: string }>(lists: ReadonlyArray<readonly T[]>): T[][] {
  const chunks: T[][] = [];
  let chunk: T[] = [];
  let ids = new Set<string>();
  for (const list of lists) {
    if (list.some((item) => ids.has(item.id))) {
      chunks.push(chunk);
      chunk = [];
      ids = new Set();
    }
    for (const item of list) ids.add(item.id);
    chunk.push(...list);
  }
  chunks.push(chunk);
  return chunks.filter((items) => items.length > 0);
}

export interface SearchIndexProjectionOptions {
  /**
   * The index's vector dimension. Vectors of another length (recorded under another embedding
   * model) are left out instead of failing the projection for ever; re-embedding brings them.
   * Without it every vector is passed on.
   */
  vectorDimensions?: number;
}

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
  const targetOf = (trx: Knex.Transaction) => index.withinTransaction?.(trx) ?? index;
  return projection<Handled>({
    name: 'search-index',
    tables: [],
    external: index.withinTransaction === undefined,
    // A concept is indexed before its vector arrives; concepts are independent of each other.
    // A source's facts are extracted, then embedded, and each fact is stabilized after it was
    // extracted (as in the facts projection): documents are only upserted (a stable fact is never
    // made new again) and vectors and status only set, so a run may index all, then set all
    // vectors (the last of a fact wins, as in log order), then stabilize all. Without the group
    // FactsExtracted and FactsEmbedded alternate source by source, and each embedding was its own
    // write of about ten vectors: 660 statements in a rebuild of 20 copies of the corpus log.
    batchTogether: [
      ['ConceptCreated', 'ConceptEmbedded'],
      ['FactsExtracted', 'FactsEmbedded', 'FactStabilized'],
    ],
    handlers: {
      // The run's documents in as few calls as keep each call's facts distinct: a fact listed by two
      // events is indexed twice, in their order, as one call per event did (an index may keep some
      // fields of the document it replaces, so the calls do not collapse into the last).
      async FactsExtracted(trx, events) {
        for (const documents of distinctChunks(events.map(factDocumentsOf))) await targetOf(trx).index(facts, documents);
      },
      // The run's vectors in one call (the last of a fact wins, as one event after another would leave it).
      async FactsEmbedded(trx, events) {
        const updates = events
          .flatMap((event) => {
            const repositoryId = repositoryOf(event);
            return event.data.vectors.map((entry) => ({ id: entry.fact_id, repository_id: repositoryId, vector: unpackVector(entry.vector) }));
          })
          .filter((update) => fits(update.vector));
        if (updates.length > 0) await targetOf(trx).update(facts, lastOfEach(updates));
      },
      async FactStabilized(trx, events) {
        const updates: DocumentUpdate<FactDocument>[] = events.map((event) => ({ id: parseStreamName(event.streamId).id, repository_id: repositoryOf(event), set: { status: 'stable' } }));
        await targetOf(trx).update(facts, lastOfEach(updates));
      },
      // A merged fact is never found again; its sources and links moved to the survivor.
      FactMergedInto: each((trx, event) => targetOf(trx).remove(facts, repositoryOf(event), [parseStreamName(event.streamId).id])),
      FactRemoved: each((trx, event) => targetOf(trx).remove(facts, repositoryOf(event), [parseStreamName(event.streamId).id])),
      FactRetracted: each((trx, event) => targetOf(trx).remove(facts, repositoryOf(event), [parseStreamName(event.streamId).id])),
      // Each concept stream starts with its ConceptCreated: the run's concepts are distinct.
      async ConceptCreated(trx, events) {
        await targetOf(trx).index(
          concepts,
          events.map((event) => ({
            id: parseStreamName(event.streamId).id,
            repository_id: repositoryOf(event),
            canonical_name: event.data.canonical_name,
            context: event.data.context,
            aliases: event.data.aliases,
            fact_count: 0,
            status: 'active',
            version: event.streamVersion,
          })),
        );
      },
      ConceptAliasAdded: each((trx, event) =>
        targetOf(trx).update(concepts, [
          { id: parseStreamName(event.streamId).id, repository_id: repositoryOf(event), addTo: { aliases: [event.data.alias] }, version: event.streamVersion },
        ]),
      ),
      ConceptAliasRemoved: each((trx, event) =>
        targetOf(trx).update(concepts, [
          { id: parseStreamName(event.streamId).id, repository_id: repositoryOf(event), removeFrom: { aliases: [event.data.alias] }, version: event.streamVersion },
        ]),
      ),
      // The latest fitting vector of each concept in one call (a vector that does not fit is skipped, as before).
      async ConceptEmbedded(trx, events) {
        const updates = events
          .map((event) => ({ id: parseStreamName(event.streamId).id, repository_id: repositoryOf(event), vector: unpackVector(event.data.vector), version: event.streamVersion }))
          .filter((update) => fits(update.vector));
        if (updates.length > 0) await targetOf(trx).update(concepts, lastOfEach(updates));
      },
      ConceptMergedInto: each((trx, event) => targetOf(trx).remove(concepts, repositoryOf(event), [parseStreamName(event.streamId).id])),
      // A slice's writes come from its concept's stream, in order: the stream version orders them.
      SummarySliceWritten: each((trx, event) =>
        targetOf(trx).index(summaries, [
          {
            id: event.data.slice_id,
            repository_id: repositoryOf(event),
            concept_id: parseStreamName(event.streamId).id,
            content: searchableSummaryText(event.data.content),
            slice_number: event.data.slice_number,
            status: event.data.is_open ? 'open' : 'frozen',
            updated_at: event.occurredAt,
            version: event.streamVersion,
          },
        ]),
      ),
      SummarySliceRemoved: each((trx, event) => targetOf(trx).remove(summaries, repositoryOf(event), [event.data.slice_id])),
      RepositoryDeleted: each((trx, event) => targetOf(trx).removeRepository(parseStreamName(event.streamId).id)),
    },
  });
}
