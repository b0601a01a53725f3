import t, { type Test } from 'tap';
import { registerUser, startTestService, waitForPipeline } from '../../helpers/service.js';
import { CURIE_ARTICLE, startWebServer } from '../../helpers/webServer.js';

/**
 * Retrying a source: a failed source starts over (covered in sources.test.ts); a processed
 * source whose later stage failed gets those tasks re-queued; anything else has nothing to retry.
 */
/** One service for the file: each subtest has a user and a repository of its own, and reads only its repository's tasks and sources. */
let shared: ReturnType<typeof startTestService> | null = null;
t.teardown(async () => {
  if (shared) await (await shared).close();
});
let fixtures = 0;

/** The file's service, a web server of `pages` (closed when `t` ends), a new user and a repository. */
async function retryFixture(t: Test, pages: Parameters<typeof startWebServer>[0]) {
  const web = await startWebServer(pages);
  t.teardown(() => web.close());
  const service = await (shared ??= startTestService());
  fixtures += 1;
  const { token } = await registerUser(service, `retry-${fixtures}@example.org`);
  const repoId: string = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Retries' } })).body.id;
  return { web, service, token, repoId };
}

/** retryFixture with a source of `path` that the server did not have when it was fetched: failed for good (404). */
async function failedSourceFixture(t: Test, path: string) {
  const pages: Parameters<typeof startWebServer>[0] = {};
  const fixture = await retryFixture(t, pages);
  const { web, service, token, repoId } = fixture;
  const sourceUrl = `/api/v1/repositories/${repoId}/sources`;
  const source = (await service.call('POST', sourceUrl, { token, body: { url: `${web.baseUrl}${path}` } })).body;
  await waitForPipeline(service, repoId, token);
  t.equal((await service.call('GET', `${sourceUrl}/${source.id}`, { token })).body.status, 'failed');
  return { ...fixture, pages, sourceUrl, source };
}

t.test('retrying a processed source re-queues its failed tasks, and only those', async (t) => {
  const { web, service, token, repoId } = await retryFixture(t, { '/curie': { body: CURIE_ARTICLE } });
  const source = (await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body: { url: `${web.baseUrl}/curie` } })).body;
  await waitForPipeline(service, repoId, token);

  const nothing = await service.call('POST', `/api/v1/repositories/${repoId}/sources/${source.id}/retry`, { token });
  t.equal(nothing.status, 409, 'a processed source with no failed task has nothing to retry');
  t.equal(nothing.body.error, 'conflict');
  t.match(nothing.body.message, /nothing to retry/);

  // Given: the source's concept extraction ended failed (as a permanent model failure leaves it).
  const knex = service.context.db.knex;
  const extraction = await knex('jobs').where({ source_id: source.id, kind: 'extract_concepts' }).first();
  t.ok(extraction, 'the source had a concept-extraction task');
  await knex('jobs').where({ id: extraction.id }).update({ state: 'failed', last_error: 'the provider answered 401' });
  const failedTasks = await service.call('GET', `/api/v1/repositories/${repoId}/tasks?source_id=${source.id}&state=failed`, { token });
  t.equal(failedTasks.body.total, 1, 'the failure is visible in the tasks API');
  t.match(failedTasks.body.items[0].last_error, /401/);

  const together = await Promise.all(Array.from({ length: 6 }, () => service.call('POST', `/api/v1/repositories/${repoId}/sources/${source.id}/retry`, { token })));
  t.same(together.map((reply) => reply.status).sort(), [202, 409, 409, 409, 409, 409], 'retries sent together: one re-queues the task, the others find nothing to retry');
  const retried = together.find((reply) => reply.status === 202)!;
  t.equal(retried.body.status, 'processed', 'the source itself did not fail');
  await waitForPipeline(service, repoId, token);
  const after = await knex('jobs').where({ id: extraction.id }).first();
  t.equal(after.state, 'succeeded', 'the failed task ran again and succeeded');
  t.equal(after.attempts, 1);

  const unknown = await service.call('POST', `/api/v1/repositories/${repoId}/sources/00000000-0000-4000-8000-000000000000/retry`, { token });
  t.equal(unknown.status, 404);
});

t.test('a source that failed and started over has nothing left to retry', async (t) => {
  // Not there yet: the fetch fails for good (404), and the source with it.
  const { web, service, token, repoId, pages, sourceUrl, source } = await failedSourceFixture(t, '/later');
  const tasks = `/api/v1/repositories/${repoId}/tasks`;
  const failedTask = (await service.call('GET', `${tasks}?source_id=${source.id}&state=failed`, { token })).body.items[0];
  t.equal(failedTask?.kind, 'retrieve_source');
  // The task alone cannot run again: the stages do nothing for a failed source.
  const alone = await service.call('POST', `${tasks}/${failedTask.id}/retry`, { token });
  t.equal(alone.status, 409);
  t.match(alone.body.message, /retry the source/);
  t.equal((await service.call('GET', `${tasks}/${failedTask.id}`, { token })).body.state, 'failed', 'and its failure stays on record');

  pages['/later'] = { body: CURIE_ARTICLE };
  t.equal((await service.call('POST', `${sourceUrl}/${source.id}/retry`, { token })).status, 202, 'the failed source starts over');
  await waitForPipeline(service, repoId, token);
  t.equal((await service.call('GET', `${sourceUrl}/${source.id}`, { token })).body.status, 'processed');
  const fetches = web.hits.get('/later');

  const again = await service.call('POST', `${sourceUrl}/${source.id}/retry`, { token });
  t.equal(again.status, 409, "the first fetch's failed task was taken over by the retry's: nothing to retry");
  await waitForPipeline(service, repoId, token);
  t.equal(web.hits.get('/later'), fetches, 'and the page is not fetched again');
  const taken = await service.call('POST', `${tasks}/${failedTask.id}/retry`, { token });
  t.equal(taken.status, 409, 'nor through the tasks route');
  t.match(taken.body.message, /took this one's place/);
});

t.test('retries and deletions sent together: one of them acts, the others are told it was done', async (t) => {
  const { web, service, token, repoId, pages, sourceUrl, source } = await failedSourceFixture(t, '/soon');
  pages['/soon'] = { body: CURIE_ARTICLE };
  const failedFetches = web.hits.get('/soon') ?? 0;

  // A route that takes no body refuses one with fields, naming them; `{}` is no body.
  const withBody = await service.call('POST', `${sourceUrl}/${source.id}/retry`, { token, body: { x: 1 } });
  t.equal(withBody.status, 400);
  t.match(withBody.body, { error: 'bad_request', message: /'x'.*this route takes no body/ });
  t.equal((await service.call('DELETE', `${sourceUrl}/${source.id}`, { token, body: [1] })).status, 400, 'nor an array');
  t.equal((await service.call('GET', `${sourceUrl}/${source.id}`, { token })).body.status, 'failed', 'and nothing happened');
  const retries = await Promise.all(Array.from({ length: 8 }, () => service.call('POST', `${sourceUrl}/${source.id}/retry`, { token })));
  t.same(retries.map((reply) => reply.status).sort(), [202, 409, 409, 409, 409, 409, 409, 409], 'one retry starts the source over');
  const log = await service.context.store.readStream(`source-${source.id}`);
  t.equal(log.filter((event) => event.type === 'SourceRetryRequested').length, 1);
  await waitForPipeline(service, repoId, token);
  t.equal(web.hits.get('/soon'), failedFetches + 1, 'the page is fetched once more');

  const deletions = await Promise.all(Array.from({ length: 5 }, () => service.call('DELETE', `${sourceUrl}/${source.id}`, { token })));
  t.same(deletions.map((reply) => reply.status).sort(), [204, 404, 404, 404, 404], 'one deletion; the others find the source deleted');
  t.equal((await service.context.store.readStream(`source-${source.id}`)).filter((event) => event.type === 'SourceDeleted').length, 1);
});

t.test('a retry and a deletion of a failed source sent together: a retry answered 202 was made before the deletion, one answered 404 was not made', async (t) => {
  const { web, service, token, repoId } = await retryFixture(t, {});
  const sourceUrl = `/api/v1/repositories/${repoId}/sources`;
  const sources: Array<{ id: string }> = [];
  for (let n = 0; n < 4; n++) sources.push((await service.call('POST', sourceUrl, { token, body: { url: `${web.baseUrl}/missing-${n}` } })).body);
  await waitForPipeline(service, repoId, token);
  const raced = await Promise.all(
    sources.map(async (source) => {
      const [retry, deletion] = await Promise.all([
        service.call('POST', `${sourceUrl}/${source.id}/retry`, { token }),
        service.call('DELETE', `${sourceUrl}/${source.id}`, { token }),
      ]);
      return { source, retry, deletion };
    }),
  );
  for (const { source, retry, deletion } of raced) {
    t.equal(deletion.status, 204, 'the deletion is made either way');
    const types = (await service.context.store.readStream(`source-${source.id}`)).map((event) => event.type);
    const retried = types.indexOf('SourceRetryRequested');
    if (retry.status === 202) t.ok(retried !== -1 && retried < types.indexOf('SourceDeleted'), 'a retry answered 202 was recorded before the deletion');
    else t.same([retry.status, retry.body.error, retried], [404, 'not_found', -1], 'a retry answered 404 recorded nothing');
    t.equal((await service.call('GET', `${sourceUrl}/${source.id}`, { token })).status, 404);
  }
});
