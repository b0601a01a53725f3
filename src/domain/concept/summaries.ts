import { v5 as uuidv5 } from 'uuid';

/**
 * Summary slices and syntheses of a concept (docs/pipeline.md, "Summaries and syntheses"): the
 * pure rules that the decider, the stages and the tests share. A concept's facts are summarised
 * in slices of `batch_size` facts in a stable order; a full slice is frozen (`is_open: false`)
 * and never rewritten, except when facts it covered left the concept (a source deleted, a fact
 * merged away); one open slice grows. Markdown cites facts as `[text](<fact:FACT_ID>)`.
 */

/** Namespace of slice and synthesis ids (uuidv5); fixed forever, since ids are derived from it. */
const SUMMARY_ID_NAMESPACE = '9d1f4c2a-6b3e-4f70-a8d5-1e2c3b4a5f60';

/** A slice's id: derived from (concept, slice number), so a rewrite keeps it. */
export function summarySliceId(conceptId: string, sliceNumber: number): string {
  return uuidv5(`${conceptId}:summary:${sliceNumber}`, SUMMARY_ID_NAMESPACE);
}

/** A concept's synthesis id: one synthesis per concept, re-made in place. */
export function synthesisId(conceptId: string): string {
  return uuidv5(`${conceptId}:synthesis`, SUMMARY_ID_NAMESPACE);
}

/**
 * What a fact citation looks like in Markdown, its id captured: the target `<fact:ID>` of the link
 * form `[text](<fact:ID>)` (also written bare) and, so that a sloppy model answer cannot slip a
 * reference past the check, the bare `(fact:ID)`. The one definition: citedFactIds reads it, and
 * search strips it (withoutCitations for the OpenSearch index, withoutCitationsSql for
 * PostgreSQL's search vectors), so neither `fact` nor a piece of an id matches every cited text.
 * Written so that JavaScript and PostgreSQL's regular expressions (ARE) read it alike.
 */
export const FACT_CITATION_PATTERN = String.raw`<fact:([^>]*)>|\(fact:([^)\s]*)\)`;

/** The text without its citations' targets (each a space), as search should match it; the link text stays. */
export function withoutCitations(markdown: string): string {
  return markdown.replace(new RegExp(FACT_CITATION_PATTERN, 'g'), ' ');
}

/** withoutCitations of a text column, in SQL (immutable: fit for a generated column or an index expression). */
export function withoutCitationsSql(column: string): string {
  // The pattern holds no quote, so it stands in the statement as a literal.
  return `regexp_replace(${column}, '${FACT_CITATION_PATTERN}', ' ', 'g')`;
}

/**
 * Every fact id the Markdown refers to (FACT_CITATION_PATTERN), in order of first appearance.
 */
export function citedFactIds(markdown: string): string[] {
  const ids: string[] = [];
  const seen = new Set<string>();
  for (const match of markdown.matchAll(new RegExp(FACT_CITATION_PATTERN, 'g'))) {
    const id = (match[1] ?? match[2] ?? '').trim();
    if (seen.has(id)) continue;
    seen.add(id);
    ids.push(id);
  }
  return ids;
}

/** Why a Markdown text's citations are not acceptable for `allowed`, or null when they are. */
export function citationProblem(markdown: string, allowed: ReadonlySet<string>): string | null {
  if (markdown.trim() === '') return 'the content is empty';
  const cited = citedFactIds(markdown);
  if (cited.length === 0) return 'the content cites no fact';
  const foreign = cited.filter((id) => !allowed.has(id));
  if (foreign.length > 0) return `the content cites facts outside its input: ${foreign.slice(0, 5).join(', ')}`;
  return null;
}

/** A slice as recorded. */
export interface SliceState {
  sliceNumber: number;
  factIds: readonly string[];
  isOpen: boolean;
}

/** One slice to (re)write: the facts it covers and whether it stays open. */
export interface PlannedSlice {
  sliceNumber: number;
  factIds: string[];
  isOpen: boolean;
  /** `facts_added`: a new or grown slice; `facts_removed`: facts it covered left the concept. */
  reason: 'facts_added' | 'facts_removed';
}

export interface SlicePlan {
  writes: PlannedSlice[];
  /** Slices from this number on are removed (the concept has fewer facts now), or null. */
  removeFrom: number | null;
}

/**
 * What the slices of a concept become, given the facts linked to it now (in the stable order:
 * oldest first, then by id). Frozen slices before the first slice that lost a fact, or before
 * the open slice, stay as they are. From there on, the remaining facts of those slices (in slice
 * order) and then the facts no slice covers yet are cut again into slices of `batchSize`: full
 * ones frozen, the last partial one open. Slices whose facts and openness do not change are not
 * written again.
 */
export function planSlices(slices: readonly SliceState[], linkedFactIds: readonly string[], batchSize: number): SlicePlan {
  if (!Number.isInteger(batchSize) || batchSize < 1) throw new Error('batch size must be a positive integer');
  const ordered = [...slices].sort((a, b) => a.sliceNumber - b.sliceNumber);
  const linked = new Set(linkedFactIds);
  const covered = new Set(ordered.flatMap((slice) => slice.factIds));
  const lostFacts = (slice: SliceState) => slice.factIds.some((id) => !linked.has(id));
  let pivot = ordered.findIndex((slice) => slice.isOpen || lostFacts(slice));
  if (pivot === -1) pivot = ordered.length;
  const kept = ordered.slice(0, pivot);
  const redone = ordered.slice(pivot);
  const pool = [...redone.flatMap((slice) => slice.factIds.filter((id) => linked.has(id))), ...linkedFactIds.filter((id) => !covered.has(id))];
  const firstNumber = (kept.at(-1)?.sliceNumber ?? 0) + 1;
  const before = new Map(redone.map((slice) => [slice.sliceNumber, slice]));
  const writes: PlannedSlice[] = [];
  let count = 0;
  for (let start = 0; start < pool.length; start += batchSize) {
    const factIds = pool.slice(start, start + batchSize);
    const sliceNumber = firstNumber + count++;
    const isOpen = factIds.length < batchSize;
    const previous = before.get(sliceNumber);
    if (previous && previous.isOpen === isOpen && sameIds(previous.factIds, factIds)) continue;
    const removed = previous !== undefined && previous.factIds.some((id) => !factIds.includes(id));
    writes.push({ sliceNumber, factIds, isOpen, reason: removed ? 'facts_removed' : 'facts_added' });
  }
  const lastNumber = ordered.at(-1)?.sliceNumber ?? 0;
  const nextNumber = firstNumber + count;
  return { writes, removeFrom: nextNumber <= lastNumber ? nextNumber : null };
}

function sameIds(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((id, index) => id === b[index]);
}
