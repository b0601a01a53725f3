import { defineCollection, field } from '../collection.js';

/** A summary slice as an index stores it (the `concept_summaries` read model's columns). */
export interface SummaryDocument {
  id: string;
  repository_id: string;
  /** The concept the slice summarises: a filter. */
  concept_id: string;
  content: string;
  slice_number: number;
  /** `open` (still growing) or `frozen`. */
  status: string;
  /** RFC 3339: when the slice was last written. */
  updated_at: string;
  version?: number;
}

/**
 * Summary slices of concepts, searched by their Markdown. A slice's writes come from its
 * concept's stream, so they arrive in order and carry the stream version; a removed slice is
 * deleted. Slices of a concept that merged into another stay in an external index until the
 * index is rebuilt, so readers keep only hits the `concept_summaries` read model still holds
 * (src/read/summaries.ts).
 */
export const summaries = defineCollection<SummaryDocument>({
  name: 'summaries',
  language: 'english',
  fields: {
    concept_id: field.keyword({ filter: true }),
    content: field.text(),
    slice_number: field.integer({ sort: true }),
    status: field.keyword({ filter: true }),
    updated_at: field.date({ sort: true }),
  },
  vectors: false,
  versioned: true,
  tombstones: false,
  order: { ranked: [{ field: 'slice_number', order: 'asc' }], listed: [{ field: 'updated_at', order: 'desc' }] },
  postgres: { table: 'concept_summaries' },
  opensearch: { mappingVersion: 1, completeField: 'content' },
});
