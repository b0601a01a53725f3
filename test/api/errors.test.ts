import Fastify from 'fastify';
import multipart from '@fastify/multipart';
import t from 'tap';
import { notFound } from '../../src/app/errors.js';
import { registerErrorHandling } from '../../src/api/errors.js';
import { SearchUnavailableError } from '../../src/search/port.js';

t.test('a 404 while a read model is rebuilt is a 503 with Retry-After: "not found" cannot be told yet', async (t) => {
  let rebuilding: string[] = ['facts'];
  const app = Fastify();
  registerErrorHandling(app, { rebuilding: async () => rebuilding });
  app.get('/fact', async () => {
    throw notFound('fact');
  });
  t.teardown(() => app.close());

  const during = await app.inject({ method: 'GET', url: '/fact' });
  t.equal(during.statusCode, 503);
  t.equal(during.headers['retry-after'], '5');
  t.same(during.json(), { error: 'unavailable', message: 'fact not found while read model facts is being rebuilt: it may not be re-applied yet; retry after the rebuild' });
  rebuilding = [];
  const after = await app.inject({ method: 'GET', url: '/fact' });
  t.equal(after.statusCode, 404);
  t.same(after.json(), { error: 'not_found', message: 'fact not found' });
  t.equal(after.headers['retry-after'], undefined);
});

t.test('a search cluster that cannot be reached is a 503 with Retry-After, not an internal error', async (t) => {
  const app = Fastify();
  registerErrorHandling(app);
  app.get('/facts', async () => {
    throw new SearchUnavailableError('connect ECONNREFUSED 10.0.0.7:9200');
  });
  t.teardown(() => app.close());
  const reply = await app.inject({ method: 'GET', url: '/facts' });
  t.equal(reply.statusCode, 503);
  t.equal(reply.headers['retry-after'], '5');
  t.same(reply.json(), { error: 'unavailable', message: 'search is unavailable: the search cluster cannot be reached; retry in a moment' });
});

t.test('a body with too few or too many of its fields is told which to choose from', async (t) => {
  const app = Fastify();
  registerErrorHandling(app);
  const oneOf = { type: 'object', additionalProperties: false, minProperties: 1, maxProperties: 1, properties: { url: { type: 'string' }, doi: { type: 'string' } } };
  const someOf = { type: 'object', additionalProperties: false, minProperties: 1, properties: { title: { type: 'string' }, topic: { type: 'string' } } };
  app.post('/sources', { schema: { body: oneOf } }, async () => ({}));
  app.put('/investigation', { schema: { body: someOf } }, async () => ({}));
  app.put('/promptset', { schema: { body: { type: 'object', properties: { prompts: { ...someOf, properties: { decompose: { type: 'string' }, synthesize: { type: 'string' } } } } } } }, async () => ({}));
  t.teardown(() => app.close());

  const refusal = async (method: 'POST' | 'PUT', url: string, payload: object) => {
    const reply = await app.inject({ method, url, payload });
    t.equal(reply.statusCode, 400, `${method} ${url} ${JSON.stringify(payload)}`);
    return reply.json();
  };
  t.same(await refusal('POST', '/sources', {}), { error: 'bad_request', message: 'body must NOT have fewer than 1 properties (give exactly 1 of url, doi)' });
  t.same(await refusal('POST', '/sources', { url: 'http://a.example/', doi: '10.1/x' }), {
    error: 'bad_request',
    message: 'body must NOT have more than 1 properties (give exactly 1 of url, doi)',
  });
  t.same(await refusal('PUT', '/investigation', {}), { error: 'bad_request', message: 'body must NOT have fewer than 1 properties (give at least 1 of title, topic)' });
  t.same(await refusal('PUT', '/promptset', { prompts: {} }), {
    error: 'bad_request',
    message: 'body/prompts must NOT have fewer than 1 properties (give at least 1 of decompose, synthesize)',
  });
});

t.test('a body or uploaded file over server.body_limit is a 413 naming the limit and the setting', async (t) => {
  const app = Fastify({ bodyLimit: 2048 });
  registerErrorHandling(app, { bodyLimit: 2048 });
  await app.register(multipart, { limits: { fileSize: 2048, files: 1 } });
  app.post('/json', async () => ({}));
  app.post('/upload', async (request) => {
    const file = await request.file();
    await file?.toBuffer();
    return {};
  });
  t.teardown(() => app.close());

  const json = await app.inject({ method: 'POST', url: '/json', headers: { 'content-type': 'application/json' }, payload: JSON.stringify({ text: 'a'.repeat(4096) }) });
  t.equal(json.statusCode, 413);
  t.same(json.json(), { error: 'payload_too_large', message: 'the request body is larger than 2 KiB, the limit (server.body_limit)' });

  const form = new FormData();
  form.append('file', new Blob(['a'.repeat(4096)], { type: 'text/plain' }), 'big.txt');
  const request = new Request('http://localhost/upload', { method: 'POST', body: form });
  const upload = await app.inject({
    method: 'POST',
    url: '/upload',
    headers: { 'content-type': request.headers.get('content-type') ?? '' },
    payload: Buffer.from(await request.arrayBuffer()),
  });
  t.equal(upload.statusCode, 413);
  t.same(upload.json(), { error: 'payload_too_large', message: 'the uploaded file is larger than 2 KiB, the limit (server.body_limit)' });
});
