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
  await rejectsWith(t, harness.app.tasks.get(stranger, { repository, task: jobs.fetch }), 'not_found', /^repository not found$/);
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

/** Queues a job of `kind` for `source` at trigger position `position` (jobs of one event share it). */
async function enqueueAt(kind: string, source: string, position: number): Promise<string> {
  const job = { kind, subjectId: source, sourceId: source, triggerEventId: randomUUID(), triggerPosition: position, repositoryId: repository, correlationId: null };
  return (await harness.service.context.jobs.enqueue(job)).id;
}

/** Every page of a list of `source`'s tasks, walked by cursor `limit` at a time; `between` runs before each next page. */
async function walk(source: string, limit: number, state?: 'queued', between: (page: number) => Promise<void> = async () => {}): Promise<string[][]> {
  const pages: string[][] = [];
  let cursor: string | undefined;
  do {
    if (pages.length > 0) await between(pages.length);
    const page = await harness.app.tasks.list(owner, { repository, source_id: source, state, limit, cursor });
    pages.push(page.items.map((task) => task.id));
    cursor = page.next_cursor ?? undefined;
  } while (cursor !== undefined && pages.length < 20);
  return pages;
}

t.test('a state-filtered list pages on from the last task shown: one leaving the state, or a new one, between pages is neither skipped nor repeated', async (t) => {
  const source = randomUUID();
  // Oldest first; each kind queued once in this database, so claiming a kind claims that job.
  const kinds = ['source_decomposition', 'deduplicate_facts', 'extract_concepts', 'refine_concepts', 'embed_concepts'];
  const queued: string[] = [];
  for (const kind of kinds) queued.push(await enqueueAt(kind, source, 1000 + queued.length));
  const newestFirst = [...queued].reverse();
  let added = '';
  const pages = await walk(source, 2, 'queued', async (page) => {
    // After page 1, its second job starts running (by an offset, page 2 skipped one);
    // after page 2, a newer job is queued (by an offset, page 3 repeated one).
    if (page === 1) t.equal((await harness.service.context.jobs.claim('refine_concepts', 'test-worker', { leaseMs: 60_000 }))?.id, newestFirst[1]);
    if (page === 2) added = await enqueueAt('embed_concepts', source, 2000);
  });
  t.same(pages, [newestFirst.slice(0, 2), newestFirst.slice(2, 4), newestFirst.slice(4)], 'each queued job once, in order, and the walk ends');
  t.notOk(pages.flat().includes(added), 'the job added meanwhile is before the walk began');
});

t.test('ties on the time (and on the trigger position) page in the list\'s order', async (t) => {
  const source = randomUUID();
  const ids: string[] = [];
  // Three of one event, two of another, one of a third: the intake enqueues an event's jobs in one statement.
  for (const [index, position] of [3000, 3000, 3000, 3001, 3001, 3002].entries()) ids.push(await enqueueAt(['cleanup_facts', 'summarize_concepts', 'synthesize_concept'][index % 3]!, source, position));
  const older = await enqueueAt('refresh_concept_relations', source, 3003);
  const { knex } = harness.service.context.db;
  await knex('jobs').whereIn('id', ids).update({ created_at: '2030-01-01T00:00:00.123456Z' });
  await knex('jobs').where({ id: older }).update({ created_at: '2030-01-01T00:00:00.123455Z' });
  const byId = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  const expected = [...ids.slice(5), ...ids.slice(3, 5).sort(byId), ...ids.slice(0, 3).sort(byId), older];
  t.same((await harness.app.tasks.list(owner, { repository, source_id: source })).items.map((task) => task.id), expected, 'time, then position (latest first), then id');
  for (const limit of [1, 2, 4]) t.same((await walk(source, limit)).flat(), expected, `${limit} a page: each once, in order (a microsecond apart is not a tie)`);
});

t.test('a cursor this list did not return is invalid', async (t) => {
  const source = randomUUID();
  await enqueueAt('cleanup_facts', source, 4000);
  await enqueueAt('cleanup_facts', source, 4001);
  const first = await harness.app.tasks.list(owner, { repository, source_id: source, limit: 1 });
  t.type(first.next_cursor, 'string');
  const list = (cursor: string, offset?: number) => harness.app.tasks.list(owner, { repository, source_id: source, cursor, offset });
  const cursor = (text: string) => Buffer.from(text).toString('base64url');
  const id = randomUUID();
  for (const bad of [
    'nonsense',
    cursor('o:2'), // the offsets the tasks' cursors were
    cursor(`k:["2030-01-01 00:00:00+00","${id}"]`), // a sources search's
    cursor(`t:["2030-01-01T00:00:00.000000Z","1"]`),
    cursor(`t:["2030-02-30T00:00:00.000000Z","1","${id}"]`),
    cursor(`t:["2030-01-01 00:00:00","1","${id}"]`),
    cursor(`t:["2030-01-01T00:00:00.000000Z","9223372036854775808","${id}"]`),
    cursor(`t:["2030-01-01T00:00:00.000000Z","-1","${id}"]`),
    cursor('t:["2030-01-01T00:00:00.000000Z","1","not-a-uuid"]'),
    cursor(`t:["2030-01-01T00:00:00.000000Z",1,"${id}"]`),
  ]) {
    await rejectsWith(t, list(bad), 'invalid', /cursor/);
  }
  await rejectsWith(t, list(first.next_cursor!, 1), 'invalid', /offset or cursor/);
  t.same((await list(cursor(`t:["2030-01-01T00:00:00.000000Z","9223372036854775807","${id}"]`))).items.length, 2, 'a well-formed position pages on from there');
});
