import fc from 'fast-check';
import t from 'tap';

import { ERROR_CODES } from '../../src/api/errors.js';
import { registerUser, startTestService } from '../helpers/service.js';

/**
 * Walks every operation of the OpenAPI document with hostile parameters and bodies, as a
 * sysadmin with a seeded repository: no answer may be a 5xx, and a refused call must not have
 * stored anything (the event log head and the service-state tables do not change).
 */

interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  items?: JsonSchema;
  enum?: unknown[];
  format?: string;
}
interface Parameter {
  in: 'path' | 'query' | 'header';
  name: string;
  schema?: JsonSchema;
}
interface Operation {
  summary?: string;
  parameters?: Parameter[];
  requestBody?: { content: Record<string, { schema: JsonSchema }> };
}
type OpenApi = { paths: Record<string, Record<string, Operation>> };

/** Text an attacker tries: NUL, lone surrogates, numbers out of range, injection, traversal, huge. */
const HOSTILE_TEXT = [
  '\u0000',
  'a\u0000b',
  '\ud800',
  'x\udfffy',
  '\udc00\ud800',
  '1e20',
  '9223372036854775808',
  '-9223372036854775809',
  '-1',
  'NaN',
  '',
  ' ',
  "'; DROP TABLE events; --",
  '../../../etc/passwd',
  '%',
  '<script>alert(1)</script>',
  'x'.repeat(5_000),
  'ＡＤＡ@example.org',
  'http://user:pass@127.0.0.1/',
  'http://169.254.169.254/latest/meta-data/',
  'a:b:c',
  '\u202e\u200b',
  '-'.repeat(40),
  '- '.repeat(40),
];
const HOSTILE_NUMBERS = [1e20, 9223372036854775808, -1, 1.5, 0, -0, 2 ** 53, Number.MAX_VALUE];

/** Raw URL fragments: what an attacker types after `%` (not valid UTF-8, encoded NUL, half an escape). */
const RAW_URL_TEXT = ['%00', 'a%00b', '%ED%A0%80', '%C0%80', '%FF%FE', '%', '%2', '1e20', '9223372036854775808', '-1', '%E2%80%AE'];

/** The first code point past the surrogates, and how many there are: fast-check's 'binary' unit leaves them out. */
const SURROGATES_START = 0xd800;
const SURROGATES = 0x800;
/**
 * A code point as fast-check's `unit: 'binary'` draws it (the same values for the same seed), with
 * an inverse that is arithmetic: fast-check's own builds a map of all 1.1 million code points
 * (about a CPU-second, most of this file's) to find its "dangerous strings" (`__proto__`, …) as
 * units, which it then still finds in this one.
 */
const binaryUnit = fc.nat({ max: 0x10ffff - SURROGATES }).map(
  (index) => String.fromCodePoint(index < SURROGATES_START ? index : index + SURROGATES),
  (value) => {
    const codePoint = typeof value === 'string' ? value.codePointAt(0) : undefined;
    if (codePoint === undefined || (codePoint >= SURROGATES_START && codePoint < SURROGATES_START + SURROGATES) || String.fromCodePoint(codePoint) !== value) {
      throw new Error('not one code point of the binary unit');
    }
    return codePoint < SURROGATES_START ? codePoint : codePoint - SURROGATES;
  },
);
const hostileText = fc.oneof(fc.constantFrom(...HOSTILE_TEXT), fc.string({ unit: binaryUnit, maxLength: 40 }));
const hostileValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: hostileText },
  { weight: 2, arbitrary: fc.constantFrom(...HOSTILE_NUMBERS) },
  { weight: 1, arbitrary: fc.constantFrom(null, true, [], {}, ['\u0000'], { nested: '\ud800' }) },
);

/** A valid-looking value for a property, so a call gets past its schema and the hostile part reaches the code behind it. */
function plausibleFor(name: string, schema: JsonSchema | undefined, depth: number): fc.Arbitrary<unknown> {
  const types = [schema?.type ?? 'string'].flat();
  if (schema?.enum?.length) return fc.constantFrom(...schema.enum);
  if (types.includes('object') && depth < 3) return objectFor(schema ?? {}, depth + 1);
  if (types.includes('array')) return fc.array(valueFor(name, schema?.items, depth + 1), { maxLength: 3 });
  if (types.includes('integer') || types.includes('number')) return fc.constantFrom(1, 10, 50);
  if (types.includes('boolean')) return fc.boolean();
  if (/email/.test(name)) return fc.constantFrom('fuzz@example.org', 'admin@example.org');
  if (/password/.test(name)) return fc.constant('correct horse battery');
  if (/url/.test(name)) return fc.constantFrom('https://example.org/otters', 'https://example.org/a?b=c');
  if (/(^|_)id$/.test(name) && seededIds.length) return fc.constantFrom(...seededIds);
  return fc.constantFrom('otters', 'Sea otters use rocks as tools.', 'general');
}

/** Ids of seeded resources, so id-shaped fields sometimes name something that exists. */
const seededIds: string[] = [];

/** A value for a property: one time in three hostile, else plausible. */
function valueFor(name: string, schema: JsonSchema | undefined, depth = 0): fc.Arbitrary<unknown> {
  return fc.oneof({ weight: 1, arbitrary: hostileValue }, { weight: 2, arbitrary: plausibleFor(name, schema, depth) });
}

function objectFor(schema: JsonSchema, depth = 0): fc.Arbitrary<Record<string, unknown>> {
  const shape = Object.fromEntries(Object.entries(schema.properties ?? {}).map(([name, property]) => [name, valueFor(name, property, depth)]));
  return fc.record(shape, { requiredKeys: [] });
}

/** A query or path value as it goes into the URL: a hostile string encoded, a raw fragment, or a plausible one. */
function urlText(plausible: fc.Arbitrary<unknown>): fc.Arbitrary<string> {
  const encode = (value: unknown) => encodeURIComponent(String(value).replace(/[\uD800-\uDFFF]/g, '\uFFFD'));
  return fc.oneof(
    { weight: 1, arbitrary: fc.constantFrom(...RAW_URL_TEXT) },
    { weight: 1, arbitrary: hostileText.map(encode) },
    { weight: 3, arbitrary: plausible.map(encode) },
  );
}

/**
 * The OAuth protocol endpoints answer errors in RFC 6749's `{error, error_description}` with its
 * own codes, and its sign-in pages in HTML: only "no 5xx, nothing stored" applies to them.
 */
const isOAuthProtocolPath = (path: string) => path.startsWith('/api/v1/oauth/') || path.startsWith('/.well-known/');

t.test('no route answers 5xx to hostile input, and refused calls store nothing', async (t) => {
  const service = await startTestService({ workers: false, overrides: { rate_limits: { enabled: false } } });
  t.teardown(() => service.close());
  const admin = await registerUser(service, 'admin@example.org');
  const token = admin.token;
  const repository = await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Fuzzed', slug: 'fuzzed' } });
  t.equal(repository.status, 201);
  const upload = await service.app.inject({
    method: 'POST',
    url: `/api/v1/repositories/${repository.body.id}/sources/upload`,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'multipart/form-data; boundary=b' },
    payload: '--b\r\nContent-Disposition: form-data; name="file"; filename="otters.md"\r\nContent-Type: text/markdown\r\n\r\n# Otters\n\nSea otters use tools.\r\n--b--\r\n',
  });
  t.equal(upload.statusCode, 201, upload.body);
  const sourceId = JSON.parse(upload.body).id as string;

  const document = (await service.call('GET', '/api/v1/openapi.json')).body as OpenApi;
  const operations = Object.entries(document.paths).flatMap(([path, methods]) =>
    Object.entries(methods).map(([method, operation]) => ({ path, method: method.toUpperCase(), operation })),
  );
  t.ok(operations.length > 50, `the document lists ${operations.length} operations`);
  // Ending the session would leave the rest of the walk unauthenticated; deleting the repository would leave it nothing to reach.
  const skipped = (path: string, method: string) => path === '/api/v1/auth/logout' || (method === 'DELETE' && path === '/api/v1/repositories/{repoID}');
  const realIds: Record<string, string[]> = { repoID: [repository.body.id, 'fuzzed'], sourceID: [sourceId], userID: [admin.user.id] };
  seededIds.push(sourceId, repository.body.id);

  const knex = service.context.db.knex;
  // What a call can store: events, and the service state kept out of the log (one statement: it runs around each of ~1,200 calls).
  const storedState = async () => {
    const counted = ['credentials', 'sessions', 'slug_reservations', 'retired_refresh_tokens'].map((table) => `(SELECT count(*) FROM ${table}) AS ${table}`);
    const { rows } = await knex.raw<{ rows: Array<Record<string, unknown>> }>(`SELECT (SELECT coalesce(max(global_position), 0) FROM events) AS events, ${counted.join(', ')}`);
    return Object.entries(rows[0] ?? {})
      .map(([name, value]) => `${name}=${String(value)}`)
      .join(' ');
  };
  const serverErrors: string[] = [];
  let calls = 0;
  // The state after a refused call is the state before the next one: nothing else writes here
  // (no workers), and a late write by the refused call would still show as a change, at the next
  // refused call. After an accepted call (which may store) the state is read again.
  let known: string | null = null;
  for (const { path, method, operation } of operations) {
    if (skipped(path, method)) continue;
    const parameters = operation.parameters ?? [];
    const pathParameters = Object.fromEntries(
      parameters
        .filter((p) => p.in === 'path')
        .map((p) => [p.name, urlText(realIds[p.name] ? fc.constantFrom(...realIds[p.name]) : plausibleFor(p.name, p.schema, 0))]),
    );
    const queryParameters = Object.fromEntries(parameters.filter((p) => p.in === 'query').map((p) => [p.name, urlText(plausibleFor(p.name, p.schema, 0))]));
    const jsonBody = operation.requestBody?.content['application/json']?.schema;
    const request = fc.record({
      pathValues: fc.record(pathParameters),
      query: fc.record(queryParameters, { requiredKeys: [] }),
      body: jsonBody ? fc.oneof({ weight: 4, arbitrary: objectFor(jsonBody) }, { weight: 1, arbitrary: hostileValue }) : fc.constant(undefined),
    });
    await fc.assert(
      fc.asyncProperty(request, async ({ pathValues, query, body }) => {
        const url =
          path.replace(/\{(\w+)\}/g, (_match, name: string) => pathValues[name] ?? 'x') +
          (Object.keys(query).length ? `?${Object.entries(query).map(([name, value]) => `${name}=${value}`).join('&')}` : '');
        const before = known ?? (await storedState());
        known = null;
        const response = await service.app.inject({
          method: method as 'GET',
          url,
          headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
          ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
        });
        calls += 1;
        if (response.statusCode >= 500) serverErrors.push(`${method} ${url} ${body === undefined ? '' : JSON.stringify(body).slice(0, 200)} -> ${response.statusCode} ${response.body.slice(0, 200)}`);
        if (response.statusCode >= 400) {
          if (!isOAuthProtocolPath(path) && /json/.test(String(response.headers['content-type']))) {
            const reply = JSON.parse(response.body) as { jsonrpc?: unknown; error?: unknown; message?: unknown };
            // The MCP endpoint answers a body it cannot take as JSON-RPC (docs/mcp.md).
            const jsonRpc = path === '/api/v1/mcp' && reply.jsonrpc === '2.0' && typeof (reply.error as { code?: unknown } | undefined)?.code === 'number';
            if (!jsonRpc && (!ERROR_CODES.includes(reply.error as (typeof ERROR_CODES)[number]) || typeof reply.message !== 'string')) serverErrors.push(`${method} ${url}: error reply without {error, message}: ${response.body.slice(0, 200)}`);
          } else if (!/json|html/.test(String(response.headers['content-type']))) serverErrors.push(`${method} ${url}: error reply of type ${response.headers['content-type']}`);
          const after = await storedState();
          known = after;
          if (after !== before) serverErrors.push(`${method} ${url} answered ${response.statusCode} but stored something (${before} -> ${after})`);
        }
      }),
      { numRuns: 12, seed: 20261125 },
    );
  }
  t.same(serverErrors, [], `${calls} hostile calls, none answered 5xx or stored on failure`);
});
