import Fastify from 'fastify';
import t from 'tap';
import { notFound } from '../../src/app/errors.js';
import { registerErrorHandling } from '../../src/api/errors.js';

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
