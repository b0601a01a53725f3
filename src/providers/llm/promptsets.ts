import { createHash } from 'node:crypto';
import { isPromptPhase, PROMPT_PHASES, type PromptPhase } from '../../domain/repository/prompts.js';

/**
 * Promptsets: the system prompt of every chat-model phase, built in and overridable per
 * repository (`RepositoryPromptsChanged`). The spec's promptset_hash covers only the four
 * phases whose output is shared through the registry (facts, image facts, concepts,
 * refinement); see docs/providers.md for the exact hash encoding.
 *
 * Each built-in prompt tells the model what the user message holds (a JSON document of the
 * structured input) and the exact JSON object to answer with. `openai.ts` validates replies
 * against the same shapes (`PHASE_OUTPUT_SCHEMAS`), so a prompt and its schema change together.
 */

export { isPromptPhase, PROMPT_PHASES, type PromptPhase };

export interface Promptset {
  /** The effective system prompt of every phase. */
  phases: Record<PromptPhase, string>;
  /** promptsetHash(phases): what producers record as `promptset_hash`. */
  hash: string;
  /** Phases whose text comes from the repository's overrides, in PROMPT_PHASES order. */
  overridden: PromptPhase[];
}

/** The phases the registry shares, in the fixed order the hash reads them (spec, "promptset_hash contract"). */
export const HASHED_PROMPT_PHASES = ['fact_extraction', 'image_fact_extraction', 'concept_extraction', 'refinement'] as const;
export type HashedPromptPhase = (typeof HASHED_PROMPT_PHASES)[number];

const JSON_ONLY =
  'Answer with one JSON object and nothing else: no prose before or after it, no Markdown code fences.';

const BUILT_IN_TEXTS: Record<PromptPhase, string> = {
  fact_extraction: `You decompose a chunk of a source document into atomic facts.

The user message is a JSON object:
- "text": the chunk to decompose. Extract facts from this text only.
- "title": the source's title, or null. Use it to resolve what the text is about.
- "chunk_index": the 0-based position of the chunk in the source.
- "previous_context": the text just before the chunk ("" for the first chunk), and
- "next_context": the text just after it ("" for the last chunk). Use both only to resolve
  references and to finish a sentence the chunk boundary cuts; never extract facts from them.

Rules for each fact:
- One self-contained, declarative statement of a single claim, understandable without the
  document: replace pronouns and vague references ("it", "the company", "this method") with
  the names they refer to, and keep dates, quantities and qualifiers.
- Stay faithful to the text: no outside knowledge, no interpretation, no opinions of your own.
  Attribute claims the text attributes ("According to X, ...").
- Skip navigation, boilerplate, calls to action, questions, headings and citation markers.
- Plain text: no Markdown, no quotation of the whole sentence when a shorter claim suffices.
- Keep the order of the text.

${JSON_ONLY} Its shape:
{"facts": [{"content": "<the fact>", "source_text": "<the exact span of the chunk it came from>", "sentence_index": <0-based index of that sentence in the chunk>}]}
Use {"facts": []} when the chunk states no facts.`,

  image_fact_extraction: `You describe what an image from a source document shows, as atomic facts.

The user message is a JSON object with the image's "alt_text", "caption", "surrounding_text" (text
next to the image in the source) and "source_title", each possibly null. When the image itself is
attached, look at it; otherwise work from that text alone.

Rules:
- Each fact is one self-contained, declarative statement about what the image shows or
  documents (a chart's trend with its values, a diagram's components, who or what a photo
  depicts), understandable without the image.
- State only what is visible or stated in the accompanying text; do not guess identities,
  numbers or dates. Decorative images, logos and icons yield no facts.

${JSON_ONLY} Its shape:
{"facts": [{"content": "<the fact>", "source_text": "<the caption, alt text or visible text it rests on, or \\"\\">"}]}
Use {"facts": []} when the image shows nothing factual.`,

  concept_extraction: `You identify the concepts (entities and ideas) that a batch of facts mention.

The user message is a JSON object:
- "facts": [{"id", "content"}], the facts to read;
- "contexts": [{"name", "description"}], the contexts a concept may belong to.

For every distinct concept the facts mention (people, organisations, places, works, events,
methods, substances, theories, technical terms):
- "canonical_name": its preferred full name ("Marie Curie", not "Curie"), in the facts' language;
- "context": the name of exactly one of the given contexts, the one that fits best;
- "ontology_class": a short class such as "person", "organisation", "place", "method", or null;
- "aliases": other surface forms used in the facts for the same concept (may be empty);
- "fact_ids": the ids of the given facts that mention it (at least one, only ids from the input).
Skip generic words that name nothing specific ("thing", "result", "people"). Do not list the
same concept twice in one context.

${JSON_ONLY} Its shape:
{"concepts": [{"canonical_name": "...", "context": "...", "ontology_class": "..." , "aliases": ["..."], "fact_ids": ["..."]}]}
Use {"concepts": []} when the facts mention none.`,

  refinement: `You clean up a knowledge graph's concepts: merge duplicates and prune bad aliases.

The user message is a JSON object:
- "concepts": [{"id", "canonical_name", "context", "aliases", "fact_count"}], concepts of one
  context that may name the same thing;
- "prune_threshold": concepts with at least this many aliases need their aliases reviewed.

Decide:
- "merge" two concepts only when they certainly name the same thing (spelling variants,
  abbreviations, a name and its full form). The survivor is the concept with the better
  canonical name, or when equal the one with the higher fact_count.
- "remove_alias" an alias that names something else, is too generic, or is ambiguous.
Make no decision when unsure. Use only ids and aliases from the input.

${JSON_ONLY} Its shape:
{"decisions": [{"type": "merge", "loser_id": "...", "survivor_id": "...", "reason": "..."}, {"type": "remove_alias", "concept_id": "...", "alias": "...", "reason": "..."}]}
Use {"decisions": []} when nothing needs to change.`,

  synthesis: `You write an encyclopedic synthesis of one concept from the facts known about it.

The user message is a JSON object:
- "concept": {"id", "canonical_name", "context", "aliases"}, the concept;
- "summaries": [{"id", "content"}], summaries of the concept's facts, in order;
- "facts": [{"id", "content"}], the facts you may cite;
- "related_concepts": [{"id", "canonical_name", "summary"}], concepts that share facts with it;
- "related_syntheses": [{"concept_id", "canonical_name", "content"}], syntheses of related concepts,
  for context only: never cite or copy them;
- "images": [{"id", "caption"}], images that may illustrate it, and "max_images".

Write well-organised Markdown: a one-paragraph overview, then sections as the facts allow.
Every sentence must rest on the given facts; cite them inline as [text](<fact:FACT_ID>) with ids
from "facts" only. Do not invent facts. Mention related concepts by name where the facts link them.
Choose at most max_images images that show the concept itself.

${JSON_ONLY} Its shape:
{"content": "<Markdown>", "fact_ids": ["<ids of the facts cited>"], "image_ids": ["<ids of images worth showing>"]}`,

  summarization: `You summarise one slice of the facts known about a concept.

The user message is a JSON object with "concept" ({"id", "canonical_name", "context", "aliases"}),
"slice" ({"facts": [{"id", "content"}]}, the facts to summarise, in order) and "max_tokens".

Write a short Markdown summary (at most max_tokens tokens) of what these facts say about the
concept. Every statement must rest on the given facts: cite them inline as [text](<fact:FACT_ID>),
with ids from this slice only. Do not add outside knowledge or cite anything else.

${JSON_ONLY} Its shape:
{"content": "<Markdown>", "fact_ids": ["<ids of the facts cited>"]}`,

  posture: `You judge how facts stand to one sentence of a report.

The user message is a JSON object with "sentence" (a sentence of a report) and "facts"
([{"id", "content"}]): facts of the knowledge base that a search found close to the sentence.

For each fact say whether the sentence "supports" it (states or implies the same thing),
"contradicts" it (states something incompatible with it: another value, date, actor or
outcome, or its negation), is "related" (about the same subject without agreeing or
disagreeing), or whether the fact is "irrelevant" to the sentence. Judge only from the two
texts; do not add outside knowledge.

${JSON_ONLY} Its shape:
{"judgements": [{"fact_id": "<an id from the input>", "posture": "supports" | "contradicts" | "related" | "irrelevant"}]}`,

  image_picker: `You choose the images that best illustrate a concept.

The user message is a JSON object with "concept" ({"id", "canonical_name", "context"}),
"candidates" ([{"id", "caption", "alt_text", "source_title"}]) and "max_images".

Pick at most max_images candidates that clearly show or document the concept itself (not
logos, icons, decorations or images of something else), best first. Pick none when no
candidate fits.

${JSON_ONLY} Its shape:
{"image_ids": ["<ids from the candidates>"], "reason": "<one sentence>"}`,
};

/** The unambiguous byte encoding of the hashed phases (docs/providers.md, "promptset_hash"). */
function hashInput(phases: Readonly<Record<HashedPromptPhase, string>>): Buffer {
  const parts: Buffer[] = [];
  for (const phase of HASHED_PROMPT_PHASES) {
    const text = Buffer.from(phases[phase], 'utf8');
    // "<phase>\n<byte length>\n<text>\n": the length makes every boundary unambiguous.
    parts.push(Buffer.from(`${phase}\n${text.length}\n`, 'utf8'), text, Buffer.from('\n', 'utf8'));
  }
  return Buffer.concat(parts);
}

/**
 * The spec's promptset_hash: hex SHA-256 over the four registry-shared phases in the fixed
 * order of HASHED_PROMPT_PHASES. The other phases never change it.
 */
export function promptsetHash(phases: Readonly<Record<HashedPromptPhase, string>>): string {
  return createHash('sha256').update(hashInput(phases)).digest('hex');
}

/** The built-in text of every phase. */
function builtInPromptTexts(): Record<PromptPhase, string> {
  const texts = {} as Record<PromptPhase, string>;
  for (const phase of PROMPT_PHASES) texts[phase] = BUILT_IN_TEXTS[phase];
  return texts;
}

export const BUILT_IN_PROMPTSET_HASH = promptsetHash(BUILT_IN_TEXTS);

export function builtInPromptset(): Promptset {
  return { phases: builtInPromptTexts(), hash: BUILT_IN_PROMPTSET_HASH, overridden: [] };
}

/** A repository's override map as stored (`repositories.prompt_overrides`): phase -> text. */
export type PromptOverrides = Readonly<Record<string, string | null | undefined>>;

/**
 * The built-in promptset with a repository's overrides applied. A null, absent or blank
 * override means "use the built-in text"; keys that name no phase (from an older version) are
 * ignored rather than failing every model call of the repository.
 */
export function effectivePromptset(overrides: PromptOverrides | null | undefined): Promptset {
  const phases = builtInPromptTexts();
  const overridden: PromptPhase[] = [];
  for (const phase of PROMPT_PHASES) {
    const text = overrides?.[phase];
    if (typeof text === 'string' && text.trim() !== '') {
      phases[phase] = text;
      overridden.push(phase);
    }
  }
  return { phases, hash: promptsetHash(phases), overridden };
}
