import { defineCollection, field } from '../collection.js';

/** A concept as an index stores it (the `concepts` read model's columns, aliases, optional vector). */
export interface ConceptDocument {
  id: string;
  repository_id: string;
  canonical_name: string;
  context: string;
  aliases: string[];
  /**
   * Facts linked when the document was written. Informational on OpenSearch (the projection does
   * not follow links); the API reads live counts from the `concepts` read model.
   */
  fact_count: number;
  /** `active` or `merged`; merged concepts are never found. */
  status: string;
  vector?: number[] | null;
  /** Version of the concept stream's event that wrote this: older writes are ignored. */
  version?: number;
}

/**
 * Concepts, found by canonical name or alias. A concept's events share one stream, so they arrive
 * in order: a merge deletes it, and an alias that arrives later for a deleted concept is ignored.
 */
export const concepts = defineCollection<ConceptDocument>({
  name: 'concepts',
  // Names are not stemmed (as the `concepts.search` column's `simple` configuration).
  language: 'simple',
  fields: {
    canonical_name: field.text({ sort: true }),
    context: field.keyword({ filter: true }),
    aliases: field.textList(),
    fact_count: field.integer({ sort: true }),
    status: field.keyword({ filter: true }),
  },
  vectors: true,
  versioned: true,
  tombstones: false,
  hidden: { field: 'status', values: ['merged'] },
  order: { ranked: [{ field: 'canonical_name', order: 'asc' }], listed: [{ field: 'canonical_name', order: 'asc' }] },
  postgres: {
    table: 'concepts',
    vectors: { table: 'concept_vectors', key: 'concept_id' },
    computed: {
      // The concepts projection keeps the canonical name among the alias rows (lookup by name); it is
      // no alias. Told apart by the keys conceptNameKey made, not by SQL lower() (ctype-dependent).
      aliases: (row) =>
        `coalesce((SELECT array_agg(ca.alias ORDER BY ca.alias) FROM concept_aliases ca
           WHERE ca.concept_id = ${row}.id AND ca.alias_lower <> ${row}.name_key), ARRAY[]::text[])`,
    },
  },
  opensearch: { mappingVersion: 1, completeField: 'canonical_name' },
});
