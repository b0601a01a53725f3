import { randomUUID } from 'node:crypto';
import t from 'tap';
import type { Principal } from '../../src/auth/rbac.js';
import { enqueueJob, failQueuedJob, rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';

let harness: TestApplication;
let owner: Principal;
let repository: string;
const sourceId = randomUUID();
const jobs: Record<string, string> = {};

t.before(async () => {
  harness = await startTestApplication({ name: 'Retries' });
  ({ owner, repository } = harness);
  jobs.fetch = await enqueueJob(harness, 'retrieve_source', repository, sourceId);
  await failQueuedJob(harness, 'retrieve_source');
  jobs.embed = await enqueueJob(harness, 'embed_facts', repository, sourceId);
});
t.teardown(() => harness.close());

t.test('retry: a failed task is queued again; others are a conflict', async (t) => {
  await rejectsWith(t, harness.app.tasks.retry(owner, { repository, task: jobs.embed }), 'conflict', /task is queued/);
  await rejectsWith(t, harness.app.tasks.retry({ ...owner, scopes: ['jobs:read'] }, { repository, task: jobs.fetch }), 'forbidden', /jobs:write/);
  await rejectsWith(t, harness.app.tasks.retry(owner, { repository, task: randomUUID() }), 'not_found', /task/);
  t.match(await harness.app.tasks.retry(owner, { repository, task: jobs.fetch }), { id: jobs.fetch, state: 'queued' });
  await rejectsWith(t, harness.app.tasks.retry(owner, { repository, task: jobs.fetch }), 'conflict', /task is queued/);
});

t.test('retrying a source re-queues its failed tasks', async (t) => {
  const { source } = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/retry-tasks' });
  const failed = await enqueueJob(harness, 'deduplicate_facts', repository, source.id);
  await failQueuedJob(harness, 'deduplicate_facts');
  t.match(await harness.app.sources.retry(owner, { repository, source: source.id }), { id: source.id });
  t.match(await harness.app.tasks.get(owner, { repository, task: failed }), { state: 'queued' });
});
