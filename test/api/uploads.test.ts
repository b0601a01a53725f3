import t from 'tap';
import { fileNameLineBreakScanner } from '../../src/api/uploads.js';

/** Feeds `text` to a new scanner in the pieces `cuts` makes; whether it saw a broken file name. */
function scanned(text: string, cuts: readonly number[] = []): boolean {
  const scan = fileNameLineBreakScanner();
  let from = 0;
  for (const cut of [...cuts, text.length]) {
    if (scan(text.slice(from, cut))) return true;
    from = cut;
  }
  return false;
}

const part = (disposition: string) => `--b\r\n${disposition}\r\nContent-Type: text/plain\r\n\r\nhello\r\n--b--\r\n`;

t.test('a quoted file name holding a bare LF or CR is seen, wherever the chunks are cut', async (t) => {
  const cases = {
    'a bare LF': part('Content-Disposition: form-data; name="file"; filename="a\nb.txt"'),
    'a bare CR': part('Content-Disposition: form-data; name="file"; filename="a\rb.txt"'),
    'filename* and spaces, header in capitals': part('CONTENT-DISPOSITION: form-data; name="file"; filename* = "a\nb.txt"'),
    'after a field part': `--b\r\nContent-Disposition: form-data; name="url"\r\n\r\nx\r\n${part('content-disposition: form-data; name="file"; filename="x\n"')}`,
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
  };
  for (const [what, body] of Object.entries(cases)) {
    for (let cut = 0; cut <= body.length; cut += 1) t.equal(scanned(body, [cut]), false, `${what}, cut at ${cut}`);
  }
});

t.test('a line too long to be a part header is passed over, not kept', async (t) => {
  const long = `Content-Disposition: form-data; name="file"; ${'x'.repeat(20_000)}; filename="a\nb"`;
  t.equal(scanned(part(long)), false, 'past 16 KiB the line is not read on');
  t.equal(scanned(part(long.replace('x'.repeat(20_000), 'x'.repeat(100)))), true, 'the same header, short, is seen');
});
