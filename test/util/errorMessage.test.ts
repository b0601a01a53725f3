import fc from 'fast-check';
import t from 'tap';
import { runeLength } from '../../src/util/codePoints.js';
import { boundedErrorMessage, errorMessage, MAX_KEPT_ERROR_CHARS, reboundedErrorMessage } from '../../src/util/errorMessage.js';

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

t.test("errorMessage: an Error's message, anything else as String makes it", async (t) => {
  t.equal(errorMessage(new TypeError('bad')), 'bad');
  t.equal(errorMessage('plain'), 'plain');
  t.equal(errorMessage(42), '42');
  t.equal(errorMessage(undefined), 'undefined');
  t.equal(errorMessage({ message: 'not an Error' }), '[object Object]');
});

t.test('a short message is kept whole, an Error or not', async (t) => {
  t.equal(boundedErrorMessage(new Error('relation "facts" does not exist')), 'relation "facts" does not exist');
  t.equal(boundedErrorMessage('plain'), 'plain');
  t.equal(boundedErrorMessage(new Error('x'.repeat(MAX_KEPT_ERROR_CHARS))), 'x'.repeat(MAX_KEPT_ERROR_CHARS), 'exactly the bound');
  const emoji = '😀'.repeat(MAX_KEPT_ERROR_CHARS);
  t.equal(boundedErrorMessage(emoji), emoji, 'the bound is in characters: 2,000 emoji (4,000 UTF-16 units) are kept whole');
});

t.test("a failed statement's megabyte of SQL keeps its start and the reason at its end", async (t) => {
  const sql = `insert into "fact_vectors" values ${Array.from({ length: 40_000 }, (_, n) => `($${3 * n + 1}, $${3 * n + 2}, $${3 * n + 3})`).join(', ')}`;
  const full = `${sql} - bind message has 54464 parameter formats but 0 parameters`;
  const message = boundedErrorMessage(new Error(full));
  t.equal(message.length, MAX_KEPT_ERROR_CHARS, 'the bound, the marker included');
  t.match(message, /^insert into "fact_vectors" values \(\$1, \$2, \$3\)/, 'the start');
  t.match(message, / - bind message has 54464 parameter formats but 0 parameters$/, 'the reason at the end');
  const leftOut = /… \((\d+) characters left out\) …/.exec(message);
  t.ok(leftOut, 'says how much was left out');
  t.equal(Number(leftOut?.[1]) + message.length - (leftOut?.[0].length ?? 0) - 2, full.length, 'what is kept and what is left out make the whole');
});

t.test('a smaller bound is kept exactly, the marker included', async (t) => {
  const message = boundedErrorMessage(new Error('abcdefghij'.repeat(5)), 40);
  t.equal(message, 'abcde … (40 characters left out) … fghij');
  t.equal(message.length, 40);
  t.equal(boundedErrorMessage(new Error('abcdefghij'), 4), 'abc…', 'a bound too small for the marker keeps the start');
  t.equal(boundedErrorMessage(new Error('abcdefghij'), 0), '');
});

t.test('a cut never halves a character: an emoji where the start ends or the end starts stays whole', async (t) => {
  // Bound 40: five characters of each side kept around a 30-character marker.
  t.equal(boundedErrorMessage(new Error(`abcd😀${'x'.repeat(40)}😀wxyz`), 40), 'abcd😀 … (40 characters left out) … 😀wxyz', 'the emoji at each cut is one character, kept whole');
  t.equal(boundedErrorMessage(new Error('😀'.repeat(50)), 40), `${'😀'.repeat(5)} … (40 characters left out) … ${'😀'.repeat(5)}`);
  t.equal(boundedErrorMessage(new Error(`${'a'.repeat(10)}𠀀b`), 4), 'aaa…');
  for (let at = 0; at < 40; at++) {
    const text = `${'x'.repeat(at)}${'😀'.repeat(30)}`;
    t.notMatch(boundedErrorMessage(new Error(text), 31), LONE_SURROGATE, `emoji from unit ${at}`);
  }
});

t.test('never more characters than the bound, never half a character, and the start and end of what it keeps are the message\'s', async (t) => {
  fc.assert(
    fc.property(fc.string({ unit: fc.constantFrom('a', 'é', '😀', '𠀀', ' ', '…', '9'), maxLength: 400 }), fc.integer({ min: 0, max: 200 }), (text, max) => {
      const bounded = boundedErrorMessage(new Error(text), max);
      if (runeLength(text) <= max) return bounded === text;
      if (runeLength(bounded) > max || LONE_SURROGATE.test(bounded)) return false;
      const marker = / … \((\d+) characters left out\) … /.exec(bounded);
      if (!marker) return bounded === '' || (bounded.endsWith('…') && text.startsWith(bounded.slice(0, -1)));
      const head = bounded.slice(0, marker.index);
      const tail = bounded.slice(marker.index + marker[0].length);
      return runeLength(bounded) === max && text.startsWith(head) && text.endsWith(tail) && runeLength(head) + Number(marker[1]) + runeLength(tail) === runeLength(text);
    }),
    { numRuns: 500 },
  );
  t.pass('property held');
});

t.test('reboundedErrorMessage: a stored bounded message bounded again counts what was left out of the original', async (t) => {
  fc.assert(
    fc.property(
      fc.string({ unit: fc.constantFrom('a', 'é', '😀', '𠀀', ' ', '…', '9'), minLength: 0, maxLength: 600, size: 'max' }),
      fc.integer({ min: 40, max: 300 }),
      fc.integer({ min: 0, max: 300 }),
      (text, first, second) => {
        const stored = boundedErrorMessage(text, first);
        const again = reboundedErrorMessage(stored, second);
        if (runeLength(stored) <= second) return again === stored;
        if (runeLength(again) > second || LONE_SURROGATE.test(again)) return false;
        const markers = [...again.matchAll(/ … \((\d+) characters left out\) … /g)];
        if (markers.length === 0) return again === '' || (again.endsWith('…') && stored.startsWith(again.slice(0, -1)));
        const [marker] = markers;
        if (markers.length !== 1 || marker === undefined) return false;
        const head = again.slice(0, marker.index);
        const tail = again.slice(marker.index + marker[0].length);
        return text.startsWith(head) && text.endsWith(tail) && runeLength(head) + Number(marker[1]) + runeLength(tail) === runeLength(text);
      },
    ),
    { numRuns: 500 },
  );
  t.pass('property held');
});

t.test('reboundedErrorMessage: a marker off the middle is left out whole, and its count kept', async (t) => {
  // A message that quotes a bounded one near its start: the new start stops before the old marker, the end takes the rest.
  const quoted = `E: ${boundedErrorMessage('abcdefghij'.repeat(10), 40)} ${'z'.repeat(40)} the end`;
  t.equal(quoted, `E: abcde … (90 characters left out) … fghij ${'z'.repeat(40)} the end`);
  const again = reboundedErrorMessage(quoted, 60);
  t.equal(again, `E: abcde … (123 characters left out) … ${'z'.repeat(13)} the end`, '3 + 5 + 90 + 5 + 1 + 40 + 8 = 152 characters, 29 kept');
  t.equal(runeLength(again), 60, 'the bound');
  t.equal(reboundedErrorMessage('no marker here at all, just long', 20), boundedErrorMessage('no marker here at all, just long', 20), 'no marker: bounded as boundedErrorMessage bounds it');
  t.equal(reboundedErrorMessage(quoted, 100), quoted, 'within the bound: as it is');
});
