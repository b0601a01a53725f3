// Uploads whose part headers busboy would drop or misread, sent to a listening server in small
// writes (a byte, seven bytes, or whole), so that the check meets them split across the request's
// chunks as a client's packets split them, not in the one chunk app.inject delivers.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { registerUser, startTestService, type TestService } from '../helpers/service.js';

let service: TestService;
let token: string;
let repoId: string;
let port: number;
/** The upload routes, as the OpenAPI document lists them: every operation that reads multipart/form-data. */
let uploadRoutes: string[];

t.before(async () => {
  // No pipeline workers: an accepted upload appends its own events and nothing after them.
  service = await startTestService({ workers: false });
  token = (await registerUser(service, 'uploader@example.org')).token;
  repoId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Otters' } })).body.id;
  const document = (await service.call('GET', '/api/v1/openapi.json')).body as {
    paths: Record<string, Record<string, { requestBody?: { content?: Record<string, unknown> } }>>;
  };
  uploadRoutes = Object.entries(document.paths).flatMap(([path, methods]) =>
    Object.entries(methods)
      .filter(([, operation]) => operation.requestBody?.content?.['multipart/form-data'] !== undefined)
      .map(([method]) => `${method.toUpperCase()} ${path}`),
  );
  await service.app.listen({ port: 0, host: '127.0.0.1' });
  port = (service.app.server.address() as AddressInfo).port;
});
t.teardown(() => service.close());

/** POSTs `body` (latin1 text, as the bytes go) to an upload route in writes of `size` bytes, each on its way before the next. */
function post(route: string, body: string, size: number): Promise<{ status: number; body: any }> {
  const bytes = Buffer.from(body, 'latin1');
  return new Promise((resolve, reject) => {
    const request = http.request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: `/api/v1/repositories/${repoId}/${route}`,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'multipart/form-data; boundary=b', 'content-length': bytes.length },
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) }));
      },
    );
    request.on('error', reject);
    request.on('socket', (socket) => socket.setNoDelay(true));
    const write = async () => {
      for (let at = 0; at < bytes.length; at += size) {
        await new Promise<void>((done, failed) => request.write(bytes.subarray(at, at + size), (error) => (error ? failed(error) : done())));
        // A turn of the event loop: the server reads this write before the next is sent.
        await new Promise((done) => setImmediate(done));
      }
      request.end();
    };
    // The server may answer before the body is all sent; a write after that fails, the answer stands.
    write().catch(() => {});
  });
}

/** What an upload can have stored: the repository's sources and reports, and the event log's head. */
async function stored() {
  const sources = await service.call('GET', `/api/v1/repositories/${repoId}/sources?limit=1`, { token });
  const reports = await service.call('GET', `/api/v1/repositories/${repoId}/reports?limit=1`, { token });
  return { sources: sources.body.total, reports: reports.body.total, head: await service.context.store.headPosition() };
}

const filePart = (disposition = 'Content-Disposition: form-data; name="file"; filename="otters.txt"') =>
  `--b\r\n${disposition}\r\nContent-Type: text/plain\r\n\r\nSea otters hold hands while they sleep, so that they do not drift apart.\r\n`;
const fieldPart = (header: string, value = 'Otters') => `--b\r\n${header}\r\n\r\n${value}\r\n`;
const END = '--b--\r\n';
const SIZES = [Number.MAX_SAFE_INTEGER, 7, 1] as const;
const sizeName = (size: number) => (size === 1 ? 'a byte per write' : size === 7 ? 'seven bytes per write' : 'one write');

t.test('both upload routes are the ones the document lists', async (t) => {
  t.same(uploadRoutes.sort(), ['POST /api/v1/repositories/{repoID}/reports/upload', 'POST /api/v1/repositories/{repoID}/sources/upload']);
});

t.test("a part whose header busboy would drop or misread is a 400, on both routes, however the body is split, and nothing is stored", async (t) => {
  const malformed = {
    // 1. A header line before the Content-Disposition holding a bare LF or CR: busboy stops reading
    // the header there, never sees the Content-Disposition, and drops the part.
    'a bare LF in the Content-Type before the file part\'s Content-Disposition': `--b\r\nContent-Type: text/plain\nX: y\r\nContent-Disposition: form-data; name="file"; filename="otters.txt"\r\n\r\nOtters.\r\n${END}`,
    'a bare CR in the Content-Type before a field\'s Content-Disposition': `${fieldPart('Content-Type: text/plain\rX: y\r\nContent-Disposition: form-data; name="title"')}${filePart()}${END}`,
    'a bare LF in the Content-Type before a field\'s Content-Disposition': `${fieldPart('Content-Type: text/plain\nX: y\r\nContent-Disposition: form-data; name="title"')}${filePart()}${END}`,
    'a line that is no header before a field\'s Content-Disposition': `${fieldPart('Content-Type text/plain\r\nContent-Disposition: form-data; name="title"')}${filePart()}${END}`,
    'a field part without a Content-Disposition': `${fieldPart('Content-Type: text/plain')}${filePart()}${END}`,
    // 2. Extended parameters (RFC 5987 / 2231) that percent-encode a line break: busboy decodes them and drops the part.
    "filename*=UTF-8''a%0Ab.txt": `${filePart("Content-Disposition: form-data; name=\"file\"; filename*=UTF-8''a%0Ab.txt")}${END}`,
    "filename*=UTF-8''a%0Db.txt": `${filePart("Content-Disposition: form-data; name=\"file\"; filename*=UTF-8''a%0Db.txt")}${END}`,
    "a field's name*=UTF-8''ti%0atle": `${fieldPart("Content-Disposition: form-data; name*=UTF-8''ti%0atle")}${filePart()}${END}`,
    // 3. A malformed part after the file part: busboy drops it as it reads the rest of the body.
    'a field with a raw LF in its name after the file part': `${filePart()}${fieldPart('Content-Disposition: form-data; name="ti\ntle"')}${END}`,
    'a field with a bare LF before its Content-Disposition after the file part': `${filePart()}${fieldPart('Content-Type: text/plain\nX: y\r\nContent-Disposition: form-data; name="title"')}${END}`,
    "a second file part with filename*=UTF-8''a%0Ab.txt after the file part": `${filePart()}${filePart("Content-Disposition: form-data; name=\"file\"; filename*=UTF-8''a%0Ab.txt")}${END}`,
    'a field whose header the next boundary cuts, after the file part': `${filePart()}--b\r\nContent-Disposition: form-data; name="title"\r\n${END}`,
  };
  const before = await stored();
  for (const [what, body] of Object.entries(malformed)) {
    for (const route of ['sources/upload', 'reports/upload']) {
      for (const size of SIZES) {
        const reply = await post(route, body, size);
        t.equal(reply.status, 400, `${route}, ${what}, ${sizeName(size)}: ${JSON.stringify(reply.body)}`);
        t.match(reply.body, { error: 'bad_request', message: /^a part's header is malformed: / }, `${route}, ${what}, ${sizeName(size)}`);
      }
    }
  }
  t.same(await stored(), before, 'no source, no report, no event');
});

t.test('well-formed uploads, sent in small writes, are still taken', async (t) => {
  const naive = await post('sources/upload', `${filePart("Content-Disposition: form-data; name=\"file\"; filename*=UTF-8''na%C3%AFve.txt")}${END}`, 7);
  t.equal(naive.status, 201, JSON.stringify(naive.body));
  t.equal(naive.body.filename, 'naïve.txt', "filename*=UTF-8''na%C3%AFve.txt is decoded");
  const kept = await post('sources/upload', `${filePart('Content-Disposition: form-data; name="file"; filename="a%0Ab.txt"')}${END}`, 7);
  t.equal(kept.status, 201, `a percent-encoded LF in a plain filename is not decoded: ${JSON.stringify(kept.body)}`);
  t.equal(kept.body.filename, 'a%0Ab.txt');
  // CRLF between headers, a preamble and an epilogue, and text that looks like headers after a boundary-like line in the file.
  const text = 'Notes\n--b\nContent-Type: text/plain\nx\ry\n---\ntitle: otters\n---\nSea otters use rocks as tools.';
  const body = `A preamble\nwith a bare LF\r\n--b\r\nContent-Disposition: form-data; name="title"\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nOtters\r\n${filePart('Content-Disposition: form-data; name="file"; filename="notes.md"').replace(/\r\n\r\n.*\r\n$/, `\r\n\r\n${text}\r\n`)}${END}An epilogue\nContent-Type: x\ry\r\n`;
  for (const size of SIZES) {
    const report = await post('reports/upload', body, size);
    t.equal(report.status, 201, `${sizeName(size)}: ${JSON.stringify(report.body)}`);
    t.equal(report.body.title, 'Otters', `${sizeName(size)}: the title field is read`);
  }
  const source = await post('sources/upload', `${filePart('Content-Disposition: form-data; name="file"; filename="notes.md"')}${END}`, 1);
  t.equal(source.status, 201, JSON.stringify(source.body));
  // As a client library writes the body: Node's FormData (a line break in a name it percent-encodes).
  const form = new FormData();
  form.append('title', 'Sea otters');
  form.append('file', new Blob(['Sea otters use rocks as tools.\r\n--b\r\n'], { type: 'text/markdown' }), 'naïve\nnotes.md');
  const sent = await fetch(`http://127.0.0.1:${port}/api/v1/repositories/${repoId}/reports/upload`, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: form });
  const report = await sent.json();
  t.equal(sent.status, 201, JSON.stringify(report));
  t.match(report, { title: 'Sea otters', filename: 'naïve%0Anotes.md' }, "a FormData upload's field and file name");
});

t.test('a form field after the file part is a 400 on both routes, however the body is split, and nothing is stored', async (t) => {
  // The fields were read as the file part began: one after it was taken from a body that came in
  // one write and dropped from one that came in several.
  const bodies = {
    reports: { route: 'reports/upload', body: `${filePart()}${fieldPart('Content-Disposition: form-data; name="title"', 'Late title')}${END}`, message: /^form field 'title' comes after the file part: send the form fields before the file$/ },
    sources: { route: 'sources/upload', body: `${filePart()}${fieldPart('Content-Disposition: form-data; name="note"')}${END}`, message: /^unknown form field 'note': this upload takes the file only$/ },
    'reports, unknown': { route: 'reports/upload', body: `${filePart()}${fieldPart('Content-Disposition: form-data; name="note"')}${END}`, message: /^unknown form field 'note'/ },
    'reports, sent twice': {
      route: 'reports/upload',
      body: `${fieldPart('Content-Disposition: form-data; name="title"')}${filePart()}${fieldPart('Content-Disposition: form-data; name="title"', 'Again')}${END}`,
      message: /^form field 'title' sent more than once$/,
    },
  };
  const before = await stored();
  for (const [what, { route, body, message }] of Object.entries(bodies)) {
    for (const size of SIZES) {
      const reply = await post(route, body, size);
      t.equal(reply.status, 400, `${what}, ${sizeName(size)}: ${JSON.stringify(reply.body)}`);
      t.match(reply.body, { error: 'bad_request', message }, `${what}, ${sizeName(size)}`);
    }
  }
  t.same(await stored(), before, 'no source, no report, no event');
});

t.test("a text field named file (curl -F file=text) is a 400 that names it, on both routes, however the body is split", async (t) => {
  // It read "no file part in the upload", as if the field had not come.
  const sentAsText = /^no file part in the upload: the form field 'file' was sent as text \(its part has no filename\); send the file as a file part, as curl -F file=@path does$/;
  const besideTheFile = /^the form field 'file' was sent as text as well as the file part; send the file part only$/;
  const bodies = {
    'file alone': { body: `${fieldPart('Content-Disposition: form-data; name="file"', 'sometext')}${END}`, message: sentAsText },
    'file, typed text/plain': { body: `${fieldPart('Content-Disposition: form-data; name="file"\r\nContent-Type: text/plain', 'sometext')}${END}`, message: sentAsText },
    'title, then file': { body: `${fieldPart('Content-Disposition: form-data; name="title"')}${fieldPart('Content-Disposition: form-data; name="file"', 'sometext')}${END}`, message: sentAsText },
    // Beside the file part it read "unknown form field 'file'".
    'file as text, then the file part': { body: `${fieldPart('Content-Disposition: form-data; name="file"', 'sometext')}${filePart()}${END}`, message: besideTheFile },
    'the file part, then file as text': { body: `${filePart()}${fieldPart('Content-Disposition: form-data; name="file"', 'sometext')}${END}`, message: besideTheFile },
    'another field only': { body: `${fieldPart('Content-Disposition: form-data; name="upload"', 'sometext')}${END}`, message: /^no file part in the upload$/ },
  };
  const before = await stored();
  for (const [what, { body, message }] of Object.entries(bodies)) {
    for (const route of ['sources/upload', 'reports/upload']) {
      for (const size of SIZES) {
        const reply = await post(route, body, size);
        t.equal(reply.status, 400, `${route}, ${what}, ${sizeName(size)}: ${JSON.stringify(reply.body)}`);
        t.match(reply.body, { error: 'bad_request', message }, `${route}, ${what}, ${sizeName(size)}`);
      }
    }
  }
  t.same(await stored(), before, 'no source, no report, no event');
});
