import t from 'tap';
import { sentenceRunes, splitSentences } from '../../../src/domain/report/sentences.js';

t.test('sentences of Markdown blocks, with offsets into the text', async (t) => {
  const text = [
    '# Marie Curie',
    '',
    'Marie Curie was born in Warsaw in 1867. She moved to **Paris** in 1891.',
    'She studied at the [Sorbonne](https://example.org/sorbonne).',
    '',
    '- Polonium was named after Poland.',
    '- Radium glows.',
    '',
    '```',
    'code is not prose.',
    '```',
  ].join('\n');
  const sentences = splitSentences(text);
  t.same(
    sentences.map((sentence) => sentence.text),
    ['Marie Curie', 'Marie Curie was born in Warsaw in 1867.', 'She moved to Paris in 1891.', 'She studied at the Sorbonne.', 'Polonium was named after Poland.', 'Radium glows.'],
  );
  t.same(sentences.map((sentence) => sentence.index), [0, 1, 2, 3, 4, 5]);
  t.equal(text.slice(sentences[1].start, sentences[1].end), 'Marie Curie was born in Warsaw in 1867.');
  t.equal(text.slice(sentences[2].start, sentences[2].end), 'She moved to **Paris** in 1891.', 'offsets cover the markup, not the white space');
  t.same(splitSentences('   \n\n'), []);
});

t.test("a block's marks are neither text nor span, whatever the kind and however nested", async (t) => {
  const lines = ['## A heading here', '- A bullet item.', '1. A numbered item.', '> > A quote in a quote.', '- [ ] A task to do.', '- [x] A task done.', '> - A bullet in a quote.'];
  const text = lines.join('\n\n');
  const sentences = splitSentences(text);
  const words = ['A heading here', 'A bullet item.', 'A numbered item.', 'A quote in a quote.', 'A task to do.', 'A task done.', 'A bullet in a quote.'];
  t.same(sentences.map((sentence) => sentence.text), words);
  t.same(sentences.map((sentence) => text.slice(sentence.start, sentence.end)), words, 'each span is the words, no mark');
});

t.test('pathological markup costs a pass over the text, not one per bracket: a 256 KiB report of open brackets or links', async (t) => {
  // With `[^\]]*` each `[` scanned to the end: this took minutes of the API thread.
  const brackets = splitSentences(`Marie Curie discovered polonium. ${'['.repeat(262_000)}`);
  t.equal(brackets[0].text, 'Marie Curie discovered polonium.');
  const links = splitSentences('[a](<'.repeat(52_000));
  t.equal(links.length, 1);
  t.match(links[0].text, /^\[a\]\(<\[a\]\(</, 'no link in it: the text as given');
  t.same(splitSentences('See [the docs](https://example.org/x), then [the code](https://example.org/y).').map((sentence) => sentence.text), ['See the docs, then the code.'], 'links keep their text');
});

t.test('a code span keeps the link syntax it holds; a link keeps the span it holds', async (t) => {
  t.same(splitSentences('Write `[text](url)` for a link. See [`splitSentences`](https://x.test) too.').map((sentence) => sentence.text), [
    'Write [text](url) for a link.',
    'See splitSentences too.',
  ]);
});

t.test('code spans and nested emphasis lose exactly their marks', async (t) => {
  const text = 'Run ``a`b`` here. It is **bold *and italic* text**. Also *a **b** c*. Keep snake_case and 2 * 3.';
  t.same(splitSentences(text).map((sentence) => sentence.text), ['Run a`b here.', 'It is bold and italic text.', 'Also a b c.', 'Keep snake_case and 2 * 3.']);
  for (const markup of ['*'.repeat(262_144), `a ${'`'.repeat(262_144)}`, '**a'.repeat(87_000)]) {
    t.equal(splitSentences(markup).length, 1, 'an unmatched run stays as written, in one pass');
  }
});

t.test('a sentence does not end inside a link, an image or a code span', async (t) => {
  const text = '![A photograph. Marie Curie](curie.png) She is in her laboratory. See [The first. The second](https://x.test/a) for both. Run `x = 1. Y = 2` once.';
  const sentences = splitSentences(text);
  t.same(
    sentences.map((sentence) => sentence.text),
    ['A photograph. Marie Curie She is in her laboratory.', 'See The first. The second for both.', 'Run x = 1. Y = 2 once.'],
    "no `![` sentence, no link target in a sentence's words",
  );
  t.same(
    sentences.map((sentence) => text.slice(sentence.start, sentence.end)),
    ['![A photograph. Marie Curie](curie.png) She is in her laboratory.', 'See [The first. The second](https://x.test/a) for both.', 'Run `x = 1. Y = 2` once.'],
  );
  t.same(splitSentences('An image ends it: ![alt](a.png)').map((sentence) => sentence.text), ['An image ends it: alt'], 'a link at the end of the block');
});

t.test('a title before a name ends no sentence', async (t) => {
  const text = 'In 1903 Dr. Marie Curie and Prof. Henri Becquerel shared the prize. Mr. Nobel had died in 1896.\nHe was a Dr.\nNext line.';
  const sentences = splitSentences(text);
  t.same(sentences.map((sentence) => sentence.text), [
    'In 1903 Dr. Marie Curie and Prof. Henri Becquerel shared the prize.',
    'Mr. Nobel had died in 1896.',
    'He was a Dr.',
    'Next line.',
  ], 'not `Dr.`, `Prof.` and `Mr.` sentences of their own; a title at the end of a line stays where it ends');
  t.same(sentences.map((sentence) => text.slice(sentence.start, sentence.end)), sentences.map((sentence) => sentence.text));
});

t.test('an abbreviation inside a sentence ends none; the same abbreviation at a sentence end still does', async (t) => {
  const cases: Array<[string, string[]]> = [
    // Saint and street: St. before a name joins; before a word that starts sentences, it ends one.
    ['The arch stands in St. Louis on the river.', ['The arch stands in St. Louis on the river.']],
    ['He lives on Main St. Then he moved to Ohio.', ['He lives on Main St.', 'Then he moved to Ohio.']],
    // A name suffix: before the rest of a name joins, before a new sentence's first word ends it.
    ['Martin Luther King Jr. Day is a holiday. Sr. Mary Joseph taught there.', ['Martin Luther King Jr. Day is a holiday.', 'Sr. Mary Joseph taught there.']],
    ['The son was named John Smith Jr. He was born in 1950.', ['The son was named John Smith Jr.', 'He was born in 1950.']],
    // Before a number: No., Fig., Vol., pp. and their kin join; before a word, No. is an answer.
    ['He lived at No. 10 Downing Street for years.', ['He lived at No. 10 Downing Street for years.']],
    ['See Fig. 3 Panel B for the setup. Vol. 2 Chapter 3 is on this. Read pp. 4-5 Section 2 first.', ['See Fig. 3 Panel B for the setup.', 'Vol. 2 Chapter 3 is on this.', 'Read pp. 4-5 Section 2 first.']],
    ['He said no. Then he left the room.', ['He said no.', 'Then he left the room.']],
    // Never at a sentence end: vs., e.g., i.e., cf. join whatever follows.
    ['It was Smith vs. Jones in court. Cities, e.g. Paris, grew. One city, i.e. The Hague, stayed. Cf. Section 3 for more.', ['It was Smith vs. Jones in court.', 'Cities, e.g. Paris, grew.', 'One city, i.e. The Hague, stayed.', 'Cf. Section 3 for more.']],
    // etc. mid-sentence joins (the segmenter's own rule, before a lower-case word); before a capital it ends one.
    ['Apples, pears, etc. are sold here. We bought apples, pears, etc. The shop closed.', ['Apples, pears, etc. are sold here.', 'We bought apples, pears, etc.', 'The shop closed.']],
    // Initials: before the rest of a name join; before a new sentence's first word end one.
    ['J. R. R. Tolkien wrote it. J. Robert Oppenheimer led it. He lived in the U.S. He moved.', ['J. R. R. Tolkien wrote it.', 'J. Robert Oppenheimer led it.', 'He lived in the U.S.', 'He moved.']],
    ['The U.S. Army landed. She got an A. The rest failed.', ['The U.S. Army landed.', 'She got an A.', 'The rest failed.']],
    // Mr., Mrs., Ms. stay as they were: before a capital they join.
    ['Mrs. Smith and Ms. Jones met Mr. Brown.', ['Mrs. Smith and Ms. Jones met Mr. Brown.']],
    // An abbreviation at the end of a line ends it as any sentence does.
    ['He lived on Main St.\nLouis lived elsewhere.', ['He lived on Main St.', 'Louis lived elsewhere.']],
  ];
  for (const [text, expected] of cases) {
    const sentences = splitSentences(text);
    t.same(sentences.map((sentence) => sentence.text), expected, text);
    t.same(sentences.map((sentence) => text.slice(sentence.start, sentence.end)), expected, 'offsets cover the joined sentence');
  }
});

t.test('Chinese and Japanese sentences end at 。！？ with no space after them, offsets into the text', async (t) => {
  const text = '居里夫人于1903年获得诺贝尔物理学奖。她是第一位获得诺贝尔奖的女性！这是真的吗？\n\nキュリーは1867年にワルシャワで生まれた。本当？';
  const sentences = splitSentences(text);
  const expected = ['居里夫人于1903年获得诺贝尔物理学奖。', '她是第一位获得诺贝尔奖的女性！', '这是真的吗？', 'キュリーは1867年にワルシャワで生まれた。', '本当？'];
  t.same(sentences.map((sentence) => sentence.text), expected);
  t.same(sentences.map((sentence) => text.slice(sentence.start, sentence.end)), expected);
});

t.test('sentenceRunes weighs a CJK character by what it says: Han 3, kana and Hangul 2, anything else 1', async (t) => {
  t.equal(sentenceRunes('Marie Curie won the Nobel Prize in Physics in 1903.'), 51, 'Latin text: its code points');
  t.equal(sentenceRunes('居里夫人于1903年获得诺贝尔物理学奖。'), 15 * 3 + 4 + 1, 'Chinese: 15 ideographs, 4 digits and a full stop');
  t.equal(sentenceRunes('マリー・キュリーは1903年にノーベル物理学賞を受賞した。'), 7 * 3 + 16 * 2 + 4 + 2, 'Japanese: the long-vowel mark ー is kana, the middle dot ・ and 。 punctuation');
  t.equal(sentenceRunes('마리 퀴리는 1903년에 노벨 물리학상을 받았다.'), 17 * 2 + 10, 'Korean: 17 Hangul syllables, 5 spaces, 4 digits and a full stop');
  t.equal(sentenceRunes('😀ＡＩ'), 3, 'an emoji and full-width letters count one each');
});
