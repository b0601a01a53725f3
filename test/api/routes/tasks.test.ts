import t from 'tap';
import { randomUUID } from 'node:crypto';
import { registerUser, startTestService, type TestService } from '../../helpers/service.js';

let service: TestService;
let token: string;
let strangerToken: string;
let repoId: string;
let otherRepoId: string;
const sourceA = randomUUID();
const sourceB = randomUUID();
const reportR = randomUUID();
const job: Record<string, string> = {};

const url = (path: string, repo = repoId) => `/api/v1/repositories/${repo}${path}`;
const get = (path: string, as = token) => service.call('GET', url(path), { token: as });

let position = 1000;
async function enqueue(kind: string, repositoryId: string, extra: { sourceId?: string; reportId?: string } = {}): Promise<string> {
  position += 1;
  const { id } = await service.context.jobs.enqueue({
    kind,
    subjectId: extra.sourceId ?? extra.reportId ?? repositoryId,
    triggerEventId: randomUUID(),
    triggerPosition: position,
    repositoryId,
    correlationId: null,
    ...extra,
  });
  return id;
}

/** Claims the queued job of `kind` (the only one queued of that kind) and ends it as asked. */
async function finish(kind: string, outcome: 'succeed' | 'fail'): Promise<void> {
  const claimed = await service.context.jobs.claim(kind, 'test-worker', { leaseMs: 60_000 });
  if (!claimed) throw new Error(`no queued ${kind} job`);
  if (outcome === 'succeed') await service.context.jobs.succeed(claimed);
  else await service.context.jobs.fail(claimed, { error: 'the host answered 410', permanent: true, retryDelayMs: 0 });
}

t.before(async () => {
  // No workers: the test moves the jobs through their states itself.
  service = await startTestService({ workers: false });
  token = (await registerUser(service, 'owner@example.org')).token;
  strangerToken = (await registerUser(service, 'stranger@example.org')).token;
  repoId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Tasks' } })).body.id;
  otherRepoId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Elsewhere' } })).body.id;
  job.fetchA = await enqueue('retrieve_source', repoId, { sourceId: sourceA });
  await finish('retrieve_source', 'succeed');
  job.embedA = await enqueue('embed_facts', repoId, { sourceId: sourceA });
  job.fetchB = await enqueue('retrieve_source', repoId, { sourceId: sourceB });
  await finish('retrieve_source', 'fail');
  job.annotate = await enqueue('annotate_report', repoId, { reportId: reportR });
  job.elsewhere = await enqueue('embed_facts', otherRepoId, { sourceId: randomUUID() });
});
t.teardown(() => service.close());

t.test('the task list with per-kind counts and completeness', async (t) => {
  const all = await get('/tasks');
  t.equal(all.status, 200);
  t.equal(all.body.total, 4, 'only this repository\'s tasks');
  t.same(all.body.items.map((task: { id: string }) => task.id).sort(), [job.fetchA, job.embedA, job.fetchB, job.annotate].sort());
  t.same(all.body.counts.retrieve_source, { queued: 0, running: 0, succeeded: 1, failed: 1, dead: 0 });
  t.same(all.body.counts.embed_facts, { queued: 1, running: 0, succeeded: 0, failed: 0, dead: 0 });
  t.equal(all.body.complete, false, 'queued work in the repository');
  const failed = all.body.items.find((task: { id: string }) => task.id === job.fetchB);
  t.match(failed, { kind: 'retrieve_source', state: 'failed', source_id: sourceB, report_id: null, last_error: /410/, attempts: 1 });

  const forA = await get(`/tasks?source_id=${sourceA}`);
  t.same(forA.body.items.map((task: { kind: string }) => task.kind).sort(), ['embed_facts', 'retrieve_source']);
  t.same(Object.keys(forA.body.counts).sort(), ['embed_facts', 'retrieve_source'], 'counts of the source only');
  t.equal(forA.body.complete, false, 'embedding is still queued');
  const forB = await get(`/tasks?source_id=${sourceB}`);
  t.equal(forB.body.complete, true, 'a failed task is not pending');
  const report = await get(`/tasks?report_id=${reportR}`);
  t.match(report.body, { total: 1, complete: false, items: [{ id: job.annotate, report_id: reportR }] });

  t.same((await get('/tasks?state=failed')).body.items.map((task: { id: string }) => task.id), [job.fetchB], 'state filter');
  t.same((await get('/tasks?kind=embed_facts')).body.items.map((task: { id: string }) => task.id), [job.embedA], 'kind filter');
  const unknownKind = await get('/tasks?kind=bogus');
  t.equal(unknownKind.status, 400, 'an unknown kind is refused, as an unknown state is');
  t.match(unknownKind.body, { error: 'bad_request', message: /kind/ });
  // A kind of task this release makes answers, tasks or none; one it never makes (the registry
  // exchange's, in the spec's queue list or not) is refused with the kinds it does make.
  t.match((await get('/tasks?kind=migrate_context')).body, { items: [], total: 0 }, 'a kind made here, none yet: an empty page');
  for (const unbuilt of ['contribute_source', 'pull_all_from_registry', 'export_graph', 'import_graph']) {
    const refused = await get(`/tasks?kind=${unbuilt}`);
    t.equal(refused.status, 400, `${unbuilt} is not made by this release`);
    t.match(refused.body, { error: 'bad_request', message: /^querystring\/kind must be equal to one of the allowed values \(retrieve_source, .*migrate_context\)$/ });
  }
  const narrowed = await get(`/tasks?source_id=${sourceA}&state=succeeded`);
  t.equal(narrowed.body.total, 1);
  t.equal(narrowed.body.complete, false, 'completeness ignores the state filter');
  const paged = await get('/tasks?limit=1&offset=1');
  t.equal(paged.body.items.length, 1);
  t.equal(paged.body.total, 4);
  t.notOk('next_cursor' in paged.body, 'REST pages by limit and offset, as documented (the MCP tools by cursor)');
  t.equal((await get('/tasks?cursor=abc')).status, 400, 'no cursor here');
  const unknownSource = await get(`/tasks?source_id=${randomUUID()}`);
  t.equal(unknownSource.status, 404, 'an unknown source is not a finished one');
  t.match(unknownSource.body, { error: 'not_found', message: /source not found/ });

  await finish('embed_facts', 'succeed');
  t.equal((await get(`/tasks?source_id=${sourceA}`)).body.complete, true, 'complete once nothing is queued or running for it');

  t.equal((await get('/tasks?state=sleeping')).status, 400, 'unknown state');
  t.equal((await get('/tasks?limit=9999')).status, 400);
  t.equal((await get('/tasks', strangerToken)).status, 404);
  t.equal((await get('/jobs')).status, 404, 'the old /jobs path is gone');
});

t.test('stats: counts and totals of the repository', async (t) => {
  const stats = await get('/tasks/stats');
  t.equal(stats.status, 200);
  t.same(stats.body.totals, { queued: 1, running: 0, succeeded: 2, failed: 1, dead: 0 });
  t.equal(stats.body.counts.annotate_report.queued, 1);
  t.equal(stats.body.complete, false);
  t.equal((await get('/tasks/stats', strangerToken)).status, 404);
});

t.test('one task, and retrying a failed one', async (t) => {
  const one = await get(`/tasks/${job.fetchB}`);
  t.equal(one.status, 200);
  t.match(one.body, { id: job.fetchB, state: 'failed', repository_id: repoId });
  t.equal((await get(`/tasks/${job.elsewhere}`)).status, 404, 'a task of another repository');
  t.equal((await get(`/tasks/${randomUUID()}`)).status, 404);
  t.equal((await get('/tasks/not-a-uuid')).status, 400);

  const retried = await service.call('POST', url(`/tasks/${job.fetchB}/retry`), { token });
  t.equal(retried.status, 202);
  t.match(retried.body, { id: job.fetchB, state: 'queued' });
  const again = await service.call('POST', url(`/tasks/${job.fetchB}/retry`), { token });
  t.equal(again.status, 409, 'a queued task cannot be retried');
  t.equal(again.body.error, 'conflict');
  t.equal((await service.call('POST', url(`/tasks/${randomUUID()}/retry`), { token })).status, 404);
  t.equal((await service.call('POST', url(`/tasks/${job.fetchA}/retry`), { token: strangerToken })).status, 404);
  t.equal((await get(`/tasks?source_id=${sourceB}`)).body.complete, false, 'the retried task is pending again');
});

t.test('the OpenAPI document lists the read surface', async (t) => {
  const openapi = await service.call('GET', '/api/v1/openapi.json');
  t.equal(openapi.status, 200);
  for (const path of [
    '/api/v1/repositories/{repoID}/tasks',
    '/api/v1/repositories/{repoID}/tasks/stats',
    '/api/v1/repositories/{repoID}/tasks/{taskID}/retry',
    '/api/v1/repositories/{repoID}/facts',
    '/api/v1/repositories/{repoID}/facts/{factID}/concepts',
    '/api/v1/repositories/{repoID}/concepts',
    '/api/v1/repositories/{repoID}/concepts/{conceptID}/relations/{otherID}',
    '/api/v1/repositories/{repoID}/concepts/migrate-context',
    '/api/v1/repositories/{repoID}/promptset',
  ]) {
    t.ok(openapi.body.paths[path], path);
  }
});
