import t from 'tap';
import { nameLineBreakScanner } from '../../src/api/uploads.js';

/** Feeds `text` to a new scanner in the pieces `cuts` makes; whether it saw a broken part name. */
function scanned(text: string, cuts: readonly number[] = []): boolean {
  const scan = nameLineBreakScanner();
  let from = 0;
  for (const cut of [...cuts, text.length]) {
    if (scan(text.slice(from, cut))) return true;
    from = cut;
  }
  return false;
}

const field = (disposition: string) => `--b\r\n${disposition}\r\n\r\nOtters\r\n--b--\r\n`;
const part = (disposition: string) => `--b\r\n${disposition}\r\nContent-Type: text/plain\r\n\r\nhello\r\n--b--\r\n`;

t.test('a quoted file name holding a bare LF or CR is seen, wherever the chunks are cut', async (t) => {
  const cases = {
    'a bare LF': part('Content-Disposition: form-data; name="file"; filename="a\nb.txt"'),
    'a bare CR': part('Content-Disposition: form-data; name="file"; filename="a\rb.txt"'),
    'filename* and spaces, header in capitals': part('CONTENT-DISPOSITION: form-data; name="file"; filename* = "a\nb.txt"'),
    'after a field part': `--b\r\nContent-Disposition: form-data; name="url"\r\n\r\nx\r\n${part('content-disposition: form-data; name="file"; filename="x\n"')}`,
    // busboy drops a part whose Content-Disposition holds a bare CR or LF: a text field went without a word.
    'a bare LF in a field name': field('Content-Disposition: form-data; name="ti\ntle"'),
    'a bare CR in a field name': field('Content-Disposition: form-data; name="ti\rtle"'),
    'a bare LF in an unquoted field name': field('Content-Disposition: form-data; name=ti\ntle'),
    'a bare LF ending the header': field('Content-Disposition: form-data; name="title"\nContent-Type: text/plain'),
    // busboy cuts a quoted name at a CRLF: the field read as 'ti', the file as 'a'.
    'a CRLF in a field name': field('Content-Disposition: form-data; name="ti\r\ntle"'),
    'a CRLF in a file name': part('Content-Disposition: form-data; name="file"; filename="a\r\nb.txt"'),
    'a CRLF in a folded file name, then a bare LF': part('Content-Disposition: form-data; name="file";\r\n filename="a\r\n b\nc.txt"'),
    'a field part with a broken name before the file part': `${field('Content-Disposition: form-data; name="title\n"').slice(0, -'--b--\r\n'.length)}${part('Content-Disposition: form-data; name="file"; filename="a.txt"')}`,
  };
  for (const [what, body] of Object.entries(cases)) {
    for (let cut = 0; cut <= body.length; cut += 1) t.equal(scanned(body, [cut]), true, `${what}, cut at ${cut}`);
    t.equal(scanned(body, [...body].map((_, n) => n)), true, `${what}, a character at a time`);
  }
});

t.test('well-formed and merely odd headers are not taken for one', async (t) => {
  const cases = {
    'a plain file name': part('Content-Disposition: form-data; name="file"; filename="a b.txt"'),
    'a percent-encoded LF': part('Content-Disposition: form-data; name="file"; filename="a%0Ab.txt"'),
    'an unclosed quote at the CRLF': part('Content-Disposition: form-data; name="file"; filename="a.txt'),
    'an unquoted name': part('Content-Disposition: form-data; name="file"; filename=a.txt'),
    'a field named filename': part('Content-Disposition: form-data; name="filename"'),
    'a LF in a field value': `--b\r\nContent-Disposition: form-data; name="url"\r\n\r\nfilename="a\nb"\r\n--b--\r\n`,
    'a LF in another header': part('Content-Disposition: form-data; name="file"; filename="a.txt"\r\nX-Note: filename="a\nb"'),
    'a plain field': field('Content-Disposition: form-data; name="title"'),
    'a folded header (busboy joins it)': part('Content-Disposition: form-data; name="file";\r\n\tfilename="a\r\n b.txt"'),
    'an escaped quote in a name': field('Content-Disposition: form-data; name="a\\"b"; filename="c"'),
    'an unclosed quote at the end of the header block': field('Content-Disposition: form-data; name="title'),
    'a field value holding what looks like a broken header': `--b\r\nContent-Disposition: form-data; name="notes"\r\n\r\nContent-Disposition: form-data; name="a\nb"\r\n--b--\r\n`,
    'a LF and a CR in the preamble': `Content-Disposition: form-data; name="a\nb"\r\nx\ry\r\n${field('Content-Disposition: form-data; name="title"')}`,
  };
  for (const [what, body] of Object.entries(cases)) {
    for (let cut = 0; cut <= body.length; cut += 1) t.equal(scanned(body, [cut]), false, `${what}, cut at ${cut}`);
  }
});

t.test('a long body in many chunks is read once and still seen', async (t) => {
  // 'content-disposition: filename="' repeated made the scanner's predecessor read a 16 KiB tail again with every chunk.
  const filler = 'content-disposition: filename="'.repeat(2_048);
  const fields = `--b\r\nContent-Disposition: form-data; name="notes"\r\n\r\n${filler.repeat(32)}\r\n`;
  const body = `${fields}${field('Content-Disposition: form-data; name="ti\r\ntle"')}`;
  const cuts: number[] = [];
  for (let at = 1_000; at < body.length; at += 1_000) cuts.push(at);
  t.ok(body.length > 2_000_000, `${body.length} characters in ${cuts.length + 1} chunks`);
  let started = performance.now();
  t.equal(scanned(body, cuts), true, 'the broken name after 2 MB of fields is seen');
  const elapsed = performance.now() - started;
  started = performance.now();
  t.equal(scanned(body.replace('ti\r\ntle', 'title'), cuts), false, 'the same body well-formed is not taken for one');
  t.ok(elapsed < 1_000 && performance.now() - started < 1_000, `read in ${Math.round(elapsed)} ms: linear, not a tail per chunk`);
  const headers = `--b\r\n${'Content-Disposition: form-data; name="x"; filename="a.txt"\r\n'.repeat(20_000)}`;
  started = performance.now();
  t.equal(scanned(`${headers}\r\n`, headers.split('').map((_, n) => n).filter((n) => n % 4_096 === 0)), false, 'a header block of 20,000 Content-Disposition lines');
  t.ok(performance.now() - started < 1_000, 'read once too');
});

t.test('a line too long to be a part header is passed over, not kept', async (t) => {
  const long = `Content-Disposition: form-data; name="file"; ${'x'.repeat(20_000)}; filename="a\nb"`;
  t.equal(scanned(part(long)), false, 'past 16 KiB the line is not read on');
  t.equal(scanned(part(long.replace('x'.repeat(20_000), 'x'.repeat(100)))), true, 'the same header, short, is seen');
});
