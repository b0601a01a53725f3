/**
 * How a report's text is cut into the sentences that get annotated. Pure and deterministic
 * (the same text gives the same sentences on every tier and after every replay): Markdown
 * blocks first (a blank line, a heading, a list item or a quote starts a new block), then
 * `Intl.Segmenter` sentences within a block. Markup that is not words (heading marks, list
 * bullets, emphasis, link targets) is left in the offsets but out of the sentence text.
 */

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
  return markdown
    .replace(BLOCK_START, '')
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/(\*\*|__|\*|_|`)/g, '')
    .replace(/\s+/g, ' ')
    .trim();
}

const segmenter = new Intl.Segmenter('en', { granularity: 'sentence' });

/** The sentences of a report text, in order. Empty sentences (markup only) are left out. */
export function splitSentences(text: string): ReportSentence[] {
  const sentences: ReportSentence[] = [];
  for (const block of blocks(text)) {
    for (const segment of segmenter.segment(block.text)) {
      const plain = plainText(segment.segment);
      if (plain === '') continue;
      const leading = segment.segment.length - segment.segment.trimStart().length;
      const start = block.start + segment.index + leading;
      const end = block.start + segment.index + segment.segment.trimEnd().length;
      sentences.push({ index: sentences.length, text: plain, start, end });
    }
  }
  return sentences;
}
