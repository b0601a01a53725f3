import t from 'tap';
import { randomUUID } from 'node:crypto';
import { registerUser, startTestService, waitForPipeline, type TestService } from '../../helpers/service.js';
import { startCorpusServer } from '../../helpers/corpus.js';
import { CURIE_ARTICLE } from '../../helpers/webServer.js';

/**
 * Deleting a source: it leaves every read and investigation at once; its facts that another
 * source has stay; the rest are retracted by cleanup_facts (FactRetracted, with the source and
 * the reason), leave search and their concepts' counts, and the history says what did it.
 */
let service: TestService;
let web: Awaited<ReturnType<typeof startCorpusServer>>;
let token: string;
let repoId: string;

const api = (method: string, url: string, body?: unknown) => service.call(method, `/api/v1/repositories/${repoId}${url}`, { token, body });

t.before(async () => {
  web = await startCorpusServer({
    '/curie': { body: CURIE_ARTICLE },
    '/curie-copy': { body: CURIE_ARTICLE.replace('Marie Curie</title>', 'Marie Curie (copy)</title>') },
  });
  service = await startTestService();
  token = (await registerUser(service, 'curator@example.org')).token;
  repoId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Deletions' } })).body.id;
});
t.teardown(async () => {
  await service.close();
  await web.close();
});

t.test('a deleted source leaves; facts no other source has are retracted, with the reason in the history', async (t) => {
  const other = web.documents.find((document) => document.kind === 'html') as { url: string };
  const original = (await api('POST', '/sources', { url: `${web.baseUrl}/curie` })).body;
  const copy = (await api('POST', '/sources', { url: `${web.baseUrl}/curie-copy` })).body;
  const unrelated = (await api('POST', '/sources', { url: other.url })).body;
  const investigation = (await api('POST', '/investigations', { title: 'Curie' })).body;
  await api('POST', `/investigations/${investigation.id}/sources`, { source_id: original.id });
  await waitForPipeline(service, repoId, token);
  // A report whose sentence the Curie article supports.
  const report = (await api('POST', '/reports', { title: 'Notes', text: 'Marie Curie discovered polonium and radium with Pierre Curie in 1898.' })).body;
  await waitForPipeline(service, repoId, token);
  const annotatedFacts = async () =>
    ((await api('GET', `/reports/${report.id}/annotations`)).body.items as Array<{ facts: Array<{ fact_id: string }> }>).flatMap((sentence) =>
      sentence.facts.map((fact) => fact.fact_id),
    );
  t.ok((await annotatedFacts()).length > 0, 'the report is annotated with Curie facts');

  const curieFacts = (await api('GET', `/sources/${original.id}/facts?limit=500`)).body;
  // The concepts whose summaries hold Curie facts now.
  const summarizedBefore: string[] = [];
  for (const concept of (await api('GET', '/concepts?show_small=true&limit=500&mode=lexical')).body.items as Array<{ id: string }>) {
    const slices = (await api('GET', `/concepts/${concept.id}/summaries?limit=100`)).body.items as Array<{ fact_ids: string[] }>;
    if (slices.some((slice) => slice.fact_ids.some((id) => curieFacts.items.some((fact: { id: string }) => fact.id === id)))) summarizedBefore.push(concept.id);
  }
  t.ok(summarizedBefore.length > 0, 'some concept summarises Curie facts');
  const unrelatedFacts = (await api('GET', `/sources/${unrelated.id}/facts?limit=500`)).body;
  const before = (await api('GET', '/facts?limit=1&mode=lexical')).body.total;
  t.ok(curieFacts.total > 0 && unrelatedFacts.total > 0);
  const polonium = async () => (await api('GET', `/facts?query=${encodeURIComponent('polonium')}&mode=lexical`)).body.total;
  t.ok((await polonium()) > 0);

  // The first copy goes: its facts stay, the copy has them too.
  t.equal((await service.call('DELETE', `/api/v1/repositories/${repoId}/sources/${original.id}?reason=${encodeURIComponent('a duplicate of the copy')}`, { token })).status, 204);
  t.equal((await api('GET', `/sources/${original.id}`)).status, 404, 'gone from the reads at once');
  t.notOk((await api('GET', '/sources?limit=500')).body.items.some((source: { id: string }) => source.id === original.id));
  t.same((await api('GET', `/investigations/${investigation.id}/sources`)).body.items, [], 'and from the investigation');
  await waitForPipeline(service, repoId, token);
  t.equal((await api('GET', '/facts?limit=1&mode=lexical')).body.total, before, 'facts another source has stay');
  t.equal((await api('GET', `/sources/${copy.id}/facts?limit=500`)).body.total, curieFacts.total);

  // The copy goes too: now its facts are no one's.
  t.equal((await service.call('DELETE', `/api/v1/repositories/${repoId}/sources/${copy.id}`, { token })).status, 204);
  await waitForPipeline(service, repoId, token);
  t.equal((await api('GET', '/facts?limit=1&mode=lexical')).body.total, before - curieFacts.total, 'its facts are retracted');
  t.equal(await polonium(), 0, 'and no longer found');
  const hybrid = (await api('GET', `/facts?query=${encodeURIComponent('Marie Curie discovered polonium')}&limit=100`)).body;
  t.notOk(
    hybrid.items.some((fact: { id: string }) => curieFacts.items.some((gone: { id: string }) => gone.id === fact.id)),
    'nor by their vectors',
  );
  t.equal((await api('GET', `/sources/${unrelated.id}/facts?limit=500`)).body.total, unrelatedFacts.total, 'other sources keep theirs');
  const curieIds = new Set(curieFacts.items.map((fact: { id: string }) => fact.id));
  for (const concept of summarizedBefore) {
    const summaries = (await api('GET', `/concepts/${concept}/summaries?limit=100`)).body;
    if (summaries.items === undefined) continue; // a concept left with no facts may be gone from reads
    const cited = (summaries.items as Array<{ fact_ids: string[] }>).flatMap((slice) => slice.fact_ids);
    t.notOk(cited.some((id) => curieIds.has(id)), `concept ${concept}: no slice holds a retracted fact`);
    const definition = (await api('GET', `/concepts/${concept}/definition`)).body;
    t.notOk(((definition.synthesis?.fact_ids ?? []) as string[]).some((id) => curieIds.has(id)), `concept ${concept}: its synthesis cites none`);
  }
  t.notOk((await annotatedFacts()).some((id) => curieIds.has(id)), 'the report no longer cites them');
  t.equal((await api('GET', `/reports/${report.id}`)).body.fact_count, (await annotatedFacts()).length, "and its fact count follows");
  const concepts = (await api('GET', '/concepts?show_small=true&limit=500&mode=lexical')).body.items as Array<{ id: string; fact_count: number }>;
  for (const concept of concepts) {
    const facts = (await api('GET', `/concepts/${concept.id}/facts?limit=500`)).body;
    t.equal(concept.fact_count, facts.total, `concept ${concept.id}: its count matches its facts`);
  }

  const factId = curieFacts.items[0].id;
  const history = (await api('GET', `/events?stream=fact-${factId}`)).body.events as Array<{ type: string; data: Record<string, unknown>; actor: string }>;
  const retracted = history.find((event) => event.type === 'FactRetracted');
  t.match(retracted, { data: { source_id: copy.id, reason: 'source deleted' }, actor: 'system:cleanup_facts' }, 'the fact says which deletion took it');
  const deletions = (await api('GET', '/events?types=SourceDeleted')).body.events as Array<{ stream_id: string; data: { reason: string | null } }>;
  t.same(
    deletions.map((event) => [event.stream_id, event.data.reason]),
    [
      [`source-${original.id}`, 'a duplicate of the copy'],
      [`source-${copy.id}`, null],
    ],
    'and the deletions say who and why',
  );

  // The URL can come back: a new source, processed again, its facts back.
  const again = await api('POST', '/sources', { url: `${web.baseUrl}/curie` });
  t.equal(again.status, 201, 'a new source');
  t.not(again.body.id, original.id);
  await waitForPipeline(service, repoId, token);
  t.equal((await api('GET', `/sources/${again.body.id}`)).body.status, 'processed');
  t.equal((await api('GET', '/facts?limit=1&mode=lexical')).body.total, before - curieFacts.total + curieFacts.total, 'the facts are back');
  t.ok((await polonium()) > 0);
  // Decided about as new facts: stable again, linked to their concepts again.
  const back = (await api('GET', `/sources/${again.body.id}/facts?limit=500`)).body.items as Array<{ id: string; status: string }>;
  t.ok(back.every((fact) => fact.status === 'stable'), 'stable again');
  const linked = await Promise.all(back.map(async (fact) => (await api('GET', `/facts/${fact.id}/concepts`)).body.total as number));
  t.ok(linked.some((count) => count > 0), 'linked to concepts again');
  const deduplicated = (await api('GET', `/events?stream=source-${again.body.id}&types=SourceFactsDeduplicated`)).body.events as Array<{ data: { stable_fact_ids: string[] } }>;
  t.equal(deduplicated[0]?.data.stable_fact_ids.length, back.length, 'deduplication counts them stable');

  // And the new source's deletion retracts them again.
  t.equal((await service.call('DELETE', `/api/v1/repositories/${repoId}/sources/${again.body.id}`, { token })).status, 204);
  await waitForPipeline(service, repoId, token);
  t.equal(await polonium(), 0, 'retracted again');
  t.equal((await api('GET', `/facts/${back[0]?.id}`)).status, 404);
  const retractions = ((await api('GET', `/events?stream=fact-${back[0]?.id}&types=FactRetracted`)).body.events as Array<{ data: { source_id: string } }>).map((event) => event.data.source_id);
  t.same(retractions, [copy.id, again.body.id], 'once for each deletion that left it without a source');
});

t.test('bad deletions are refused', async (t) => {
  t.equal((await service.call('DELETE', `/api/v1/repositories/${repoId}/sources/${randomUUID()}`, { token })).status, 404, 'an unknown source');
  t.equal((await service.call('DELETE', `/api/v1/repositories/${repoId}/sources/not-a-uuid`, { token })).status, 400);
  const source = (await api('POST', '/sources', { url: `${web.baseUrl}/nowhere` })).body;
  await waitForPipeline(service, repoId, token);
  const reader = await registerUser(service, 'deletion-reader@example.org');
  await service.call('PUT', '/api/v1/admin/users/roles', { token, body: { user_id: reader.user.id, role: 'editor', domain: `repository:${repoId}` } });
  t.equal((await service.call('DELETE', `/api/v1/repositories/${repoId}/sources/${source.id}`, { token: reader.token })).status, 403, 'an editor may not delete');
  t.equal((await api('GET', `/sources/${source.id}`)).status, 200, 'still there');
  t.equal((await service.call('DELETE', `/api/v1/repositories/${repoId}/sources/${source.id}`, { token })).status, 204);
  t.equal((await service.call('DELETE', `/api/v1/repositories/${repoId}/sources/${source.id}`, { token })).status, 404, 'deleting twice');
  t.equal((await service.call('POST', `/api/v1/repositories/${repoId}/sources/${source.id}/retry`, { token })).status, 404, 'a deleted source is not retried');
});
