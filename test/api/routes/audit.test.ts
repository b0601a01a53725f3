import t from 'tap';
import { createPermissionAudit } from '../../../src/app/audit.js';
import { registerUser, startTestService, type TestService } from '../../helpers/service.js';
import { listen } from '../../mcp/helpers.js';

let service: TestService;
let admin: Awaited<ReturnType<typeof registerUser>>;
let owner: Awaited<ReturnType<typeof registerUser>>;
let stranger: Awaited<ReturnType<typeof registerUser>>;
let repoId: string;
let otherRepoId: string;
let endpoint: URL;

t.before(async () => {
  service = await startTestService({ workers: false });
  admin = await registerUser(service, 'admin@example.org'); // the first user: sysadmin
  owner = await registerUser(service, 'owner@example.org');
  stranger = await registerUser(service, 'stranger@example.org');
  repoId = (await service.call('POST', '/api/v1/repositories', { token: owner.token, body: { name: 'Audited' } })).body.id;
  otherRepoId = (await service.call('POST', '/api/v1/repositories', { token: stranger.token, body: { name: 'Elsewhere' } })).body.id;
  ({ endpoint } = await listen(service));
});
t.teardown(() => service.close());

const auditOf = async (query: string, token = admin.token) => service.call('GET', `/api/v1/admin/audit?${query}`, { token });

t.test('REST decisions, allowed and refused, are recorded with who, how, what, where and through which route', async (t) => {
  const allowed = await service.call('GET', `/api/v1/repositories/${repoId}`, { token: owner.token, headers: { 'x-request-id': 'audit-allowed-1' } });
  t.equal(allowed.status, 200);
  const refused = await service.call('GET', `/api/v1/repositories/${repoId}/facts`, { token: stranger.token, headers: { 'x-request-id': 'audit-refused-1' } });
  t.equal(refused.status, 404, 'no role there: answered as a missing repository, and still recorded as refused');

  const listed = await auditOf(`user_id=${stranger.user.id}&allowed=false`);
  t.equal(listed.status, 200);
  t.match(listed.body.items[0], {
    user_id: stranger.user.id,
    credential_kind: 'session',
    permission: 'facts:read',
    domain: `repository:${repoId}`,
    repository_id: repoId,
    allowed: false,
    transport: 'rest',
    operation: 'GET /api/v1/repositories/:repoID/facts',
    client_address: '127.0.0.1',
    request_id: 'audit-refused-1',
  });
  t.match(listed.body.items[0].credential_id, /^[0-9a-f-]{36}$/, 'the session, never a token');
  const ownerRows = await auditOf(`user_id=${owner.user.id}&permission=repositories:read`);
  t.match(ownerRows.body.items[0], { allowed: true, request_id: 'audit-allowed-1', operation: 'GET /api/v1/repositories/:repoID' });
  t.ok(Date.parse(ownerRows.body.items[0].occurred_at) <= Date.now());
});

t.test('MCP tool decisions are recorded with the tool and the credential kind', async (t) => {
  const key = await service.call('POST', '/api/v1/users/me/api-keys', { token: owner.token, body: { name: 'tool client', scopes: ['*:read'] } });
  const call = (repository: string) =>
    fetch(endpoint, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${key.body.key}` },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'searchFacts', arguments: { repository, query: 'anything' } } }),
    });
  t.equal((await call(repoId)).status, 200);
  t.equal((await call(otherRepoId)).status, 200, 'a denied tool call is a tool error');
  const rows = await auditOf(`user_id=${owner.user.id}&transport=mcp`);
  t.equal(rows.body.total, 2);
  t.match(rows.body.items, [
    { permission: 'facts:read', repository_id: otherRepoId, allowed: false, operation: 'tool searchFacts', credential_kind: 'api_key', credential_id: key.body.id },
    { permission: 'facts:read', repository_id: repoId, allowed: true, operation: 'tool searchFacts', credential_kind: 'api_key', credential_id: key.body.id },
  ]);
  const byKind = await auditOf('credential_kind=api_key');
  t.ok(byKind.body.items.every((row: { credential_kind: string }) => row.credential_kind === 'api_key'));
});

t.test('the service audit needs audit:read; a repository audit shows that repository only, to its owner', async (t) => {
  const denied = await service.call('GET', '/api/v1/admin/audit', { token: owner.token });
  t.equal(denied.status, 403);
  t.match(denied.body, { error: 'forbidden', message: /audit:read/ });
  const recorded = await auditOf(`user_id=${owner.user.id}&permission=audit:read&allowed=false`);
  t.equal(recorded.body.total, 1, 'the refusal to read the audit is itself audited');

  const own = await service.call('GET', `/api/v1/repositories/${repoId}/audit?limit=500`, { token: owner.token });
  t.equal(own.status, 200);
  t.ok(own.body.total > 0);
  t.ok(own.body.items.every((row: { repository_id: string }) => row.repository_id === repoId), 'only its own repository');
  t.ok(own.body.items.some((row: { user_id: string; allowed: boolean }) => row.user_id === stranger.user.id && !row.allowed), "a stranger's refused attempt shows to the owner");
  const bySlug = await service.call('GET', '/api/v1/repositories/audited/audit?allowed=false', { token: owner.token });
  t.equal(bySlug.status, 200);
  t.ok(bySlug.body.items.every((row: { allowed: boolean }) => !row.allowed));

  await service.call('PUT', '/api/v1/admin/users/roles', { token: admin.token, body: { user_id: stranger.user.id, role: 'editor', domain: `repository:${repoId}` } });
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}/audit`, { token: stranger.token })).status, 403, 'an editor may not read it');
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}/audit`)).status, 401);
  t.equal((await service.call('GET', '/api/v1/repositories/no-such-repo/audit', { token: owner.token })).status, 404);
});

t.test('filters, time range and paging; bad filters are 400', async (t) => {
  const everything = await auditOf('limit=500');
  const times = everything.body.items.map((row: { occurred_at: string }) => Date.parse(row.occurred_at));
  t.same(times, [...times].sort((a, b) => b - a), 'newest first');
  const page = await auditOf('limit=2&offset=1');
  // The page's own call added the newest row, so offset 1 now starts at what was the newest.
  t.same(page.body.items.map((row: { id: string }) => row.id), everything.body.items.slice(0, 2).map((row: { id: string }) => row.id));
  t.equal(page.body.total, everything.body.total + 1, 'the same total, and the call reading it added one row');
  const future = await auditOf(`since=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`);
  t.same(future.body, { items: [], total: 0, next_cursor: null });
  const past = await auditOf(`until=${encodeURIComponent('2020-01-01T00:00:00Z')}`);
  t.equal(past.body.total, 0);
  for (const query of ['allowed=maybe', 'since=yesterday', 'credential_kind=cookie', 'transport=smoke', 'limit=0', 'offset=-1', 'colour=red']) {
    const answer = await auditOf(query);
    t.equal(answer.status, 400, query);
    t.equal(answer.body.error, 'bad_request', query);
  }
});

t.test('paging by next_cursor lists every row once however many are added between pages; an inverted range or a bad cursor is a 400', async (t) => {
  const snapshot = (await auditOf('limit=500')).body.items.map((row: { id: string }) => row.id);
  t.ok(snapshot.length > 6, `enough rows to page through (${snapshot.length})`);
  const seen: string[] = [];
  let cursor = '';
  for (let pages = 0; pages < 500; pages++) {
    const page = await auditOf(`limit=3${cursor ? `&cursor=${cursor}` : ''}`);
    t.equal(page.status, 200, JSON.stringify(page.body));
    seen.push(...page.body.items.map((row: { id: string }) => row.id));
    if (page.body.next_cursor === null) break;
    cursor = page.body.next_cursor;
    // Every read adds a row (its own decision), and others decide meanwhile: they come before the cursor.
    await service.call('GET', `/api/v1/repositories/${repoId}`, { token: owner.token });
  }
  t.equal(new Set(seen).size, seen.length, 'no row twice');
  t.same(seen.filter((id) => snapshot.includes(id)), snapshot, 'every row listed at the start, in the same order');
  t.notOk(snapshot.includes(seen[0]), 'the first page starts at its own read');
  t.equal(seen[1], snapshot[0], 'and goes on with the rows before it');

  const refusals: Array<[string, RegExp]> = [
    ['since=2025-01-02T00:00:00Z&until=2025-01-01T00:00:00Z', /since must not be after until/],
    ['since=2024-12-31T23:59:60Z', /since must be an RFC 3339 date-time/],
    ['cursor=nonsense', /cursor is not one this service returned/],
    [`cursor=${Buffer.from('a:["2025-01-01T00:00:00.000000Z","-1"]').toString('base64url')}`, /cursor is not one this service returned/],
    [`cursor=${cursor}&offset=1`, /cursor and offset do not combine/],
    ['permission=sources:raed', /unknown permission 'sources:raed': permissions are object:action pairs from GET \/api\/v1\/admin\/permissions/],
    ['permission=sources:*', /unknown permission 'sources:\*'/],
  ];
  for (const [query, message] of refusals) {
    const answer = await auditOf(query);
    t.equal(answer.status, 400, query);
    t.match(answer.body, { error: 'bad_request', message }, query);
  }
  t.same((await auditOf('since=2025-01-01T00:00:00Z&until=2025-01-01T00:00:00Z')).body, { items: [], total: 0, next_cursor: null }, 'since = until: an empty range, not a wrong one');
});

t.test('decisions are buffered and written in batches; a refused write keeps them for the next flush', async (t) => {
  const knex = service.context.db.knex;
  const warnings: string[] = [];
  const log = { warn: (_: object, message: string) => void warnings.push(message), info: () => undefined };
  const audit = createPermissionAudit({ knex, log, settings: { retentionDays: 30, batchSize: 2, flushIntervalMs: 3_600_000, maxBuffered: 4 } });
  const call = { transport: 'rest' as const, operation: 'GET /batch-test' };
  const decision = (n: number) => ({ userId: `batch-${n}`, credentialKind: 'session' as const, credentialId: 's', permission: 'facts:read', domain: 'system', allowed: true });
  const written = async () => (await knex('permission_audit').where({ operation: 'GET /batch-test' }).orderBy('id').select('user_id')).map((row) => row.user_id);

  await knex.raw('ALTER TABLE permission_audit RENAME TO permission_audit_away');
  try {
    for (const n of [1, 2, 3, 4, 5]) audit.record(decision(n), call);
    await audit.flush();
  } finally {
    await knex.raw('ALTER TABLE permission_audit_away RENAME TO permission_audit');
  }
  t.ok(warnings.some((message) => /could not be written/.test(message)), 'the failure is logged');
  await audit.flush();
  t.same(await written(), ['batch-2', 'batch-3', 'batch-4', 'batch-5'], 'kept and written later; beyond maxBuffered the oldest went');
  t.ok(warnings.some((message) => /dropped/.test(message)), 'and the drop is logged');
  audit.record(decision(6), call);
  await audit.close();
  t.same((await written()).at(-1), 'batch-6', 'close writes what is buffered');
});

t.test('retention: rows older than audit.retention_days go, at start and daily after', async (t) => {
  const knex = service.context.db.knex;
  const row = (daysAgo: number, userId: string) => ({
    occurred_at: new Date(Date.now() - daysAgo * 86_400_000),
    user_id: userId,
    credential_kind: 'session',
    credential_id: 's',
    permission: 'facts:read',
    domain: 'system',
    allowed: true,
    transport: 'rest',
    operation: 'GET /retention-test',
  });
  await knex('permission_audit').insert([row(31, 'old'), row(29, 'recent')]);
  t.equal(await service.context.audit.prune(), 1);
  t.same((await knex('permission_audit').where({ operation: 'GET /retention-test' }).select('user_id')).map((r) => r.user_id), ['recent']);

  const restarted = await startTestService({ persistent: true, overrides: { audit: { retention_days: 1 } } });
  t.teardown(() => restarted.close());
  await restarted.context.db.knex('permission_audit').insert([row(2, 'old')]);
  await restarted.close({ keepData: true });
  const again = await startTestService({ dataDir: restarted.dataDir, overrides: { audit: { retention_days: 1 } } });
  t.teardown(() => again.close());
  t.equal((await again.context.db.knex('permission_audit').where({ operation: 'GET /retention-test' })).length, 0, 'a worker prunes when it starts');
});
