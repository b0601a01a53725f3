import { Readability } from '@mozilla/readability';
import { DOMParser } from 'linkedom';
import TurndownService from 'turndown';

import { joinParagraphs, toAbsoluteHttpUrl, toIsoDate, type DocumentImage, type ExtractedDocument } from './document.js';

// The slice of the DOM this module uses. linkedom's own typings are mostly `any`, and the
// project compiles without the DOM lib, so the shapes are spelled out here once.
interface DomNode {
  readonly nodeType: number;
  readonly nodeName: string;
  readonly childNodes: ArrayLike<DomNode>;
  readonly textContent: string | null;
}

interface DomElement extends DomNode {
  readonly tagName: string;
  readonly outerHTML: string;
  readonly innerHTML: string;
  getAttribute(name: string): string | null;
  setAttribute(name: string, value: string): void;
  removeAttribute(name: string): void;
  querySelector(selector: string): DomElement | null;
  querySelectorAll(selector: string): ArrayLike<DomElement>;
  closest(selector: string): DomElement | null;
  remove(): void;
}

interface DomDocument {
  readonly documentElement: DomElement | null;
  readonly childNodes: ArrayLike<DomNode>;
  readonly body: DomElement;
  readonly title: string;
  querySelector(selector: string): DomElement | null;
  querySelectorAll(selector: string): ArrayLike<DomElement>;
}

type ReadabilityInput = ConstructorParameters<typeof Readability>[0];

const ELEMENT_NODE = 1;
const TEXT_NODE = 3;

// Elements that sit in <head> when a page leaves out the <html>/<head>/<body> skeleton.
const HEAD_ELEMENTS = new Set(['TITLE', 'META', 'LINK', 'BASE', 'STYLE', 'SCRIPT', 'NOSCRIPT', 'TEMPLATE']);
// Never text: code, styling, embedded objects, form controls.
const SKIPPED_ELEMENTS = new Set([
  'SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD', 'SVG', 'IFRAME', 'OBJECT', 'EMBED', 'CANVAS', 'SELECT', 'BUTTON', 'INPUT', 'TEXTAREA',
]);
const PARAGRAPH_ELEMENTS = new Set([
  'P', 'DIV', 'SECTION', 'ARTICLE', 'MAIN', 'ASIDE', 'HEADER', 'FOOTER', 'NAV', 'BLOCKQUOTE', 'PRE',
  'H1', 'H2', 'H3', 'H4', 'H5', 'H6', 'UL', 'OL', 'DL', 'TABLE', 'FIGURE', 'FIGCAPTION', 'FORM',
  'FIELDSET', 'ADDRESS', 'DETAILS', 'SUMMARY', 'HR', 'CAPTION', 'BODY',
]);
const LINE_ELEMENTS = new Set(['LI', 'DT', 'DD', 'TR', 'BR']);
const CELL_ELEMENTS = new Set(['TD', 'TH']);

/** Whether an element (its upper-case name) stands apart from the words around it: a paragraph, line or cell. */
export function separatesWords(name: string): boolean {
  return PARAGRAPH_ELEMENTS.has(name) || LINE_ELEMENTS.has(name) || CELL_ELEMENTS.has(name);
}

// Meta names that carry a publication date, most specific first (compared lower-cased).
const PUBLISHED_DATE_META_NAMES = [
  'article:published_time',
  'citation_publication_date',
  'citation_date',
  'citation_online_date',
  'dc.date.issued',
  'dcterms.issued',
  'dc.date',
  'datepublished',
];

function isElement(node: DomNode): node is DomElement {
  return node.nodeType === ELEMENT_NODE;
}

function escapeHtmlText(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** Whether the parse has the <html><head/><body/></html> shape Readability and linkedom expect. */
function hasDocumentSkeleton(document: DomDocument): boolean {
  const root = document.documentElement;
  if (!root || root.nodeName !== 'HTML') return false;
  for (const node of Array.from(document.childNodes)) {
    if (isElement(node) && node !== root) return false;
  }
  let bodies = 0;
  for (const node of Array.from(root.childNodes)) {
    if (isElement(node)) {
      if (node.nodeName === 'BODY') bodies += 1;
      else if (node.nodeName !== 'HEAD') return false;
    } else if (node.nodeType === TEXT_NODE && (node.textContent ?? '').trim() !== '') {
      return false;
    }
  }
  return bodies === 1;
}

/**
 * linkedom does not infer the implied <html>, <head> and <body> of HTML5 (a fragment or a page
 * that omits them parses into loose top-level nodes, and `document.head` then throws), so such
 * markup is rebuilt into a full skeleton and parsed again.
 */
function rebuildSkeleton(document: DomDocument): string {
  const headParts: string[] = [];
  const bodyParts: string[] = [];
  let inBody = false;
  const place = (node: DomNode): void => {
    if (isElement(node)) {
      if (node.nodeName === 'HTML') {
        Array.from(node.childNodes).forEach(place);
      } else if (node.nodeName === 'HEAD') {
        headParts.push(node.innerHTML);
      } else if (node.nodeName === 'BODY') {
        bodyParts.push(node.innerHTML);
        inBody = true;
      } else if (!inBody && HEAD_ELEMENTS.has(node.nodeName)) {
        headParts.push(node.outerHTML);
      } else {
        bodyParts.push(node.outerHTML);
        inBody = true;
      }
    } else if (node.nodeType === TEXT_NODE) {
      const text = node.textContent ?? '';
      if (text.trim() !== '') inBody = true;
      bodyParts.push(escapeHtmlText(text));
    }
    // Comments, doctypes and processing instructions carry no content.
  };
  Array.from(document.childNodes).forEach(place);
  return `<!DOCTYPE html><html><head>${headParts.join('')}</head><body>${bodyParts.join('')}</body></html>`;
}

function parseHtml(html: string): DomDocument {
  const parser = new DOMParser();
  // linkedom's typings are loose; DomDocument is the part of its HTMLDocument used here.
  const parsed = parser.parseFromString(html, 'text/html') as unknown as DomDocument;
  if (hasDocumentSkeleton(parsed)) return parsed;
  return parser.parseFromString(rebuildSkeleton(parsed), 'text/html') as unknown as DomDocument;
}

function parseFragment(html: string): DomElement {
  return parseHtml(`<!DOCTYPE html><html><head></head><body>${html}</body></html>`).body;
}

function cleanInlineText(text: string | null | undefined): string | null {
  const cleaned = (text ?? '').replace(/\s+/g, ' ').trim();
  return cleaned === '' ? null : cleaned;
}

function baseUrlOf(document: DomDocument, url: string | undefined): string | null {
  const baseHref = document.querySelector('base[href]')?.getAttribute('href');
  if (baseHref) {
    try {
      return url ? new URL(baseHref, url).href : new URL(baseHref).href;
    } catch {
      // An unusable <base> is ignored, as browsers do.
    }
  }
  if (!url) return null;
  try {
    return new URL(url).href;
  } catch {
    return null;
  }
}

function findPublishedDate(document: DomDocument): string | null {
  const metaContents = new Map<string, string>();
  for (const meta of Array.from(document.querySelectorAll('meta'))) {
    const key = (meta.getAttribute('property') ?? meta.getAttribute('name') ?? meta.getAttribute('itemprop') ?? '').trim().toLowerCase();
    const content = meta.getAttribute('content');
    if (key && content && !metaContents.has(key)) metaContents.set(key, content);
  }
  for (const name of PUBLISHED_DATE_META_NAMES) {
    const date = toIsoDate(metaContents.get(name));
    if (date) return date;
  }
  // A <time> marked as the publication date beats the first <time> of an article, which
  // beats the first <time> anywhere (often a page header's "today").
  const times = [
    ...Array.from(document.querySelectorAll('time[pubdate][datetime], time[itemprop="datePublished"][datetime]')),
    ...Array.from(document.querySelectorAll('article time[datetime]')),
    ...Array.from(document.querySelectorAll('time[datetime]')),
  ];
  for (const time of times) {
    const date = toIsoDate(time.getAttribute('datetime'));
    if (date) return date;
  }
  return null;
}

/** Rewrites link and image addresses to absolute ones, so the Markdown stands on its own. */
function absolutizeReferences(root: DomElement, baseUrl: string | null): void {
  for (const [selector, attribute] of [['a[href]', 'href'], ['img[src]', 'src']] as const) {
    for (const element of Array.from(root.querySelectorAll(selector))) {
      const value = element.getAttribute(attribute)?.trim();
      if (!value || value.startsWith('#') || !baseUrl) continue;
      try {
        element.setAttribute(attribute, new URL(value, baseUrl).href);
      } catch {
        // Leave an unparsable address as the author wrote it.
      }
    }
  }
  for (const image of Array.from(root.querySelectorAll('img[srcset]'))) {
    // An image given only by srcset keeps its first candidate; otherwise src is the one we keep.
    if (!image.getAttribute('src')?.trim()) {
      const first = firstSrcsetCandidate(image.getAttribute('srcset') ?? '');
      const absolute = first ? (first.startsWith('data:') ? first : toAbsoluteHttpUrl(first, baseUrl)) : null;
      if (absolute) image.setAttribute('src', absolute);
    }
    image.removeAttribute('srcset');
  }
}

/** The address of a srcset's first candidate (`a.png 1x, b.png 2x` → `a.png`). */
function firstSrcsetCandidate(srcset: string): string | null {
  const trimmed = srcset.trim();
  if (trimmed === '') return null;
  // A data: URI contains commas of its own, so it runs to the first whitespace.
  const candidate = trimmed.startsWith('data:') ? trimmed.split(/\s/, 1)[0] : trimmed.split(',', 1)[0]?.trim().split(/\s+/, 1)[0];
  return candidate || null;
}

// Declared sizes below this (in CSS pixels) mark tracking pixels, spacers and icons.
const MIN_DECLARED_IMAGE_PIXELS = 16;

function isTinyDeclared(image: DomElement): boolean {
  for (const attribute of ['width', 'height']) {
    const value = image.getAttribute(attribute)?.trim();
    if (value && /^\d+(?:\.\d+)?(?:px)?$/i.test(value) && Number.parseFloat(value) < MIN_DECLARED_IMAGE_PIXELS) return true;
  }
  return false;
}

function imageCaption(image: DomElement): string | null {
  const figure = image.closest('figure');
  return cleanInlineText(figure?.querySelector('figcaption')?.textContent) ?? cleanInlineText(image.getAttribute('title'));
}

function collectImages(root: DomElement, baseUrl: string | null): DocumentImage[] {
  const images: DocumentImage[] = [];
  const seen = new Set<string>();
  for (const image of Array.from(root.querySelectorAll('img'))) {
    if (isTinyDeclared(image)) continue;
    const source = (image.getAttribute('src') || image.getAttribute('data-src') || '').trim();
    const url = /^data:image\//i.test(source) ? source : toAbsoluteHttpUrl(source, baseUrl);
    if (!url || seen.has(url)) continue;
    seen.add(url);
    images.push({ url, altText: cleanInlineText(image.getAttribute('alt')) ?? '', caption: imageCaption(image) });
  }
  return images;
}

/** Collects text as lines and paragraphs while walking the DOM. */
class PlainTextWriter {
  private readonly paragraphs: string[] = [];
  private lines: string[] = [];
  private line = '';
  /** Whether the current line came from <pre>, whose indentation is content. */
  private linePreformatted = false;

  appendInline(text: string): void {
    let collapsed = text.replace(/\s+/g, ' ');
    if (this.line === '' || this.line.endsWith(' ')) collapsed = collapsed.trimStart();
    this.line += collapsed;
  }

  appendPreformatted(text: string): void {
    text.replace(/\r\n?/g, '\n').split('\n').forEach((part, index) => {
      if (index > 0) this.breakLine();
      this.line += part;
      this.linePreformatted = true;
    });
  }

  appendCellSeparator(): void {
    if (this.line.trim() !== '') this.line = `${this.line.trimEnd()} | `;
  }

  breakLine(): void {
    const finished = this.linePreformatted ? this.line.trimEnd() : this.line.trim();
    if (finished.trim() !== '') this.lines.push(finished);
    this.line = '';
    this.linePreformatted = false;
  }

  breakParagraph(): void {
    this.breakLine();
    if (this.lines.length > 0) this.paragraphs.push(this.lines.join('\n'));
    this.lines = [];
  }

  result(): string {
    this.breakParagraph();
    return joinParagraphs(this.paragraphs);
  }
}

function toPlainText(root: DomElement): string {
  const writer = new PlainTextWriter();
  const walk = (node: DomNode, preformatted: boolean): void => {
    if (node.nodeType === TEXT_NODE) {
      const text = node.textContent ?? '';
      if (preformatted) writer.appendPreformatted(text);
      else writer.appendInline(text);
      return;
    }
    if (!isElement(node)) return;
    const name = node.nodeName;
    if (SKIPPED_ELEMENTS.has(name)) return;
    if (name === 'BR') {
      writer.breakLine();
      return;
    }
    const paragraph = PARAGRAPH_ELEMENTS.has(name);
    const line = LINE_ELEMENTS.has(name);
    if (paragraph) writer.breakParagraph();
    else if (line) writer.breakLine();
    else if (CELL_ELEMENTS.has(name)) writer.appendCellSeparator();
    for (const child of Array.from(node.childNodes)) walk(child, preformatted || name === 'PRE');
    if (paragraph) writer.breakParagraph();
    else if (line) writer.breakLine();
  };
  walk(root, false);
  return writer.result();
}

function createTurndown(): TurndownService {
  const turndown = new TurndownService({
    headingStyle: 'atx',
    codeBlockStyle: 'fenced',
    bulletListMarker: '-',
    emDelimiter: '_',
    strongDelimiter: '**',
  });
  // turndown fences only <pre><code>; a bare <pre> would lose its line structure in Markdown.
  turndown.addRule('barePreformatted', {
    filter: (node) => node.nodeName === 'PRE' && node.firstChild?.nodeName !== 'CODE',
    replacement: (_content, node) => `\n\n\`\`\`\n${(node.textContent ?? '').replace(/\n$/, '')}\n\`\`\`\n\n`,
  });
  turndown.remove(['script', 'style', 'noscript', 'template', 'iframe', 'object', 'embed', 'canvas', 'form']);
  return turndown;
}

function toMarkdown(html: string): string {
  return createTurndown()
    .turndown(html)
    .replace(/[ \t]+$/gm, '')
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}

/**
 * Readability keeps a short <title> whole, site name and all ("Glaciers | News"). When the
 * page's only <h1> is part of that title, the <h1> is the article's own title.
 */
function chooseTitle(documentTitle: string | null, page: DomDocument): string | null {
  const headings = page.querySelectorAll('h1');
  const heading = headings.length === 1 ? cleanInlineText(headings[0]?.textContent) : null;
  if (!documentTitle) return heading;
  if (heading && documentTitle.length > heading.length && documentTitle.toLowerCase().includes(heading.toLowerCase())) {
    return heading;
  }
  return documentTitle;
}

function readArticle(html: string): { title: string | null; content: string; publishedTime: string | null } | null {
  const document = parseHtml(html);
  try {
    // linkedom implements the DOM Readability walks; the cast bridges the two typings.
    const article = new Readability(document as unknown as ReadabilityInput).parse();
    if (!article?.content || !cleanInlineText(article.textContent)) return null;
    return { title: cleanInlineText(article.title), content: article.content, publishedTime: article.publishedTime ?? null };
  } catch {
    // Readability gives up on some malformed DOMs; the body fallback still has the text.
    return null;
  }
}

/**
 * Turns an HTML page into its main text: Readability picks the article (the whole body when
 * it finds none), turndown writes the Markdown. `url` resolves relative links and images.
 */
export function htmlToDocument(html: string, url?: string): ExtractedDocument {
  const page = parseHtml(html);
  const baseUrl = baseUrlOf(page, url);
  const article = readArticle(html);

  let content: DomElement;
  if (article) {
    content = parseFragment(article.content);
  } else {
    content = page.body;
    for (const element of Array.from(content.querySelectorAll('script, style, noscript, template, iframe, object, embed, svg, canvas'))) {
      element.remove();
    }
  }
  absolutizeReferences(content, baseUrl);

  const title = chooseTitle(article?.title ?? cleanInlineText(page.title), page);
  return {
    title,
    text: toPlainText(content),
    markdown: toMarkdown(content.innerHTML),
    publishedAt: findPublishedDate(page) ?? toIsoDate(article?.publishedTime),
    kind: 'html',
    images: collectImages(content, baseUrl),
  };
}
