import t from 'tap';
import { boundedErrorMessage, MAX_KEPT_ERROR_CHARS } from '../../src/util/errorMessage.js';

t.test('a short message is kept whole, an Error or not', async (t) => {
  t.equal(boundedErrorMessage(new Error('relation "facts" does not exist')), 'relation "facts" does not exist');
  t.equal(boundedErrorMessage('plain'), 'plain');
  t.equal(boundedErrorMessage(new Error('x'.repeat(MAX_KEPT_ERROR_CHARS))), 'x'.repeat(MAX_KEPT_ERROR_CHARS), 'exactly the bound');
});

t.test("a failed statement's megabyte of SQL keeps its start and the reason at its end", async (t) => {
  const sql = `insert into "fact_vectors" values ${Array.from({ length: 40_000 }, (_, n) => `($${3 * n + 1}, $${3 * n + 2}, $${3 * n + 3})`).join(', ')}`;
  const full = `${sql} - bind message has 54464 parameter formats but 0 parameters`;
  const message = boundedErrorMessage(new Error(full));
  t.ok(message.length < MAX_KEPT_ERROR_CHARS + 100, `bounded (${message.length} characters)`);
  t.match(message, /^insert into "fact_vectors" values \(\$1, \$2, \$3\)/, 'the start');
  t.match(message, / - bind message has 54464 parameter formats but 0 parameters$/, 'the reason at the end');
  t.match(message, new RegExp(`… \\(${full.length - MAX_KEPT_ERROR_CHARS} characters left out\\) …`), 'says how much was left out');
});

t.test('a smaller bound is kept', async (t) => {
  t.equal(boundedErrorMessage(new Error('abcdefghij'), 4), 'ab … (6 characters left out) … ij');
});

t.test('a cut never halves a character: an emoji where the start ends or the end starts stays whole or goes whole', async (t) => {
  const lone = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
  // max 4: head 2 units, tail 2 units. 'a😀' puts the pair across the head's cut, '😀b' across the tail's.
  const head = boundedErrorMessage(new Error('a😀cdefghij'), 4);
  t.notMatch(head, lone, `no lone surrogate in ${JSON.stringify(head)}`);
  t.equal(head, 'a … (7 characters left out) … ij', 'the emoji is left out with what lay between, counted as one character');
  const tail = boundedErrorMessage(new Error('abcdefgh😀b'), 4);
  t.notMatch(tail, lone, `no lone surrogate in ${JSON.stringify(tail)}`);
  t.equal(tail, 'ab … (7 characters left out) … b');
  for (let at = 0; at < 40; at++) {
    const text = `${'x'.repeat(at)}${'😀'.repeat(30)}`;
    t.notMatch(boundedErrorMessage(new Error(text), 21), lone, `emoji from unit ${at}`);
  }
});
