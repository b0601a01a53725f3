import t from 'tap';
import { avoidSplitPair, headOfRunes, headOfUnits, runeLength, tailOfRunes, tailOfUnits } from '../../src/util/codePoints.js';

t.test('a cut in UTF-16 units keeps a surrogate pair whole', async (t) => {
  t.equal(runeLength('a😀'), 2);
  t.equal(avoidSplitPair('a😀', 2), 1, 'between the halves: moved back');
  t.equal(avoidSplitPair('a😀', 1), 1);
  t.equal(headOfUnits('a😀b', 2), 'a');
  t.equal(headOfUnits('a😀b', 3), 'a😀');
  t.equal(tailOfUnits('a😀b', 2), 'b', 'the low half alone is left out');
  t.equal(tailOfUnits('a😀b', 3), '😀b');
  t.equal(tailOfUnits('ab', 5), 'ab');
});

t.test('a cut in characters keeps that many code points, each pair whole', async (t) => {
  t.equal(headOfRunes('a😀b', 2), 'a😀', 'the emoji is one character');
  t.equal(headOfRunes('😀😀😀', 2), '😀😀');
  t.equal(headOfRunes('ab', 5), 'ab');
  t.equal(headOfRunes('ab', 0), '');
  t.equal(headOfRunes('𠀀x', 1), '𠀀', 'an astral-plane ideograph too');
  t.equal(tailOfRunes('a😀b', 2), '😀b', 'from the end: the emoji is one character');
  t.equal(tailOfRunes('😀😀😀', 2), '😀😀');
  t.equal(tailOfRunes('ab', 5), 'ab');
  t.equal(tailOfRunes('ab', 0), '');
  t.equal(tailOfRunes('x𠀀', 1), '𠀀');
});
