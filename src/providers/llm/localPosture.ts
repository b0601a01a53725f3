import type { PostureInput, PostureJudgement, PostureLabel } from './port.js';

/**
 * The built-in model's posture rule for report annotation. It reads words, not meaning, so it
 * says only what words can show, and `related` otherwise:
 * - `irrelevant` (dropped) when the fact and the sentence share no content word;
 * - `contradicts` when most of the fact's content words (at least 60%) are in the sentence and
 *   exactly one of the two is negated (not, no, never, ...);
 * - `supports` when every content word of the fact is in the sentence and neither or both are negated;
 * - `related` otherwise.
 */

/** Function words: never content, never a name. */
export const STOP_WORDS: ReadonlySet<string> = new Set(
  (
    'a an the and or but if then than of in on at to for from by with as into onto about over under ' +
    'is are was were be been being am do does did done has have had having it its this that these those ' +
    'he she they them his her their we us our you your i me my which who whom whose what when where why how ' +
    'also very more most less least some any each every all both such so can could may might must shall should will would'
  ).split(' '),
);

const NEGATIONS = new Set(['not', 'no', 'never', 'neither', 'nor', 'none', 'nobody', 'nothing', 'nowhere', 'cannot', 'without', 'false', 'untrue']);

/** Lower-cased words, "n't" read as "not". */
function words(text: string): string[] {
  return (text.toLowerCase().replace(/n[’']t\b/g, ' not').match(/[\p{L}\p{N}]+/gu) ?? []) as string[];
}

/** A crude stem so "prizes" meets "prize" and "discovered" meets "discovers". */
function stem(word: string): string {
  if (/^\d/.test(word) || word.length <= 4) return word;
  return word.replace(/(ies|es|s|ed|ing)$/, '');
}

interface Reading {
  content: Set<string>;
  negated: boolean;
}

function read(text: string): Reading {
  const all = words(text);
  return { content: contentWordsOf(all), negated: all.some((word) => NEGATIONS.has(word)) };
}

function contentWordsOf(all: readonly string[]): Set<string> {
  return new Set(all.filter((word) => !STOP_WORDS.has(word) && !NEGATIONS.has(word)).map(stem));
}

/** The stemmed content words of a text (stop words and negations left out). */
function contentWords(text: string): Set<string> {
  return contentWordsOf(words(text));
}

/** Cosine of two texts' content-word sets: the similarity annotation uses when no vectors are at hand. */
export function wordSimilarity(a: string, b: string): number {
  const left = contentWords(a);
  const right = contentWords(b);
  if (left.size === 0 || right.size === 0) return 0;
  let shared = 0;
  for (const word of left) if (right.has(word)) shared++;
  return shared / Math.sqrt(left.size * right.size);
}

export function localPosture(sentence: string, fact: string): PostureLabel {
  const s = read(sentence);
  const f = read(fact);
  if (f.content.size === 0) return 'irrelevant';
  let shared = 0;
  for (const word of f.content) if (s.content.has(word)) shared++;
  if (shared === 0) return 'irrelevant';
  const coverage = shared / f.content.size;
  if (coverage >= 0.6 && s.negated !== f.negated) return 'contradicts';
  if (coverage === 1 && s.negated === f.negated) return 'supports';
  return 'related';
}

/** The built-in judgement of every pair; irrelevant facts are left out, as a chat model would leave them out. */
export function judgePosturesLocally(input: PostureInput): PostureJudgement[] {
  const judgements: PostureJudgement[] = [];
  for (const fact of input.facts) {
    const posture = localPosture(input.sentence, fact.content);
    if (posture !== 'irrelevant') judgements.push({ factId: fact.id, posture });
  }
  return judgements;
}
