/**
 * How a report's text is cut into the sentences that get annotated. Pure and deterministic
 * (the same text gives the same sentences on every tier and after every replay): Markdown
 * blocks first (a blank line, a heading, a list item or a quote starts a new block), then
 * `Intl.Segmenter` sentences within a block. A block's leading marks (heading, list bullet or
 * number, task box, quotes) are out of both the offsets and the text; markup within a sentence
 * that is not words (emphasis, link targets) is in the offsets but out of the sentence text.
 */
import { codeSpans, MARKDOWN_INLINE_LINK, outsideCodeSpans, stripCodeAndEmphasis } from '../text.js';

export interface ReportSentence {
  /** 0-based position among all the sentences of the text. */
  index: number;
  /** The sentence as annotated: trimmed, Markdown decoration removed. */
  text: string;
  /** UTF-16 offsets of the sentence in the report's text (end exclusive). */
  start: number;
  end: number;
}

const BLOCK_START = /^\s{0,3}(#{1,6}\s|[-*+]\s|\d{1,9}[.)]\s|>\s?)/;

/**
 * The marks a block starts with, however many: a heading's, a list item's (with a task's box),
 * quotes within quotes, a list within a quote. They are neither words nor part of a sentence.
 */
const BLOCK_MARKS = /^(?:\s{0,3}(?:#{1,6}\s+|(?:[-*+]|\d{1,9}[.)])\s+(?:\[[ xX]\]\s+)?|>\s?))+/;

/** Lines of the text grouped into blocks, each with its UTF-16 start offset. */
function blocks(text: string): Array<{ text: string; start: number }> {
  const result: Array<{ text: string; start: number }> = [];
  let current: { text: string; start: number } | null = null;
  let offset = 0;
  let inFence = false;
  for (const line of text.split('\n')) {
    const lineStart = offset;
    offset += line.length + 1;
    if (/^\s{0,3}(```|~~~)/.test(line)) {
      // Code is not prose: fenced blocks are not annotated.
      inFence = !inFence;
      current = null;
      continue;
    }
    if (inFence) continue;
    if (line.trim() === '') {
      current = null;
      continue;
    }
    if (current === null || BLOCK_START.test(line)) {
      current = { text: line, start: lineStart };
      result.push(current);
    } else {
      current.text += `\n${line}`;
    }
  }
  return result;
}

/** The words of a Markdown span: block marks, emphasis, inline code ticks and link targets dropped. */
export function plainText(markdown: string): string {
  return stripCodeAndEmphasis(outsideCodeSpans(markdown.replace(BLOCK_MARKS, ''), (text) => text.replace(MARKDOWN_INLINE_LINK, '$1')))
    .replace(/\s+/g, ' ')
    .trim();
}

const segmenter = new Intl.Segmenter('en', { granularity: 'sentence' });

/**
 * The stretches of a block a sentence cannot end inside, as sorted disjoint [start, end) ranges:
 * its links and images (the segmenter ends a sentence at an image's `!` and at a period inside a
 * link's text, which left `![` a sentence of its own and a link's target in the next sentence's
 * text) and its code spans (a period in code ends no sentence).
 */
function unbreakable(body: string): Array<[number, number]> {
  const ranges: Array<[number, number]> = codeSpans(body).map((span) => [span.start, span.end]);
  for (const match of body.matchAll(MARKDOWN_INLINE_LINK)) ranges.push([match.index, match.index + match[0].length]);
  ranges.sort((a, b) => a[0] - b[0]);
  const merged: Array<[number, number]> = [];
  for (const range of ranges) {
    const last = merged[merged.length - 1];
    if (last && range[0] < last[1]) last[1] = Math.max(last[1], range[1]);
    else merged.push([range[0], range[1]]);
  }
  return merged;
}

/**
 * The abbreviation a segment ends with, followed on its line by the next segment: its letters (with
 * inner periods: `e.g`, `U.S`) before the final period. The segmenter (ICU without its abbreviation
 * list, which V8 does not offer) ends a sentence at every period followed by a space and a capital
 * or a digit and a capital (`Dr. Curie`, `St. Louis`, `No. 10 Downing`); before a lower-case word
 * it already ends none (`etc. and`, `Jr. was`).
 */
const ENDING_ABBREVIATION = /(?:^|[\s(\["'\u201c\u2018])((?:\p{L}+\.)*\p{L}+)\.[ \t\u00a0]+$/u;

/** Titles that stand before a name and rarely end an English sentence: joined before any capital (`Dr. No`). */
const TITLES = new Set(['Mr', 'Mrs', 'Ms', 'Dr', 'Prof', 'Gen', 'Col', 'Lt', 'Sgt', 'Capt', 'Rev', 'Hon']);

/** Abbreviations that end no sentence in practice (lower-cased): joined before anything on the line. */
const MID_SENTENCE = new Set(['vs', 'e.g', 'i.e', 'cf', 'viz']);

/** Abbreviations of a numbered thing (lower-cased): joined before a number (`No. 10`, `Fig. 3`, `pp. 4-5`); `no.` before a word is an answer. */
const BEFORE_NUMBER = new Set(['no', 'nos', 'fig', 'figs', 'vol', 'vols', 'p', 'pp', 'ch', 'eq', 'op']);

/**
 * Abbreviations that stand before or inside a name but also end sentences (`St. Louis` and `Main
 * St.`, `King Jr. Day` and `John Smith Jr.`), as do initials (`J. R. R. Tolkien`, `the U.S.`):
 * joined before a capitalised word unless it is one that starts sentences (SENTENCE_STARTERS), so
 * `Main St. Then he left` is two sentences. A name that is such a word after one (`on Main St.
 * In` ...) is read as a new sentence, and a sentence's first word that is a name (`got an A.
 * Mary`) as the rest of a name: the common case each way.
 */
const BEFORE_NAME = new Set(['Jr', 'Sr', 'St', 'Mt', 'Ft']);
const INITIALS = /^(?:\p{Lu}\.)*\p{Lu}$/u;

/** Words (lower-cased) that start English sentences and are rarely a name or part of one. */
const SENTENCE_STARTERS = new Set(
  (
    'a an the this that these those there then thus here he she it its they we i you his her their our my your ' +
    'but and or so yet nor in on at after before when while since as if although though however meanwhile today ' +
    'later also by for from with of to one some many most all both each every no not none what who where why how ' +
    'which during despite because now still soon finally first next other such another once until over under ' +
    'between among is was are were has had have unlike instead only even again eventually moreover furthermore ' +
    'therefore nevertheless yes'
  ).split(' '),
);

/** Whether the break the segmenter made after `segment`, with `rest` after it, falls inside a sentence. */
function continuesAfterAbbreviation(segment: string, rest: string): boolean {
  const abbreviation = ENDING_ABBREVIATION.exec(segment)?.[1];
  if (abbreviation === undefined) return false;
  const lower = abbreviation.toLowerCase();
  if (MID_SENTENCE.has(lower)) return true;
  if (BEFORE_NUMBER.has(lower) && /^\p{N}/u.test(rest)) return true;
  if (!/^\p{Lu}/u.test(rest)) return false;
  if (TITLES.has(abbreviation)) return true;
  if (!BEFORE_NAME.has(abbreviation) && !INITIALS.test(abbreviation)) return false;
  const word = /^\p{L}+/u.exec(rest)?.[0] ?? '';
  return !SENTENCE_STARTERS.has(word.toLowerCase());
}

/**
 * The block's sentences as the segmenter finds them, a break inside an unbreakable stretch or
 * after an abbreviation inside a sentence joined over.
 */
function segments(body: string): Array<{ index: number; segment: string }> {
  const ranges = unbreakable(body);
  const result: Array<{ index: number; segment: string }> = [];
  let next = 0;
  let from = 0;
  for (const { index, segment } of segmenter.segment(body)) {
    const end = index + segment.length;
    while (next < ranges.length && ranges[next][1] <= end) next++;
    if (end < body.length && next < ranges.length && ranges[next][0] < end) continue;
    if (end < body.length && continuesAfterAbbreviation(segment, body.slice(end, end + 100))) continue;
    result.push({ index: from, segment: body.slice(from, end) });
    from = end;
  }
  return result;
}

/** A Han ideograph (Chinese hanzi, Japanese kanji, Korean hanja): a word or most of one. */
const HAN = /\p{sc=Han}/u;
/** A kana (with the long-vowel mark ー, which is of no script) or a Hangul syllable or jamo: about a syllable. */
const KANA_OR_HANGUL = /[\p{sc=Hiragana}\p{sc=Katakana}\u30fc\p{sc=Hangul}]/u;

/**
 * A sentence's length as `providers.reports.min_sentence_runes` measures it: its runes (code
 * points), a Han ideograph counting as 3 and a kana or Hangul character as 2, so the one minimum
 * means about as much said in every script. A CJK character carries what two or three Latin
 * letters do: "Marie Curie won the Nobel Prize in Physics in 1903." is 51 runes, its Chinese
 * "居里夫人于1903年获得诺贝尔物理学奖。" 20 (50 weighted), its Japanese 29 (59) and its Korean 27
 * (44); counted plainly, nearly every CJK sentence was under 40 and no Chinese or Japanese report
 * got an annotation. Digits, punctuation (full-width too) and every other script count 1: Thai,
 * written without spaces between words, spells about as many characters as English does.
 */
export function sentenceRunes(text: string): number {
  let runes = 0;
  for (const char of text) runes += HAN.test(char) ? 3 : KANA_OR_HANGUL.test(char) ? 2 : 1;
  return runes;
}

/** The sentences of a report text, in order. Empty sentences (markup only) are left out. */
export function splitSentences(text: string): ReportSentence[] {
  const sentences: ReportSentence[] = [];
  for (const block of blocks(text)) {
    // The block's marks are cut off before the sentences are found: a numbered item's `1.` would
    // otherwise end a sentence of its own, and every kind of item now spans its words alone.
    const marks = BLOCK_MARKS.exec(block.text)?.[0].length ?? 0;
    const body = block.text.slice(marks);
    const bodyStart = block.start + marks;
    for (const segment of segments(body)) {
      const plain = plainText(segment.segment);
      if (plain === '') continue;
      const leading = segment.segment.length - segment.segment.trimStart().length;
      const start = bodyStart + segment.index + leading;
      const end = bodyStart + segment.index + segment.segment.trimEnd().length;
      sentences.push({ index: sentences.length, text: plain, start, end });
    }
  }
  return sentences;
}
