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
