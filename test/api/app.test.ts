import { once } from 'node:events';
import { connect, type AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { ProjectionRunner } from '../../src/projection/runner.js';
import { eventually, registerUser, startTestService, waitForPipeline } from '../helpers/service.js';
import { CURIE_ARTICLE, startWebServer } from '../helpers/webServer.js';

const READ_MODEL_TABLES = {
  users: 'id',
  role_assignments: 'user_id, role, domain',
  repositories: 'id',
  sources: 'id',
  facts: 'id',
  fact_sources: 'fact_id, source_id',
  concepts: 'id',
  concept_aliases: 'concept_id, alias_lower',
  fact_concepts: 'fact_id, concept_id',
  concept_relations: 'repository_id, concept_a, concept_b',
  concept_summaries: 'id',
  concept_summary_facts: 'concept_id, fact_id',
  concept_syntheses: 'concept_id',
};

// The key was read and validated, but nothing looked at it: /metrics answered 200 with it false.
t.test('metrics.enabled false leaves /metrics out', async (t) => {
  const service = await startTestService({ overrides: { metrics: { enabled: false } } });
  t.teardown(() => service.close());
  t.equal((await service.app.inject({ method: 'GET', url: '/metrics' })).statusCode, 404);
  t.equal((await service.call('GET', '/healthz')).status, 200, 'liveness is still served');
});

t.test('health, OpenAPI, docs and metrics', async (t) => {
  const service = await startTestService();
  t.teardown(() => service.close());
  const health = await service.call('GET', '/healthz');
  t.equal(health.status, 200);
  t.equal(health.body.status, 'ok');
  const openapi = await service.call('GET', '/api/v1/openapi.json');
  t.equal(openapi.status, 200);
  t.equal(openapi.body.openapi, '3.0.3');
  for (const path of ['/api/v1/auth/register', '/api/v1/repositories/{repoID}/facts', '/api/v1/repositories/{repoID}/events']) {
    t.ok(openapi.body.paths[path], `OpenAPI documents ${path}`);
  }
  const docs = await service.app.inject({ method: 'GET', url: '/docs/' });
  t.equal(docs.statusCode, 200);
  t.match(docs.body, /swagger/i);
  await registerUser(service, 'metrics@example.org');
  const metrics = await service.app.inject({ method: 'GET', url: '/metrics' });
  t.equal(metrics.statusCode, 200);
  for (const name of ['factlog_http_requests_total', 'factlog_eventstore_appends_total', 'factlog_projection_lag_events', 'factlog_stage_queue_depth']) {
    t.match(metrics.body, new RegExp(`^# TYPE ${name}`, 'm'), name);
  }
  t.match(metrics.body, /factlog_eventstore_appends_total\{outcome="ok"\} [1-9]/);
  const unknown = await service.call('GET', '/api/v1/nothing-here');
  t.equal(unknown.status, 404);
  t.same(Object.keys(unknown.body).sort(), ['error', 'message']);
  const requestId = await service.call('GET', '/healthz', { headers: { 'x-request-id': 'trace-123' } });
  t.equal(requestId.headers['x-request-id'], 'trace-123');

  // Liveness without the database: the head comes from what the store last read (the projection
  // runner reads the log all the time), not from a statement queued behind the pipeline's.
  const { store } = service.context;
  const head = await store.headPosition();
  t.ok(head > 0, 'the registration stored events');
  const readHead = store.headPosition;
  let headReads = 0;
  store.headPosition = () => {
    headReads += 1;
    return readHead();
  };
  t.teardown(() => (store.headPosition = readHead));
  const liveness = await service.call('GET', '/healthz');
  t.same(liveness.body, { status: 'ok', head_position: head });
  t.equal(headReads, 0, '/healthz ran no statement');
});

t.test('projections: status, and a rebuild from position 0 equals the live read models', async (t) => {
  const web = await startWebServer({ '/curie': { body: CURIE_ARTICLE } });
  const service = await startTestService();
  t.teardown(async () => {
    await service.close();
    await web.close();
  });
  const admin = await registerUser(service, 'admin@example.org');
  const user = await registerUser(service, 'user@example.org');
  const repo = (await service.call('POST', '/api/v1/repositories', { token: user.token, body: { name: 'Rebuilt' } })).body;
  await service.call('PUT', `/api/v1/repositories/${repo.id}`, { token: user.token, body: { description: 'changed' } });
  const source = (await service.call('POST', `/api/v1/repositories/${repo.id}/sources`, { token: user.token, body: { url: `${web.baseUrl}/curie` } })).body;
  await eventually(async () => (await service.call('GET', `/api/v1/repositories/${repo.id}/sources/${source.id}`, { token: user.token })).body.status === 'processed');
  await waitForPipeline(service, repo.id, user.token);

  t.equal((await service.call('GET', '/api/v1/projections', { token: user.token })).status, 403);
  const status = await service.call('GET', '/api/v1/projections', { token: admin.token });
  t.equal(status.status, 200);
  t.same(status.body.projections.map((p: { name: string }) => p.name).sort(), ['api-keys', 'concepts', 'facts', 'host-health', 'investigations', 'job-intake', 'oauth-clients', 'reports', 'repositories', 'search-index', 'sources', 'summaries', 'users']);

  const knex = service.context.db.knex;
  const snapshot = async () => {
    const rows: Record<string, unknown[]> = {};
    for (const [table, order] of Object.entries(READ_MODEL_TABLES)) rows[table] = await knex.raw(`SELECT * FROM ${table} ORDER BY ${order}`).then((r) => r.rows);
    return rows;
  };
  const live = await snapshot();
  t.ok((live.facts as unknown[]).length > 0);
  t.ok((live.concept_summaries as unknown[]).length > 0 && (live.concept_syntheses as unknown[]).length > 0, 'the pipeline summarised and synthesised');
  for (const name of ['users', 'repositories', 'sources', 'facts', 'concepts', 'summaries']) await service.context.projections.rebuild(name);
  t.same(await snapshot(), live, 'rebuilt rows equal live rows');

  t.equal((await service.call('POST', '/api/v1/projections/nope/rebuild', { token: admin.token })).status, 404);
  t.equal((await service.call('POST', '/api/v1/projections/facts/rebuild', { token: user.token })).status, 403);
  // Two at once: one rebuild starts; the other is refused, not answered 202 to fail in the background.
  const answers = await Promise.all([1, 2].map(() => service.call('POST', '/api/v1/projections/facts/rebuild', { token: admin.token })));
  t.same(answers.map((answer) => answer.status).sort(), [202, 409]);
  t.match(answers.find((answer) => answer.status === 202)?.body, { name: 'facts', state: 'rebuilding', position: 0 });
  t.match(answers.find((answer) => answer.status === 409)?.body, { error: 'conflict', message: 'projection facts is already rebuilding; follow it in GET /projections' });
  await eventually(async () => (await service.context.projections.status()).every((p) => p.state === 'running'));
  t.same(await snapshot(), live, 'a rebuild through the API converges to the same rows');
  const jobsBefore = await knex('jobs').count<{ n: string }[]>('* as n');
  await service.context.projections.rebuild('job-intake');
  t.same(await knex('jobs').count<{ n: string }[]>('* as n'), jobsBefore, 'rebuilding intake re-enqueues nothing that ran');
});

t.test('bootstrap: default admin from the environment wins over first-user promotion; starter repository', async (t) => {
  const service = await startTestService({
    overrides: { bootstrap: { default_admin: true, default_repository: true } },
    env: {
      SVC_BOOTSTRAP_DEFAULT_ADMIN_EMAIL: 'root@example.org',
      SVC_BOOTSTRAP_DEFAULT_ADMIN_PASSWORD: 'root password here',
      SVC_BOOTSTRAP_DEFAULT_ADMIN_DISPLAY_NAME: 'Root',
    },
  });
  t.teardown(() => service.close());
  const root = await service.call('POST', '/api/v1/auth/login', { body: { email: 'root@example.org', password: 'root password here' } });
  t.equal(root.status, 200);
  t.equal(root.body.user.name, 'Root');
  const first = await registerUser(service, 'first@example.org');
  const permissions = await service.call('GET', '/api/v1/permissions', { token: first.token });
  t.notOk(permissions.body.domains.some((d: { roles: string[] }) => d.roles.includes('sysadmin')), 'the first registered user is not promoted');
  const repos = await service.call('GET', '/api/v1/repositories', { token: root.body.token });
  t.same(repos.body.items.map((r: { slug: string }) => r.slug), ['starter']);
});

t.test('bootstrap: a default admin that the sign-up rules refuse is a configuration error naming its variables', async (t) => {
  const env = {
    SVC_BOOTSTRAP_DEFAULT_ADMIN_EMAIL: 'root@example.org',
    SVC_BOOTSTRAP_DEFAULT_ADMIN_PASSWORD: 'short',
    SVC_BOOTSTRAP_DEFAULT_ADMIN_DISPLAY_NAME: 'Root',
  };
  await t.rejects(startTestService({ overrides: { bootstrap: { default_admin: true } }, env }), {
    name: 'ConfigError',
    message:
      /bootstrap\.default_admin: the administrator of SVC_BOOTSTRAP_DEFAULT_ADMIN_EMAIL, SVC_BOOTSTRAP_DEFAULT_ADMIN_PASSWORD, SVC_BOOTSTRAP_DEFAULT_ADMIN_DISPLAY_NAME is refused: password must be at least 8 characters/,
  });
  await t.rejects(startTestService({ overrides: { bootstrap: { default_admin: true } }, env: { ...env, SVC_BOOTSTRAP_DEFAULT_ADMIN_PASSWORD: 'long enough', SVC_BOOTSTRAP_DEFAULT_ADMIN_EMAIL: 'root' } }), {
    name: 'ConfigError',
    message: /is refused: email is not a valid address/,
  });
});

t.test('first-user promotion can be turned off', async (t) => {
  const service = await startTestService({ overrides: { bootstrap: { auto_promote_first_user: false } } });
  t.teardown(() => service.close());
  const first = await registerUser(service, 'first@example.org');
  t.equal((await service.call('GET', '/api/v1/admin/users', { token: first.token })).status, 403);
});

t.test('data survives a restart of the context', async (t) => {
  const service = await startTestService({ persistent: true });
  const user = await registerUser(service, 'keep@example.org');
  const repo = (await service.call('POST', '/api/v1/repositories', { token: user.token, body: { name: 'Kept' } })).body;
  await service.close({ keepData: true });
  const again = await startTestService({ dataDir: service.dataDir });
  t.teardown(async () => {
    await again.close();
    const { rm } = await import('node:fs/promises');
    await rm(service.dataDir, { recursive: true, force: true });
  });
  const read = await again.call('GET', `/api/v1/repositories/${repo.id}`, { token: user.token });
  t.equal(read.status, 200);
  t.equal(read.body.name, 'Kept');
});

/**
 * Holds the runner's batches for the lanes that feed `projection` before their transaction opens
 * (reads share PGlite's one connection, so a batch held inside it would hold them too). A batch
 * released with `drop` is never applied: a process killed before the batch's commit.
 */
function holdBatchesOf(t: Test, projection: string) {
  // applyBatch is private: reached by name on the prototype, the one place every lane's batch passes.
  const runner = ProjectionRunner.prototype as unknown as { applyBatch: (lane: { workers: Set<{ projection: { name: string } }> }, batch: unknown[]) => Promise<void> };
  const original = runner.applyBatch;
  const hold = () => {
    let release!: (how: 'apply' | 'drop') => void;
    let enter!: () => void;
    const released = new Promise<'apply' | 'drop'>((resolve) => (release = resolve));
    const entered = new Promise<void>((resolve) => (enter = resolve));
    return { released, release, entered, enter };
  };
  let current = hold();
  runner.applyBatch = async function (this: unknown, lane, batch) {
    if ([...lane.workers].some((worker) => worker.projection.name === projection)) {
      current.enter();
      if ((await current.released) === 'drop') return;
    }
    return original.call(this, lane, batch);
  };
  t.teardown(() => {
    current.release('apply');
    runner.applyBatch = original;
  });
  return {
    entered: () => current.entered,
    release: (how: 'apply' | 'drop') => current.release(how),
    holdAgain: () => (current = hold()),
  };
}

t.test('a rebuild the service did not finish goes on as a rebuild after a restart: 503 for what it has not re-applied, `rebuilding`, until its end', async (t) => {
  const service = await startTestService({ persistent: true });
  t.teardown(async () => {
    const { rm } = await import('node:fs/promises');
    await rm(service.dataDir, { recursive: true, force: true });
  });
  const admin = await registerUser(service, 'admin@example.org');
  const user = await registerUser(service, 'user@example.org');
  const repo = (await service.call('POST', '/api/v1/repositories', { token: user.token, body: { name: 'Rebuilt' } })).body;
  const head = await service.context.store.headPosition();
  const batches = holdBatchesOf(t, 'repositories');
  t.equal((await service.call('POST', '/api/v1/projections/repositories/rebuild', { token: admin.token })).status, 202);
  await batches.entered();
  // Killed with its tables emptied and its first batch not committed.
  batches.release('drop');
  await service.close({ keepData: true });

  batches.holdAgain();
  const again = await startTestService({ dataDir: service.dataDir });
  t.teardown(() => again.close());
  await batches.entered();
  const missing = await again.call('GET', `/api/v1/repositories/${repo.id}`, { token: user.token });
  t.equal(missing.status, 503, 'not re-applied yet: unavailable, not 404');
  t.equal(missing.headers['retry-after'], '5');
  t.match(missing.body, { error: 'unavailable', message: /being rebuilt/ });
  const during = await again.call('GET', '/api/v1/projections', { token: admin.token });
  t.match(
    during.body.projections.find((projection: { name: string }) => projection.name === 'repositories'),
    { state: 'rebuilding', position: 0, lag: during.body.projections[0].head },
  );

  batches.release('apply');
  await eventually(async () => (await again.context.projections.status()).every((projection) => projection.state === 'running'));
  t.equal((await again.call('GET', `/api/v1/repositories/${repo.id}`, { token: user.token })).status, 200, 'rebuilt');
  const stored = await again.context.db.knex('projection_checkpoints').where({ name: 'repositories' }).first('position', 'rebuild_target');
  t.ok(Number(stored.position) >= head, 'the checkpoint reached the end it was rebuilding to');
  t.equal(stored.rebuild_target, null, 'and the rebuild is no longer kept');
});

t.test('a request that comes while the server closes is answered 503 unavailable with Retry-After, in the error shape', async (t) => {
  const service = await startTestService({ workers: false });
  t.teardown(() => service.close());
  await service.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = service.app.server.address() as AddressInfo;
  const socket = connect(port, '127.0.0.1');
  await once(socket, 'connect');
  let received = '';
  socket.setEncoding('latin1');
  socket.on('data', (chunk: string) => (received += chunk));
  // A request in flight (its body not yet all sent) holds the connection open through the close.
  const body = JSON.stringify({ email: 'nobody@example.org', password: 'not this one' });
  const arrived = once(service.app.server, 'request');
  socket.write(`POST /api/v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 5)}`);
  // The server has the request (its head parsed, the body still coming); then the close has
  // begun once the server stops listening (fastify's preClose hooks, the app's among them, ran first).
  await arrived;
  const closed = service.app.close();
  await eventually(async () => !service.app.server.listening, 5_000, 5);
  // The rest of the body, and the next request on the same connection, as a keep-alive client sends it.
  socket.write(`${body.slice(5)}GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n`);
  await once(socket, 'close');
  await closed;
  const replies = received.split(/(?=HTTP\/1\.1 )/);
  t.equal(replies.length, 2, 'both requests answered');
  t.match(replies[0], /^HTTP\/1\.1 401 /, 'the request in flight is answered as usual');
  t.match(replies[1], /^HTTP\/1\.1 503 /);
  t.match(replies[1], /\r\nretry-after: 5\r\n/i);
  t.match(replies[1], /\r\nconnection: close\r\n/i);
  t.same(JSON.parse(replies[1].slice(replies[1].indexOf('\r\n\r\n') + 4)), { error: 'unavailable', message: 'the service is shutting down; retry in a few seconds' });
});
