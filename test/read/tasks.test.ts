import { randomUUID } from 'node:crypto';
import t from 'tap';
import type { Principal } from '../../src/auth/rbac.js';
import { enqueueJob, failQueuedJob, rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';

let harness: TestApplication;
let owner: Principal;
let stranger: Principal;
let repository: string;
let elsewhere: string;
const sourceId = randomUUID();
const jobs: Record<string, string> = {};

t.before(async () => {
  harness = await startTestApplication({ name: 'Tasks' });
  ({ owner, stranger, repository } = harness);
  elsewhere = (await harness.app.repositories.create(owner, { name: 'Elsewhere' })).id;
  owner = await harness.refreshed(owner);
  jobs.fetch = await enqueueJob(harness, 'retrieve_source', repository, sourceId);
  await failQueuedJob(harness, 'retrieve_source');
  jobs.embed = await enqueueJob(harness, 'embed_facts', repository, sourceId);
  jobs.other = await enqueueJob(harness, 'embed_facts', elsewhere, sourceId);
});
t.teardown(() => harness.close());

t.test('list, counts and completeness of a source', async (t) => {
  const list = await harness.app.tasks.list(owner, { repository, source_id: sourceId });
  t.equal(list.total, 2);
  t.same(list.counts.retrieve_source, { queued: 0, running: 0, succeeded: 0, failed: 1, dead: 0 });
  t.equal(list.complete, false, 'embedding is still queued');
  t.same((await harness.app.tasks.list(owner, { repository, state: 'failed' })).items.map((task) => task.id), [jobs.fetch]);
  const stats = await harness.app.tasks.stats(owner, { repository });
  t.same(stats.totals, { queued: 1, running: 0, succeeded: 0, failed: 1, dead: 0 });
});

t.test('one task; a task of another repository is not there', async (t) => {
  t.match(await harness.app.tasks.get(owner, { repository, task: jobs.fetch }), { id: jobs.fetch, state: 'failed', last_error: /410/ });
  await rejectsWith(t, harness.app.tasks.get(owner, { repository, task: jobs.other }), 'not_found', /task not found/);
  await rejectsWith(t, harness.app.tasks.get(owner, { repository, task: 'not-a-uuid' }), 'not_found');
  await rejectsWith(t, harness.app.tasks.get(stranger, { repository, task: jobs.fetch }), 'forbidden', /jobs:read/);
  await rejectsWith(t, harness.app.tasks.list(owner, { repository, offset: -5 }), 'invalid');
});
