import { randomUUID } from 'node:crypto';
import t from 'tap';
import { withSourceLock } from '../../src/app/sources.js';
import type { Principal } from '../../src/auth/rbac.js';
import { sourceDecider } from '../../src/domain/source/decider.js';
import { streamName } from '../../src/eventstore/envelope.js';
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

t.test("retrying a task of a deleted source is refused, and the task stays failed; its deletion's cleanup can be retried", async (t) => {
  const { source } = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/retry-deleted' });
  const failed = await enqueueJob(harness, 'extract_concepts', repository, source.id);
  await failQueuedJob(harness, 'extract_concepts');
  await harness.app.sources.remove(owner, { repository, source: source.id });
  await rejectsWith(t, harness.app.tasks.retry(owner, { repository, task: failed }), 'conflict', /source was deleted/);
  t.match(await harness.app.tasks.get(owner, { repository, task: failed }), { state: 'failed' }, 'not queued again');
  // The job intake queued the deletion's cleanup_facts (no workers run here to take it).
  const { jobs: [cleanup] } = await harness.service.context.jobs.list({ repositoryId: repository, sourceId: source.id, kind: 'cleanup_facts', limit: 10 });
  await failQueuedJob(harness, 'cleanup_facts');
  t.match(await harness.app.tasks.retry(owner, { repository, task: cleanup.id }), { id: cleanup.id, state: 'queued' }, 'the cleanup the deletion started is retried');
});

t.test('a task retry waits for a deletion of its source that is underway, and then finds the source gone', async (t) => {
  const { source } = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/retry-racing-delete' });
  const failed = await enqueueJob(harness, 'refine_concepts', repository, source.id);
  await failQueuedJob(harness, 'refine_concepts');
  const { db, commands } = harness.service.context;
  let retry!: Promise<unknown>;
  // A deletion holding the source's lock, as sources.remove does: it has loaded the source, and appends after the retry has started.
  await withSourceLock(db, source.id, async () => {
    retry = harness.app.tasks.retry(owner, { repository, task: failed }).catch((error: unknown) => error);
    // Time for a retry that takes no lock to look at the source and queue the task before the deletion lands.
    await Promise.race([retry, new Promise((resolve) => setTimeout(resolve, 500))]);
    await commands.execute(streamName('source', source.id), sourceDecider, { type: 'DeleteSource' }, { repositoryId: repository, actor: owner.userId, causationId: null, correlationId: null });
  });
  t.match(await retry, { name: 'DomainError', code: 'conflict', message: /source was deleted/ }, 'the retry came after the deletion: the source is gone');
  t.match(await harness.app.tasks.get(owner, { repository, task: failed }), { state: 'failed' }, 'nothing queued for a deleted source');
});
