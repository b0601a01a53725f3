import type { SliceSummaryInput, SynthesisInput, SynthesisOutput } from './port.js';

/**
 * The built-in model's summaries and syntheses: honest and extractive. It selects facts, orders
 * them and cites each one; every sentence of its Markdown is a fact of the input, word for word,
 * as the link text of its own citation `[fact](<fact:FACT_ID>)`. It invents nothing, so what it
 * writes is as true as the facts are. Pure and cheap: it runs on the calling thread.
 */

/** Characters per token, roughly, for English text: how max_tokens becomes a length budget. */
const CHARS_PER_TOKEN = 4;
/** Facts the overview of a synthesis opens with. */
const OVERVIEW_FACTS = 3;
/** Facts a synthesis lists after its overview, at most (beyond that it reads as a dump). */
const DETAIL_FACTS = 25;

/** A fact as the link text of its citation: brackets escaped, on one line. */
export function citeFact(fact: { id: string; content: string }): string {
  const text = fact.content.replace(/\s+/g, ' ').trim().replace(/([[\]\\])/g, '\\$1');
  return `[${text}](<fact:${fact.id}>)`;
}

/** The concept's names, lower-cased, longest first (to tell whether a fact mentions it). */
function namesOf(concept: { canonicalName: string; aliases: readonly string[] }): string[] {
  return [...new Set([concept.canonicalName, ...concept.aliases].map((name) => name.trim().toLowerCase()).filter((name) => name.length > 1))].sort(
    (a, b) => b.length - a.length,
  );
}

function mentions(content: string, names: readonly string[]): boolean {
  const lower = content.toLowerCase();
  return names.some((name) => lower.includes(name));
}

/** A fact that says what the concept is ("X is a ...", "X was ...", "X refers to ..."). */
function isDefinitional(content: string, names: readonly string[]): boolean {
  const lower = content.toLowerCase();
  return names.some((name) => {
    const at = lower.indexOf(name);
    return at >= 0 && at < 40 && /\b(is|was|are|were|refers to|means)\b/.test(lower.slice(at + name.length, at + name.length + 40));
  });
}

/**
 * Picks facts by rank within a character budget (always at least one), and returns them in their
 * input order: the stable order of the concept's facts.
 */
function pick<T extends { id: string; content: string }>(facts: readonly T[], rank: (fact: T) => number, budget: number, limit = Infinity): T[] {
  const ranked = facts.map((fact, index) => ({ fact, index, rank: rank(fact) })).sort((a, b) => b.rank - a.rank || a.index - b.index);
  const chosen: typeof ranked = [];
  let used = 0;
  for (const entry of ranked) {
    if (chosen.length >= limit) break;
    const length = citeFact(entry.fact).length + 1;
    if (chosen.length > 0 && used + length > budget) continue;
    chosen.push(entry);
    used += length;
  }
  return chosen.sort((a, b) => a.index - b.index).map((entry) => entry.fact);
}

/** A slice's summary: its facts that mention the concept first, within max_tokens, cited in order. */
export function localSliceSummary(input: SliceSummaryInput): { content: string } {
  const names = namesOf(input.concept);
  const facts = input.facts.filter((fact) => fact.content.trim() !== '');
  if (facts.length === 0) return { content: '' };
  const chosen = pick(facts, (fact) => (mentions(fact.content, names) ? 2 : 0) + (isDefinitional(fact.content, names) ? 1 : 0), input.maxTokens * CHARS_PER_TOKEN);
  return { content: chosen.map(citeFact).join(' ') };
}

/**
 * A synthesis: an overview of the facts that say what the concept is, then the other facts
 * (those naming the concept first), then the related concepts by name, within max_tokens.
 * Images: the first max_images candidates (image facts in their stable order).
 */
export function localSynthesis(input: SynthesisInput): SynthesisOutput {
  const names = namesOf(input.concept);
  const facts = input.facts.filter((fact) => fact.content.trim() !== '');
  const budget = input.maxTokens * CHARS_PER_TOKEN;
  // The overview: facts that name the concept, those saying what it is first; without any, its first fact.
  const naming = facts.filter((fact) => mentions(fact.content, names));
  const overview = pick(naming.length > 0 ? naming : facts.slice(0, 1), (fact) => (isDefinitional(fact.content, names) ? 1 : 0), budget / 4, OVERVIEW_FACTS);
  const inOverview = new Set(overview.map((fact) => fact.id));
  const rest = facts.filter((fact) => !inOverview.has(fact.id));
  const used = overview.reduce((sum, fact) => sum + citeFact(fact).length + 1, 0);
  const details = rest.length > 0 && used < budget ? pick(rest, (fact) => (mentions(fact.content, names) ? 1 : 0), budget - used, DETAIL_FACTS) : [];
  const parts: string[] = [];
  if (overview.length > 0) parts.push(overview.map(citeFact).join(' '));
  if (details.length > 0) parts.push(['### Details', '', ...details.map((fact) => `- ${citeFact(fact)}`)].join('\n'));
  if (input.relatedConcepts.length > 0) parts.push(['### Related concepts', '', ...input.relatedConcepts.map((concept) => `- ${concept.canonicalName.replace(/([[\]\\<>])/g, '\\$1')}`)].join('\n'));
  return { content: parts.join('\n\n'), imageFactIds: input.images.slice(0, input.maxImages).map((image) => image.factId) };
}
