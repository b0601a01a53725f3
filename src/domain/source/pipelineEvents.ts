/**
 * Source-stream events appended by the pipeline stages after decomposition (the source decider
 * folds them; see docs/pipeline.md for the stage that appends each).
 */
export type SourcePipelineEvent =
  /**
   * embed_facts: vectors of the source's facts (packed float32, src/interchange/vectors.ts). A
   * large source's vectors of a model come in several of these (parts), each fact in one of them;
   * the source decider counts the model embedded once every fact has a vector.
   */
  | {
      type: 'FactsEmbedded';
      data: { model: string; dimensions: number; vectors: Array<{ fact_id: string; vector: string }> };
    }
  /**
   * deduplicate_facts finished the source: which of its facts it stabilized and which it merged
   * (each decision is also on the fact's own stream). Triggers extract_concepts.
   */
  | {
      type: 'SourceFactsDeduplicated';
      data: { stable_fact_ids: string[]; merged: Array<{ fact_id: string; survivor_id: string }> };
    }
  /**
   * extract_concepts recorded one batch (0-based `batch_index` of `batch_count`): the concepts
   * each fact mentions. Concepts themselves are created on their own streams first.
   */
  | {
      type: 'ConceptsExtracted';
      data: {
        model_id: string;
        promptset_hash: string;
        batch_index: number;
        batch_count: number;
        links: Array<{ fact_id: string; concept_ids: string[] }>;
      };
    };

export type SourcePipelineCommand =
  /** Records these vectors, or those of them whose facts have no vector of the model yet (one part of several). */
  | { type: 'RecordEmbeddings'; model: string; dimensions: number; vectors: Array<{ fact_id: string; vector: string }> }
  | { type: 'RecordDeduplication'; stableFactIds: string[]; merged: Array<{ fact_id: string; survivor_id: string }> }
  | {
      type: 'RecordConceptBatch';
      modelId: string;
      promptsetHash: string;
      batchIndex: number;
      batchCount: number;
      links: Array<{ fact_id: string; concept_ids: string[] }>;
    };
