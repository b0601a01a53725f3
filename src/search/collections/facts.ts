import { defineCollection, field, type HitOf } from '../collection.js';

/** A fact as an index stores it (the `facts` read model's columns, plus an optional vector). */
export interface FactDocument {
  id: string;
  repository_id: string;
  content: string;
  content_hash: string;
  fact_kind: string;
  /** `new` (extracted) → `stable` | `merged`; merged facts are never found. */
  status: string;
  /** RFC 3339. When a fact is indexed again, the index keeps the earliest time it was given. */
  created_at: string;
  /** Omitted or undefined: keep the stored vector; null: remove it; numbers: set it. */
  vector?: number[] | null;
}

export type FactHit = HitOf<FactDocument>;

/**
 * Atomic facts. Their writes come from two streams (the source's extraction and embedding, the
 * fact's own status and merge), which on Kafka travel on different partitions: so a merged fact
 * leaves a tombstone, and a status that overtakes its text makes a partial document.
 */
export const facts = defineCollection<FactDocument>({
  name: 'facts',
  language: 'english',
  fields: {
    content: field.text({ mayBeEmpty: true }),
    content_hash: field.keyword(),
    fact_kind: field.keyword({ filter: true }),
    // A redelivered FactsExtracted (status `new`) never moves a stable fact back to new.
    status: field.keyword({ filter: true, initial: 'new' }),
    // As the facts read model keeps its first row.
    created_at: field.date({ sort: true, keepEarliest: true }),
  },
  vectors: true,
  versioned: false,
  tombstones: true,
  hidden: { field: 'status', values: ['merged'] },
  // Best first, then oldest; newest first in a listing.
  order: { ranked: [{ field: 'created_at', order: 'asc' }], listed: [{ field: 'created_at', order: 'desc' }] },
  postgres: { table: 'facts', vectors: { table: 'fact_vectors', key: 'fact_id' } },
  opensearch: { mappingVersion: 1, completeField: 'content_hash' },
});
