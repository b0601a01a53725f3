import { createRequire } from 'node:module';
import winkNLP, { type ItemSentence, type Model, type PartOfSpeech, type WinkMethods } from 'wink-nlp';
import { extractLocalConcepts, refineLocalConcepts } from './localConcepts.js';
import { judgePosturesLocally } from './localPosture.js';
import { localSliceSummary, localSynthesis } from './localSummaries.js';
import type {
  ChatModel,
  ConceptCandidate,
  ConceptExtractionInput,
  ExtractedFact,
  FactExtractionInput,
  FactExtractor,
  ImageInput,
  PostureInput,
  PostureJudgement,
  RefinementDecision,
  RefinementInput,
  SliceSummaryInput,
  SynthesisInput,
  SynthesisOutput,
} from './port.js';

/**
 * The built-in chat-model stand-in: rule-based fact extraction with no network and no
 * randomness, on wink-nlp's English lite model (sentence boundaries and part-of-speech tags).
 *
 * Per chunk: split the text into blocks (paragraphs, list items, underlined headings), strip
 * citation markers (the text is plain in every format, Markdown's already read: see cleanBlock),
 * split blocks into sentences, drop what is not a statement of fact
 * (questions, headings, navigation and calls to action, verbless fragments, very short
 * sentences), split sentences into independent clauses where that is safe, and make each
 * clause self-contained by replacing a leading pronoun with the subject of the previous
 * sentence. A clause whose leading pronoun cannot be resolved is dropped rather than emitted
 * as a fact that means nothing on its own.
 */

export const LOCAL_FACT_EXTRACTOR_MODEL_ID = 'local/rule-based-v1';

export function createLocalFactExtractor(): FactExtractor {
  return {
    modelId: LOCAL_FACT_EXTRACTOR_MODEL_ID,
    async extractFacts(input: FactExtractionInput, signal?: AbortSignal): Promise<ExtractedFact[]> {
      signal?.throwIfAborted();
      if (typeof input?.text !== 'string') throw new TypeError('extractFacts expects input.text to be a string');
      const facts = extractFactsFromText(input.text, input.previousContext ?? '', input.nextContext ?? '', input.title ?? null);
      // The plain extractor keeps its original output shape; the chat model adds sentence provenance.
      return facts.map(({ content, sourceText }) => ({ content, sourceText }));
    },
  };
}

/**
 * The built-in chat model: the fact extractor above (with sentence provenance), image facts from
 * the text next to an image (it sees no pixels), and rule-based concepts (`localConcepts.ts`).
 */
export function createLocalChatModel(): ChatModel {
  return {
    modelId: LOCAL_FACT_EXTRACTOR_MODEL_ID,
    canSeeImages: false,
    async extractFacts(input: FactExtractionInput, signal?: AbortSignal): Promise<ExtractedFact[]> {
      signal?.throwIfAborted();
      if (typeof input?.text !== 'string') throw new TypeError('extractFacts expects input.text to be a string');
      return extractFactsFromText(input.text, input.previousContext ?? '', input.nextContext ?? '', input.title ?? null);
    },
    async extractImageFacts(input: ImageInput, signal?: AbortSignal): Promise<ExtractedFact[]> {
      signal?.throwIfAborted();
      if (input === null || typeof input !== 'object') throw new TypeError('extractImageFacts expects an image input');
      return imageFacts(input);
    },
    async extractConcepts(input: ConceptExtractionInput, signal?: AbortSignal): Promise<ConceptCandidate[]> {
      signal?.throwIfAborted();
      return extractLocalConcepts(input, tagSentences);
    },
    async refineConcepts(input: RefinementInput, signal?: AbortSignal): Promise<RefinementDecision[]> {
      signal?.throwIfAborted();
      return refineLocalConcepts(input);
    },
    async judgePostures(input: PostureInput, signal?: AbortSignal): Promise<PostureJudgement[]> {
      signal?.throwIfAborted();
      return judgePosturesLocally(input);
    },
    async summarizeFacts(input: SliceSummaryInput, signal?: AbortSignal): Promise<{ content: string }> {
      signal?.throwIfAborted();
      return localSliceSummary(input);
    },
    async synthesizeConcept(input: SynthesisInput, signal?: AbortSignal): Promise<SynthesisOutput> {
      signal?.throwIfAborted();
      return localSynthesis(input);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Image facts from the words next to an image

/** alt texts that describe nothing: file names, camera names, placeholders. */
const FILE_NAME = /\.(png|jpe?g|gif|svg|webp|bmp|tiff?|avif|heic)$/i;
const CAMERA_NAME = /^(img|dsc|dscn|dcim|pxl|photo|image|screenshot|scan)[\s_-]*\d/i;
const PLACEHOLDER_WORDS = new Set([
  'image', 'img', 'photo', 'photograph', 'picture', 'pic', 'logo', 'icon', 'thumbnail', 'thumb', 'banner', 'avatar',
  'placeholder', 'spacer', 'untitled', 'figure', 'fig', 'graphic', 'illustration', 'alt', 'null', 'undefined',
  'click', 'here', 'button', 'arrow', 'menu', 'close', 'search', 'home', 'loading', 'default', 'blank', 'pixel',
]);
const DESCRIPTION_LEAD = /^(an?\s+)?(image|photo|photograph|picture|illustration|portrait|drawing|painting|figure|diagram|chart|map|fig\.)\s*\d*\s*(of|showing|shows|depicting|depicts|with)?[:.\s]+/i;
const TRAILING_YEAR = /[\s,;(–—-]+(c\.\s*|ca\.\s*|circa\s+)?(\d{4}(?:s)?)\)?\.?$/i;
const MIN_DESCRIPTION_WORDS = 2;

/** "Marie Curie in her laboratory, 1904" → "An image shows Marie Curie in her laboratory in 1904." */
function imageFacts(input: ImageInput): ExtractedFact[] {
  const descriptions: string[] = [];
  for (const raw of [input.caption, input.altText]) {
    if (typeof raw !== 'string') continue;
    const text = raw.replace(/\s+/g, ' ').trim();
    if (!isUsableDescription(text)) continue;
    const lower = text.toLowerCase();
    // Alt text that repeats (part of) the caption adds nothing.
    if (descriptions.some((kept) => kept.toLowerCase().includes(lower) || lower.includes(kept.toLowerCase()))) {
      const longer = descriptions.findIndex((kept) => lower.includes(kept.toLowerCase()));
      if (longer !== -1) descriptions[longer] = text;
      continue;
    }
    descriptions.push(text);
  }
  const facts: ExtractedFact[] = [];
  for (const description of descriptions) {
    const content = describeImage(description, input.sourceTitle ?? null);
    if (content !== null && !facts.some((fact) => fact.content === content)) facts.push({ content, sourceText: description });
  }
  return facts;
}

function isUsableDescription(text: string): boolean {
  if (text === '' || FILE_NAME.test(text) || CAMERA_NAME.test(text) || /^https?:\/\//i.test(text)) return false;
  // "marie_curie_1904" or "header-bg": a slug, not a description.
  if (!/\s/.test(text) && /[_-]/.test(text)) return false;
  const words = text.split(/\s+/).filter((word) => /\p{L}/u.test(word));
  if (words.length < MIN_DESCRIPTION_WORDS) return false;
  return !words.every((word) => PLACEHOLDER_WORDS.has(word.toLowerCase().replace(/[^\p{L}]/gu, '')));
}

/**
 * A self-contained statement about what the image shows. A description that is a sentence
 * stands as it is (its pronouns resolved against the source title); a noun phrase becomes
 * "An image shows ...", a trailing year becoming "in 1904".
 */
function describeImage(description: string, title: string | null): string | null {
  const sentence = extractFactsFromText(description, '', '', title);
  if (sentence.length > 0) return sentence.map((fact) => fact.content).join(' ');
  let phrase = description.replace(DESCRIPTION_LEAD, '').replace(/[.:;,\s]+$/, '');
  let when = '';
  const year = TRAILING_YEAR.exec(phrase);
  if (year !== null && year.index > 0) {
    when = ` in ${year[2]}`;
    phrase = phrase.slice(0, year.index).replace(/[\s,;(–—-]+$/, '');
  }
  if (phrase.split(/\s+/).filter((word) => /\p{L}/u.test(word)).length < 1) return null;
  const tokens = tagSentences(phrase).flatMap((item) => item.tokens);
  // Keep a name's capital, lower a common word's: "A laboratory" → "a laboratory".
  const first = tokens[0];
  if (first !== undefined && first.pos !== 'PROPN' && !/^\p{Lu}{2}/u.test(first.value)) {
    phrase = phrase.charAt(0).toLowerCase() + phrase.slice(1);
  }
  return `An image shows ${phrase}${when}.`;
}

// ---------------------------------------------------------------------------------------------
// wink-nlp

let sharedNlp: WinkMethods | null = null;

/**
 * Loading the model takes a moment and some memory: once per process (per model worker thread),
 * on first use or by `preloadLocalChatModel`. It is required here rather than imported at the
 * top, so a process that only imports this module (the API thread) never holds the model.
 */
function nlp(): WinkMethods {
  sharedNlp ??= winkNLP(createRequire(import.meta.url)('wink-eng-lite-web-model') as Model);
  return sharedNlp;
}

/** Loads the language model now instead of on the first call. */
export function preloadLocalChatModel(): void {
  nlp();
}

interface Token {
  value: string;
  /** Lower-cased value. */
  normal: string;
  pos: PartOfSpeech;
  /** Whether whitespace precedes the token in the text it came from. */
  spaced: boolean;
}

interface Sentence {
  tokens: Token[];
  /** Offsets in the text that was tagged. */
  start: number;
  end: number;
  text: string;
}

function tagSentences(text: string): Sentence[] {
  const { its } = nlp();
  const sentences: Sentence[] = [];
  let cursor = 0;
  nlp()
    .readDoc(text)
    .sentences()
    .each((item: ItemSentence) => {
      const tokens = item.tokens();
      const values = tokens.out(its.value) as string[];
      const spaces = tokens.out(its.precedingSpaces) as string[];
      const tags = tokens.out(its.pos) as PartOfSpeech[];
      const sentenceTokens: Token[] = [];
      let start = -1;
      for (let i = 0; i < values.length; i++) {
        const value = values[i] ?? '';
        cursor += (spaces[i] ?? '').length;
        // wink keeps the text verbatim (doc.out() === text); searching is only a safety net.
        const found = text.startsWith(value, cursor) ? cursor : text.indexOf(value, cursor);
        const at = found === -1 ? cursor : found;
        cursor = at + value.length;
        const pos = tags[i] ?? 'X';
        if (pos === 'SPACE' || value.trim() === '') continue;
        if (start === -1) start = at;
        sentenceTokens.push({ value, normal: value.toLowerCase(), pos, spaced: (spaces[i] ?? '') !== '' });
      }
      if (sentenceTokens.length > 0 && start !== -1) {
        sentences.push({ tokens: sentenceTokens, start, end: cursor, text: text.slice(start, cursor) });
      }
    });
  return sentences;
}

// ---------------------------------------------------------------------------------------------
// Extraction

function extractFactsFromText(
  text: string,
  previousContext: string,
  nextContext: string,
  title: string | null,
): ExtractedFact[] {
  // The contexts are contiguous with the chunk, so tagging them together gives the chunk's
  // sentences their true boundaries and their preceding sentences. Exactly the sentences that
  // start inside the chunk are emitted, whole: one cut by the chunk start belongs to the
  // previous chunk, and one cut by the chunk end is finished from the next context.
  const full = previousContext + text + nextContext;
  const emitFrom = previousContext.length;
  const emitTo = previousContext.length + text.length;
  const discourse = new Discourse(topicOfTitle(title));
  const facts: ExtractedFact[] = [];
  // Sentences of the chunk's prose (headings and menus are not counted), in text order.
  let sentenceIndex = -1;

  for (const block of splitBlocks(full)) {
    if (block.start >= emitTo) break;
    if (block.kind === 'heading') continue;
    const cleaned = cleanBlock(full, block);
    if (cleaned.text === '' || isNavigation(cleaned)) continue;
    for (const sentence of tagSentences(cleaned.text)) {
      const sourceStart = cleaned.origin[sentence.start] ?? block.start;
      if (sourceStart >= emitTo) break;
      // Up to where the next kept character starts: trailing citation markers stay in sourceText.
      const sourceEnd = cleaned.origin[sentence.end] ?? block.end;
      if (sourceStart >= emitFrom) sentenceIndex++;
      if (classifySentence(sentence, block.kind) !== 'statement') continue;
      const contents = discourse.factsOf(sentence.tokens);
      if (sourceStart < emitFrom) continue;
      const sourceText = full.slice(sourceStart, sourceEnd).trim();
      for (const content of contents) facts.push({ content, sourceText, sentenceIndex });
    }
  }
  return facts;
}

// ---------------------------------------------------------------------------------------------
// Blocks: paragraphs, list items and headings of plain text

type BlockKind = 'paragraph' | 'list-item' | 'heading';

interface Block {
  kind: BlockKind;
  /** Offsets in the text; `end` is exclusive. */
  start: number;
  end: number;
}

const SETEXT_UNDERLINE = /^\s{0,3}(=+|-+)\s*$/;
const THEMATIC_BREAK = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const TABLE_ROW = /^\s*\|/;
const LIST_MARKER = /^\s*(?:[-*+•‣◦▪]|\d{1,3}[.)])\s+/;
const TERMINAL_PUNCTUATION = /[.!?…:;,"”’)\]]$/;
const FUNCTION_WORDS = new Set([
  'a', 'an', 'the', 'of', 'in', 'on', 'at', 'to', 'for', 'by', 'with', 'from', 'and', 'or', 'but',
  'as', 'that', 'which', 'who', 'its', 'his', 'her', 'their', 'is', 'was', 'are', 'were', 'be',
]);

/**
 * The blocks of the extractor's plain text, by the layout plain text has in every format: blank lines
 * between paragraphs, bulleted or numbered items (`-`, `*`, `+`, `•`, `1.`), a title underlined with
 * `===` or `---`, separator lines and `|` table rows. Markdown's own syntax (`#` headings, code
 * fences) is not read here: a Markdown document's text comes without it, and in any other format a
 * line that starts with `# ` or a backtick fence is the author's text.
 */
function splitBlocks(text: string): Block[] {
  const blocks: Block[] = [];
  let open: Block | null = null;
  let openLines = 0;
  const flush = (): void => {
    if (open !== null) blocks.push(open);
    open = null;
    openLines = 0;
  };

  let lineStart = 0;
  while (lineStart <= text.length) {
    const newline = text.indexOf('\n', lineStart);
    const lineEnd = newline === -1 ? text.length : newline;
    const contentEnd = text[lineEnd - 1] === '\r' ? lineEnd - 1 : lineEnd;
    const line = text.slice(lineStart, contentEnd);

    if (line.trim() === '') {
      flush();
    } else if (SETEXT_UNDERLINE.test(line) && open !== null && openLines === 1) {
      open.kind = 'heading';
      flush();
    } else if (THEMATIC_BREAK.test(line) || TABLE_ROW.test(line)) {
      flush();
    } else {
      const marker = LIST_MARKER.exec(line);
      const contentStart = lineStart + (marker?.[0].length ?? line.length - line.trimStart().length);
      const current: Block | null = open;
      if (marker !== null) {
        flush();
        open = { kind: 'list-item', start: contentStart, end: contentEnd };
        openLines = 1;
      } else if (current === null || (openLines === 1 && standsAlone(text.slice(current.start, current.end), line))) {
        flush();
        open = { kind: 'paragraph', start: contentStart, end: contentEnd };
        openLines = 1;
      } else {
        current.end = contentEnd;
        openLines++;
      }
    }
    if (newline === -1) break;
    lineStart = newline + 1;
  }
  flush();
  return blocks;
}

/**
 * Whether a one-line block is a title or label rather than the first line of a wrapped
 * paragraph: short, unpunctuated, not ending mid-phrase, and followed by a capitalized line.
 */
function standsAlone(line: string, nextLine: string): boolean {
  const trimmed = line.trim();
  const words = trimmed.split(/\s+/u);
  const lastWord = (words.at(-1) ?? '').toLowerCase();
  return (
    !TERMINAL_PUNCTUATION.test(trimmed) &&
    !trimmed.endsWith('-') &&
    words.length <= 8 &&
    !FUNCTION_WORDS.has(lastWord) &&
    /^\p{Lu}/u.test(nextLine.trimStart())
  );
}

// ---------------------------------------------------------------------------------------------
// Cleaning with an offset map back to the original text

interface CleanText {
  text: string;
  /** origin[i] is the offset in the original text of text[i]. */
  origin: number[];
}

/** `source` with every match of `pattern` replaced by `replacement`, which stands where the match started. */
function rewrite(source: CleanText, pattern: RegExp, replacement: string): CleanText {
  let text = '';
  const origin: number[] = [];
  let copiedTo = 0;
  const copy = (from: number, to: number): void => {
    text += source.text.slice(from, to);
    for (let i = from; i < to; i++) origin.push(source.origin[i] ?? 0);
  };
  for (const match of source.text.matchAll(pattern)) {
    const at = match.index ?? 0;
    copy(copiedTo, at);
    text += replacement;
    for (let i = 0; i < replacement.length; i++) origin.push(source.origin[at] ?? 0);
    copiedTo = at + match[0].length;
  }
  copy(copiedTo, source.text.length);
  return { text, origin };
}

/**
 * Citation and cleanup markers: [1], [1, 2], [3–5], [a], [note 2], [^4], [citation needed]. Not
 * `[sic]`: that is the quoting author's word that an error is the original's, part of what it says.
 */
const CITATION_MARKER = new RegExp(
  String.raw`[ \t\u00a0]*\[(?:` +
    [
      String.raw`\d{1,4}(?:\s*[,–—-]\s*\d{1,4})*`,
      String.raw`[a-z]|[ivx]{1,5}|note\s*\d+|\^[\w-]+`,
      'citation needed|clarification needed|verification needed|better source needed|failed verification',
      String.raw`page needed|dubious[^\]]{0,40}|original research\??`,
      String.raw`according to whom\?|by whom\?|when\?|who\?|which\?|where\?`,
    ].join('|') +
    String.raw`)\]`,
  'gi',
);
const WHITESPACE_RUN = /\s+/g;
const SPACE_BEFORE_PUNCTUATION = / +(?=[.,;:!?](?:\s|$))/g;
const EDGE_SPACE = /^ | $/g;

/**
 * A block's words without citation markers, on one line. The text is the extractor's plain reading
 * of the document, so every other character is the author's: an HTML page's tags and character
 * references are gone with its DOM, a Markdown document's syntax with the extractor's reading of it
 * (which alone knows what is code, escaped or a reference), and a text/plain file has none. Reading
 * Markdown here as well took characters from every format: a text/plain file's `__init__`, `*very*`,
 * `> 5 people` or `# of cases` lost their marks or their line, as did what a Markdown document's
 * escapes, code spans and references made text (`\*a\*`, `` `*a*` `` and `&#42;a&#42;` all read
 * "a", not "*a*"); and in a text/plain file `<p>` or `AT&amp;T` are those characters.
 */
function cleanBlock(text: string, block: Block): CleanText {
  const origin: number[] = [];
  for (let i = block.start; i < block.end; i++) origin.push(i);
  let cleaned: CleanText = { text: text.slice(block.start, block.end), origin };
  cleaned = rewrite(cleaned, CITATION_MARKER, '');
  cleaned = rewrite(cleaned, WHITESPACE_RUN, ' ');
  cleaned = rewrite(cleaned, SPACE_BEFORE_PUNCTUATION, '');
  cleaned = rewrite(cleaned, EDGE_SPACE, '');
  return cleaned;
}

const MENU_SEPARATOR = /\s[|·•»›]\s/g;

/** Menus ("Home | About | Contact") carry no facts. */
function isNavigation(cleaned: CleanText): boolean {
  return (cleaned.text.match(MENU_SEPARATOR)?.length ?? 0) >= 2;
}

// ---------------------------------------------------------------------------------------------
// Which sentences state facts

type SentenceKind = 'statement' | 'question' | 'boilerplate' | 'heading' | 'fragment' | 'too-short';

const MIN_WORDS = 4;
const NON_WORD_POS = new Set<PartOfSpeech>(['PUNCT', 'SYM', 'SPACE']);
const VERB_POS = new Set<PartOfSpeech>(['VERB', 'AUX']);
const DANGLING_END_POS = new Set<PartOfSpeech>(['DET', 'ADP', 'CCONJ', 'SCONJ']);
const ENDS_AS_QUESTION = /\?["'”’)\]]*$/;
const ENDS_AS_SENTENCE = /[.!?…]["'”’)\]]*$/;

/** Calls to action, site chrome and reference-section furniture; matched on lower case. */
const BOILERPLATE: RegExp[] = [
  /\b(click|tap) (here|this link|the link|below|above)\b/,
  /^(click|tap) (on|to)\b/,
  /^(read|learn|find out|see|discover|show) (more|less|all)\b/,
  /^(subscribe|unsubscribe|sign up|sign in|log ?in|log out|register now|get started|continue reading)\b/,
  /^(skip to|jump to|back to top|scroll (up|down)|go back|return to)\b/,
  /^(follow|like|share|join|contact|email|call) (us|me|this|now|today|on|via|our)\b/,
  /^(download|buy|order|shop|book|reserve|try|watch|listen|donate|upgrade|install|get) (now|today|free|for free)\b/,
  /^(download|buy|order|shop|book|reserve|try|watch|listen|donate|upgrade|install|get) (it|this|the app|our|your|tickets|online)\b/,
  /^please\b/,
  /^(you|your)\b/,
  /\ball rights reserved\b/,
  /^(copyright\b|©)|\(c\) \d{4}/,
  /\bcookies?\b.*\b(accept|consent|policy|settings|preferences)\b/,
  /\b(we|this (site|website)) uses? cookies\b/,
  /\b(privacy policy|terms of (use|service)|terms and conditions)\b/,
  /\bnewsletter\b/,
  /^(advertisement|sponsored|related (articles|posts|stories))\b/,
  /^(this|the) (article|page|section|entry|post) (is about|needs|may need|has been|was last|is part of|relies)\b/,
  /\b(retrieved|archived) (on|from)\b/,
  /^(see also|references|external links|further reading|bibliography)\b/,
  /\b(enable javascript|your browser|this browser)\b/,
  /^(posted|last updated|last modified|last edited)\b/,
  /^(published|updated) (on|by)\b/,
  /\bfrom wikipedia\b|\bthe free encyclopedia\b/,
  /\bleave a (comment|reply)\b/,
];

function classifySentence(sentence: Sentence, blockKind: BlockKind): SentenceKind {
  const { tokens, text } = sentence;
  const lower = text.toLowerCase().replace(/[’‘]/g, "'");
  if (ENDS_AS_QUESTION.test(text)) return 'question';
  if (BOILERPLATE.some((pattern) => pattern.test(lower))) return 'boilerplate';
  if (/[:;,]$/.test(text)) return 'fragment';
  const words = tokens.filter((token) => !NON_WORD_POS.has(token.pos));
  if (words.length < MIN_WORDS) return 'too-short';
  if (!tokens.some((token) => VERB_POS.has(token.pos))) return 'fragment';
  const terminated = ENDS_AS_SENTENCE.test(text);
  if (!terminated && (blockKind === 'heading' || isTitleCase(words))) return 'heading';
  const lastWord = words.at(-1);
  if (lastWord !== undefined && DANGLING_END_POS.has(lastWord.pos)) return 'fragment';
  return 'statement';
}

/** Most longer words capitalized, as in "Marie Curie Wins Second Nobel Prize". */
function isTitleCase(words: Token[]): boolean {
  const longer = words.filter((word) => word.value.length > 3 && /^\p{L}/u.test(word.value));
  if (longer.length < 2) return false;
  const capitalized = longer.filter((word) => /^\p{Lu}/u.test(word.value)).length;
  return capitalized / longer.length >= 0.75;
}

// ---------------------------------------------------------------------------------------------
// Clauses

const SUBORDINATORS = new Set([
  'although', 'though', 'because', 'since', 'if', 'unless', 'when', 'whenever', 'while', 'whereas',
  'after', 'before', 'until', 'once', 'as',
]);
const CLAUSE_COORDINATORS = new Set(['and', 'but']);
const RELATIVE_WORDS = new Set(['who', 'whom', 'whose', 'which', 'that', 'where', 'when']);
const NOMINAL_POS = new Set<PartOfSpeech>(['NOUN', 'PROPN', 'PRON']);
const OPENING_BRACKETS = new Set(['(', '[', '{']);
const CLOSING_BRACKETS = new Set([')', ']', '}']);

interface ClauseCut {
  at: number;
  /** Tokens the cut removes: ';' or ', and'. */
  width: number;
}

/**
 * Splits at '; ' and at ', and' / ', but' outside brackets and quotes, where both sides are
 * independent clauses (their own subject before their own verb). Sentences that open with a
 * subordinate clause are left whole: their parts depend on each other.
 */
function splitClauses(tokens: Token[]): Token[][] {
  const first = tokens[0];
  if (first === undefined || first.pos === 'SCONJ' || SUBORDINATORS.has(first.normal)) return [tokens];

  const cuts: ClauseCut[] = [];
  let depth = 0;
  let inQuote = false;
  tokens.forEach((token, i) => {
    if (OPENING_BRACKETS.has(token.value)) depth++;
    else if (CLOSING_BRACKETS.has(token.value)) depth = Math.max(0, depth - 1);
    else if (token.value === '“') depth++;
    else if (token.value === '”') depth = Math.max(0, depth - 1);
    else if (token.value === '"') inQuote = !inQuote;
    if (depth > 0 || inQuote) return;
    if (token.value === ';') cuts.push({ at: i, width: 1 });
    const next = tokens[i + 1];
    if (token.value === ',' && next?.pos === 'CCONJ' && CLAUSE_COORDINATORS.has(next.normal)) {
      cuts.push({ at: i, width: 2 });
    }
  });

  const clauses: Token[][] = [];
  let from = 0;
  cuts.forEach((cut, k) => {
    const rightEnd = cuts[k + 1]?.at ?? tokens.length;
    const left = tokens.slice(from, cut.at);
    const right = tokens.slice(cut.at + cut.width, rightEnd);
    if (isIndependentClause(left) && isIndependentClause(right)) {
      clauses.push(left);
      from = cut.at + cut.width;
    }
  });
  clauses.push(tokens.slice(from));
  return clauses;
}

function isIndependentClause(tokens: Token[]): boolean {
  const words = tokens.filter((token) => !NON_WORD_POS.has(token.pos));
  const first = words[0];
  if (words.length < 3 || first === undefined || RELATIVE_WORDS.has(first.normal)) return false;
  const verbAt = words.findIndex((token) => VERB_POS.has(token.pos));
  return verbAt > 0 && words.slice(0, verbAt).some((token) => NOMINAL_POS.has(token.pos));
}

function renderClause(tokens: Token[]): string {
  let from = 0;
  let to = tokens.length;
  while (from < to && (tokens[from]?.pos === 'PUNCT' || tokens[from]?.pos === 'CCONJ')) from++;
  while (to > from && /^[,;:—–-]$/.test(tokens[to - 1]?.value ?? '')) to--;
  const kept = tokens.slice(from, to);
  let text = kept.map((token, i) => (i > 0 && token.spaced ? ' ' : '') + token.value).join('');
  if (kept[0] !== undefined && kept[0].pos !== 'PROPN') text = capitalize(text);
  if (!ENDS_AS_SENTENCE.test(text)) text += '.';
  return text;
}

function capitalize(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

// ---------------------------------------------------------------------------------------------
// Noun phrases and their agreement

interface NounPhrase {
  tokens: Token[];
  /** The noun the phrase is about: "capital" in "the capital of France". */
  head: Token;
  /** Words follow the head ("of France", "who discovered radium"): "X's" would read badly. */
  postModified: boolean;
  plural: boolean;
  /** Headed by a proper noun. */
  proper: boolean;
  /** Learned from the pronouns that referred to it: he/she (true), it/its (false). */
  person: boolean | null;
  /** Learned from he/his (male) or she/her (female). */
  gender: Gender | null;
}

type Gender = 'male' | 'female';

const IRREGULAR_PLURALS = new Set([
  'people', 'children', 'men', 'women', 'data', 'mice', 'geese', 'teeth', 'feet', 'criteria', 'phenomena', 'media',
]);
const SINGULAR_S_ENDING = /(ss|us|is|ics|ous|sis|news|series|species)$/;
/** Words that make a capitalized phrase a thing, place or institution rather than a person. */
const NON_PERSON_WORDS = new Set([
  'prize', 'prizes', 'award', 'awards', 'medal', 'university', 'college', 'institute', 'society', 'academy',
  'company', 'corporation', 'inc', 'ltd', 'museum', 'tower', 'river', 'mountain', 'mountains', 'ocean',
  'sea', 'lake', 'street', 'road', 'church', 'cathedral', 'bridge', 'park', 'war', 'republic', 'kingdom',
  'empire', 'union', 'states', 'nations', 'council', 'committee', 'party', 'association', 'foundation',
  'center', 'centre', 'hospital', 'school', 'laboratory', 'department', 'ministry', 'agency', 'bank',
  'group', 'press', 'journal', 'times', 'act', 'treaty', 'cup', 'games', 'festival', 'city', 'county',
  'state', 'province', 'island', 'islands', 'valley', 'airport', 'station', 'hall', 'house', 'palace',
  'castle', 'building', 'system', 'project', 'program', 'programme', 'mission', 'theory', 'law', 'effect',
  'january', 'february', 'march', 'april', 'june', 'july', 'august', 'september', 'october',
  'november', 'december', 'monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday', 'sunday',
]);
/** Common nouns that name people, so he/she can refer to "the woman who discovered radium". */
const PERSON_NOUNS = new Set([
  'man', 'woman', 'boy', 'girl', 'person', 'king', 'queen', 'prince', 'princess', 'emperor', 'empress',
  'president', 'author', 'writer', 'poet', 'painter', 'composer', 'singer', 'actor', 'actress', 'teacher',
  'professor', 'doctor', 'engineer', 'inventor', 'founder', 'leader', 'mother', 'father', 'son',
  'daughter', 'wife', 'husband', 'brother', 'sister', 'child', 'student', 'researcher', 'explorer',
  'philosopher', 'mathematician', 'politician', 'officer', 'soldier', 'minister', 'director', 'player',
]);
const NOT_PERSON_IST = new Set([
  'list', 'mist', 'twist', 'wrist', 'fist', 'gist', 'exist', 'assist', 'persist', 'insist', 'resist', 'consist',
]);
const PLACE_PREFIXES = new Set([
  'new', 'san', 'santa', 'los', 'las', 'saint', 'st.', 'mount', 'cape', 'port', 'fort', 'north', 'south', 'east',
  'west', 'upper', 'lower', 'great', 'united',
]);
const MAX_PHRASE_TOKENS = 10;
/** What cannot end a noun phrase: "the sample in" is "the sample". */
const PHRASE_TAIL_POS = new Set<PartOfSpeech>(['PUNCT', 'ADP', 'DET', 'CCONJ', 'SCONJ', 'PART']);

function makePhrase(candidate: Token[]): NounPhrase | null {
  let from = 0;
  let to = candidate.length;
  while (from < to && (candidate[from]?.pos === 'PUNCT' || candidate[from]?.pos === 'CCONJ')) from++;
  while (to > from && PHRASE_TAIL_POS.has(candidate[to - 1]?.pos ?? 'X')) to--;
  let tokens = candidate.slice(from, to);
  if (tokens.length > MAX_PHRASE_TOKENS) {
    // A long subject ("The results of the survey carried out in ...") keeps its core.
    tokens = tokens.slice(0, modifiersStart(tokens));
    if (tokens.length > MAX_PHRASE_TOKENS) return null;
  }
  const core = modifiersStart(tokens);
  const headAt = lastIndexWhere(tokens.slice(0, core), isNoun);
  const head = tokens[headAt];
  if (head === undefined || tokens[0]?.normal === 'there') return null;
  const coordinated = tokens.slice(0, core).some((token) => token.pos === 'CCONJ' && token.normal === 'and');
  return {
    tokens,
    head,
    postModified: core < tokens.length,
    plural: coordinated || isPluralHead(head, tokens),
    proper: head.pos === 'PROPN',
    person: null,
    gender: null,
  };
}

/** Where a phrase's post-modifiers start: its first preposition, relative word or verb. */
function modifiersStart(tokens: Token[]): number {
  const at = tokens.findIndex(
    (token, i) => i > 0 && (token.pos === 'ADP' || VERB_POS.has(token.pos) || isRelativeWord(token)),
  );
  return at === -1 ? tokens.length : at;
}

function isRelativeWord(token: Token): boolean {
  return token.pos !== 'DET' && RELATIVE_WORDS.has(token.normal);
}

function lastIndexWhere(tokens: Token[], predicate: (token: Token) => boolean): number {
  for (let i = tokens.length - 1; i >= 0; i--) if (predicate(tokens[i] as Token)) return i;
  return -1;
}

function isNoun(token: Token): boolean {
  return token.pos === 'NOUN' || token.pos === 'PROPN';
}

function isPluralHead(head: Token, phrase: Token[]): boolean {
  if (IRREGULAR_PLURALS.has(head.normal)) return true;
  if (!head.normal.endsWith('s') || head.normal.length <= 3 || SINGULAR_S_ENDING.test(head.normal)) return false;
  if (head.pos === 'NOUN') return true;
  // A proper noun is plural only as "the Curies", not as "Paris" or "the United States".
  return phrase.length === 2 && phrase[0]?.normal === 'the';
}

/** Two to four capitalized names without a thing or place word: "Marie Curie". */
function looksLikePersonName(phrase: NounPhrase): boolean {
  const names = phrase.tokens;
  return (
    phrase.proper &&
    names.length >= 2 &&
    names.length <= 4 &&
    names.every((token) => token.pos === 'PROPN') &&
    !PLACE_PREFIXES.has(names[0]?.normal ?? '') &&
    !names.some(isNonPersonWord)
  );
}

function canBePerson(phrase: NounPhrase): boolean {
  if (phrase.person !== null) return phrase.person;
  if (phrase.plural) return false;
  if (!phrase.proper) return namesPeople(phrase.head);
  return !phrase.tokens.some(isNonPersonWord);
}

function canBeThing(phrase: NounPhrase): boolean {
  if (phrase.person !== null) return !phrase.person;
  return !phrase.plural && !looksLikePersonName(phrase) && !(!phrase.proper && namesPeople(phrase.head));
}

/** "physicist", "woman", "founder". */
function namesPeople(noun: Token): boolean {
  const word = noun.normal;
  return PERSON_NOUNS.has(word) || (word.length > 5 && word.endsWith('ist') && !NOT_PERSON_IST.has(word));
}

function isNonPersonWord(token: Token): boolean {
  return NON_PERSON_WORDS.has(token.normal.replace(/\.$/, ''));
}

/** Runs of two or more proper nouns in a sentence that may name a person. */
function personNamesIn(tokens: Token[]): NounPhrase[] {
  const names: NounPhrase[] = [];
  let run: Token[] = [];
  const close = (): void => {
    const phrase = run.length >= 2 ? makePhrase(run) : null;
    if (phrase !== null && looksLikePersonName(phrase)) names.push(phrase);
    run = [];
  };
  for (const token of tokens) {
    if (token.pos === 'PROPN') run.push(token);
    else close();
  }
  close();
  return names;
}

// ---------------------------------------------------------------------------------------------
// Subjects

const INTRODUCTORY_POS = new Set<PartOfSpeech>(['ADP', 'ADV', 'SCONJ', 'CCONJ', 'INTJ']);
const PHRASE_POS = new Set<PartOfSpeech>(['NOUN', 'PROPN', 'ADJ', 'NUM', 'PART']);

/** The subject noun phrase of a clause: what stands before its first verb, minus introductions. */
function subjectOf(tokens: Token[]): NounPhrase | null {
  const verbAt = tokens.findIndex((token) => VERB_POS.has(token.pos));
  if (verbAt <= 0) return null;
  let before = tokens.slice(0, verbAt);
  let relativeClause: Token[] = [];
  const relative = before.findIndex((token, i) => i > 0 && isRelativeWord(token));
  if (relative > 0) {
    before = before.slice(0, relative);
    relativeClause = restrictiveRelativeClause(tokens, relative, verbAt);
  }
  const segments = splitOnCommas(withoutParentheses(before));
  for (const [i, segment] of segments.entries()) {
    const first = segment[0];
    if (first === undefined || INTRODUCTORY_POS.has(first.pos) || !segment.some(isNoun)) continue;
    const attached = i === segments.length - 1 && before.at(-1)?.value !== ',' ? relativeClause : [];
    return makePhrase([...fromInnerDeterminer(segment), ...attached]);
  }
  // "After the war the company expanded": the noun phrase right before the verb.
  const trailing = trailingNounPhrase(segments.at(-1) ?? []);
  return trailing.length > 0 ? makePhrase(trailing) : null;
}

const MAX_RELATIVE_CLAUSE_TOKENS = 6;

/**
 * "who discovered radium" in "The woman who discovered radium was Polish": from the relative
 * word to the main verb, found after the relative clause's own verb group. Empty when unsure.
 */
function restrictiveRelativeClause(tokens: Token[], relative: number, relativeVerb: number): Token[] {
  let i = relativeVerb;
  while (i < tokens.length && ['AUX', 'PART', 'ADV'].includes(tokens[i]?.pos ?? '')) i++;
  if (tokens[i]?.pos === 'VERB') i++;
  const mainVerb = tokens.findIndex((token, k) => k >= i && VERB_POS.has(token.pos));
  if (mainVerb === -1 || mainVerb - relative > MAX_RELATIVE_CLAUSE_TOKENS) return [];
  const clause = tokens.slice(relative, mainVerb);
  return clause.some((token) => token.value === ',' || token.pos === 'CCONJ') ? [] : clause;
}

/** "Today the element" is "the element": a determiner starts a noun phrase unless it follows a preposition. */
function fromInnerDeterminer(segment: Token[]): Token[] {
  for (let k = segment.length - 1; k > 0; k--) {
    const before = segment[k - 1];
    if (segment[k]?.pos === 'DET' && before !== undefined && !['ADP', 'DET', 'CCONJ', 'PART'].includes(before.pos)) {
      return segment.slice(k);
    }
  }
  return segment;
}

function withoutParentheses(tokens: Token[]): Token[] {
  let depth = 0;
  return tokens.filter((token) => {
    if (OPENING_BRACKETS.has(token.value)) depth++;
    const keep = depth === 0;
    if (CLOSING_BRACKETS.has(token.value)) depth = Math.max(0, depth - 1);
    return keep;
  });
}

function splitOnCommas(tokens: Token[]): Token[][] {
  const segments: Token[][] = [[]];
  for (const token of tokens) {
    if (token.value === ',') segments.push([]);
    else segments.at(-1)?.push(token);
  }
  return segments.filter((segment) => segment.length > 0);
}

function trailingNounPhrase(tokens: Token[]): Token[] {
  const last = tokens.at(-1);
  if (last === undefined || !isNoun(last)) return [];
  let from = tokens.length - 1;
  while (from > 0) {
    const previous = tokens[from - 1];
    if (previous === undefined) break;
    if (previous.pos === 'DET') {
      from--;
      break;
    }
    if (!PHRASE_POS.has(previous.pos)) break;
    from--;
  }
  return tokens.slice(from);
}

// ---------------------------------------------------------------------------------------------
// Pronoun resolution

type Referent = 'person' | 'thing' | 'plural';

const SUBJECT_PRONOUNS: Record<string, Referent> = {
  he: 'person', she: 'person', it: 'thing', they: 'plural', this: 'thing', these: 'plural',
};
const POSSESSIVE_PRONOUNS: Record<string, Referent> = {
  his: 'person', her: 'person', its: 'thing', their: 'plural',
};
const PRONOUN_GENDER: Record<string, Gender> = { he: 'male', his: 'male', she: 'female', her: 'female' };
const POSSESSED_POS = new Set<PartOfSpeech>(['NOUN', 'PROPN', 'ADJ', 'NUM', 'ADV']);
const MAX_INTRODUCTION_TOKENS = 8;

/** Where a clause's subject stands: first, or right after a short verbless introduction. */
function subjectSlot(tokens: Token[]): number {
  const comma = tokens.findIndex((token) => token.value === ',');
  if (comma <= 0 || comma > MAX_INTRODUCTION_TOKENS) return 0;
  const introduction = tokens.slice(0, comma);
  const opener = introduction[0];
  const introduces = opener !== undefined && (opener.pos === 'ADP' || opener.pos === 'ADV');
  return introduces && !introduction.some((token) => VERB_POS.has(token.pos)) ? comma + 1 : 0;
}

const REPORTING_PARTICIPLES = new Set([
  'said', 'believed', 'thought', 'known', 'estimated', 'reported', 'claimed', 'expected', 'assumed',
  'argued', 'suggested', 'hoped', 'feared', 'rumored', 'rumoured', 'understood', 'alleged', 'considered',
  'noted', 'shown', 'agreed', 'recommended', 'accepted', 'required', 'stated', 'held',
]);
const COMPLEMENTIZERS = new Set(['that', 'whether', 'how', 'why', 'if']);
/** Adjectives whose "it ... to" usually refers to a thing: "it is able to fly". */
const REFERRING_ADJECTIVES = new Set([
  'able', 'unable', 'likely', 'unlikely', 'due', 'ready', 'set', 'about', 'free', 'sure', 'used', 'easy', 'hard',
  'difficult', 'cheap', 'expensive', 'safe', 'dangerous',
]);
const RAISING_VERBS = new Set(['seems', 'seemed', 'appears', 'appeared', 'turns', 'turned', 'happens', 'happened']);

/** "It is important that ...", "It was not until 1903 that ...": `it` refers to nothing. */
function isDummyIt(tokens: Token[], slot: number): boolean {
  const verb = tokens[slot + 1];
  if (verb === undefined || !VERB_POS.has(verb.pos)) return false;
  let i = slot + 2;
  while (tokens[i] !== undefined && ['AUX', 'PART', 'ADV'].includes(tokens[i]?.pos ?? '')) {
    if (tokens[i]?.normal === 'not' && tokens[i + 1]?.normal === 'until') return true;
    i++;
  }
  const predicate = tokens[i];
  if (predicate === undefined) return false;
  if (RAISING_VERBS.has(verb.normal) && (predicate.normal === 'that' || predicate.normal === 'as')) return true;
  const adjective = predicate.pos === 'ADJ';
  if (!adjective && !(predicate.pos === 'VERB' && REPORTING_PARTICIPLES.has(predicate.normal))) return false;
  for (let j = i + 1; j <= i + 4 && j < tokens.length; j++) {
    const word = tokens[j];
    if (word === undefined || word.pos === 'PUNCT') break;
    if (COMPLEMENTIZERS.has(word.normal)) return true;
    if (word.normal === 'to') return !(adjective && REFERRING_ADJECTIVES.has(predicate.normal));
  }
  return false;
}

interface ResolvedClause {
  tokens: Token[];
  /** The clause's subject when it was a resolved subject pronoun (keeps what was learned). */
  subject: NounPhrase | null;
}

/**
 * The running state of a text: the subject of the previous sentence, the person names it
 * mentioned, and a topic from the title for text that opens with a pronoun.
 */
class Discourse {
  private subject: NounPhrase | null = null;
  private names: NounPhrase[] = [];

  constructor(private readonly topic: NounPhrase | null) {}

  /** The facts of a statement sentence, and the sentence's subject becomes the antecedent. */
  factsOf(sentence: Token[]): string[] {
    const facts: string[] = [];
    let sentenceSubject: NounPhrase | null = null;
    for (const clause of splitClauses(sentence)) {
      const resolved = this.resolve(clause);
      if (resolved === null) continue;
      facts.push(renderClause(resolved.tokens));
      const subject = resolved.subject ?? subjectOf(resolved.tokens);
      if (sentenceSubject === null && subject !== null) {
        sentenceSubject = subject;
        // A later clause of the same sentence refers back to this one.
        this.subject = subject;
      }
    }
    this.names = personNamesIn(sentence);
    return facts;
  }

  /** The clause with its leading pronoun replaced; null when the pronoun has no antecedent. */
  private resolve(clause: Token[]): ResolvedClause | null {
    const slot = subjectSlot(clause);
    const pronoun = clause[slot];
    const next = clause[slot + 1];
    if (pronoun === undefined) return { tokens: clause, subject: null };

    const subjectReferent = SUBJECT_PRONOUNS[pronoun.normal];
    if (subjectReferent !== undefined) {
      // "This discovery ..." is a determiner, not a pronoun: nothing to replace.
      const demonstrative = pronoun.normal === 'this' || pronoun.normal === 'these';
      const determiner = demonstrative && !(next !== undefined && VERB_POS.has(next.pos));
      if (determiner || (pronoun.normal === 'it' && isDummyIt(clause, slot))) return { tokens: clause, subject: null };
      const antecedent = this.antecedent(subjectReferent, PRONOUN_GENDER[pronoun.normal] ?? null);
      if (antecedent === null) return null;
      const replacement = phraseTokens(antecedent, pronoun.spaced, slot === 0);
      return { tokens: [...clause.slice(0, slot), ...replacement, ...clause.slice(slot + 1)], subject: antecedent };
    }

    const possessiveReferent = POSSESSIVE_PRONOUNS[pronoun.normal];
    if (possessiveReferent !== undefined && next !== undefined && POSSESSED_POS.has(next.pos)) {
      const antecedent = this.antecedent(possessiveReferent, PRONOUN_GENDER[pronoun.normal] ?? null);
      if (antecedent === null) return null;
      // "Its capital is Paris. It has ...": the owner stays the topic, not "France's capital".
      return { tokens: withOwner(clause, slot, antecedent), subject: antecedent };
    }
    return { tokens: clause, subject: null };
  }

  private antecedent(referent: Referent, gender: Gender | null): NounPhrase | null {
    const candidate = this.subject ?? this.topic;
    if (referent === 'plural') return candidate?.plural ? candidate : null;
    if (referent === 'thing') {
      if (candidate === null || !canBeThing(candidate)) return null;
      candidate.person = false;
      return candidate;
    }
    const fits = (phrase: NounPhrase | null): phrase is NounPhrase =>
      phrase !== null && canBePerson(phrase) && (phrase.gender === null || phrase.gender === gender);
    // Failing the subject, a person named in the previous sentence: "... awarded to Marie Curie. She ..."
    const person = fits(candidate) ? candidate : (this.names.find(fits) ?? null);
    if (person !== null) {
      person.person = true;
      person.gender = gender;
    }
    return person;
  }
}

/**
 * The clause with the possessive pronoun at `slot` replaced by its owner: "France's capital",
 * or, when the owner has words after its head, "the value of the sample in the museum".
 */
function withOwner(clause: Token[], slot: number, owner: NounPhrase): Token[] {
  const pronoun = clause[slot] as Token;
  const atStart = slot === 0;
  let possessedEnd = slot + 1;
  while (possessedEnd < clause.length && POSSESSED_POS.has(clause[possessedEnd]?.pos ?? 'X')) possessedEnd++;
  const possessed = clause.slice(slot + 1, possessedEnd);
  if (owner.postModified && possessed.some(isNoun)) {
    const the: Token = { value: atStart ? 'The' : 'the', normal: 'the', pos: 'DET', spaced: pronoun.spaced };
    const of: Token = { value: 'of', normal: 'of', pos: 'ADP', spaced: true };
    return [
      ...clause.slice(0, slot),
      the,
      ...possessed,
      of,
      ...phraseTokens(owner, true, false),
      ...clause.slice(possessedEnd),
    ];
  }
  const lastWord = owner.tokens.at(-1)?.value ?? '';
  const marker: Token = {
    value: owner.plural && lastWord.endsWith('s') ? "'" : "'s",
    normal: "'s",
    pos: 'PART',
    spaced: false,
  };
  return [...clause.slice(0, slot), ...phraseTokens(owner, pronoun.spaced, atStart), marker, ...clause.slice(slot + 1)];
}

/** The antecedent's tokens in the pronoun's place: capitalized at the start, "the" for "a". */
function phraseTokens(phrase: NounPhrase, spaced: boolean, atStart: boolean): Token[] {
  return phrase.tokens.map((token, i) => {
    if (i > 0) return token;
    let value = token.value;
    if (token.pos === 'DET' && (token.normal === 'a' || token.normal === 'an')) value = 'the';
    if (token.pos === 'DET') value = atStart ? capitalize(value) : value.toLowerCase();
    else if (atStart) value = capitalize(value);
    return { ...token, value, normal: value.toLowerCase(), spaced };
  });
}

// ---------------------------------------------------------------------------------------------
// Title topic

const TITLE_SEPARATOR = /\s+[|–—•·-]\s+|:\s+/;
const MAX_TITLE_WORDS = 8;

/** "Marie Curie - Wikipedia" gives "Marie Curie", an antecedent for a text that opens with "She". */
function topicOfTitle(title: string | null): NounPhrase | null {
  if (title === null || typeof title !== 'string') return null;
  const main = (title.split(TITLE_SEPARATOR)[0] ?? '').replace(/\s*\([^)]*\)\s*$/, '').trim();
  if (main === '' || main.split(/\s+/).length > MAX_TITLE_WORDS) return null;
  const tokens = tagSentences(main).flatMap((sentence) => sentence.tokens);
  if (tokens.some((token) => VERB_POS.has(token.pos))) return null;
  return makePhrase(tokens);
}
