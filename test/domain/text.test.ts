import t from 'tap';
import { cleanFileName, MAX_FILE_NAME_CHARS, MARKDOWN_INLINE_LINK, outsideCodeSpans, shortenRunes, stripCodeAndEmphasis } from '../../src/domain/text.js';
import { runeLength } from '../../src/util/codePoints.js';

t.test('runes are code points', async (t) => {
  t.equal(runeLength('abc'), 3);
  t.equal(runeLength('😀é'), 2, 'an astral character is one rune, two UTF-16 units');
});

t.test('shortening never cuts a character in half', async (t) => {
  t.equal(shortenRunes('short', 10), 'short');
  t.equal(shortenRunes('abcdef', 4), 'abc…');
  const emoji = '😀'.repeat(61);
  const shortened = shortenRunes(emoji, 60);
  t.equal(shortened, `${'😀'.repeat(59)}…`);
  t.notMatch(shortened, /[\uD800-\uDBFF](?![\uDC00-\uDFFF])/, 'no lone high surrogate');
  t.equal(runeLength(shortened), 60);
});

t.test('cleanFileName: no control or bidirectional characters, no lone surrogates, at most 255 characters', async (t) => {
  t.equal(cleanFileName('notes.md'), 'notes.md');
  t.equal(cleanFileName('a\u0000b\u0001c\u007f\u0085.txt'), 'abc.txt', 'NUL, C0, DEL and C1 controls dropped');
  t.equal(cleanFileName('line\r\nX-Injected: 1.txt'), 'lineX-Injected: 1.txt', 'no line breaks');
  t.equal(cleanFileName('report\u202etxt.exe'), 'reporttxt.exe', 'a right-to-left override cannot disguise the extension');
  t.equal(cleanFileName('a\u200eb\u200fc\u061cd\u2028e\u2029f.txt'), 'abcdef.txt', 'nor the direction marks, nor line or paragraph separators');
  t.equal(cleanFileName('x\ud800y.md'), 'x\ufffdy.md');
  t.equal(cleanFileName('  Zürich 東京 🧪.pdf  '), 'Zürich 東京 🧪.pdf', 'letters of any script and emoji kept');
  t.equal(runeLength(cleanFileName('a'.repeat(400)) ?? ''), MAX_FILE_NAME_CHARS);
  t.equal(cleanFileName('\u0000\u202e '), null, 'nothing left');
  t.equal(cleanFileName(undefined), null);
});

t.test('stripCodeAndEmphasis: CommonMark code spans and emphasis, marks left where nothing matches', async (t) => {
  const cases: Array<[string, string]> = [
    ['``a`b``', 'a`b'],
    ['` a `', 'a'],
    ['`a', '`a'],
    ['\\``a`', '\\`a'],
    ['`*a*`', '*a*'],
    ['**bold *and italic* text**', 'bold and italic text'],
    ['*a **b** c*', 'a b c'],
    ['***both***', 'both'],
    ['**foo*', '*foo'],
    ['*foo**', 'foo*'],
    ['foo*bar*baz', 'foobarbaz'],
    ['snake_case_name', 'snake_case_name'],
    ['5 * 3 * 2', '5 * 3 * 2'],
    ['\\*not\\*', '\\*not\\*'],
  ];
  for (const [markdown, text] of cases) t.equal(stripCodeAndEmphasis(markdown), text, markdown);
  // With `unescape`, a backslash before ASCII punctuation goes outside code spans, as CommonMark renders it.
  const unescaped: Array<[string, string]> = [
    ['\\*not\\* \\_em\\_', '*not* _em_'],
    ['\\\\*emphasis*', '\\emphasis'],
    ['\\&amp; \\" \\$ \\~', '&amp; " $ ~'],
    ['`a\\*b \\\\` stays', 'a\\*b \\\\ stays'],
    ['\\a \\é \\', '\\a \\é \\'],
  ];
  for (const [markdown, text] of unescaped) t.equal(stripCodeAndEmphasis(markdown, { unescape: true }), text, `unescaped ${markdown}`);
  // Each of these is a pass over its 256 KiB, not one per delimiter (the last round's patterns' cost).
  for (const markdown of ['*'.repeat(262_144), '`'.repeat(262_144), '['.repeat(262_144), '**a'.repeat(87_381), '*a **a ***a '.repeat(21_845), '_a *a '.repeat(43_690)]) {
    t.ok(stripCodeAndEmphasis(markdown).length > 0);
  }
});

t.test('outsideCodeSpans: code spans bind tighter than links; a link may hold a whole span', async (t) => {
  const links = (text: string) => text.replace(MARKDOWN_INLINE_LINK, '$1');
  const cases: Array<[string, string]> = [
    ['`[a](b)` is code', '`[a](b)` is code'],
    ['see [`code`](https://x.test)', 'see `code`'],
    ['[not a `link](/foo`)', '[not a `link](/foo`)'],
    ['[a](b) and `[c](d)`', 'a and `[c](d)`'],
    ['\\`[a](b)`', '\\`a`'],
    ['no spans [a](b)', 'no spans a'],
    ['held \uE000 characters `[a](b)` and \uE0001\uE001 [c](d)', 'held \uE000 characters `[a](b)` and \uE0001\uE001 c'],
    // An escaped character is text: held from the patterns like a span, and put back as written.
    ['\\[not a link\\](x) and \\![not an image](y)', '\\[not a link\\](x) and \\!not an image'],
    ['[\\[1\\]](#cite_note-1) and [a\\]b](c)', '\\[1\\] and a\\]b'],
    ['\\\\[a](b) and [a](b\\)c)', '\\\\a and a'],
    ['`\\`[a](b)`', '`\\`a`'],
    ['[Mercury](https://en.wikipedia.org/wiki/Mercury_(planet)) and [a](b(c)', 'Mercury and [a](b(c)'],
  ];
  for (const [markdown, text] of cases) t.equal(outsideCodeSpans(markdown, links), text, markdown);
  // One pass over 256 KiB of escapes, or of escaped brackets inside one unclosed link text.
  for (const markdown of ['\\*'.repeat(131_072), `[${'\\['.repeat(131_072)}`, `[a](${'(b)'.repeat(87_381)}`]) {
    t.ok(outsideCodeSpans(markdown, links).length > 0);
  }
  t.equal(stripCodeAndEmphasis(outsideCodeSpans('`*[a](b)*` and *[c](d)*', links)), '*[a](b)* and c', 'then the spans become their text');
});
