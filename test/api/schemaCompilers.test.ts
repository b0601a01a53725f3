import Fastify, { type FastifyInstance } from 'fastify';
import t from 'tap';
import { processWideSchemaCompilers } from '../../src/api/schemaCompilers.js';

/** A small app as buildApp configures fastify's compilers, with one route whose body holds a name of at most `maxName` characters. */
async function appWith(maxName: number, seen: { validators: unknown[]; serializers: unknown[] }): Promise<FastifyInstance> {
  const app = Fastify({
    ajv: { customOptions: { removeAdditional: false, coerceTypes: 'array', useDefaults: true, allErrors: false } },
    schemaController: { compilersFactory: processWideSchemaCompilers },
  });
  app.post(
    '/things',
    {
      schema: {
        body: { type: 'object', required: ['name'], additionalProperties: false, properties: { name: { type: 'string', maxLength: maxName }, count: { type: 'integer', default: 1 } } },
        response: { 200: { type: 'object', properties: { name: { type: 'string' }, count: { type: 'integer' } } } },
      },
    },
    async (request, reply) => {
      seen.validators.push(request.getValidationFunction('body'));
      seen.serializers.push(reply.getSerializationFunction('200'));
      return { ...(request.body as object), secret: 'not in the response schema' };
    },
  );
  await app.ready();
  return app;
}

t.test('apps of one process share the compiled functions of equal schemas, and each validates by its own', async (t) => {
  const seen = { validators: [] as unknown[], serializers: [] as unknown[] };
  const first = await appWith(5, seen);
  const second = await appWith(5, seen);
  const other = await appWith(10, seen);
  t.teardown(async () => {
    await Promise.all([first.close(), second.close(), other.close()]);
  });

  for (const app of [first, second, other]) {
    const ok = await app.inject({ method: 'POST', url: '/things', payload: { name: 'abc' } });
    t.equal(ok.statusCode, 200);
    t.same(ok.json(), { name: 'abc', count: 1 }, 'defaults applied, fields outside the response schema left out');
  }
  t.equal(seen.validators[0], seen.validators[1], 'the same schema: one validator for both apps');
  t.equal(seen.serializers[0], seen.serializers[1], 'the same response schema: one serializer');
  t.not(seen.validators[0], seen.validators[2], 'a schema that differs has its own validator');

  const long = { name: 'abcdefgh' };
  t.equal((await first.inject({ method: 'POST', url: '/things', payload: long })).statusCode, 400, 'the 5-character limit holds');
  t.equal((await second.inject({ method: 'POST', url: '/things', payload: long })).statusCode, 400);
  t.equal((await other.inject({ method: 'POST', url: '/things', payload: long })).statusCode, 200, 'the 10-character app accepts it');
  t.equal((await other.inject({ method: 'POST', url: '/things', payload: { name: 'a', extra: true } })).statusCode, 400, 'additional properties refused');
});

t.test('one schema as body and as query string: the body is validated as sent, the query string coerced', async (t) => {
  const counted = { type: 'object', additionalProperties: false, properties: { count: { type: 'integer' }, tags: { type: 'array', items: { type: 'string' } } } };
  const app = Fastify({
    ajv: { customOptions: { removeAdditional: false, coerceTypes: 'array', useDefaults: true, allErrors: false } },
    schemaController: { compilersFactory: processWideSchemaCompilers },
  });
  t.teardown(() => app.close());
  app.post('/counted', { schema: { body: counted, querystring: counted } }, async (request) => ({ query: request.query, body: request.body }));

  const ok = await app.inject({ method: 'POST', url: '/counted?count=3&tags=one', payload: { count: 3, tags: ['one'] } });
  t.equal(ok.statusCode, 200);
  t.same(ok.json(), { query: { count: 3, tags: ['one'] }, body: { count: 3, tags: ['one'] } }, 'query text became a number and a one-element array');
  for (const body of [{ count: '3' }, { count: true }, { tags: 'one' }, { count: null }]) {
    const refused = await app.inject({ method: 'POST', url: '/counted', payload: body });
    t.equal(refused.statusCode, 400, `body ${JSON.stringify(body)} is refused, not coerced`);
    t.match(refused.json().message, /^body\/(count must be integer|tags must be array)$/);
  }
});

t.test('numbers in a query string or path are read in decimal digits only', async (t) => {
  const app = Fastify({
    ajv: { customOptions: { removeAdditional: false, coerceTypes: 'array', useDefaults: true, allErrors: false } },
    schemaController: { compilersFactory: processWideSchemaCompilers },
  });
  t.teardown(() => app.close());
  const query = {
    type: 'object',
    additionalProperties: false,
    properties: { from: { type: 'integer', minimum: 0, default: 0 }, weight: { type: 'number' }, pages: { type: 'array', items: { type: 'integer' } }, name: { type: 'string' } },
  };
  app.get('/items/:n', { schema: { querystring: query, params: { type: 'object', properties: { n: { type: 'integer' } } } } }, async (request) => ({ query: request.query, params: request.params }));

  const ok = await app.inject({ method: 'GET', url: '/items/7?from=0012&weight=-2.5&pages=1&pages=2&name=1e2' });
  t.equal(ok.statusCode, 200);
  t.same(ok.json(), { query: { from: 12, weight: -2.5, pages: [1, 2], name: '1e2' }, params: { n: 7 } }, 'decimal text coerced; a string property keeps any text');
  t.same((await app.inject({ method: 'GET', url: '/items/7' })).json().query, { from: 0 }, 'defaults still applied');
  for (const [url, message] of [
    ['/items/7?from=1e2', 'querystring/from must be an integer in decimal digits'],
    ['/items/7?from=0x10', 'querystring/from must be an integer in decimal digits'],
    ['/items/7?from=%20', 'querystring/from must be an integer in decimal digits'],
    ['/items/7?from=+5', 'querystring/from must be an integer in decimal digits'],
    ['/items/7?from=Infinity', 'querystring/from must be an integer in decimal digits'],
    ['/items/7?weight=.5', 'querystring/weight must be a number in decimal digits'],
    ['/items/7?pages=1&pages=0b11', 'querystring/pages must be an integer in decimal digits'],
    ['/items/0x7', 'params/n must be an integer in decimal digits'],
  ]) {
    const refused = await app.inject({ method: 'GET', url });
    t.equal(refused.statusCode, 400, url);
    t.equal(refused.json().message, message);
  }
  t.equal((await app.inject({ method: 'GET', url: '/items/7?from=-1' })).statusCode, 400, 'the schema still applies after the text check (minimum)');
});
