/**
 * Events of a concept's stream `concept-<id>`. A concept's id is derived from its uniqueness
 * key: uuidv5(`<repository id>:<lower(canonical_name)>:<lower(context)>`, CONCEPT_ID_NAMESPACE)
 * (`conceptIdFor`), so two racing extractions of one concept append to one stream and the
 * loser of the version race sees the concept as existing.
 */
export type ConceptEvent =
  | {
      type: 'ConceptCreated';
      data: {
        canonical_name: string;
        context: string;
        ontology_class: string | null;
        aliases: string[];
        /** The source whose concept extraction created it (provenance; null for migrations). */
        source_id: string | null;
      };
    }
  | { type: 'ConceptAliasAdded'; data: { alias: string } }
  | { type: 'ConceptAliasRemoved'; data: { alias: string; reason: string } }
  /** `vector` is packed float32 (src/interchange/vectors.ts). */
  | { type: 'ConceptEmbedded'; data: { model: string; dimensions: number; vector: string } }
  /**
   * The concept was folded into another (refine_concepts, or migrate_context moving it to a new
   * context): its aliases and fact links move to the survivor; the concept is no longer listed.
   */
  | { type: 'ConceptMergedInto'; data: { survivor_id: string; reason: string } };

export type ConceptCommand =
  | {
      type: 'CreateConcept';
      canonicalName: string;
      context: string;
      ontologyClass: string | null;
      aliases: string[];
      sourceId: string | null;
    }
  /** Adds the aliases the concept lacks (case-insensitively); none new → no events. */
  | { type: 'AddAliases'; aliases: string[] }
  | { type: 'RemoveAlias'; alias: string; reason: string }
  | { type: 'RecordEmbedding'; model: string; dimensions: number; vector: string }
  | { type: 'MergeConcept'; survivorId: string; reason: string };

export type ConceptState =
  | { status: 'none' }
  | {
      status: 'active' | 'merged';
      canonicalName: string;
      context: string;
      aliases: string[];
      embeddedWith: string | null;
      survivorId: string | null;
    };
