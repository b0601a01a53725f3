import { readFileSync } from 'node:fs';

import t from 'tap';

import { toIsoDate } from '../../../src/providers/fetch/document.js';
import { extractDocument, UnsupportedContentError } from '../../../src/providers/fetch/extract.js';
import { htmlToDocument } from '../../../src/providers/fetch/html.js';
import { pdfToDocument } from '../../../src/providers/fetch/pdf.js';

const samplePdf = readFileSync(new URL('../../fixtures/fetch/sample.pdf', import.meta.url));
const untitledPdf = readFileSync(new URL('../../fixtures/fetch/untitled.pdf', import.meta.url));

async function unsupported(promise: Promise<unknown>): Promise<UnsupportedContentError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof UnsupportedContentError) return error;
    throw error;
  }
  throw new Error('expected UnsupportedContentError');
}

t.test('HTML article: Readability picks the article, turndown writes Markdown', async (t) => {
  const html = `<!DOCTYPE html><html><head><title>Glaciers are retreating | Science News</title>
    <base href="https://news.example/science/">
    <meta name="citation_publication_date" content="2019/07/04"></head>
    <body><header><a href="/">News</a> | <a href="/login">Log in</a></header>
    <main><article>
      <h1>Glaciers are retreating</h1>
      <p>Alpine glaciers lost a tenth of their volume between 2000 and 2020, according to the survey published by the institute last week.</p>
      <p>The <strong>melting</strong> accelerates in summer; see <a href="report.html">the full report</a> for the figures per valley.</p>
      <figure><img src="charts/volume.png" alt="Glacier volume chart"><figcaption>Volume over time</figcaption></figure>
      <ul><li>Rhône glacier</li><li>Aletsch glacier</li></ul>
      <pre>year  volume
2000  100
2020   90</pre>
      <img src="data:image/png;base64,AAAA" alt="inline data">
      <img src="charts/volume.png" alt="duplicate">
    </article></main>
    <footer>Contact us</footer></body></html>`;
  const document = htmlToDocument(html, 'https://news.example/science/glaciers');
  t.equal(document.kind, 'html');
  t.equal(document.publishedAt, '2019-07-04');
  // Readability drops an <h1> that repeats the title; the title field carries it.
  t.match(document.text, /^Alpine glaciers lost a tenth[^\n]*last week\.\n\nThe melting/);
  t.match(document.text, /\n\nThe melting accelerates in summer; see the full report for the figures per valley\.\n\n/);
  t.match(document.text, /Rhône glacier\nAletsch glacier/, 'list items are lines of one paragraph');
  t.match(document.text, /year {2}volume\n2000 {2}100\n2020 {3}90/, 'preformatted text keeps its spacing');
  t.notMatch(document.text, /Log in|Contact us/);
  t.notMatch(document.text, /\n{3}/, 'never more than one blank line');
  t.match(document.markdown, /\*\*melting\*\*/);
  t.match(document.markdown, /\[the full report\]\(https:\/\/news\.example\/science\/report\.html\)/);
  t.match(document.markdown, /^- +Rhône glacier$/m);
  t.match(document.markdown, /```\nyear {2}volume/);
  t.same(
    document.images,
    [
      { url: 'https://news.example/science/charts/volume.png', altText: 'Glacier volume chart', caption: 'Volume over time' },
      { url: 'data:image/png;base64,AAAA', altText: 'inline data', caption: null },
    ],
    'absolute, http(s) or data:, deduplicated, with the figure caption',
  );
  t.equal(document.title, 'Glaciers are retreating', 'the site name goes when the only <h1> is in <title>');
});

t.test('HTML title and date sources', async (t) => {
  const withTime = htmlToDocument(
    '<html><head><title>  Spaced \n Title </title></head><body><p>Text here.</p><article><time datetime="2021-11-30T23:59:00-08:00">Nov 30</time><p>Body</p></article></body></html>',
  );
  t.equal(withTime.title, 'Spaced Title');
  t.equal(withTime.publishedAt, '2021-11-30', 'the date as written in its own zone');

  const publishedMetaWins = htmlToDocument(
    '<html><head><meta property="article:published_time" content="2020-01-02"><meta name="citation_publication_date" content="1999-01-01"></head><body><p>x</p><time datetime="2010-10-10">t</time></body></html>',
  );
  t.equal(publishedMetaWins.publishedAt, '2020-01-02');

  const invalid = htmlToDocument('<html><head><meta property="article:published_time" content="yesterday"></head><body><p>x</p><time datetime="2023-02-30">t</time></body></html>');
  t.equal(invalid.publishedAt, null, 'unparsable and impossible dates are dropped');

  const unrelatedHeading = htmlToDocument('<html><head><title>Quarterly report</title></head><body><h1>Contents</h1><p>Text.</p></body></html>');
  t.equal(unrelatedHeading.title, 'Quarterly report');

  const h1Only = htmlToDocument('<html><body><h1>Heading Title</h1><p>Some text.</p></body></html>');
  t.equal(h1Only.title, 'Heading Title');
});

t.test('HTML without the html/head/body skeleton still parses', async (t) => {
  const fragment = htmlToDocument('<p>First <b>bold</b> paragraph.</p><p>Second one.</p>');
  t.equal(fragment.text, 'First bold paragraph.\n\nSecond one.');
  t.equal(fragment.markdown, 'First **bold** paragraph.\n\nSecond one.');

  const implied = htmlToDocument('<!DOCTYPE html><title>Implied</title><p>para one<p>para two');
  t.equal(implied.title, 'Implied');
  t.equal(implied.text, 'para one\n\npara two');

  const bare = htmlToDocument('just words, no tags');
  t.equal(bare.text, 'just words, no tags');
});

t.test('HTML where Readability finds nothing falls back to the body text', async (t) => {
  const document = htmlToDocument(
    '<html><body><div>Short note.</div><script>var hidden = "script text";</script><style>.x{}</style><table><tr><th>Key</th><th>Value</th></tr><tr><td>a</td><td>1</td></tr></table></body></html>',
  );
  t.match(document.text, /Short note\./);
  t.notMatch(document.text, /script text|\.x\{\}/);
  t.match(document.text, /Key \| Value\na \| 1/);
});

t.test('extractDocument dispatches HTML and decodes its charset', async (t) => {
  const latin1 = Buffer.from('<html><body><p>Caf\u00e9 cr\u00e8me</p></body></html>', 'latin1');
  const fromHeader = await extractDocument({ body: latin1, contentType: 'text/html; charset=ISO-8859-1' });
  t.equal(fromHeader.text, 'Café crème');

  // “quoted” €5 in windows-1252 bytes, declared only by the page's <meta charset>.
  const cp1252 = Buffer.concat([
    Buffer.from('<html><head><meta charset="windows-1252"></head><body><p>'),
    Buffer.from([0x93]),
    Buffer.from('quoted'),
    Buffer.from([0x94, 0x20, 0x80]),
    Buffer.from('5</p></body></html>'),
  ]);
  const fromMeta = await extractDocument({ body: cp1252, contentType: 'text/html' });
  t.equal(fromMeta.text, '\u201cquoted\u201d \u20ac5');

  const sniffed = await extractDocument({ body: Buffer.from('\ufeff  <!doctype html><html><body><p>sniffed page</p></body></html>') });
  t.equal(sniffed.kind, 'html');
  t.equal(sniffed.text, 'sniffed page');

  const byExtension = await extractDocument({ body: Buffer.from('<p>by extension</p>'), contentType: 'application/octet-stream', filename: 'page.HTM' });
  t.equal(byExtension.kind, 'html');

  const byUrlExtension = await extractDocument({ body: Buffer.from('<p>url ext</p>'), url: 'https://example.com/a/page.html?x=1' });
  t.equal(byUrlExtension.kind, 'html');
});

t.test('PDF: text by lines, pages as paragraphs, title from metadata or first line', async (t) => {
  const sample = await pdfToDocument(samplePdf);
  t.same(sample, {
    title: 'Atomic Facts in Practice',
    text:
      'Atomic facts are short self-contained statements.\nEach fact names its subject explicitly.\n\n' +
      'Concepts group facts that share a subject (see page one).',
    markdown:
      'Atomic facts are short self-contained statements.\nEach fact names its subject explicitly.\n\n' +
      'Concepts group facts that share a subject (see page one).',
    publishedAt: null,
    kind: 'pdf',
    images: [],
  });
  t.ok(samplePdf.subarray(0, 5).equals(Buffer.from('%PDF-')), 'the caller’s buffer is left intact');

  const untitled = await extractDocument({ body: untitledPdf, contentType: 'application/octet-stream' });
  t.equal(untitled.kind, 'pdf', 'sniffed from %PDF-');
  t.equal(untitled.title, 'Notes on event sourcing');
  t.equal(untitled.text, 'Notes on event sourcing\nEvents are immutable records of change.');

  const mislabelled = await extractDocument({ body: samplePdf, contentType: 'text/html' });
  t.equal(mislabelled.kind, 'pdf', 'the PDF signature beats a wrong label');
});

/**
 * A one-page PDF whose page holds `line` in Helvetica, its byte `~` read as 😀 (a ToUnicode map to
 * a surrogate pair), so a test can put an emoji where a cut falls.
 */
function pdfWithLine(line: string): Buffer {
  const cmap =
    '/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Emoji def 1 begincodespacerange <00> <FF> endcodespacerange ' +
    '1 beginbfchar <7E> <D83DDE00> endbfchar endcmap CMapName currentdict /CMap defineresource pop end end';
  const content = `BT /F1 6 Tf 10 700 Td (${line}) Tj ET`;
  const objects = [
    '<< /Type /Catalog /Pages 2 0 R >>',
    '<< /Type /Pages /Kids [3 0 R] /Count 1 >>',
    '<< /Type /Page /Parent 2 0 R /MediaBox [0 0 3000 800] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>',
    `<< /Length ${content.length} >>\nstream\n${content}\nendstream`,
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>',
    `<< /Length ${cmap.length} >>\nstream\n${cmap}\nendstream`,
  ];
  let body = '%PDF-1.4\n';
  const offsets: number[] = [];
  objects.forEach((object, i) => {
    offsets.push(Buffer.byteLength(body, 'latin1'));
    body += `${i + 1} 0 obj\n${object}\nendobj\n`;
  });
  const xref = Buffer.byteLength(body, 'latin1');
  body += `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n${offsets.map((offset) => `${String(offset).padStart(10, '0')} 00000 n \n`).join('')}`;
  body += `trailer\n<< /Size ${objects.length + 1} /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`;
  return Buffer.from(body, 'latin1');
}

t.test("PDF: a title from the first line is cut at 300 characters, never inside an emoji", async (t) => {
  const document = await pdfToDocument(pdfWithLine(`${'a'.repeat(299)}~~b`));
  t.equal(document.text, `${'a'.repeat(299)}😀😀b`, 'the emoji are read from the page');
  t.equal(document.title, `${'a'.repeat(299)}😀`, 'the 300th character is the emoji, whole (a cut in UTF-16 units kept half of it)');
  const emoji = await pdfToDocument(pdfWithLine('~'.repeat(400)));
  t.equal(emoji.title, '😀'.repeat(300), 'counted in characters: 300 emoji, not 150');
});

t.test('a corrupt PDF is an UnsupportedContentError', async (t) => {
  for (const [label, body] of [
    ['garbage after the header', Buffer.from('%PDF-1.4\nthis is not really a pdf\n%%EOF')],
    ['truncated fixture', samplePdf.subarray(0, 200)],
  ] as const) {
    const error = await unsupported(extractDocument({ body, contentType: 'application/pdf' }));
    t.match(error.message, /PDF is corrupt/, label);
    t.equal(error.permanent, true);
    t.equal(error.contentType, 'application/pdf');
  }
  const error = await unsupported(extractDocument({ body: Buffer.from('not a pdf at all'), filename: 'paper.pdf' }));
  t.match(error.message, /PDF/);
});

t.test('a PDF label over an HTML body is read as HTML (a paywall page)', async (t) => {
  const document = await extractDocument({
    body: Buffer.from('<!DOCTYPE html><html><body><p>Please log in to read this article.</p></body></html>'),
    contentType: 'application/pdf',
  });
  t.equal(document.kind, 'html');
  t.equal(document.text, 'Please log in to read this article.');
});

t.test('Markdown: title from the first # heading, text without syntax', async (t) => {
  const markdown = [
    '---',
    'title: Front matter title',
    'date: 2022-09-15',
    '---',
    '',
    'Intro before the heading.',
    '',
    '## Not the title',
    '',
    '# The *Real* Title #',
    '',
    'Some **bold**, _italic_ and `code` with a [link](https://example.com/x "t") and snake_case_name.',
    'Second line of the same paragraph.  ',
    '',
    '> A quoted line',
    '',
    '- item one',
    '- [x] done item',
    '1. numbered',
    '',
    '![Diagram](img/diagram.png)',
    '',
    '| Name | Value |',
    '|------|:-----:|',
    '| a    | 1     |',
    '',
    '```js',
    '# not a heading',
    'const x = 1;',
    '```',
    '',
    '---',
    '',
    'See [the docs][docs].',
    '',
    '[docs]: https://example.com/docs',
  ].join('\r\n');
  const document = await extractDocument({ body: Buffer.from(markdown), contentType: 'text/markdown', url: 'https://example.com/notes/readme.md' });
  t.equal(document.kind, 'markdown');
  t.equal(document.title, 'The Real Title');
  t.equal(document.publishedAt, '2022-09-15');
  t.notMatch(document.markdown, /Front matter title|\r/, 'front matter and CR are gone from the Markdown');
  t.match(document.markdown, /^# The \*Real\* Title #$/m, 'the Markdown keeps its syntax');
  t.equal(
    document.text,
    [
      'Intro before the heading.',
      'Not the title',
      'The Real Title',
      'Some bold, italic and code with a link and snake_case_name.\nSecond line of the same paragraph.',
      'A quoted line',
      'item one\ndone item\nnumbered',
      'Diagram',
      'Name | Value\na | 1',
      '# not a heading\nconst x = 1;',
      'See the docs.',
    ].join('\n\n'),
  );
  t.same(document.images, [{ url: 'https://example.com/notes/img/diagram.png', altText: 'Diagram', caption: null }]);

  const setext = await extractDocument({ body: Buffer.from('Setext Title\n============\n\nBody.'), filename: 'notes.markdown' });
  t.equal(setext.title, 'Setext Title');
  t.equal(setext.text, 'Setext Title\n\nBody.');

  const plainLabelled = await extractDocument({ body: Buffer.from('# Raw GitHub\n\ntext'), contentType: 'text/plain; charset=utf-8', url: 'https://raw.example/readme.md' });
  t.equal(plainLabelled.kind, 'markdown', 'text/plain with a .md name is Markdown');
  t.equal(plainLabelled.title, 'Raw GitHub');

  const noHeading = await extractDocument({ body: Buffer.from('---\ntitle: Only front matter\n---\nBody'), contentType: 'text/markdown' });
  t.equal(noHeading.title, 'Only front matter');
});

t.test('plain text keeps lines and paragraphs and honours the charset', async (t) => {
  const document = await extractDocument({
    body: Buffer.from('First line\r\nsecond line   \r\n\r\n\r\n\r\n  indented paragraph\n'),
    contentType: 'text/plain',
  });
  t.same(document, {
    title: null,
    text: 'First line\nsecond line\n\n  indented paragraph',
    markdown: 'First line\nsecond line\n\n  indented paragraph',
    publishedAt: null,
    kind: 'text',
    images: [],
  });

  const latin1 = await extractDocument({ body: Buffer.from('na\u00efve caf\u00e9', 'latin1'), contentType: 'text/plain; charset="iso-8859-1"' });
  t.equal(latin1.text, 'naïve café');

  // No charset declared and not UTF-8: read as windows-1252 (the web's default), not as replacement characters.
  const undeclared = await extractDocument({ body: Buffer.from('G\u00f6del was born in Br\u00fcnn in 1906.', 'latin1'), contentType: 'text/plain', filename: 'latin1.txt' });
  t.equal(undeclared.text, 'G\u00f6del was born in Br\u00fcnn in 1906.', 'Latin-1 bytes without a charset');
  t.notMatch(undeclared.text, /\ufffd/);
  const cp1252 = await extractDocument({ body: Buffer.from([0x93, 0x51, 0x75, 0x6f, 0x74, 0x65, 0x64, 0x94, 0x20, 0x80]), contentType: 'text/plain' });
  t.equal(cp1252.text, '\u201cQuoted\u201d \u20ac', 'CP-1252 quotes and the euro sign');

  const utf16 = await extractDocument({ body: Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('wide text', 'utf16le')]) });
  t.equal(utf16.text, 'wide text', 'UTF-16 with a BOM is sniffed');

  const unknownCharset = await extractDocument({ body: Buffer.from('café'), contentType: 'text/plain; charset=x-no-such-charset' });
  t.equal(unknownCharset.text, 'café', 'an unknown charset falls back to UTF-8');

  const csv = await extractDocument({ body: Buffer.from('a,b\n1,2'), contentType: 'text/csv' });
  t.equal(csv.kind, 'text');

  const untyped = await extractDocument({ body: Buffer.from('untyped words'), filename: 'NOTES' });
  t.equal(untyped.kind, 'text', 'untyped UTF-8 without an extension is text');
});

t.test('unsupported content names its type', async (t) => {
  const png = Buffer.from('89504e470d0a1a0a0000000d49484452', 'hex');
  const image = await unsupported(extractDocument({ body: png, contentType: 'image/png' }));
  t.match(image.message, /image\/png/);
  t.equal(image.contentType, 'image/png');
  t.equal(image.permanent, true);

  const zip = await unsupported(extractDocument({ body: Buffer.from('504b0304140000000800', 'hex'), contentType: 'application/zip' }));
  t.match(zip.message, /application\/zip/);

  const binary = await unsupported(extractDocument({ body: png, contentType: 'application/octet-stream' }));
  t.match(binary.message, /application\/octet-stream/);

  const binaryWithName = await unsupported(extractDocument({ body: png, filename: 'photo.png' }));
  t.match(binaryWithName.message, /\.png/);

  const json = await unsupported(extractDocument({ body: Buffer.from('{"a":1}'), contentType: 'application/json' }));
  t.match(json.message, /application\/json/);
});

t.test('binary data declared as text is refused, not read as replacement characters', async (t) => {
  // Random bytes as a QA run uploaded them: a fact of U+FFFD and control characters came out.
  const random = Buffer.from('0246 7e16 efbf bd2c 5c6d 8342 0099 ff10 0507 1f7f 4142'.replaceAll(' ', ''), 'hex');
  for (const contentType of ['text/plain', 'text/markdown', 'text/html; charset=utf-8']) {
    const error = await unsupported(extractDocument({ body: random, contentType }));
    t.match(error.message, /^binary content, not (plain text|Markdown|HTML): text\/(plain|markdown|html) holds control bytes/, contentType);
    t.equal(error.permanent, true);
  }
  t.match((await unsupported(extractDocument({ body: random, filename: 'notes.txt' }))).message, /binary content, not plain text/, 'by extension');
  const formFeedAndEscape = await extractDocument({ body: Buffer.from('Page one.\fPage two \u001b[1mbold\u001b[0m.\tTabbed.'), contentType: 'text/plain' });
  t.match(formFeedAndEscape.text, /Page one/, 'form feed, escape and tab are text');
  const latin1 = await extractDocument({ body: Buffer.from('caf\u00e9 cr\u00e8me', 'latin1'), contentType: 'text/plain' });
  t.match(latin1.text, /caf/, 'an 8-bit encoding is not binary');
});

t.test('no text is an UnsupportedContentError', async (t) => {
  const cases: Array<[string, Parameters<typeof extractDocument>[0]]> = [
    ['empty html', { body: Buffer.from('<html><body></body></html>'), contentType: 'text/html' }],
    ['script-only html', { body: Buffer.from('<html><body><script>var a = 1;</script></body></html>'), contentType: 'text/html' }],
    ['empty text', { body: Buffer.from('  \n\n '), contentType: 'text/plain' }],
    ['empty markdown', { body: Buffer.from('---\ntitle: x\n---\n'), contentType: 'text/markdown' }],
    ['empty body', { body: Buffer.alloc(0), contentType: 'text/plain' }],
  ];
  for (const [label, input] of cases) {
    const error = await unsupported(extractDocument(input));
    t.match(error.message, /^no text/, label);
  }
  const emptyUntyped = await unsupported(extractDocument({ body: Buffer.alloc(0) }));
  t.match(emptyUntyped.message, /untyped content/);
});

t.test('toIsoDate', async (t) => {
  t.equal(toIsoDate('2024-03-01'), '2024-03-01');
  t.equal(toIsoDate('2024-03-01T23:30:00-05:00'), '2024-03-01');
  t.equal(toIsoDate('2024/3/7'), '2024-03-07');
  t.equal(toIsoDate('20240307'), '2024-03-07');
  t.equal(toIsoDate('2024'), null, 'a year alone is not a date');
  t.equal(toIsoDate('2024-03'), null);
  t.equal(toIsoDate('2023-02-29'), null, 'not a leap year');
  t.equal(toIsoDate('2024-13-01'), null);
  t.equal(toIsoDate('March 3, 2024'), null);
  t.equal(toIsoDate(''), null);
  t.equal(toIsoDate(null), null);
});

t.test('Markdown inline markup is stripped in one pass over a line, whatever it holds', async (t) => {
  // Each of these took the square of its length (minutes for the largest) while the old patterns
  // let a bracket, a tag or an emphasis run scan to the end of the line.
  const cases: Array<[string, string]> = [
    ['brackets', `Polonium was found in 1898. ${'['.repeat(200_000)}`],
    ['unclosed link destinations', '[a](<'.repeat(40_000)],
    ['emphasis runs', '*a **a ***a '.repeat(20_000)],
    ['underscore runs', '_a __a ___a '.repeat(20_000)],
    ['unclosed tags', '<a'.repeat(100_000)],
    ['unclosed comments', 'a <!--'.repeat(45_000)],
    ['tag runs', '<p>a</p>'.repeat(32_000)],
    ['stars', `a ${'*'.repeat(262_144)}`],
    ['backticks', `a ${'`'.repeat(262_144)}`],
    ['backtick runs of every length', Array.from({ length: 700 }, (_, k) => `${'`'.repeat(k + 1)}a`).join('')],
    ['unclosed strong', '**a'.repeat(87_000)],
    ['mixed delimiters', '_a *a '.repeat(43_000)],
    // The same over the lines of one paragraph, which inline markup is read across, and escapes.
    ['brackets on lines', '[\n'.repeat(131_072)],
    ['strong on lines', '**a\n'.repeat(87_000)],
    ['backticks on lines', 'a `\n'.repeat(87_000)],
    ['tags on lines', '<a\n'.repeat(87_000)],
    ['escapes', '\\*'.repeat(131_072)],
    ['escaped brackets in a link text', `[${'\\[\n'.repeat(87_000)}`],
    ['parentheses in a link destination', `[a](${'(b)'.repeat(87_000)}`],
    ['reference images', '[![a][b]][c] ![['.repeat(20_000)],
    // A deep list, then fences and lines that look for the list item they are in.
    ['fences under a deep list', `${Array.from({ length: 400 }, (_, k) => `${' '.repeat(2 * k)}- a`).join('\n')}\n${'  ```\n'.repeat(87_000)}`],
  ];
  for (const [name, markdown] of cases) {
    const document = await extractDocument({ body: Buffer.from(markdown), contentType: 'text/markdown', url: 'https://example.com/x.md' });
    t.ok(document.text.length > 0, name);
  }
  const kept = await extractDocument({
    body: Buffer.from('Some **bold**, *italic*, __strong__, _em_, ~~gone~~, `code`, ``a`b`` and [a link](https://e.example) with <b>html</b>.\n\n**bold *and italic* text**, *a **b** c*, ***both***, snake_case, 2 * 3 and \\*stars\\*.'),
    contentType: 'text/markdown',
    url: 'https://example.com/y.md',
  });
  // A code span holding a backtick kept its ticks, and nested emphasis its outer marks.
  t.equal(kept.text, 'Some bold, italic, strong, em, gone, code, a`b and a link with html.\n\nbold and italic text, a b c, both, snake_case, 2 * 3 and *stars*.');
});

t.test('Markdown backslash escapes: one rule, CommonMark\'s, outside code and in it', async (t) => {
  const read = async (markdown: string) => (await extractDocument({ body: Buffer.from(markdown), contentType: 'text/markdown' })).text;
  // CommonMark's examples (spec 0.31.2, "Backslash escapes"): any ASCII punctuation character may be
  // escaped, and is then text, never markup; the backslash goes.
  t.equal(await read('\\!\\"\\#\\$\\%\\&\\\'\\(\\)\\*\\+\\,\\-\\.\\/\\:\\;\\<\\=\\>\\?\\@\\[\\\\\\]\\^\\_\\`\\{\\|\\}\\~'), '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~');
  t.equal(await read('\\\t\\A\\a\\ \\3\\φ\\«'), '\\\t\\A\\a\\ \\3\\φ\\«', 'before any other character a backslash is text');
  t.equal(
    await read(
      [
        '\\*not emphasized*',
        '\\<br/> not a tag',
        '\\[not a link](/foo)',
        '\\`not code`',
        '1\\. not a list',
        '\\* not a list',
        '\\# not a heading',
        '\\[foo]: /url "not a reference"',
        '\\&ouml; not a character entity',
        '\\&amp; and \\&ast;not emphasized*',
      ].join('\n'),
    ),
    [
      '*not emphasized*',
      '<br/> not a tag',
      '[not a link](/foo)',
      '`not code`',
      '1. not a list',
      '* not a list',
      '# not a heading',
      '[foo]: /url "not a reference"',
      '&ouml; not a character entity',
      '&amp; and &ast;not emphasized*',
    ].join('\n'),
  );
  t.equal(await read('\\\\*emphasis*'), '\\emphasis', 'an escaped backslash is one backslash, and the emphasis after it is read');
  t.equal(await read('[\\[1\\]](#cite_note-1) and [a](b\\)c) link'), '[1] and a link', 'in a link\'s text and destination too');
  // In code, spans and blocks alike, a backslash is text.
  t.equal(await read('`` \\[\\` `` and `a\\*b \\&amp;`'), '\\[\\` and a\\*b \\&amp;');
  t.equal(await read('```\n\\[\\]\n```\n\n~~~\n\\*a\\* &amp;\n~~~'), '\\[\\]\n\n\\*a\\* &amp;');
  t.equal(await read('Para.\n\n    \\[\\] &amp; *a*\n\n\tb\\_c\n\nAfter \\*code\\*.'), 'Para.\n\n\\[\\] &amp; *a*\nb\\_c\n\nAfter *code*.', 'indented code (one block over its blank line)');
});

t.test('Markdown: indented code, fences in list items, and inline markup across a paragraph\'s lines', async (t) => {
  const read = async (markdown: string) => (await extractDocument({ body: Buffer.from(markdown), contentType: 'text/markdown' })).text;
  t.equal(
    await read('Radium was *first isolated\nin 1910* by [Marie\nCurie](https://example.org/curie) and `Andr\né`.'),
    'Radium was first isolated\nin 1910 by Marie\nCurie and Andr\né.',
    'emphasis, a link and a code span may run over a line\'s end',
  );
  t.equal(await read('An indented line\n    continues a paragraph **here**.'), 'An indented line\ncontinues a paragraph here.');
  t.equal(
    await read('- An item\n\n    whose *second* paragraph is indented.\n\n      code in the item *stays*\n\nOutside.\n\n    code *stays*'),
    'An item\n\nwhose second paragraph is indented.\n\ncode in the item *stays*\n\nOutside.\n\ncode *stays*',
    'in a list item, indentation up to the item\'s content is the item\'s, code four columns further in',
  );
  t.equal(
    await read('1. Run:\n\n     ```sh\n     # *not* a heading\n     ```\n\n1. Then *read*:'),
    'Run:\n\n     # *not* a heading\n\nThen read:',
    'a fence may stand up to three columns past its list item\'s content',
  );
  t.equal(
    await read('[![Build][build-badge]][build] [![npm](https://img.example/npm.svg)](https://npm.example) text'),
    'Build npm text',
    'a link whose text is an image (a badge) reads as the image\'s alt text',
  );
  t.equal(await read('See [Mercury](https://en.wikipedia.org/wiki/Mercury_(planet)).'), 'See Mercury.', 'a destination may hold parentheses');
});

t.test('Markdown: a block element\'s tags leave a space, an inline one\'s nothing, a comment nothing', async (t) => {
  const markdown = [
    '<p>Otters float</p><p>on their backs</p>',
    'Some un<em>sure</em> words<br>on two lines, a cell<td>apart.',
    'Kept <!-- an aside --> words.',
    '<!-- a comment',
    'over lines -->',
    'Last words.',
  ].join('\n');
  const document = await extractDocument({ body: Buffer.from(markdown), contentType: 'text/markdown', url: 'https://example.com/tags.md' });
  // The tags were dropped without a trace: "Otters floaton their backs".
  t.equal(document.text, 'Otters float on their backs\nSome unsure words on two lines, a cell apart.\nKept  words.\n\nLast words.', 'a comment over lines ends the paragraph, as an HTML block does');
});

t.test('Markdown: what is between backticks is text, links and tags included', async (t) => {
  const markdown = 'Write `[text](url)` for a link and `<br>` for a break; see [`marked`](https://x.test) too.';
  const document = await extractDocument({ body: Buffer.from(markdown), contentType: 'text/markdown', url: 'https://example.com/code.md' });
  t.equal(document.text, 'Write [text](url) for a link and <br> for a break; see marked too.');
});

t.test('character references: decoded as each format has them', async (t) => {
  const read = async (contentType: string, body: string) => (await extractDocument({ body: Buffer.from(body), contentType })).text;
  // Plain text has no references: `&amp;` is those five characters.
  t.equal(await read('text/plain', 'AT&amp;T sells &lt;b&gt; tags &#39;cheap&#39;.'), 'AT&amp;T sells &lt;b&gt; tags &#39;cheap&#39;.');
  // HTML's are decoded by its DOM, once: `&amp;amp;` is the text "&amp;".
  t.equal(
    await read('text/html', '<html><body><p>AT&amp;T sells &lt;b&gt; tags &#39;cheap&#39;, not &amp;amp; Caf&eacute;.</p></body></html>'),
    "AT&T sells <b> tags 'cheap', not &amp; Café.",
  );
  // Markdown's as CommonMark: in text (any HTML5 name, decimal and hexadecimal), not in code spans or
  // code blocks, not after a backslash, an unknown name as written; what they decode to is text, not markup.
  const markdown = [
    'AT&amp;T sells &lt;b&gt; tags &#39;cheap&#39;, Caf&eacute; &#x263A; &NotNestedGreaterGreater; &fjlig;.',
    '',
    'Code `a &amp;&amp; b` stays, &nosuch; and &notit; stay, \\&copy; stays, &#0; is a replacement.',
    '',
    '&#42;not emphasis&#42;, &#96;not code&#96;, &#91;not a link&#93;(x), &lt;em&gt;not a tag&lt;/em&gt;, &amp;amp; once.',
    '',
    '```',
    'a &amp;&amp; b',
    '```',
    '',
    '# Fish &amp; Chips',
  ].join('\n');
  const document = await extractDocument({ body: Buffer.from(markdown), contentType: 'text/markdown' });
  t.equal(
    document.text,
    [
      "AT&T sells <b> tags 'cheap', Café ☺ ⪢̸ fj.",
      'Code a &amp;&amp; b stays, &nosuch; and &notit; stay, &copy; stays, \ufffd is a replacement.',
      '*not emphasis*, `not code`, [not a link](x), <em>not a tag</em>, &amp; once.',
      'a &amp;&amp; b',
      'Fish & Chips',
    ].join('\n\n'),
  );
  t.equal(document.title, 'Fish & Chips', 'a heading is text too');
  t.equal(document.markdown, markdown, 'the Markdown is kept as written');
});
