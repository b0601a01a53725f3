import { randomUUID } from 'node:crypto';
import t from 'tap';
import type { Principal } from '../../src/auth/rbac.js';
import { taskQueries } from '../../src/read/tasks.js';
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

t.test('the tasks of a source or report that does not exist: not found, rather than complete', async (t) => {
  await rejectsWith(t, harness.app.tasks.list(owner, { repository, source_id: randomUUID() }), 'not_found', /source not found/);
  await rejectsWith(t, harness.app.tasks.list(owner, { repository, source_id: 'garbage' }), 'not_found', /source not found/);
  await rejectsWith(t, harness.app.tasks.list(owner, { repository, report_id: randomUUID() }), 'not_found', /report not found/);
  t.equal((await harness.app.tasks.list(owner, { repository, source_id: sourceId })).total, 2, 'tasks of a source no longer in the read model (deleted) stay listed');
});

t.test('one task; a task of another repository is not there', async (t) => {
  t.match(await harness.app.tasks.get(owner, { repository, task: jobs.fetch }), { id: jobs.fetch, state: 'failed', last_error: /410/ });
  await rejectsWith(t, harness.app.tasks.get(owner, { repository, task: jobs.other }), 'not_found', /task not found/);
  await rejectsWith(t, harness.app.tasks.get(owner, { repository, task: 'not-a-uuid' }), 'not_found');
  await rejectsWith(t, harness.app.tasks.get(stranger, { repository, task: jobs.fetch }), 'forbidden', /jobs:read/);
  await rejectsWith(t, harness.app.tasks.list(owner, { repository, offset: -5 }), 'invalid');
});

t.test('complete: nothing pending, the read models through the log head, and no job changed meanwhile', async (t) => {
  const context = harness.service.context;
  const quiet = (await harness.app.repositories.create(owner, { name: 'Quiet' })).id;
  owner = await harness.refreshed(owner);
  t.equal((await harness.app.tasks.list(owner, { repository: quiet })).complete, true, 'no job at all, read models caught up');
  t.equal((await harness.app.tasks.stats(owner, { repository: quiet })).complete, true);

  // A job that just finished has its follow-up enqueued only once the job intake applies its events.
  const asked: number[] = [];
  const lagging = taskQueries({ ...context, projections: { ...context.projections, caughtUp: async (position) => (asked.push(position), false) } });
  t.equal((await lagging.list(owner, { repository: quiet })).complete, false, 'the intake has not applied the log yet');
  t.equal((await lagging.stats(owner, { repository: quiet })).complete, false);
  t.same(asked, [await context.store.headPosition(), await context.store.headPosition()], 'through the head as read after the counts');

  // A job enqueued (or claimed, or finished) between the first and the second read of the counts.
  let reads = 0;
  const jobs = Object.create(context.jobs) as typeof context.jobs;
  jobs.countsFor = async (filter) => {
    const counts = await context.jobs.countsFor(filter);
    reads += 1;
    return reads === 2 ? { ...counts, summarize_concept: { queued: 1, running: 0, succeeded: 0, failed: 0, dead: 0 } } : counts;
  };
  t.equal((await taskQueries({ ...context, jobs }).list(owner, { repository: quiet })).complete, false, 'a job appeared while the read models caught up');
  t.equal(reads, 2);

  t.equal((await lagging.list(owner, { repository, source_id: sourceId })).complete, false);
  t.same(asked.length, 2, 'with a job still queued the read models are not asked');
});
