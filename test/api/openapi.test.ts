import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';

import t from 'tap';

import { ERROR_CODES } from '../../src/api/errors.js';
import { CREDENTIAL_PATHS } from '../../src/api/rateLimits.js';
import { startTestService } from '../helpers/service.js';

interface Operation {
  summary?: string;
  operationId?: string;
  security?: unknown[];
  requestBody?: { content: Record<string, { schema: { properties?: Record<string, { format?: string }> } }> };
  responses: Record<string, { content?: Record<string, { schema: ReplySchema }> }>;
}

interface ReplySchema {
  required?: string[];
  properties?: Record<string, unknown>;
  oneOf?: ReplySchema[];
  anyOf?: ReplySchema[];
}

/**
 * An error reply is `{error, message}`, except where a protocol fixes its own shape: the OAuth
 * endpoints answer RFC 6749's `{error, error_description}` (the authorization pages an HTML page)
 * and the MCP endpoint a JSON-RPC error (docs/auth.md, docs/mcp.md).
 */
function isErrorReply(contentType: string, schema: ReplySchema): boolean {
  if (contentType === 'text/html') return true;
  const alternatives = schema.oneOf ?? schema.anyOf;
  if (alternatives) return alternatives.every((alternative) => isErrorReply(contentType, alternative));
  const required = schema.required ?? [];
  if (required.includes('jsonrpc')) return required.includes('error');
  return required.includes('error') && (required.includes('message') || 'error_description' in (schema.properties ?? {}));
}

t.test('the OpenAPI document: a summary and the error replies on every operation, multipart uploads, /metrics', async (t) => {
  const service = await startTestService({ workers: false });
  t.teardown(() => service.close());
  const document = (await service.call('GET', '/api/v1/openapi.json')).body as { paths: Record<string, Record<string, Operation>> };
  const problems: string[] = [];
  let operations = 0;
  for (const [url, methods] of Object.entries(document.paths)) {
    for (const [method, operation] of Object.entries(methods)) {
      operations += 1;
      const name = `${method.toUpperCase()} ${url}`;
      if (!operation.summary?.trim()) problems.push(`${name}: no summary`);
      const expected = ['400'];
      // Only a route that takes a bearer token refuses one (a route that serves anyone ignores it).
      const takesBearer = (operation.security?.length ?? 0) > 0;
      if (takesBearer) expected.push('401');
      if (['post', 'put', 'patch', 'delete'].includes(method)) expected.push('413', '415');
      // A method a route answers only with 405 (GET and DELETE on the MCP endpoint) reaches no resource.
      const onlyRefuses = operation.responses['405'] && !Object.keys(operation.responses).some((code) => code.startsWith('2'));
      if (takesBearer && !onlyRefuses) expected.push('403', '404');
      if (CREDENTIAL_PATHS.has(url.replace(/\{(\w+)\}/g, ':$1'))) expected.push('429');
      for (const code of expected) {
        const reply = operation.responses[code];
        // Errors are JSON; /metrics documents its one content type for all its replies.
        const [contentType, media] = Object.entries(reply?.content ?? {})[0] ?? [];
        if (!contentType || !media?.schema) problems.push(`${name}: no ${code} reply`);
        else if (!isErrorReply(contentType, media.schema)) problems.push(`${name}: the ${code} reply is not {error, message}`);
      }
      // A media type that is not JSON holds text: an object schema under it is a JSON reply mislabelled.
      for (const [code, reply] of Object.entries(operation.responses)) {
        for (const [contentType, media] of Object.entries(reply.content ?? {})) {
          if (!/json/.test(contentType) && (media.schema as { type?: unknown }).type === 'object') problems.push(`${name}: the ${code} reply is an object as ${contentType}`);
        }
      }
    }
  }
  t.same(problems, [], `${operations} operations checked`);
  const ids = Object.values(document.paths).flatMap((methods) => Object.values(methods).map((operation) => operation.operationId));
  t.same(ids.filter((id) => typeof id !== 'string'), [], 'every operation has an operationId');
  t.equal(new Set(ids).size, ids.length, 'operationIds are unique');
  t.equal(document.paths['/api/v1/repositories/{repoID}/facts/{factID}'].get.operationId, 'getRepositoriesByRepoIDFactsByFactID');
  t.same(Object.keys(document.paths['/api/v1/oauth/assets/authorize.css'].get.responses['200'].content ?? {}), ['text/css'], 'the stylesheet is CSS');
  t.same(
    Object.keys(document.paths['/api/v1/oauth/authorize/login'].post.responses['429'].content ?? {}),
    ['application/json'],
    'a page route names JSON for the errors its hooks send',
  );

  for (const upload of ['/api/v1/repositories/{repoID}/sources/upload', '/api/v1/repositories/{repoID}/reports/upload']) {
    const form = document.paths[upload].post.requestBody?.content['multipart/form-data'];
    t.equal(form?.schema.properties?.file?.format, 'binary', `${upload} documents its multipart file part`);
  }
  t.ok(document.paths['/api/v1/repositories/{repoID}/reports/upload'].post.requestBody?.content['multipart/form-data'].schema.properties?.title, 'and the report upload its form fields');
  t.ok(document.paths['/metrics']?.get?.summary, '/metrics is documented');
  t.ok(document.paths['/api/v1/auth/login'].post.responses['429'], 'login documents 429');

  // The authorization endpoint checks its parameters itself (an error goes back to the client's redirect URI), yet documents which it requires.
  const authorize = document.paths['/api/v1/oauth/authorize'].get as Operation & { parameters: Array<{ name: string; required?: boolean }> };
  t.same(
    authorize.parameters.filter((parameter) => parameter.required).map((parameter) => parameter.name).sort(),
    ['client_id', 'code_challenge', 'code_challenge_method', 'redirect_uri', 'response_type'],
    'the authorization request parameters OAuth 2.1 requires are marked required, the others not',
  );
  const registration = document.paths['/api/v1/oauth/register'].post.requestBody?.content['application/json'].schema.properties ?? {};
  t.same(
    Object.keys(registration).sort(),
    ['application_type', 'client_name', 'client_uri', 'grant_types', 'redirect_uris', 'response_types', 'scope', 'software_id', 'software_version', 'token_endpoint_auth_method'],
    'client registration documents every metadata field it checks',
  );
});

t.test('the OpenAPI document: every operation says what it does and every response what its status means', async (t) => {
  const service = await startTestService({ workers: false });
  t.teardown(() => service.close());
  const document = (await service.call('GET', '/api/v1/openapi.json')).body as {
    paths: Record<string, Record<string, { summary?: string; description?: string; responses: Record<string, { description?: string }> }>>;
  };
  const problems: string[] = [];
  let responses = 0;
  for (const [url, methods] of Object.entries(document.paths)) {
    for (const [method, operation] of Object.entries(methods)) {
      const name = `${method.toUpperCase()} ${url}`;
      if (!operation.summary?.trim() && !operation.description?.trim()) problems.push(`${name}: neither summary nor description`);
      for (const [code, reply] of Object.entries(operation.responses)) {
        responses += 1;
        // @fastify/swagger writes 'Default Response' where a route's schema gives no description.
        if (!reply.description?.trim() || reply.description === 'Default Response') problems.push(`${name} ${code}: ${JSON.stringify(reply.description)}`);
      }
    }
  }
  t.ok(responses > 500, `${responses} responses checked`);
  t.same(problems, [], 'no operation or response goes undescribed');
  t.equal(
    document.paths['/api/v1/oauth/authorize'].post.responses['302'].description?.includes('redirect URI'),
    true,
    "the consent decision's 302 says where it goes",
  );
});

t.test('a route that takes no token lists no 401, 403, 404 or 409 but those its handler gives', async (t) => {
  const service = await startTestService({ workers: false });
  t.teardown(() => service.close());
  const document = (await service.call('GET', '/api/v1/openapi.json')).body as { paths: Record<string, Record<string, Operation>> };
  // What each handler answers, read from it: a wrong password, an OAuth client that tried to
  // authenticate, a form without its CSRF token, a taken e-mail address, a CORS preflight from an
  // Origin not allowed. Every other route that serves anyone answers none of these.
  const answers: Record<string, string[]> = {
    'POST /api/v1/auth/register': ['409'],
    'POST /api/v1/auth/login': ['401'],
    'POST /api/v1/auth/refresh': ['401'],
    'POST /api/v1/oauth/token': ['401'],
    'POST /api/v1/oauth/revoke': ['401'],
    'POST /api/v1/oauth/authorize': ['403'],
    'POST /api/v1/oauth/authorize/login': ['403'],
    'OPTIONS /api/v1/mcp': ['403'],
  };
  const listed: Record<string, string[]> = {};
  for (const [url, methods] of Object.entries(document.paths)) {
    for (const [method, operation] of Object.entries(methods)) {
      if ((operation.security?.length ?? 0) > 0) continue;
      const codes = Object.keys(operation.responses).filter((code) => ['401', '403', '404', '409'].includes(code));
      if (codes.length > 0) listed[`${method.toUpperCase()} ${url}`] = codes;
    }
  }
  t.ok(document.paths['/healthz'] && document.paths['/.well-known/oauth-authorization-server'], 'the health and discovery routes are among those checked');
  t.same(listed, answers);
  t.match(document.paths['/healthz/instance'].get.responses['400'], { description: /no challenge/ }, 'the instance proof says its own 400');
});

/** Every `error` code the source can send: literal codes in HttpError and send() calls, and the mapped ones. */
function codesInSource(): Set<string> {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir)) {
      const full = path.join(dir, entry);
      if (statSync(full).isDirectory()) walk(full);
      else if (full.endsWith('.ts')) files.push(full);
    }
  };
  walk('src');
  const codes = new Set<string>();
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    for (const match of text.matchAll(/HttpError\(\d{3}, '([a-z_]+)'/g)) codes.add(match[1]);
    for (const match of text.matchAll(/send\(\d{3}, '([a-z_]+)'/g)) codes.add(match[1]);
    for (const match of text.matchAll(/\[\d{3}, '([a-z_]+)'\]/g)) codes.add(match[1]);
    for (const match of text.matchAll(/error: '([a-z_]+)', message/g)) codes.add(match[1]);
  }
  return codes;
}

t.test('the error codes in docs/api.md are the ones the code can send', async (t) => {
  const documented = new Set([...readFileSync('docs/api.md', 'utf8').matchAll(/^\| \d{3} \| `([a-z_]+)` \|/gm)].map((match) => match[1]));
  t.same([...documented].sort(), [...ERROR_CODES].sort(), 'docs/api.md lists exactly ERROR_CODES');
  const sent = codesInSource();
  t.ok(sent.size >= 8, `found ${sent.size} codes in the source`);
  for (const code of sent) t.ok((ERROR_CODES as readonly string[]).includes(code), `'${code}' sent by the code is in ERROR_CODES`);
});

t.test("docs/api.md's endpoint table has every operation of the OpenAPI document, with whether it takes a token", async (t) => {
  const service = await startTestService({ workers: false });
  t.teardown(() => service.close());
  const document = (await service.call('GET', '/api/v1/openapi.json')).body as { paths: Record<string, Record<string, Operation>> };
  const docs = readFileSync('docs/api.md', 'utf8');
  const start = docs.indexOf('\n## Endpoints (this release)\n');
  const table = docs.slice(start, docs.indexOf('\n## ', start + 1));
  // | GET, PUT | /users/{userID} | permission | notes |: paths under /api/v1 but for health, metrics and discovery.
  const rows = new Map<string, { permission: string; notes: string }>();
  for (const [, methods, paths, permission, notes] of table.matchAll(/^\| ([A-Z, ]+) \| ([^|]+) \| ([^|]*) \|(.*)\|$/gm)) {
    for (const url of paths.split(', ')) {
      const full = /^\/(healthz|metrics|\.well-known)/.test(url.trim()) ? url.trim() : `/api/v1${url.trim()}`;
      for (const method of methods.split(', ')) rows.set(`${method.trim()} ${full}`, { permission: permission.trim(), notes });
    }
  }
  t.ok(rows.size > 80, `${rows.size} operations in the table`);
  const problems: string[] = [];
  const operations = new Set<string>();
  for (const [url, methods] of Object.entries(document.paths)) {
    for (const [method, operation] of Object.entries(methods)) {
      const name = `${method.toUpperCase()} ${url}`;
      operations.add(name);
      const row = rows.get(name);
      if (!row) {
        // A method a path's row only mentions (the MCP endpoint's 405s and preflight) is in its notes.
        const sibling = [...rows].find(([key]) => key.endsWith(` ${url}`));
        if (!sibling || !new RegExp(`\\b${method.toUpperCase()}\\b`).test(sibling[1].notes)) problems.push(`${name}: not in the table`);
        continue;
      }
      const takesBearer = (operation.security?.length ?? 0) > 0;
      const documentedOpen = /^(none|CSRF token)/.test(row.permission);
      if (takesBearer === documentedOpen) problems.push(`${name}: the table says "${row.permission}", the document ${takesBearer ? 'a bearer token' : 'none'}`);
    }
  }
  for (const name of rows.keys()) if (!operations.has(name)) problems.push(`${name}: in the table, not an operation of the service`);
  t.same(problems, [], `${operations.size} operations checked`);
});
