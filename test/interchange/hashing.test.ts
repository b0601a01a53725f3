import { createHash } from 'node:crypto';
import t from 'tap';
import { contentHash, normalizeContent, sha256Hex } from '../../src/interchange/hashing.js';

/** Reference digest computed here with node:crypto, independently of the module under test. */
function referenceSha256(bytes: Uint8Array | string): string {
  return createHash('sha256').update(bytes).digest('hex');
}

t.test('sha256Hex matches published SHA-256 vectors', async (t) => {
  // FIPS 180-2 examples.
  t.equal(sha256Hex(''), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
  t.equal(sha256Hex('abc'), 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  t.equal(sha256Hex(new Uint8Array([0x61, 0x62, 0x63])), sha256Hex('abc'), 'bytes and string agree');
  t.equal(sha256Hex(Buffer.from('abc')), sha256Hex('abc'), 'a Buffer is bytes');
});

t.test('sha256Hex hashes strings as UTF-8', async (t) => {
  // "é" is C3 A9 in UTF-8; hashing "é" must equal hashing those two bytes.
  t.equal(sha256Hex('é'), referenceSha256(new Uint8Array([0xc3, 0xa9])));
  t.equal(sha256Hex('😀'), referenceSha256(new Uint8Array([0xf0, 0x9f, 0x98, 0x80])));
});

t.test('sha256Hex rejects other types', async (t) => {
  t.throws(() => sha256Hex(42 as unknown as string), TypeError);
  t.throws(() => sha256Hex(null as unknown as string), TypeError);
});

t.test('normalizeContent trims, collapses whitespace and applies NFC', async (t) => {
  t.equal(normalizeContent('  Marie Curie won two Nobel Prizes.  '), 'Marie Curie won two Nobel Prizes.');
  t.equal(normalizeContent('Marie\t\tCurie\r\n\r\nwon  two\u00a0Nobel\u2003Prizes.'), 'Marie Curie won two Nobel Prizes.');
  t.equal(normalizeContent('a\u2028b\u2029c\u3000d\u000be\u000cf\ufeffg\u1680h\u202fi\u205fj'), 'a b c d e f g h i j');
  t.equal(normalizeContent('\u00a0\n\t'), '', 'whitespace only becomes empty');
  t.equal(normalizeContent(''), '');
  t.equal(normalizeContent('Cafe\u0301'), 'Caf\u00e9', 'NFD composes to NFC');
  t.equal(normalizeContent('\ufb01sh'), '\ufb01sh', 'NFC, not NFKC: the fi ligature stays');
  t.equal(normalizeContent('zero\u200bwidth'), 'zero\u200bwidth', 'a zero-width space is not whitespace');
  t.throws(() => normalizeContent(undefined as unknown as string), TypeError);
});

t.test('normalizeContent treats NEL (U+0085) as whitespace, as Unicode and other producers do', async (t) => {
  // NEL has the Unicode White_Space property (Go's unicode.IsSpace and Python's str.split agree),
  // but JavaScript's \s and trim() leave it; text decoded as Latin-1 from cp1252 carries it.
  t.equal(normalizeContent('Marie\u0085Curie'), 'Marie Curie', 'inside: collapsed to one space');
  t.equal(normalizeContent('Marie \u0085\t Curie'), 'Marie Curie', 'in a run with other whitespace');
  t.equal(normalizeContent('\u0085Marie Curie\u0085'), 'Marie Curie', 'at either end: trimmed');
  t.equal(contentHash('Marie\u0085Curie'), contentHash('Marie Curie'));
});

t.test('contentHash is SHA-256 of the normalized UTF-8 content', async (t) => {
  const canonical = 'Marie Curie won two Nobel Prizes.';
  const expected = referenceSha256(Buffer.from(canonical, 'utf8'));
  t.equal(contentHash(canonical), expected);
  for (const variant of [
    ' Marie Curie won two Nobel Prizes.',
    'Marie Curie won two Nobel Prizes.\n',
    'Marie  Curie won two Nobel Prizes.',
    'Marie\nCurie\twon two Nobel Prizes.',
    'Marie\u00a0Curie won\u2009two Nobel Prizes.',
    '\r\n\tMarie Curie won two Nobel Prizes.\u3000',
  ]) {
    t.equal(contentHash(variant), expected, JSON.stringify(variant));
  }
  t.not(contentHash('Marie Curie won two Nobel prizes.'), expected, 'case matters');
  t.not(contentHash('MarieCurie won two Nobel Prizes.'), expected, 'removing a space matters');
});

t.test('contentHash: NFD and NFC spellings of the same text hash equal', async (t) => {
  const nfc = 'Irène Joliot-Curie was born in Paris.';
  const nfd = nfc.normalize('NFD');
  t.not(nfd, nfc, 'the fixture really differs in code points');
  // "è" is C3 A8 in UTF-8 (NFC); the reference is computed from explicit bytes.
  const bytes = Buffer.concat([Buffer.from('Ir'), Buffer.from([0xc3, 0xa8]), Buffer.from('ne Joliot-Curie was born in Paris.')]);
  t.equal(contentHash(nfd), referenceSha256(bytes));
  t.equal(contentHash(nfc), contentHash(nfd));
  t.equal(contentHash('  Ire\u0300ne   Joliot-Curie was born in Paris. '), contentHash(nfc));
});

t.test('contentHash of empty or blank content is the empty-string digest', async (t) => {
  t.equal(contentHash('   \n'), 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
});
