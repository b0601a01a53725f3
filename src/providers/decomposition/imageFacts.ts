import { headOfUnits, tailOfUnits } from '../../util/codePoints.js';
import { mapWithConcurrency } from '../../util/concurrency.js';
import type { ChatModel } from '../llm/port.js';
import type { Promptset } from '../llm/promptsets.js';
import { normalizeFacts } from './decompose.js';

/** An image of a fetched source as SourceFetched records it (bytes in the asset store). */
export interface SourceImageRef {
  image_id: string;
  sha256: string;
  content_type: string;
  url: string | null;
  alt_text: string | null;
  caption: string | null;
}

export interface ImageFact {
  imageId: string;
  content: string;
  contentHash: string;
  sourceText: string;
}

export interface ImageFactsInput {
  images: readonly SourceImageRef[];
  loadBytes(sha256: string): Promise<Uint8Array>;
  chat: Pick<ChatModel, 'extractImageFacts' | 'canSeeImages'>;
  sourceTitle?: string | null;
  /** The source's Markdown, where the text around each image is looked up; null when none. */
  markdown?: string | null;
  promptset?: Promptset;
  /** Images described at once (`providers.decomposition.concurrency.image`). */
  concurrency: number;
  signal?: AbortSignal;
}

/** Characters of text taken on each side of an image. */
const SURROUNDING_CHARS = 300;

const MARKDOWN_IMAGE = /!\[[^\]]*\]\([^)]*\)/g;
const MARKDOWN_LINK = /\[([^\]]*)\]\([^)]*\)/g;

function readable(markdown: string): string {
  return markdown
    .replace(MARKDOWN_IMAGE, ' ')
    .replace(MARKDOWN_LINK, '$1')
    .replace(/[#*_`>|]+/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
}

/**
 * The text around an image in the source's Markdown: found by its URL, else by its alt text;
 * null when the image is not in the Markdown (PDF images, images without either).
 */
export function surroundingTextFor(markdown: string | null | undefined, image: Pick<SourceImageRef, 'url' | 'alt_text'>): string | null {
  if (!markdown) return null;
  let start = -1;
  let end = -1;
  if (image.url) {
    const at = markdown.indexOf(`](${image.url}`);
    if (at >= 0) {
      start = markdown.lastIndexOf('![', at);
      end = markdown.indexOf(')', at + 2);
    }
  }
  if (start < 0 && image.alt_text) {
    start = markdown.indexOf(`![${image.alt_text}](`);
    if (start >= 0) end = markdown.indexOf(')', start + image.alt_text.length + 4);
  }
  if (start < 0 || end < 0) return null;
  // Cut where no surrogate pair is halved (a lone half is no Unicode, and a fact the model took from it could not be stored).
  const before = tailOfUnits(readable(markdown.slice(Math.max(0, start - SURROUNDING_CHARS * 2), start)), SURROUNDING_CHARS);
  const after = headOfUnits(readable(markdown.slice(end + 1, end + 1 + SURROUNDING_CHARS * 2)), SURROUNDING_CHARS);
  const text = [before, after].filter((part) => part !== '').join(' … ');
  return text === '' ? null : text;
}

/**
 * Facts of each image (chat.extractImageFacts with its alt text, caption and surrounding text),
 * up to `concurrency` images at once; images without any text are left out when the model
 * cannot see images. Returned in image order, normalized and hashed like text
 * facts. The first failing image fails the whole, as a failing text chunk does.
 */
export async function extractSourceImageFacts(input: ImageFactsInput): Promise<ImageFact[]> {
  const described = input.images.map((image) => ({ image, surroundingText: surroundingTextFor(input.markdown, image) }));
  // A model that cannot see pixels has nothing to go on for an image without any text.
  const images = input.chat.canSeeImages
    ? described
    : described.filter(({ image, surroundingText }) => image.alt_text || image.caption || surroundingText);
  const perImage = await mapWithConcurrency(images, Math.max(1, Math.floor(input.concurrency)), async ({ image, surroundingText }) => {
    input.signal?.throwIfAborted();
    const bytes = await input.loadBytes(image.sha256);
    return input.chat.extractImageFacts(
      {
        bytes,
        contentType: image.content_type,
        altText: image.alt_text,
        caption: image.caption,
        surroundingText,
        sourceTitle: input.sourceTitle ?? null,
        ...(input.promptset ? { promptset: input.promptset } : {}),
      },
      input.signal,
    );
  });
  const facts: ImageFact[] = [];
  images.forEach(({ image }, position) => {
    for (const fact of normalizeFacts(perImage[position])) {
      facts.push({ imageId: image.image_id, content: fact.content, contentHash: fact.contentHash, sourceText: fact.sourceText });
    }
  });
  return facts;
}
