import t from 'tap';
import { runeLength, shortenRunes } from '../../src/domain/text.js';

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
