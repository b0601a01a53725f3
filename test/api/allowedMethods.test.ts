import Fastify from 'fastify';
import t from 'tap';
import { registerErrorHandling } from '../../src/api/errors.js';

t.test('a path the API has, with a method it does not take: 405 with Allow; OPTIONS: 204 with Allow; an unknown path: 404', async (t) => {
  const app = Fastify();
  registerErrorHandling(app);
  app.get('/things/:id', async () => ({ ok: true }));
  app.delete('/things/:id', async () => ({ ok: true }));
  app.post('/things', async () => ({ ok: true }));
  await app.register(async (child) => {
    child.put('/nested/:a/items/:b', async () => ({ ok: true }));
  });
  t.teardown(() => app.close());

  const wrongMethod = await app.inject({ method: 'PATCH', url: '/things/7?x=1' });
  t.equal(wrongMethod.statusCode, 405);
  t.equal(wrongMethod.headers.allow, 'DELETE, GET, HEAD, OPTIONS');
  t.same(wrongMethod.json(), { error: 'method_not_allowed', message: 'PATCH is not supported on /things/7; it takes DELETE, GET, HEAD, OPTIONS' });
  const nested = await app.inject({ method: 'GET', url: '/nested/x/items/y' });
  t.equal(nested.statusCode, 405, 'routes of child plugins count');
  t.equal(nested.headers.allow, 'PUT, OPTIONS');
  const options = await app.inject({ method: 'OPTIONS', url: '/things' });
  t.equal(options.statusCode, 204);
  t.equal(options.headers.allow, 'POST, OPTIONS');
  for (const url of ['/things/7/more', '/nothing']) {
    const missing = await app.inject({ method: 'GET', url });
    t.equal(missing.statusCode, 404, url);
    t.equal(missing.json().error, 'not_found');
  }
});
