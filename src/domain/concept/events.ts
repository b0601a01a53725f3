/**
 * Events of a concept's stream `concept-<id>`. A concept's id is derived from its uniqueness
 * key: uuidv5(`<repository id>:<conceptNameKey(canonical_name)>:<lower(context)>`, CONCEPT_ID_NAMESPACE)
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
  | { type: 'ConceptMergedInto'; data: { survivor_id: string; reason: string } }
  /**
   * summarize_concepts wrote (or rewrote) one summary slice: the facts it covers, in order, and
   * Markdown citing only those facts. A frozen slice (`is_open` false) holds exactly batch_size
   * facts and is rewritten only with reason `facts_removed` (facts it covered left the concept).
   */
  | {
      type: 'SummarySliceWritten';
      data: {
        slice_id: string;
        slice_number: number;
        is_open: boolean;
        fact_ids: string[];
        content: string;
        model_id: string;
        reason: 'facts_added' | 'facts_removed';
      };
    }
  /** The concept has too few facts for this slice now (facts left it): the slice is gone. */
  | { type: 'SummarySliceRemoved'; data: { slice_id: string; slice_number: number; reason: string } }
  /**
   * synthesize_concept wrote the concept's synthesis from its slices (their facts), related
   * concepts and related syntheses. `inputs_hash` identifies the inputs, so the same inputs are
   * never synthesised twice unless asked (`reason` `requested`).
   */
  | {
      type: 'ConceptSynthesized';
      data: {
        synthesis_id: string;
        content: string;
        fact_ids: string[];
        slice_ids: string[];
        related_concept_ids: string[];
        related_synthesis_ids: string[];
        image_fact_ids: string[];
        model_id: string;
        inputs_hash: string;
        reason: 'inputs_changed' | 'requested';
      };
    }
  /** Someone asked for the synthesis to be made again (POST .../resynthesize). */
  | { type: 'ConceptResynthesisRequested'; data: { reason: string } }
  /** Every fact left the concept (their sources were deleted): its synthesis has nothing left to say. */
  | { type: 'ConceptSynthesisRemoved'; data: { synthesis_id: string; reason: string } };

/** One slice of a WriteSummarySlices command. */
export interface SliceWrite {
  sliceId: string;
  sliceNumber: number;
  factIds: string[];
  isOpen: boolean;
  content: string;
  reason: 'facts_added' | 'facts_removed';
}

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
  | { type: 'MergeConcept'; survivorId: string; reason: string }
  /** Slices to write and slices to remove (from `removeFrom` on), checked against the slice rules. */
  | {
      type: 'WriteSummarySlices';
      batchSize: number;
      modelId: string;
      slices: SliceWrite[];
      removed: Array<{ sliceId: string; sliceNumber: number }>;
      removeReason: string;
    }
  | {
      type: 'RecordSynthesis';
      synthesisId: string;
      content: string;
      factIds: string[];
      sliceIds: string[];
      relatedConceptIds: string[];
      relatedSynthesisIds: string[];
      imageFactIds: string[];
      modelId: string;
      inputsHash: string;
      /** The facts the synthesis may cite (the concept's facts it was given). */
      allowedFactIds: string[];
    }
  | { type: 'RequestResynthesis'; reason: string }
  | { type: 'RemoveSynthesis'; synthesisId: string; reason: string };

export type ConceptState =
  | { status: 'none' }
  | {
      status: 'active' | 'merged';
      canonicalName: string;
      context: string;
      aliases: string[];
      embeddedWith: string | null;
      survivorId: string | null;
      /** The summary slices, by slice number. */
      slices: Array<{ sliceNumber: number; factIds: string[]; isOpen: boolean }>;
      /** inputs_hash of the last synthesis, or null when there is none. */
      synthesisInputs: string | null;
      /** A resynthesis was requested and no synthesis was recorded since. */
      resynthesisRequested: boolean;
    };

/** The concept events of summaries and syntheses (projections/summaries.ts), apart from the concept's identity. */
export type ConceptDerivedEvent = Extract<
  ConceptEvent,
  { type: 'SummarySliceWritten' | 'SummarySliceRemoved' | 'ConceptSynthesized' | 'ConceptResynthesisRequested' | 'ConceptSynthesisRemoved' }
>;
export type ConceptIdentityEvent = Exclude<ConceptEvent, ConceptDerivedEvent>;
