import http from 'node:http';
import net, { type AddressInfo, type Socket } from 'node:net';

import Fastify from 'fastify';
import t from 'tap';

import { clearCookie, cookieHeader, setCookie } from '../../src/api/cookies.js';
import { answerClientError } from '../../src/api/errors.js';
import { DEFAULT_HTML_CSP, registerSecurityHeaders } from '../../src/api/securityHeaders.js';
import { eventually, registerUser, startTestService, type TestService } from '../helpers/service.js';

let service: TestService;
let token: string;
let repositoryId: string;
t.before(async () => {
  // The production profile (its outbound policy refuses loopback) on the embedded tier's storage.
  service = await startTestService({ workers: false, overrides: { profile: 'production', oauth: { issuer: 'https://factlog.example' }, server: { body_limit: 64 * 1024 } } });
  token = (await registerUser(service, 'admin@example.org')).token;
  repositoryId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Hardened' } })).body.id;
});
t.teardown(() => service.close());

const inject = (options: { method: string; url: string; payload?: string | Buffer; headers?: Record<string, string> }) =>
  service.app.inject({ ...options, method: options.method as 'POST', headers: { authorization: `Bearer ${token}`, ...options.headers } });

t.test("fastify's own failures answer with the documented codes", async (t) => {
  const cases = [
    { name: 'invalid JSON', payload: '{"email":', type: 'application/json', status: 400, error: 'bad_request' },
    { name: 'empty JSON body', payload: '', type: 'application/json', status: 400, error: 'bad_request' },
    { name: 'unsupported media type', payload: '<login/>', type: 'application/xml', status: 415, error: 'unsupported_media_type' },
    { name: 'body too large', payload: JSON.stringify({ email: 'x'.repeat(70 * 1024), password: 'p' }), type: 'application/json', status: 413, error: 'payload_too_large' },
  ];
  for (const { name, payload, type, status, error } of cases) {
    const response = await inject({ method: 'POST', url: '/api/v1/auth/login', payload, headers: { 'content-type': type } });
    t.equal(response.statusCode, status, name);
    t.same(Object.keys(response.json()).sort(), ['error', 'message'], `${name}: {error, message}`);
    t.equal(response.json().error, error, name);
  }
  const badUrl = await inject({ method: 'GET', url: `/api/v1/repositories/${repositoryId}/concepts/%ED%A0%80` });
  t.equal(badUrl.statusCode, 400);
  t.equal(badUrl.json().error, 'bad_request', 'a URL that is not UTF-8 is a bad_request too');
  // The query string too: its parser kept a malformed part as literal text, which was then searched for.
  for (const malformed of ['%ED%A0%80', '%C3', '%zz', '%', 'a%2']) {
    const reply = await inject({ method: 'GET', url: `/api/v1/repositories/${repositoryId}/facts?query=${malformed}&mode=lexical` });
    t.equal(reply.statusCode, 400, `?query=${malformed}`);
    t.match(reply.json(), { error: 'bad_request', message: /query string is not valid percent-encoded UTF-8/ });
  }
  for (const [query, name] of [['limit=5&limit=6', 'limit'], ['show_small=true&show_small=false', 'show_small'], ['query=a&query=b', 'query']]) {
    const path = name === 'show_small' ? 'concepts' : 'facts';
    const repeated = await inject({ method: 'GET', url: `/api/v1/repositories/${repositoryId}/${path}?${query}` });
    t.equal(repeated.statusCode, 400, query);
    t.equal(repeated.json().message, `query parameter '${name}' is given more than once; it takes one value`);
  }
  const fine = await inject({ method: 'GET', url: `/api/v1/repositories/${repositoryId}/facts?query=Z%C3%BCrich+lake&mode=lexical` });
  t.not(fine.statusCode, 400, 'percent-encoded UTF-8 and + for a space pass');
});

t.test('a refusal names the limit or repeats at most 100 characters of the input, however long the path or field name', async (t) => {
  const long = 'a'.repeat(10_000);
  // Every route: fastify's router refuses the parameter before any route runs.
  for (const url of [`/api/v1/repositories/${repositoryId}/concepts/${long}`, `/api/v1/repositories/${long}`]) {
    const reply = await inject({ method: 'GET', url });
    t.equal(reply.statusCode, 400);
    t.same(reply.json(), { error: 'bad_request', message: 'a path parameter is longer than 2500 characters (as the URL carries it, percent-encoded)' });
  }
  const atLimit = await inject({ method: 'GET', url: `/api/v1/repositories/${repositoryId}/concepts/${'a'.repeat(2_500)}` });
  t.not(atLimit.json().message, /path parameter is longer/, 'a parameter of 2,500 characters reaches its route');
  const badUrl = await inject({ method: 'GET', url: `/api/v1/repositories/${repositoryId}/concepts/${long}%ED%A0%80` });
  t.same(badUrl.json(), { error: 'bad_request', message: 'the path is not valid percent-encoded UTF-8' }, 'the path is not repeated');
  const noRoute = await inject({ method: 'GET', url: `/api/v1/${long}` });
  t.equal(noRoute.statusCode, 404);
  t.equal(noRoute.json().message, `no route for GET /api/v1/${'a'.repeat(91)}…`);
  const field = await inject({ method: 'POST', url: '/api/v1/repositories', payload: JSON.stringify({ name: 'Long', [long]: 1 }), headers: { 'content-type': 'application/json' } });
  t.equal(field.statusCode, 400);
  t.equal(field.json().message, `body must NOT have additional properties ('${'a'.repeat(99)}…')`);
  // A route that takes no query string names every parameter given: ten, and how many more.
  const many = Array.from({ length: 1000 }, (_, i) => `f${i}=${i}`).join('&');
  const fields = await inject({ method: 'GET', url: `/api/v1/repositories/${repositoryId}?${many}` });
  t.equal(fields.json().message, `querystring must NOT have additional properties ('f0', 'f1', 'f2', 'f3', 'f4', 'f5', 'f6', 'f7', 'f8', 'f9', 990 more)`);
  for (const url of [`/api/v1/repositories/${repositoryId}/sources?${long}=1`, `/api/v1/repositories/${repositoryId}/facts?${long}=%C3`]) {
    const query = await inject({ method: 'GET', url });
    t.equal(query.statusCode, 400);
    t.ok(query.body.length < 300, `a query parameter is not repeated whole (${query.body.length} bytes)`);
  }
  const nested = await inject({ method: 'POST', url: '/api/v1/repositories', payload: JSON.stringify({ name: 'Nested', [long]: { [long]: 'a\u0000' } }), headers: { 'content-type': 'application/json' } });
  t.equal(nested.statusCode, 400);
  t.ok(nested.body.length < 300, `a body's keys are not repeated whole (${nested.body.length} bytes)`);
});

/** Writes `request` (its bytes exactly) to a fresh connection and reads the reply until the server closes it. */
function rawExchange(port: number, request: string | Buffer): Promise<{ statusLine: string; headers: string; body: string }> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = net.connect(port, '127.0.0.1', () => socket.write(request));
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const [head, body = ''] = text.split('\r\n\r\n');
      const [statusLine, ...headers] = head.split('\r\n');
      resolve({ statusLine, headers: headers.join('\n'), body });
    });
  });
}

t.test("requests Node's HTTP parser refuses are answered {error, message} too", async (t) => {
  await service.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = service.app.server.address() as AddressInfo;
  const encode = 'a URL must carry bytes outside printable ASCII (UTF-8 text: é is %C3%A9), spaces and control characters percent-encoded';
  // Raw UTF-8 in the URL (curl -g 'http://…?q=café') read "malformed HTTP request: Invalid char in url query", which said neither which byte nor what to do.
  const utf8 = (line: string) => Buffer.from(`${line}\r\nHost: x\r\n\r\n`, 'utf8');
  const cases = [
    { name: 'a query string over 16 KiB', request: `GET /api/v1/repositories?q=${'a'.repeat(17 * 1024)} HTTP/1.1\r\nHost: x\r\n\r\n`, status: '431 Request Header Fields Too Large', message: /request line and headers together exceed 16 KiB/ },
    { name: 'headers over 16 KiB', request: `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: ${'a'.repeat(17 * 1024)}\r\n\r\n`, status: '431 Request Header Fields Too Large', message: /request line and headers together exceed 16 KiB/ },
    { name: 'a header line without a colon', request: 'GET /healthz HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n', status: '400 Bad Request', message: /^malformed HTTP request: Invalid header token$/ },
    { name: 'a Content-Length that is not a number', request: 'POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n', status: '400 Bad Request', message: /^malformed HTTP request: .*Content-Length/ },
    { name: 'raw UTF-8 in the query string', request: utf8('GET /api/v1/repositories?q=café HTTP/1.1'), status: '400 Bad Request', message: `the URL's query holds a byte outside ASCII (0xC3) sent as is: ${encode}` },
    { name: 'raw UTF-8 in the path', request: utf8('GET /api/v1/repositories/café HTTP/1.1'), status: '400 Bad Request', message: `the URL's path holds a byte outside ASCII (0xC3) sent as is: ${encode}` },
    { name: 'a raw control character in the query string', request: utf8('GET /api/v1/repositories?q=a\u0001b HTTP/1.1'), status: '400 Bad Request', message: `the URL's query holds a control character (0x01) sent as is: ${encode}` },
    { name: 'a raw space in the query string', request: utf8('GET /api/v1/repositories?q=a b HTTP/1.1'), status: '400 Bad Request', message: `the request line is malformed: it must be the method, the URL and HTTP/1.1, one space between; ${encode}` },
    { name: 'a URL that is no path', request: utf8('GET repositories HTTP/1.1'), status: '400 Bad Request', message: `the URL of the request line is malformed: it must be a path that begins with / (or an absolute http URL); ${encode}` },
    { name: 'a request line that is no request line', request: 'GARBAGE\r\n\r\n', status: '400 Bad Request', message: /^malformed HTTP request: Invalid method encountered$/ },
  ];
  for (const { name, request, status, message } of cases) {
    // The exchange ends when the server closes the connection: a socket left open fails the test.
    const reply = await rawExchange(port, request);
    t.equal(reply.statusLine, `HTTP/1.1 ${status}`, name);
    t.match(reply.headers, /content-type: application\/json/i);
    t.match(reply.headers, /^connection: close$/im, `${name}: Connection: close`);
    t.match(reply.headers, new RegExp(`^content-length: ${Buffer.byteLength(reply.body)}$`, 'im'), `${name}: the body's length in bytes`);
    const body = JSON.parse(reply.body);
    t.same(Object.keys(body), ['error', 'message'], `${name}: {error, message}`);
    t.equal(body.error, 'bad_request');
    if (typeof message === 'string') t.equal(body.message, message, name);
    else t.match(body.message, message, name);
  }
  t.equal((await fetch(`http://127.0.0.1:${port}/healthz`)).status, 200, 'the server still answers');
});

t.test('the client error handler: 408 for a timeout; nothing written to a reset or destroyed connection', async (t) => {
  const socketRecording = (state: { destroyed?: boolean; writable?: boolean }) => {
    const written: string[] = [];
    let destroyed = state.destroyed ?? false;
    let ended = false;
    const socket = {
      get destroyed() {
        return destroyed;
      },
      writable: state.writable ?? true,
      write: (chunk: string) => written.push(chunk),
      end: () => {
        ended = true;
      },
      once: () => socket,
      destroy: () => {
        destroyed = true;
      },
    };
    // Only what answerClientError touches of a socket.
    return { socket: socket as unknown as Socket, written, isDestroyed: () => destroyed, isEnded: () => ended };
  };
  const timeoutError = Object.assign(new Error('Request timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT', bytesParsed: 0, rawPacket: { type: 'Buffer', data: [] } });
  const timedOut = socketRecording({});
  answerClientError.call(service.app, timeoutError, timedOut.socket);
  t.match(timedOut.written.join(''), /^HTTP\/1.1 408 Request Timeout\r\n[^]*\r\n\r\n\{"error":"bad_request","message":"the request was not received in time"\}$/);
  t.ok(timedOut.isEnded(), 'and the connection is ended after the answer');
  t.notOk(timedOut.isDestroyed(), 'not destroyed at once: what the client still sends is read first');
  answerClientError.call(service.app, timeoutError, timedOut.socket);
  t.equal(timedOut.written.length, 1, 'the parser failing again on what still comes answers nothing more');

  const notWritable = socketRecording({ writable: false });
  answerClientError.call(service.app, timeoutError, notWritable.socket);
  t.same(notWritable.written, [], 'nothing is written to a socket that cannot take it');
  t.ok(notWritable.isDestroyed());
  for (const [name, error, state] of [
    ['reset', Object.assign(new Error('reset'), { code: 'ECONNRESET', bytesParsed: 0, rawPacket: { type: 'Buffer', data: [] } }), {}],
    ['destroyed', timeoutError, { destroyed: true }],
  ] as const) {
    const recording = socketRecording(state);
    answerClientError.call(service.app, error, recording.socket);
    t.same(recording.written, [], `a ${name} connection: nothing written`);
  }
});

t.test('a pipelined request the parser refuses while an earlier answer is being written closes the connection, writing nothing into that answer', async (t) => {
  const app = Fastify({ clientErrorHandler: answerClientError });
  let finish = (): void => {};
  app.get('/stream', (_request, reply) => {
    reply.raw.writeHead(200, { 'content-type': 'text/plain', 'transfer-encoding': 'chunked' });
    reply.raw.write('first chunk;');
    finish = () => reply.raw.end('last chunk');
    return reply;
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(() => app.close());
  const { port } = app.server.address() as AddressInfo;
  const received = await new Promise<string>((resolve, reject) => {
    let text = '';
    const socket = net.connect(port, '127.0.0.1', () => socket.write('GET /stream HTTP/1.1\r\nHost: x\r\n\r\n'));
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      const first = text === '';
      text += chunk;
      // The answer has begun: the next request on the connection is one the parser refuses.
      if (first) socket.write('GET /a\x01b HTTP/1.1\r\nHost: x\r\n\r\n');
    });
    socket.on('close', () => resolve(text));
    socket.on('error', reject);
  });
  finish();
  t.match(received, /^HTTP\/1.1 200 OK\r\n[^]*first chunk;/, 'the answer that had begun');
  t.notMatch(received, /HTTP\/1.1 400/, 'no refusal written inside it');
  t.notMatch(received, /bad_request/);
});

t.test('a query string on an API route that takes none is refused by name, not ignored', async (t) => {
  const refused = await inject({ method: 'GET', url: '/api/v1/users/me?foo=1&limt=5' });
  t.equal(refused.statusCode, 400);
  t.same(refused.json(), { error: 'bad_request', message: "querystring must NOT have additional properties ('foo', 'limt')" });
  t.equal((await inject({ method: 'GET', url: '/api/v1/users/me' })).statusCode, 200);
  t.equal((await inject({ method: 'GET', url: '/healthz?probe=1' })).statusCode, 200, 'outside the API a query string is left alone');
});

t.test('NUL bytes, lone surrogates and huge numbers are a 400 with a message, never a 500', async (t) => {
  const before = (await service.call('GET', '/healthz')).body.head_position;
  const calls: Array<[string, string, unknown?]> = [
    ['POST', '/api/v1/auth/register', { email: 'nul\u0000@example.org', password: 'correct horse battery' }],
    ['POST', '/api/v1/auth/login', { email: 'nul\u0000@example.org', password: 'correct horse battery' }],
    ['POST', '/api/v1/repositories', { name: 'lone \ud800 surrogate' }],
    ['GET', `/api/v1/repositories/${repositoryId}/facts?query=%00`],
    ['GET', `/api/v1/repositories/${repositoryId}/facts?concept=a%00b`],
    ['GET', `/api/v1/repositories/${repositoryId}/concepts/a%00b`],
    ['GET', '/api/v1/repositories/a%00b'],
    ['GET', `/api/v1/repositories/${repositoryId}/sources?offset=1e20`],
    ['GET', `/api/v1/repositories/${repositoryId}/sources?offset=9223372036854775808`],
    ['GET', `/api/v1/repositories/${repositoryId}/events?from=9223372036854775808`],
    ['GET', '/api/v1/repositories?offset=1e20'],
    ['GET', `/api/v1/repositories/${repositoryId}/events?from=0x10`],
    ['GET', `/api/v1/repositories/${repositoryId}/events?from=%20`],
    ['GET', `/api/v1/repositories/${repositoryId}/sources?limit=1e1`],
  ];
  for (const [method, url, body] of calls) {
    const response = await service.call(method, url, { token, body });
    t.equal(response.status, 400, `${method} ${url}`);
    t.equal(response.body.error, 'bad_request');
    t.type(response.body.message, 'string');
  }
  const nul = await service.call('POST', '/api/v1/repositories', { token, body: { name: 'x', description: 'a\u0000b' } });
  t.equal(nul.body.message, 'body/description contains a NUL character', 'the message names the field');
  const hex = await service.call('GET', `/api/v1/repositories/${repositoryId}/events?from=0x10`, { token });
  t.equal(hex.body.message, 'querystring/from must be an integer in decimal digits', 'a number in another notation is named, not read as JavaScript reads it');
  t.equal((await service.call('GET', '/healthz')).body.head_position, before, 'nothing was stored');
});

t.test('JSON bodies are validated as sent, while query strings keep their coercion to the schema', async (t) => {
  const repositories = async () => (await service.call('GET', '/api/v1/repositories', { token })).body.total as number;
  const before = await repositories();
  const reports = `/api/v1/repositories/${repositoryId}/reports`;
  const report = await service.call('POST', reports, { token, body: { text: 'A report typed as text.' } });
  t.equal(report.status, 201);
  const refused: Array<[string, string, unknown, RegExp]> = [
    ['POST', '/api/v1/repositories', { name: true }, /body\/name must be string/],
    ['POST', '/api/v1/repositories', { name: ['Arr'] }, /body\/name must be string/],
    ['POST', reports, { text: 123 }, /body\/text must be string/],
    ['PUT', `${reports}/${report.body.id}`, { title: null }, /body\/title must be string/],
  ];
  for (const [method, url, body, message] of refused) {
    const response = await service.call(method, url, { token, body });
    t.equal(response.status, 400, `${method} ${JSON.stringify(body)}`);
    t.same(response.body, { error: 'bad_request', message: response.body.message });
    t.match(response.body.message, message, 'the message names the field and the type it wants');
  }
  t.equal(await repositories(), before, 'no repository was created');
  t.equal((await service.call('GET', `${reports}/${report.body.id}`, { token })).body.title, report.body.title, 'the report kept its title');
  t.equal((await service.call('GET', reports, { token })).body.total, 1, 'and no other report was created');

  const page = await service.call('GET', '/api/v1/repositories?limit=1&offset=0', { token });
  t.equal(page.status, 200, 'a number in a query string is still read as a number');
  t.equal(page.body.items.length, 1);
});

t.test('source URLs: credentials and refused literal addresses are a 400 before anything is stored', async (t) => {
  const investigation = (await service.call('POST', `/api/v1/repositories/${repositoryId}/investigations`, { token, body: { title: 'Otters' } })).body;
  for (const url of ['http://user:secret@example.org/page', 'https://token@example.org/', 'http://127.0.0.1:8080/', 'http://169.254.169.254/latest/meta-data/', 'http://[::1]/', 'http://10.0.0.5/']) {
    const direct = await service.call('POST', `/api/v1/repositories/${repositoryId}/sources`, { token, body: { url } });
    t.equal(direct.status, 400, url);
    t.equal(direct.body.error, 'bad_request');
    t.notMatch(direct.body.message, /secret/, 'the message does not repeat the password');
    const viaInvestigation = await service.call('POST', `/api/v1/repositories/${repositoryId}/investigations/${investigation.id}/sources`, { token, body: { url } });
    t.equal(viaInvestigation.status, 400, `${url} via an investigation`);
  }
  const sources = await service.call('GET', `/api/v1/repositories/${repositoryId}/sources`, { token });
  t.equal(sources.body.total, 0, 'no source was registered');
});

/** A multipart/form-data body of the given parts: fields, and files with a filename and type. */
function multipart(parts: Array<{ name: string; value: string; filename?: string; type?: string }>) {
  const boundary = '----factloghardening';
  const encoded = parts.map(({ name, value, filename, type }) => {
    const disposition = `form-data; name="${name}"${filename ? `; filename="${filename}"` : ''}`;
    return `--${boundary}\r\nContent-Disposition: ${disposition}\r\n${type ? `Content-Type: ${type}\r\n` : ''}\r\n${value}\r\n`;
  });
  return { payload: Buffer.from(`${encoded.join('')}--${boundary}--\r\n`), type: `multipart/form-data; boundary=${boundary}` };
}

t.test('a body in a media type the route does not read is a 415; an upload holds one file part', async (t) => {
  const sources = `/api/v1/repositories/${repositoryId}/sources`;
  const reports = `/api/v1/repositories/${repositoryId}/reports`;
  const totals = async () => [(await service.call('GET', sources, { token })).body.total, (await service.call('GET', reports, { token })).body.total];
  const before = await totals();
  const json = JSON.stringify({ url: 'https://example.org/page' });
  const form = multipart([{ name: 'name', value: 'Formed' }]);
  const cases = [
    { name: 'JSON sent as text/plain', url: sources, payload: json, type: 'text/plain', message: 'body must be application/json' },
    { name: 'multipart to a JSON route', url: '/api/v1/repositories', payload: form.payload, type: form.type, message: 'body must be application/json' },
    { name: 'multipart to the MCP endpoint', url: '/api/v1/mcp', payload: form.payload, type: form.type, message: 'body must be application/json' },
    { name: 'JSON to the source upload', url: `${sources}/upload`, payload: json, type: 'application/json', message: 'body must be multipart/form-data' },
    { name: 'JSON to the report upload', url: `${reports}/upload`, payload: JSON.stringify({ text: 'x' }), type: 'application/json', message: 'body must be multipart/form-data' },
    { name: 'text to the report upload', url: `${reports}/upload`, payload: 'Some words.', type: 'text/plain', message: 'body must be multipart/form-data' },
  ];
  for (const { name, url, payload, type, message } of cases) {
    const response = await inject({ method: 'POST', url, payload, headers: { 'content-type': type } });
    t.equal(response.statusCode, 415, name);
    t.same(response.json(), { error: 'unsupported_media_type', message }, name);
  }

  const twoFiles = multipart([
    { name: 'file', value: 'The first file, with enough words in it.', filename: 'one.txt', type: 'text/plain' },
    { name: 'file', value: 'The second file, which must not be dropped unseen.', filename: 'two.txt', type: 'text/plain' },
  ]);
  for (const url of [`${sources}/upload`, `${reports}/upload`]) {
    const response = await inject({ method: 'POST', url, payload: twoFiles.payload, headers: { 'content-type': twoFiles.type } });
    t.equal(response.statusCode, 400, `two file parts to ${url}`);
    t.same(response.json(), { error: 'bad_request', message: 'send one file part' });
  }
  // A form field the upload does not take, or one sent twice, is said rather than dropped.
  const file = { name: 'file', value: 'A report with enough words in it.', filename: 'one.txt', type: 'text/plain' };
  const fieldCases = [
    { name: 'an unknown field', url: `${reports}/upload`, parts: [{ name: 'foo', value: 'bar' }, file], message: "unknown form field 'foo': this upload takes title, topic, parent_id" },
    { name: 'a repeated field', url: `${reports}/upload`, parts: [{ name: 'title', value: 'first' }, { name: 'title', value: 'second' }, file], message: "form field 'title' sent more than once" },
    { name: 'a field to the source upload', url: `${sources}/upload`, parts: [{ name: 'title', value: 'x' }, file], message: "unknown form field 'title': this upload takes the file only" },
  ];
  for (const { name, url, parts, message } of fieldCases) {
    const form = multipart(parts);
    const response = await inject({ method: 'POST', url, payload: form.payload, headers: { 'content-type': form.type } });
    t.equal(response.statusCode, 400, name);
    t.same(response.json(), { error: 'bad_request', message }, name);
  }
  t.same(await totals(), before, 'no source and no report was stored');

  const oneFile = multipart([
    { name: 'title', value: 'One file' },
    { name: 'file', value: 'A report uploaded as one file part.', filename: 'one.txt', type: 'text/plain' },
  ]);
  const uploaded = await inject({ method: 'POST', url: `${reports}/upload`, payload: oneFile.payload, headers: { 'content-type': oneFile.type } });
  t.equal(uploaded.statusCode, 201, 'one file part is accepted');
  t.equal(uploaded.json().title, 'One file', 'with the fields sent before it');
});

t.test('security headers: HTML pages get a CSP without inline script and no framing; JSON gets nosniff', async (t) => {
  const docs = await service.app.inject({ method: 'GET', url: '/docs/' });
  t.equal(docs.statusCode, 200);
  t.match(docs.headers['content-type'], /text\/html/);
  t.equal(docs.headers['content-security-policy'], DEFAULT_HTML_CSP);
  t.match(docs.headers['content-security-policy'], /frame-ancestors 'none'/);
  t.notMatch(String(docs.headers['content-security-policy']).match(/script-src [^;]*/)?.[0], /unsafe-inline/);
  t.equal(docs.headers['x-content-type-options'], 'nosniff');
  t.equal(docs.headers['referrer-policy'], 'no-referrer');
  t.equal(docs.headers['x-frame-options'], 'DENY');
  const json = await service.app.inject({ method: 'GET', url: '/healthz' });
  t.equal(json.headers['x-content-type-options'], 'nosniff');
  t.equal(json.headers['content-security-policy'], undefined);

  const app = Fastify();
  registerSecurityHeaders(app);
  app.get('/own', async (_request, reply) => reply.type('text/html').header('content-security-policy', "default-src 'none'; script-src 'nonce-abc'").send('<p>own</p>'));
  const own = await app.inject({ method: 'GET', url: '/own' });
  t.equal(own.headers['content-security-policy'], "default-src 'none'; script-src 'nonce-abc'", 'a page that sets its own CSP keeps it');
  t.equal(own.headers['x-frame-options'], 'DENY', 'and still gets the other defaults');
  await app.close();
});

t.test('cookies: HttpOnly and SameSite always, Secure outside embedded and dev', async (t) => {
  t.equal(cookieHeader('embedded', 'fl_state', 'abc'), 'fl_state=abc; Path=/; HttpOnly; SameSite=Lax');
  t.equal(cookieHeader('dev', 'fl_state', 'abc', { sameSite: 'Strict' }), 'fl_state=abc; Path=/; HttpOnly; SameSite=Strict');
  t.equal(cookieHeader('production', 'fl_state', 'abc', { maxAgeSeconds: 600, path: '/api/v1/oauth' }), 'fl_state=abc; Path=/api/v1/oauth; HttpOnly; SameSite=Lax; Secure; Max-Age=600');
  t.match(cookieHeader('distributed', 'a', 'b'), /; Secure/);
  t.throws(() => cookieHeader('production', 'a', 'b; Domain=evil.example'), /characters a cookie cannot carry/);
  t.throws(() => cookieHeader('production', 'a=b', 'c'), /cookie name/);
  const app = Fastify();
  app.get('/', async (_request, reply) => {
    setCookie(reply, 'production', 'one', '1');
    clearCookie(reply, 'production', 'two');
    return 'ok';
  });
  const response = await app.inject({ method: 'GET', url: '/' });
  t.same(response.headers['set-cookie'], ['one=1; Path=/; HttpOnly; SameSite=Lax; Secure', 'two=; Path=/; HttpOnly; SameSite=Lax; Secure; Max-Age=0']);
  await app.close();
});

t.test('a host name resolving to loopback fails the source with the reason, and the local server sees no request', async (t) => {
  let hits = 0;
  const server = http.createServer((_request, response) => {
    hits += 1;
    response.end('<html><body><p>internal admin page</p></body></html>');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as AddressInfo;
  const working = await startTestService({ overrides: { profile: 'production', oauth: { issuer: 'https://factlog.example' } } });
  t.teardown(() => working.close());
  const owner = await registerUser(working, 'owner@example.org');
  const repository = (await working.call('POST', '/api/v1/repositories', { token: owner.token, body: { name: 'Fetching' } })).body;
  const added = await working.call('POST', `/api/v1/repositories/${repository.id}/sources`, { token: owner.token, body: { url: `http://localhost:${port}/admin` } });
  t.equal(added.status, 201, 'a host name is accepted: it is checked when fetched');
  const failed = await eventually(async () => {
    const source = await working.call('GET', `/api/v1/repositories/${repository.id}/sources/${added.body.id}`, { token: owner.token });
    return source.body.status === 'failed' ? source.body : null;
  });
  t.match(failed.failure, /address refused.*localhost resolves to .*loopback address/);
  t.equal(hits, 0, 'no request reached the local server');
});

t.test('a request still arriving after read_timeout + write_timeout is cut with a 408, not up to 30 s later, and the 408 reaches a client still sending', async (t) => {
  // Limits of 1 s each: a body still arriving after about 2 s must be cut. Node looked for such
  // requests every 30 s only, so it was read to its end and answered as usual.
  const slow = await startTestService({ workers: false, overrides: { server: { read_timeout: '1s', write_timeout: '1s' } } });
  t.teardown(() => slow.close());
  await slow.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = slow.app.server.address() as AddressInfo;
  // Clients that send their body without pause until an answer comes: the server's close found
  // their last bytes unread in about one connection in five, and the kernel then reset the
  // connection instead of delivering the 408 written just before.
  const trickle = () =>
    new Promise<string>((resolve, reject) => {
      const chunks: Buffer[] = [];
      const socket = net.connect(port, '127.0.0.1', () => {
        socket.write('POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 900000\r\n\r\n{"email":"');
        const drip = setInterval(() => {
          if (chunks.length > 0 || socket.destroyed) return clearInterval(drip);
          socket.write('a'.repeat(128));
        }, 0);
        socket.on('close', () => clearInterval(drip));
      });
      socket.on('data', (chunk) => chunks.push(chunk));
      socket.on('error', reject);
      socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
    });
  const replies = await Promise.allSettled(Array.from({ length: 16 }, trickle));
  const answers = replies.map((reply) => (reply.status === 'fulfilled' ? reply.value.split('\r\n')[0] : `${(reply.reason as NodeJS.ErrnoException).code}`));
  t.same(answers, Array.from({ length: 16 }, () => 'HTTP/1.1 408 Request Timeout'), 'every trickled request is refused, and every refusal arrives');
  const first = replies[0];
  t.match(first.status === 'fulfilled' ? first.value : '', /"the request was not received in time"/);
});
t.test('a body declared past server.body_limit with Expect: 100-continue is answered 413 before it is sent, not 100 Continue', async (t) => {
  if (!service.app.server.listening) await service.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = service.app.server.address() as AddressInfo;
  const head = (length: number, type: string) =>
    `POST /api/v1/repositories HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\nContent-Type: ${type}\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`;
  // The client waits for 100 Continue before sending its body (curl does for a body over 1 MB).
  const tooLarge = await rawExchange(port, head(64 * 1024 + 1, 'application/json'));
  t.equal(tooLarge.statusLine, 'HTTP/1.1 413 Payload Too Large', 'the 413 first: the client sends nothing');
  t.same(JSON.parse(tooLarge.body), { error: 'payload_too_large', message: 'the request body is larger than 64 KiB, the limit (server.body_limit)' });

  /** The first status line the server answers a body's announcement with; the connection is then dropped. */
  const firstAnswer = (request: string) =>
    new Promise<string>((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1', () => socket.write(request));
      socket.once('data', (chunk) => {
        resolve(chunk.toString('latin1').split('\r\n')[0]);
        socket.destroy();
      });
      socket.on('error', reject);
    });
  t.equal(await firstAnswer(head(100, 'application/json')), 'HTTP/1.1 100 Continue', 'a body within the limit is asked for');
  t.equal(await firstAnswer(head(64 * 1024 + 1, 'multipart/form-data; boundary=x')), 'HTTP/1.1 100 Continue', 'an upload, whose limit is on its file, is asked for');
});
