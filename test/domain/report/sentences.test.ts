import t from 'tap';
import { splitSentences } from '../../../src/domain/report/sentences.js';

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

