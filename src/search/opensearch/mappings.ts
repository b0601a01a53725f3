import type { Types } from '@opensearch-project/opensearch';
import type { FieldSpec, SearchCollection } from '../collection.js';

/**
 * The OpenSearch mapping of a collection, derived from its fields: keywords, text with the
 * collection's analyzer (a `raw` keyword beside a sortable one), dates, integers, the stream
 * `version` of a versioned collection, and the `embedding` of one with vectors. Facts and
 * concepts derive exactly the mappings their `mapping_version` 1 indices were created with.
 */
export function mappingOf(collection: SearchCollection, dimensions: number): Types.Common_Mapping.TypeMapping {
  // `english` stems and drops stop words; `standard` lowercases words only, as Postgres's `simple`.
  const analyzer = collection.language === 'english' ? 'english' : 'standard';
  const property = (spec: FieldSpec): Types.Common_Mapping.Property => {
    switch (spec.type) {
      case 'keyword':
        return { type: 'keyword' };
      case 'text':
        return { type: 'text', analyzer, ...(spec.sort ? { fields: { raw: { type: 'keyword' } } } : {}) };
      case 'date':
        return { type: 'date' };
      case 'integer':
        return { type: 'integer' };
    }
  };
  return {
    // A typo in a field name must fail loudly, not grow the mapping.
    dynamic: 'strict',
    _meta: { factlog: { mapping_version: collection.opensearch.mappingVersion, ...(collection.vectors ? { dimensions } : {}) } },
    properties: {
      id: { type: 'keyword' },
      repository_id: { type: 'keyword' },
      ...Object.fromEntries(Object.entries(collection.fields).map(([name, spec]) => [name, property(spec)])),
      // Version of the stream's last event applied: older events are ignored (redelivery).
      ...(collection.versioned ? { version: { type: 'long' } } : {}),
      ...(collection.vectors ? { embedding: knnField(dimensions) } : {}),
    },
  };
}

/** The field a sort key names: a sortable text field sorts by its `raw` keyword. */
export function sortField(collection: SearchCollection, name: string): string {
  return collection.fields[name]?.type === 'text' ? `${name}.raw` : name;
}

function knnField(dimensions: number): Types.Common_Mapping.KnnVectorProperty {
  return {
    type: 'knn_vector',
    dimension: dimensions,
    // lucene: the engine that needs no native library (the Maven Central plugin zip has none),
    // and it applies the repository filter inside the HNSW search, so k results come back.
    method: { name: 'hnsw', space_type: 'cosinesimil', engine: 'lucene', parameters: { m: 16, ef_construction: 128 } },
  };
}
