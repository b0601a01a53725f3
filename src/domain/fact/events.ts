/**
 * Events of a fact's own stream `fact-<id>`. A fact is born in its source's FactsExtracted
 * (source stream); its stream records what the pipeline later decides about it. Status as the
 * read model shows it: `new` (extracted, not yet deduplicated) → `stable` | `merged` → (merged
 * facts only) removed by cleanup_facts.
 */
export type FactEvent =
  /** deduplicate_facts found no near duplicate it should merge into: the fact is kept. */
  | { type: 'FactStabilized'; data: { source_id: string } }
  /**
   * deduplicate_facts merged this fact into a near duplicate (cosine ≥ providers.dedup.threshold).
   * Its sources and concept links move to the survivor (projections/facts.ts, concepts.ts).
   * `catchup` is true when the catch-up pass found the pair after both were stable.
   */
  | { type: 'FactMergedInto'; data: { survivor_id: string; similarity: number; source_id: string | null; catchup: boolean } }
  /** cleanup_facts removed a merged fact; only its stream remains, for audit. */
  | { type: 'FactRemoved'; data: { survivor_id: string } }
  /**
   * cleanup_facts retracted a fact whose last source was deleted: the read models drop it, its
   * concept links and its vector. Extracted again later (by another source), it comes back.
   */
  | { type: 'FactRetracted'; data: { source_id: string; reason: string } };

export type FactCommand =
  | { type: 'StabilizeFact'; sourceId: string }
  | { type: 'MergeFact'; survivorId: string; similarity: number; sourceId: string | null; catchup: boolean }
  | { type: 'RemoveFact' }
  | { type: 'RetractFact'; sourceId: string; reason: string };

export type FactState =
  | { status: 'new' }
  | { status: 'stable' }
  | { status: 'merged'; survivorId: string }
  | { status: 'removed'; survivorId: string }
  | { status: 'retracted' };
