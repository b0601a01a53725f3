import t from 'tap';
import { randomUUID } from 'node:crypto';
import { investigationDecider, type InvestigationCommand } from '../../../src/domain/investigation/decider.js';
import { eventually, registerUser, startTestService, waitForPipeline, type TestService } from '../../helpers/service.js';
import { CURIE_ARTICLE, startWebServer } from '../../helpers/webServer.js';

let service: TestService;
let web: Awaited<ReturnType<typeof startWebServer>>;
let token: string;
let repoId: string;
let otherRepoId: string;

const base = () => `/api/v1/repositories/${repoId}/investigations`;

t.before(async () => {
  web = await startWebServer({
    '/curie': { body: CURIE_ARTICLE },
    '/slow-curie': { body: CURIE_ARTICLE.replace('Marie Curie</title>', 'Slow Curie</title>') },
  });
  service = await startTestService();
  token = (await registerUser(service, 'investigator@example.org')).token;
  repoId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Radioactivity' } })).body.id;
  otherRepoId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Elsewhere' } })).body.id;
});
t.teardown(async () => {
  await service.close();
  await web.close();
});

t.test('an investigation gathers a URL, processes it, and lists its sources, facts, concepts and tasks', async (t) => {
  const created = await service.call('POST', base(), { token, body: { title: ' Polonium ', topic: 'Who discovered polonium, and where?' } });
  t.equal(created.status, 201);
  t.match(created.body, { title: 'Polonium', topic: 'Who discovered polonium, and where?', source_count: 0, repository_id: repoId });
  const id = created.body.id;

  const added = await service.call('POST', `${base()}/${id}/sources`, { token, body: { url: `${web.baseUrl}/curie` } });
  t.equal(added.status, 201, 'a new URL is registered and added');
  t.match(added.body, { added: true, registered: true, source: { url: `${web.baseUrl}/curie` } });
  const again = await service.call('POST', `${base()}/${id}/sources`, { token, body: { url: `${web.baseUrl}/curie` } });
  t.equal(again.status, 200, 'adding it again changes nothing');
  t.match(again.body, { added: false, registered: false, source: { id: added.body.source.id } });

  // A source the repository has already is linked, not registered again.
  const known = await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body: { url: `${web.baseUrl}/slow-curie` } });
  const linked = await service.call('POST', `${base()}/${id}/sources`, { token, body: { url: `${web.baseUrl}/slow-curie` } });
  t.equal(linked.status, 201);
  t.match(linked.body, { added: true, registered: false, source: { id: known.body.id } });

  const tasks = await eventually(async () => {
    const reply = await service.call('GET', `/api/v1/repositories/${repoId}/tasks?investigation_id=${id}`, { token });
    return reply.body.complete === true ? reply : null;
  }, 90_000);
  t.equal(tasks.status, 200);
  t.ok(tasks.body.total > 0, 'the tasks of its sources');
  t.ok(
    tasks.body.items.every((task: { source_id: string | null }) => [added.body.source.id, known.body.id].includes(task.source_id as string)),
    'only tasks of its sources',
  );
  await waitForPipeline(service, repoId, token);

  const sources = await service.call('GET', `${base()}/${id}/sources`, { token });
  t.same(sources.body.items.map((source: { id: string }) => source.id), [added.body.source.id, known.body.id], 'in the order added');
  t.ok(sources.body.items.every((source: { status: string }) => source.status === 'processed'));

  const facts = await service.call('GET', `${base()}/${id}/facts?limit=500`, { token });
  t.equal(facts.status, 200);
  const sourceFacts = await service.call('GET', `/api/v1/repositories/${repoId}/sources/${added.body.source.id}/facts?limit=500`, { token });
  t.equal(facts.body.total, sourceFacts.body.total, 'the same article twice: its facts once');
  t.equal(new Set(facts.body.items.map((fact: { id: string }) => fact.id)).size, facts.body.total, 'no fact listed twice');
  t.ok(facts.body.items.some((fact: { content: string }) => /polonium/i.test(fact.content)));

  const concepts = await service.call('GET', `${base()}/${id}/concepts?limit=100`, { token });
  t.equal(concepts.status, 200);
  t.ok(concepts.body.total > 0, 'the concepts of its facts');
  const counts: number[] = concepts.body.items.map((concept: { investigation_fact_count: number }) => concept.investigation_fact_count);
  t.same(counts, [...counts].sort((a, b) => b - a), 'most covered first');

  const read = await service.call('GET', `${base()}/${id}`, { token });
  t.equal(read.body.source_count, 2);

  const removed = await service.call('DELETE', `${base()}/${id}/sources/${known.body.id}`, { token });
  t.equal(removed.status, 204);
  t.same((await service.call('GET', `${base()}/${id}/sources`, { token })).body.items.map((source: { id: string }) => source.id), [added.body.source.id]);
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}/sources/${known.body.id}`, { token })).status, 200, 'the source stays in the repository');
  t.equal((await service.call('DELETE', `${base()}/${id}/sources/${known.body.id}`, { token })).status, 404, 'not in it any more');
});

t.test('list, search, edit and delete', async (t) => {
  const first = await service.call('POST', base(), { token, body: { title: 'Radium salts', topic: 'How was radium isolated?' } });
  const second = await service.call('POST', base(), { token, body: { title: 'Nobel prizes' } });
  t.equal(second.body.topic, '', 'topic defaults to empty');
  const all = await service.call('GET', `${base()}?limit=100`, { token });
  t.ok(all.body.items.findIndex((item: { id: string }) => item.id === second.body.id) < all.body.items.findIndex((item: { id: string }) => item.id === first.body.id), 'newest first');
  const found = await service.call('GET', `${base()}?query=isolated`, { token });
  t.same(found.body.items.map((item: { id: string }) => item.id), [first.body.id], 'search matches the topic');

  const edited = await service.call('PUT', `${base()}/${first.body.id}`, { token, body: { title: 'Radium' } });
  t.equal(edited.status, 200);
  t.match(edited.body, { title: 'Radium', topic: 'How was radium isolated?' });

  t.equal((await service.call('DELETE', `${base()}/${first.body.id}`, { token })).status, 204);
  t.equal((await service.call('GET', `${base()}/${first.body.id}`, { token })).status, 404, 'deleted');
  t.notOk((await service.call('GET', `${base()}?limit=100`, { token })).body.items.some((item: { id: string }) => item.id === first.body.id));
  t.equal((await service.call('PUT', `${base()}/${first.body.id}`, { token, body: { title: 'x' } })).status, 404);

  const events = await service.call('GET', `/api/v1/repositories/${repoId}/events?stream=investigation-${first.body.id}`, { token });
  t.same(events.body.events.map((event: { type: string }) => event.type), ['InvestigationCreated', 'InvestigationUpdated', 'InvestigationDeleted'], 'its history');
});

t.test('bad input is refused and nothing is written', async (t) => {
  const created = await service.call('POST', base(), { token, body: { title: 'Bad inputs' } });
  const id = created.body.id;
  const refused = async (method: string, url: string, body: unknown, status: number, what: string) => {
    const reply = await service.call(method, url, { token, body });
    t.equal(reply.status, status, `${what}: ${JSON.stringify(reply.body)}`);
    t.type(reply.body?.error, 'string', `${what}: an error code`);
  };
  await refused('POST', base(), { title: '   ' }, 400, 'blank title');
  await refused('POST', base(), { title: 'x'.repeat(201) }, 400, 'long title');
  await refused('POST', base(), { topic: 'no title' }, 400, 'missing title');
  await refused('PUT', `${base()}/${id}`, {}, 400, 'an empty change');
  await refused('POST', `${base()}/${id}/sources`, {}, 400, 'no source');
  await refused('POST', `${base()}/${id}/sources`, { url: 'ftp://example.org/x' }, 400, 'a non-http URL');
  await refused('POST', `${base()}/${id}/sources`, { url: `${web.baseUrl}/curie`, doi: '10.1/x' }, 400, 'two references');
  await refused('POST', `${base()}/${id}/sources`, { source_id: randomUUID() }, 404, 'an unknown source');
  await refused('POST', `${base()}/${randomUUID()}/sources`, { url: `${web.baseUrl}/curie` }, 404, 'an unknown investigation');
  await refused('GET', `/api/v1/repositories/${otherRepoId}/investigations/${id}`, undefined, 404, 'another repository');
  await refused('GET', `/api/v1/repositories/${repoId}/tasks?investigation_id=${id}&source_id=${randomUUID()}`, undefined, 400, 'both filters');
  await refused('GET', `/api/v1/repositories/${repoId}/tasks?investigation_id=${randomUUID()}`, undefined, 404, 'tasks of an unknown investigation');

  const read = await service.call('GET', `${base()}/${id}`, { token });
  t.match(read.body, { title: 'Bad inputs', source_count: 0 }, 'unchanged');
  const events = await service.call('GET', `/api/v1/repositories/${repoId}/events?stream=investigation-${id}`, { token });
  t.same(events.body.events.map((event: { type: string }) => event.type), ['InvestigationCreated'], 'no event from a refused command');
  const empty = await service.call('GET', `/api/v1/repositories/${repoId}/tasks?investigation_id=${id}`, { token });
  t.match(empty.body, { total: 0, complete: true }, 'an investigation without sources has nothing to wait for');
});

t.test('a reader reads investigations but cannot change them', async (t) => {
  const reader = await registerUser(service, 'reader@example.org');
  const admin = await service.call('POST', '/api/v1/auth/login', { body: { email: 'investigator@example.org', password: 'correct horse battery' } });
  const grant = await service.call('PUT', '/api/v1/admin/users/roles', {
    token: admin.body.token,
    body: { user_id: reader.user.id, role: 'reader', domain: `repository:${repoId}` },
  });
  t.equal(grant.status, 200);
  const created = await service.call('POST', base(), { token, body: { title: 'Shared' } });
  t.equal((await service.call('GET', `${base()}/${created.body.id}`, { token: reader.token })).status, 200);
  t.equal((await service.call('POST', base(), { token: reader.token, body: { title: 'Mine' } })).status, 403);
  t.equal((await service.call('PUT', `${base()}/${created.body.id}`, { token: reader.token, body: { title: 'x' } })).status, 403);
  t.equal((await service.call('DELETE', `${base()}/${created.body.id}`, { token: reader.token })).status, 403);
  t.equal((await service.call('POST', `${base()}/${created.body.id}/sources`, { token: reader.token, body: { url: `${web.baseUrl}/curie` } })).status, 403);
  const stranger = await registerUser(service, 'stranger@example.org');
  t.equal((await service.call('GET', `${base()}/${created.body.id}`, { token: stranger.token })).status, 404, 'no role, no access: not even to knowing the repository');
});

t.test('a known URL is taken with investigations:write alone; a new one needs sources:create', async (t) => {
  const key = await service.call('POST', '/api/v1/users/me/api-keys', { token, body: { name: 'gatherer', scopes: ['investigations:write', 'investigations:read', 'sources:read'] } });
  t.equal(key.status, 201);
  const investigation = (await service.call('POST', base(), { token, body: { title: 'Gathered' } })).body;
  const known = (await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body: { url: `${web.baseUrl}/curie` } })).body;
  const taken = await service.call('POST', `${base()}/${investigation.id}/sources`, { token: key.body.key, body: { url: `${web.baseUrl}/curie` } });
  t.equal(taken.status, 201);
  t.match(taken.body, { added: true, registered: false, source: { id: known.id } });
  const fresh = await service.call('POST', `${base()}/${investigation.id}/sources`, { token: key.body.key, body: { url: `${web.baseUrl}/never-added` } });
  t.equal(fresh.status, 403);
  t.match(fresh.body.message, /sources:create/);
});

t.test('a deleted source: not counted, and not there to remove', async (t) => {
  const investigation = (await service.call('POST', base(), { token, body: { title: 'Leavers' } })).body;
  const source = (await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body: { doi: '10.5555/leaver' } })).body;
  t.equal((await service.call('POST', `${base()}/${investigation.id}/sources`, { token, body: { source_id: source.id } })).status, 201);
  t.equal((await service.call('DELETE', `/api/v1/repositories/${repoId}/sources/${source.id}`, { token })).status, 204);
  // As a link added while its source was being deleted left it before the two were made one at a time (a log keeps it).
  const execute = (command: InvestigationCommand) =>
    service.context.commands.execute(`investigation-${investigation.id}`, investigationDecider, command, { repositoryId: repoId, actor: 'test', causationId: null, correlationId: null });
  await execute({ type: 'RemoveInvestigationSource', sourceId: source.id });
  await execute({ type: 'AddInvestigationSource', sourceId: source.id, liveSources: 0 });
  const read = await service.call('GET', `${base()}/${investigation.id}`, { token });
  t.equal(read.body.source_count, 0, 'the count is of live sources, as the list');
  t.equal((await service.call('GET', `${base()}/${investigation.id}/sources`, { token })).body.total, 0);
  const removed = await service.call('DELETE', `${base()}/${investigation.id}/sources/${source.id}`, { token });
  t.equal(removed.status, 404, 'a deleted source is not there to remove');
});

t.test('a source linked while it is deleted: linked before the deletion, or not found; no link is left behind', async (t) => {
  const investigation = (await service.call('POST', base(), { token, body: { title: 'Raced links' } })).body;
  const sourcesUrl = `/api/v1/repositories/${repoId}/sources`;
  for (let round = 0; round < 4; round++) {
    const source = (await service.call('POST', sourcesUrl, { token, body: { url: `http://127.0.0.1:9/raced-link-${round}` } })).body;
    const [link, deletion] = await Promise.all([
      service.call('POST', `${base()}/${investigation.id}/sources`, { token, body: { source_id: source.id } }),
      service.call('DELETE', `${sourcesUrl}/${source.id}`, { token }),
    ]);
    t.equal(deletion.status, 204);
    const log = await service.context.store.readStreams([`investigation-${investigation.id}`, `source-${source.id}`]);
    const linkedAt = log.get(`investigation-${investigation.id}`)?.find((event) => event.type === 'InvestigationSourceAdded' && event.data.source_id === source.id)?.globalPosition;
    const deletedAt = log.get(`source-${source.id}`)?.find((event) => event.type === 'SourceDeleted')?.globalPosition ?? 0;
    if (link.status === 201) t.ok(linkedAt !== undefined && linkedAt < deletedAt, 'a link answered 201 was made before the deletion');
    else t.same([link.status, link.body.error, linkedAt], [404, 'not_found', undefined], 'a link answered 404 made nothing');
    t.same(await service.context.db.knex('investigation_sources').where({ source_id: source.id }).pluck('investigation_id'), [], 'no link outlives the deletion');
  }
  t.equal((await service.call('GET', `${base()}/${investigation.id}`, { token })).body.source_count, 0);
});

t.test('deletions of one investigation sent together: one deletes it, the others find it deleted', async (t) => {
  for (let round = 0; round < 3; round++) {
    const investigation = (await service.call('POST', base(), { token, body: { title: `Deleted thrice ${round}` } })).body;
    const deletions = await Promise.all([0, 1, 2].map(() => service.call('DELETE', `${base()}/${investigation.id}`, { token })));
    t.same(deletions.map((reply) => reply.status).sort(), [204, 404, 404], 'as a deletion sent after it would');
    t.same(deletions.filter((reply) => reply.status === 404).map((reply) => reply.body.message), ['investigation was deleted', 'investigation was deleted']);
    const deleted = (await service.context.store.readStream(`investigation-${investigation.id}`)).filter((event) => event.type === 'InvestigationDeleted');
    t.equal(deleted.length, 1, 'one deletion recorded');
  }
});
