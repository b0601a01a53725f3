import { randomUUID } from 'node:crypto';
import t from 'tap';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { currentCall, type CallContext } from '../../src/app/callContext.js';
import { repositoryDomain } from '../../src/auth/rbac.js';
import type { IndexedDocument, SearchCollection } from '../../src/search/collection.js';
import type { HybridQuery } from '../../src/search/hybrid.js';
import { MAX_OFFSET } from '../../src/read/paging.js';
import { MAX_REPORT_TOPIC_CHARS } from '../../src/domain/report/decider.js';
import { registerUser, startTestService, type TestService } from '../helpers/service.js';
import { createConcept, extractFacts, linkFacts, refreshRelations, stabilize, type SeededFact } from '../api/seedGraph.js';
import { accessToken, connectClient, listen, parsed } from './helpers.js';

let service: TestService;
let owner: Client;
let reader: Client;
let stranger: Client;
let endpoint: URL;
let readerToken: string;
let repoId: string;
let slug: string;
let otherRepoId: string;
let sourceId: string;
let facts: SeededFact[];
const ids: Record<string, string> = {};

const call = async (client: Client, name: string, args: Record<string, unknown> = {}) => parsed(await client.callTool({ name, arguments: args }));

t.before(async () => {
  // No workers: the seeded events are the pipeline's output; queued tasks stay queued.
  service = await startTestService({ workers: false });
  const admin = await registerUser(service, 'admin@example.org'); // first user: sysadmin
  const ownerUser = await registerUser(service, 'owner@example.org');
  const readerUser = await registerUser(service, 'reader@example.org');
  const strangerUser = await registerUser(service, 'stranger@example.org');
  readerToken = readerUser.token;
  const created = (await service.call('POST', '/api/v1/repositories', { token: ownerUser.token, body: { name: 'Chemistry' } })).body;
  repoId = created.id;
  slug = created.slug;
  otherRepoId = (await service.call('POST', '/api/v1/repositories', { token: strangerUser.token, body: { name: 'Private notes' } })).body.id;
  const grant = await service.call('PUT', '/api/v1/admin/users/roles', { token: admin.token, body: { user_id: readerUser.user.id, role: 'reader', domain: repositoryDomain(repoId) } });
  t.equal(grant.status, 200, 'reader role granted');

  sourceId = (await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token: ownerUser.token, body: { url: 'http://127.0.0.1:9/curie' } })).body.id;
  facts = await extractFacts(service, repoId, sourceId, [
    'Marie Curie discovered radium in 1898.',
    'Radium glows in the dark.',
    'Marie Curie isolated radium chloride.',
    'Radium was used in luminous paint.',
    'Marie Curie studied radium decay.',
    'Radium is highly radioactive.',
    'Marie Curie was born in Warsaw.',
  ]);
  await stabilize(service, repoId, sourceId, facts);
  ids.curie = await createConcept(service, repoId, 'Marie Curie', 'person', ['Madame Curie']);
  ids.radium = await createConcept(service, repoId, 'Radium', 'chemical');
  ids.warsaw = await createConcept(service, repoId, 'Warsaw', 'location');
  const [f1, f2, f3, f4, f5, f6, f7] = facts.map((fact) => fact.id);
  await linkFacts(service, repoId, sourceId, {
    [f1]: [ids.curie, ids.radium],
    [f2]: [ids.radium],
    [f3]: [ids.curie, ids.radium],
    [f4]: [ids.radium],
    [f5]: [ids.curie, ids.radium],
    [f6]: [ids.radium],
    [f7]: [ids.curie, ids.warsaw],
  });
  await refreshRelations(service, repoId, [
    [ids.curie, ids.radium, 3],
    [ids.curie, ids.warsaw, 1],
  ]);

  const listening = await listen(service);
  const issuer = listening.issuer;
  endpoint = listening.endpoint;
  owner = await connectClient(endpoint, await accessToken(service, issuer, ownerUser.user.id));
  reader = await connectClient(endpoint, await accessToken(service, issuer, readerUser.user.id));
  stranger = await connectClient(endpoint, await accessToken(service, issuer, strangerUser.user.id));
});
t.teardown(async () => {
  for (const client of [owner, reader, stranger]) await client?.close();
  await service.close();
});

t.test('tools/list names exactly the twenty-two tools, each with a described input schema', async (t) => {
  const { tools } = await owner.listTools();
  t.same(
    tools.map((tool) => tool.name),
    [
      'getRepositories',
      'listSearchProviders',
      'searchSources',
      'searchFacts',
      'getFact',
      'getFactConcepts',
      'searchConcepts',
      'getConcept',
      'getConceptSummaries',
      'getRelatedConcepts',
      'getConceptRelation',
      'getConceptSources',
      'getInvestigation',
      'createInvestigation',
      'addInvestigationSource',
      'fetchAndProcessSource',
      'getSourceTasks',
      'createReport',
      'getReport',
      'listReports',
      'getReportTasks',
      'updateReport',
    ],
  );
  for (const tool of tools) {
    t.ok(tool.description && tool.description.length > 40, `${tool.name} has a description`);
    const properties = (tool.inputSchema.properties ?? {}) as Record<string, { description?: string }>;
    if (!['getRepositories', 'listSearchProviders'].includes(tool.name)) {
      t.ok(tool.inputSchema.required?.includes('repository'), `${tool.name} requires repository`);
    }
    for (const [name, property] of Object.entries(properties)) t.ok(property.description, `${tool.name}.${name} is described`);
    const offset = properties.offset as { minimum?: number; maximum?: number } | undefined;
    // A client that pages by the advertised bounds must never be refused by the tool.
    if (offset) t.same([offset.minimum, offset.maximum], [0, MAX_OFFSET], `${tool.name}.offset advertises the bounds the tool takes`);
  }
  const createReport = tools.find((tool) => tool.name === 'createReport');
  t.same(createReport?.inputSchema.required?.sort(), ['repository', 'text']);
  t.equal(createReport?.annotations?.readOnlyHint, false);
  const reportProperties = createReport?.inputSchema.properties as Record<string, { maxLength?: number; description?: string }>;
  t.equal(reportProperties.topic.maxLength, MAX_REPORT_TOPIC_CHARS, 'the topic advertises the limit the report takes');
  t.match(reportProperties.text.description, /bytes of UTF-8/, 'the text says its limit is in bytes');
  t.equal(tools.find((tool) => tool.name === 'searchFacts')?.annotations?.readOnlyHint, true);
});

t.test('getRepositories lists only what the caller can read, with its roles', async (t) => {
  const mine = await call(owner, 'getRepositories');
  t.notOk(mine.isError);
  t.match(mine.value, [{ id: repoId, name: 'Chemistry', slug, roles: ['owner'] }]);
  t.equal(mine.value.length, 1, "the stranger's repository is not listed");
  t.type(mine.value[0].tier, 'string');
  const theirs = await call(reader, 'getRepositories');
  t.match(theirs.value, [{ id: repoId, roles: ['reader'] }]);
  const listed = await reader.callTool({ name: 'getRepositories', arguments: {} });
  t.match(listed.structuredContent, { items: [{ id: repoId }] }, 'an array result also comes as structuredContent.items');
});

t.test('listSearchProviders and searchSources', async (t) => {
  const providers = await call(reader, 'listSearchProviders');
  t.match(providers.value, { providers: [{ id: 'local', default: true }] });
  const found = await call(reader, 'searchSources', { repository: slug, query: 'curie' });
  t.notOk(found.isError, found.text);
  t.match(found.value, { total: 1, items: [{ id: sourceId, url: 'http://127.0.0.1:9/curie' }], next_cursor: null });
  t.same(
    ['body_sha256', 'text_sha256', 'markdown_sha256', 'text_chars', 'document_kind'].filter((column) => column in found.value.items[0]),
    [],
    'a source as REST answers it',
  );
  const none = await call(reader, 'searchSources', { repository: repoId, query: 'curie nobel' });
  t.match(none.value, { total: 0, items: [] }, 'every word must match');
  const unknown = await call(reader, 'searchSources', { repository: repoId, query: 'curie', provider: 'google' });
  t.ok(unknown.isError);
  t.match(unknown.text, /unknown search provider 'google'/);
  const badCursor = await call(reader, 'searchSources', { repository: repoId, query: 'curie', cursor: 'nonsense' });
  t.ok(badCursor.isError);
  t.match(badCursor.text, /cursor/);
  // The query's bound counts characters (code points) as every other: 500 emoji are 1,000 UTF-16 units.
  const emoji = await call(reader, 'searchSources', { repository: repoId, query: '🧪'.repeat(500) });
  t.notOk(emoji.isError, emoji.text);
  t.match(emoji.value, { total: 0, items: [] });
  const tooLong = await call(reader, 'searchSources', { repository: repoId, query: '🧪'.repeat(501) });
  t.ok(tooLong.isError);
  t.match(tooLong.text, /at most 500 characters/);
});

t.test('searchFacts and getFact answer with fact ids', async (t) => {
  const found = await call(reader, 'searchFacts', { repository: repoId, query: 'radium' });
  t.notOk(found.isError, found.text);
  t.ok(found.value.items.length >= 3);
  t.ok(found.value.items.every((item: { id: string }) => facts.some((fact) => fact.id === item.id)), 'items are seeded facts, by id');
  t.ok(found.value.items.length <= 10, 'default limit 10');
  const shared = await call(reader, 'searchFacts', { repository: repoId, concepts: ['Marie Curie', 'Radium'], limit: 50 });
  t.same(shared.value.items.map((item: { id: string }) => item.id).sort(), [facts[0].id, facts[2].id, facts[4].id].sort(), 'the facts both concepts share');
  const byConcept = await call(reader, 'searchFacts', { repository: repoId, concept: 'Warsaw' });
  t.same(byConcept.value.items.map((item: { id: string }) => item.id), [facts[6].id]);
  const both = await call(reader, 'searchFacts', { repository: repoId, concept: 'Warsaw', concepts: ['Radium', 'Marie Curie'] });
  t.ok(both.isError);
  t.match(both.text, /concept or concepts, not both/);
  const one = await call(reader, 'searchFacts', { repository: repoId, concepts: ['Radium'] });
  t.ok(one.isError, 'concepts needs at least two');
  const fact = await call(reader, 'getFact', { repository: repoId, factId: facts[6].id });
  t.match(fact.value, { id: facts[6].id, content: 'Marie Curie was born in Warsaw.', sources: [{ source_id: sourceId }] });
  t.same(
    ['search', 'embedding_model', 'stable_since'].filter((column) => column in fact.value),
    [],
    "the read model's own columns are not answered (REST's schema leaves them out too)",
  );
  const missing = await call(reader, 'getFact', { repository: repoId, factId: '00000000-0000-4000-8000-000000000000' });
  t.ok(missing.isError);
  t.match(missing.text, /not found: fact not found/);
});

t.test('concept tools', async (t) => {
  const search = await call(reader, 'searchConcepts', { repository: repoId, query: 'curie', show_small: true });
  t.notOk(search.isError, search.text);
  t.match(search.value.items, [{ id: ids.curie, canonical_name: 'Marie Curie' }]);
  // The query's description says how an empty query lists: by canonical name, as REST's list (not by size).
  const listed = await call(reader, 'searchConcepts', { repository: repoId, show_small: true });
  const names = listed.value.items.map((item: { canonical_name: string }) => item.canonical_name);
  t.same(names, [...names].sort((a: string, b: string) => (Buffer.from(a) < Buffer.from(b) ? -1 : 1)), 'an empty query lists by canonical name');
  const { tools } = await owner.listTools();
  const queryDescription = (tools.find((tool) => tool.name === 'searchConcepts')?.inputSchema.properties as Record<string, { description?: string }>).query.description;
  t.match(queryDescription, /by canonical name/, 'and the tool says so');
  const concept = await call(reader, 'getConcept', { repository: repoId, concept: 'marie curie' });
  t.match(concept.value, { id: ids.curie, context: 'person' });
  const summaries = await call(reader, 'getConceptSummaries', { repository: repoId, concept: ids.curie });
  t.notOk(summaries.isError, summaries.text);
  t.match(summaries.value, { concept: { id: ids.curie }, summaries: [], total: 0, synthesis: null, cited_facts: [] }, 'none made yet');
  const related = await call(reader, 'getRelatedConcepts', { repository: repoId, concept: ids.curie, show_insignificant: true });
  t.notOk(related.isError, related.text);
  const relatedIds = related.value.items.map((item: { concept: { id: string } } & { id?: string }) => item.concept?.id ?? item.id);
  t.ok(relatedIds.includes(ids.radium) && relatedIds.includes(ids.warsaw), 'both relations with show_insignificant');
  const sources = await call(reader, 'getConceptSources', { repository: repoId, concept: 'Radium' });
  t.notOk(sources.isError, sources.text);
  t.match(sources.value.items, [{ id: sourceId }]);
  const unknown = await call(reader, 'getConcept', { repository: repoId, concept: 'Einstein' });
  t.ok(unknown.isError);
  t.match(unknown.text, /not found/);
});

t.test('getFactConcepts and getConceptRelation: what a fact is about, and why two concepts are related', async (t) => {
  const about = await call(reader, 'getFactConcepts', { repository: repoId, factId: facts[0].id });
  t.notOk(about.isError, about.text);
  t.match(about.value, { fact_id: facts[0].id, merged_from: null, items: [{ id: ids.curie, canonical_name: 'Marie Curie' }, { id: ids.radium, canonical_name: 'Radium' }], total: 2 });
  const alone = await call(reader, 'getFactConcepts', { repository: repoId, factId: facts[1].id });
  t.match(alone.value, { items: [{ id: ids.radium }], total: 1 });

  const relation = await call(reader, 'getConceptRelation', { repository: repoId, concept: 'madame curie', other: 'Radium' });
  t.notOk(relation.isError, relation.text);
  t.match(relation.value, { concept: { id: ids.curie }, other: { id: ids.radium }, shared_fact_count: 3, band: String, total: 3 });
  t.same(relation.value.facts.map((fact: { id: string }) => fact.id).sort(), [facts[0].id, facts[2].id, facts[4].id].sort(), 'the facts both are linked to');
  const page = await call(reader, 'getConceptRelation', { repository: repoId, concept: ids.curie, other: ids.radium, limit: 2, offset: 2 });
  t.match(page.value, { total: 3 });
  t.equal(page.value.facts.length, 1, 'the last of three, two a page');
  const weak = await call(reader, 'getConceptRelation', { repository: repoId, concept: 'Warsaw', other: 'Marie Curie' });
  t.match(weak.value, { concept: { id: ids.warsaw }, other: { id: ids.curie }, shared_fact_count: 1, facts: [{ id: facts[6].id }] }, 'either order');
});

t.test('investigations: create, add a source, fetch a new one into it, read it, its tasks', async (t) => {
  const created = await call(owner, 'createInvestigation', { repository: repoId, title: 'Radioactivity', topic: 'Who found radium?' });
  t.notOk(created.isError, created.text);
  t.match(created.value, { title: 'Radioactivity', topic: 'Who found radium?', source_count: 0 });
  const investigationId = created.value.id;
  const added = await call(owner, 'addInvestigationSource', { repository: repoId, investigationId, sourceId });
  t.match(added.value, { added: true, source: { id: sourceId } });
  const fetched = await call(owner, 'fetchAndProcessSource', { repository: repoId, url: 'http://127.0.0.1:9/polonium', investigationId });
  t.notOk(fetched.isError, fetched.text);
  t.match(fetched.value, { created: true, added_to_investigation: true, source: { url: 'http://127.0.0.1:9/polonium', status: 'pending' } });
  const again = await call(owner, 'fetchAndProcessSource', { repository: repoId, url: 'http://127.0.0.1:9/polonium' });
  t.match(again.value, { created: false, source: { id: fetched.value.source.id } }, 'a URL the repository has answers its source');
  const firstPage = await call(reader, 'searchSources', { repository: repoId, query: '127.0.0.1', per_page: 1 });
  t.match(firstPage.value, { total: 2, items: [{ id: fetched.value.source.id }], next_cursor: String }, 'newest first, one a page');
  const secondPage = await call(reader, 'searchSources', { repository: repoId, query: '127.0.0.1', per_page: 1, cursor: firstPage.value.next_cursor });
  t.match(secondPage.value, { total: 2, items: [{ id: sourceId }], next_cursor: null });
  const neither = await call(owner, 'fetchAndProcessSource', { repository: repoId });
  t.ok(neither.isError);
  t.match(neither.text, /exactly one of url or doi/);
  const investigation = await call(reader, 'getInvestigation', { repository: repoId, investigationId });
  t.match(investigation.value, { id: investigationId, source_count: 2 });
  t.same(investigation.value.sources.map((source: { id: string }) => source.id).sort(), [sourceId, fetched.value.source.id].sort());

  const tasks = await call(reader, 'getSourceTasks', { repository: repoId, sourceId: fetched.value.source.id, byKind: true });
  t.notOk(tasks.isError, tasks.text);
  t.equal(tasks.value.complete, false, 'no worker ran: the fetch is queued');
  t.match(tasks.value.tasks, [{ kind: 'retrieve_source', state: 'queued' }]);
  t.notOk('attempts' in tasks.value.tasks[0], 'compact unless verbose');
  t.match(tasks.value.by_kind, { retrieve_source: { queued: 1 } });
  // The kind filter takes the kinds this release makes, as REST's does: none of a kind is an empty page; the registry's are refused.
  const noneOfKind = await call(reader, 'getSourceTasks', { repository: repoId, sourceId: fetched.value.source.id, kind: 'embed_facts' });
  t.match(noneOfKind.value, { complete: false, total: 0, tasks: [] });
  const unbuiltKind = await call(reader, 'getSourceTasks', { repository: repoId, sourceId: fetched.value.source.id, kind: 'contribute_source' });
  t.ok(unbuiltKind.isError, 'a kind this release never makes is refused');
  t.match(unbuiltKind.text, /kind/);
  const verbose = await call(reader, 'getSourceTasks', { repository: repoId, investigationId, verbose: true, limit: 1 });
  t.equal(verbose.value.tasks.length, 1);
  t.type(verbose.value.tasks[0].attempts, 'number');
  t.type(verbose.value.next_cursor, 'string', 'two sources, two fetches: a next page');
  const next = await call(reader, 'getSourceTasks', { repository: repoId, investigationId, limit: 1, cursor: verbose.value.next_cursor });
  t.notSame(next.value.tasks[0].id, verbose.value.tasks[0].id);
  const bothIds = await call(reader, 'getSourceTasks', { repository: repoId, investigationId, sourceId });
  t.ok(bothIds.isError);
});

t.test('reports: create with children, read, list, update, tasks', async (t) => {
  const child = await call(owner, 'createReport', { repository: repoId, title: 'Chapter', text: 'Radium glows.' });
  t.notOk(child.isError, child.text);
  const created = await call(owner, 'createReport', {
    repository: repoId,
    title: 'Curie',
    text: 'Marie Curie discovered radium. She was born in Warsaw.',
    topic: 'biography',
    childrenIds: [child.value.id],
  });
  t.notOk(created.isError, created.text);
  t.match(created.value, { title: 'Curie', topic: 'biography', children_ids: [child.value.id] });
  const reportId = created.value.id;
  const report = await call(reader, 'getReport', { repository: repoId, reportId });
  t.match(report.value, { id: reportId, text: 'Marie Curie discovered radium. She was born in Warsaw.', annotations: {} });
  const listed = await call(reader, 'listReports', { repository: repoId, search: 'warsaw' });
  t.match(listed.value, { total: 1, items: [{ id: reportId }] });
  const pending = await call(reader, 'listReports', { repository: repoId, status: 'pending' });
  t.equal(pending.value.total, 2);
  const tasks = await call(reader, 'getReportTasks', { repository: repoId, reportId });
  t.notOk(tasks.isError, tasks.text);
  t.match(tasks.value, { complete: false, tasks: [{ kind: 'annotate_report', report_id: reportId }] });
  const updated = await call(owner, 'updateReport', { repository: repoId, reportId, text: 'Marie Curie discovered polonium.', title: 'Curie, revised', childrenIds: [] });
  t.notOk(updated.isError, updated.text);
  t.match(updated.value, { title: 'Curie, revised', children_ids: [] });
  const childAfter = await call(reader, 'getReport', { repository: repoId, reportId: child.value.id });
  t.equal(childAfter.value.parent_id, null, 'a child left out of childrenIds loses its parent');
  const reparented = await call(owner, 'updateReport', { repository: repoId, reportId: child.value.id, text: 'Radium glows.', parentId: reportId });
  t.equal(reparented.value.parent_id, reportId);
  const cleared = await call(owner, 'updateReport', { repository: repoId, reportId: child.value.id, text: 'Radium glows.', parentId: '' });
  t.equal(cleared.value.parent_id, null, '"" clears the parent');
  const selfChild = await call(owner, 'updateReport', { repository: repoId, reportId, text: 'x', childrenIds: [reportId] });
  t.ok(selfChild.isError);
  t.equal((await call(reader, 'getReport', { repository: repoId, reportId })).value.text, 'Marie Curie discovered polonium.', 'a refused children list writes none of the fields either');
  const reportsBefore = (await call(reader, 'listReports', { repository: repoId })).value.total;
  const unknownChild = await call(owner, 'createReport', { repository: repoId, text: 'Radium glows.', childrenIds: ['00000000-0000-4000-8000-000000000000'] });
  t.match([unknownChild.isError, unknownChild.text], [true, /^invalid: child report .* not found/]);
  t.equal((await call(reader, 'listReports', { repository: repoId })).value.total, reportsBefore, 'no report is made when its children are refused');
  const nothing = await call(owner, 'updateReport', { repository: repoId, reportId });
  t.ok(nothing.isError, 'a call that changes nothing is refused');
  t.match(nothing.text, /^invalid: give at least one of text, title, topic, parentId or childrenIds$/);
  // Limits count characters (code points), as the advertised maxLength does: 300 emoji are 600 UTF-16 units.
  const emoji = await call(owner, 'createReport', { repository: repoId, title: '🧪'.repeat(300), text: 'Radium glows green.', topic: '🧪'.repeat(300) });
  t.notOk(emoji.isError, emoji.text);
  const tooLong = await call(owner, 'createReport', { repository: repoId, text: 'Radium glows.', topic: 'x'.repeat(MAX_REPORT_TOPIC_CHARS + 1) });
  t.ok(tooLong.isError);
  t.match(tooLong.text, /500/);
});

t.test('getSourceTasks pages a state filter from where the last page ended: a task leaving the state, or a new one, is neither skipped nor repeated', async (t) => {
  const { jobs, db } = service.context;
  const source = randomUUID();
  let position = 9000;
  // Jobs one event enqueued share the time and the trigger position: the id orders them.
  const enqueue = async (kind: string, at: string) => {
    const job = await jobs.enqueue({ kind, subjectId: source, sourceId: source, triggerEventId: randomUUID(), triggerPosition: position, repositoryId: repoId, correlationId: null });
    await db.knex('jobs').where({ id: job.id }).update({ created_at: at });
    return job.id;
  };
  const queued: string[] = [];
  for (const kind of ['source_decomposition', 'embed_facts', 'deduplicate_facts', 'extract_concepts', 'refine_concepts']) queued.push(await enqueue(kind, '2030-01-01T00:00:00.000001Z'));
  queued.sort();
  const page = (cursor?: string) => call(reader, 'getSourceTasks', { repository: repoId, sourceId: source, state: 'queued', limit: 2, cursor });
  const ids = (result: { value: { tasks: Array<{ id: string }> } }) => result.value.tasks.map((task) => task.id);
  const first = await page();
  t.notOk(first.isError, first.text);
  t.same(ids(first), queued.slice(0, 2));
  t.equal(first.value.total, 5);
  // The second task of page 1 starts running (by an offset, page 2 skipped a queued task).
  await db.knex('jobs').where({ id: queued[1] }).update({ state: 'running', attempts: 1, claimed_by: 'test-worker', lease_until: db.knex.raw("now() + interval '1 minute'") });
  const second = await page(first.value.next_cursor);
  t.same(ids(second), queued.slice(2, 4), 'on from the last task shown');
  t.equal(second.value.total, 4, 'counted anew');
  // A newer task is queued (by an offset, page 3 repeated one).
  position += 1;
  const added = await enqueue('embed_concepts', '2030-01-01T00:00:00.000002Z');
  const third = await page(second.value.next_cursor);
  t.same(ids(third), queued.slice(4), 'the rest');
  t.equal(third.value.next_cursor, null, 'the last page');
  t.notOk([first, second, third].flatMap(ids).includes(added), 'the task added meanwhile is before the walk began');

  for (const cursor of ['nonsense', Buffer.from('o:2').toString('base64url'), Buffer.from('k:["2030-01-01 00:00:00+00","x"]').toString('base64url')]) {
    const bad = await page(cursor);
    t.ok(bad.isError, `${cursor}: a tool error`);
    t.match(bad.text, /cursor is not one this service returned/);
  }
});

t.test('a caller with no role on the repository gets "repository not found" from every repository tool, as for a missing one, never data', async (t) => {
  const calls: [string, Record<string, unknown>][] = [
    ['searchSources', { query: 'curie' }],
    ['searchFacts', { query: 'radium' }],
    ['getFact', { factId: facts[0].id }],
    ['getFactConcepts', { factId: facts[0].id }],
    ['searchConcepts', {}],
    ['getConcept', { concept: ids.curie }],
    ['getConceptSummaries', { concept: ids.curie }],
    ['getRelatedConcepts', { concept: ids.curie }],
    ['getConceptRelation', { concept: ids.curie, other: ids.radium }],
    ['getConceptSources', { concept: ids.curie }],
    ['getInvestigation', { investigationId: '00000000-0000-4000-8000-000000000000' }],
    ['createInvestigation', { title: 'Mine now' }],
    ['addInvestigationSource', { investigationId: '00000000-0000-4000-8000-000000000000', sourceId }],
    ['fetchAndProcessSource', { url: 'http://127.0.0.1:9/x' }],
    ['getSourceTasks', { sourceId }],
    ['createReport', { text: 'Hello.' }],
    ['getReport', { reportId: '00000000-0000-4000-8000-000000000000' }],
    ['listReports', {}],
    ['getReportTasks', { reportId: '00000000-0000-4000-8000-000000000000' }],
    ['updateReport', { reportId: '00000000-0000-4000-8000-000000000000', text: 'x' }],
  ];
  t.equal(calls.length, 20, 'every tool that takes a repository');
  for (const [name, args] of calls) {
    const result = await call(stranger, name, { repository: repoId, ...args });
    t.ok(result.isError, `${name} is an error`);
    t.equal(result.text, 'not found: repository not found', `${name}: told of no repository`);
    t.notMatch(result.text, /Curie|radium/i, `${name}: no data`);
  }
  const missing = await call(owner, 'searchFacts', { repository: otherRepoId, query: 'x' });
  t.equal(missing.text, 'not found: repository not found', "the owner of one repository sees nothing of another's");
  const unknownRepository = await call(owner, 'searchFacts', { repository: 'no-such-repository', query: 'x' });
  t.equal(unknownRepository.text, missing.text, 'the same answer as for a repository that does not exist');
});

t.test('a reader calling a writing tool gets "permission denied"', async (t) => {
  const investigation = await call(owner, 'createInvestigation', { repository: repoId, title: 'Owned' });
  const report = await call(owner, 'createReport', { repository: repoId, text: 'Owned report.' });
  const writes: [string, Record<string, unknown>][] = [
    ['createReport', { text: 'Reader report.' }],
    ['createInvestigation', { title: 'Reader investigation' }],
    ['fetchAndProcessSource', { url: 'http://127.0.0.1:9/reader' }],
    ['updateReport', { reportId: report.value.id, text: 'Changed by a reader.' }],
    ['addInvestigationSource', { investigationId: investigation.value.id, sourceId }],
  ];
  for (const [name, args] of writes) {
    const result = await call(reader, name, { repository: repoId, ...args });
    t.ok(result.isError, `${name} refused`);
    t.match(result.text, /^permission denied: (reports|investigations|sources):(create|write)$/, `${name}: permission denied`);
  }
  const unchanged = await call(reader, 'getReport', { repository: repoId, reportId: report.value.id });
  t.equal(unchanged.value.text, 'Owned report.');
});

t.test('invalid arguments are tool errors naming the problem', async (t) => {
  const result = await call(reader, 'searchFacts', { repository: repoId, limit: 500 });
  t.ok(result.isError);
  t.match(result.text, /limit/);
  const noRepository = await call(reader, 'getConcept', { concept: 'Radium' });
  t.ok(noRepository.isError);
  t.match(noRepository.text, /repository/);

  const bad: [string, Record<string, unknown>, RegExp][] = [
    ['getFactConcepts', {}, /Input validation error: .*factId/],
    ['getFactConcepts', { factId: 'radium' }, /Input validation error: .*must be a UUID/],
    ['getFactConcepts', { factId: '00000000-0000-4000-8000-000000000000' }, /^not found: fact not found$/],
    ['getConceptRelation', { concept: 'Radium' }, /Input validation error: .*other/],
    ['getConceptRelation', { concept: 'Radium', other: '' }, /Input validation error: .*other/],
    ['getConceptRelation', { concept: 'Radium', other: 'x'.repeat(501) }, /Input validation error: .*at most 500 characters/],
    ['getConceptRelation', { concept: 'Radium', other: 'Einstein' }, /^not found: concept not found$/],
    ['getConceptRelation', { concept: 'Radium', other: 'radium' }, /^invalid: a concept has no relation to itself$/],
    ['getConceptRelation', { concept: 'Radium', other: 'Warsaw', other_context: '  ' }, /^invalid: other_context must not be empty or only whitespace/],
    ['getConceptRelation', { concept: 'Radium', other: ids.warsaw, other_context: 'person' }, /^invalid: concept .* is in context location, not person: other_context= only picks/],
    ['getConceptRelation', { concept: 'Radium', other: 'Warsaw', limit: 501 }, /limit/],
  ];
  for (const [name, args, expected] of bad) {
    const result = await call(reader, name, { repository: repoId, ...args });
    t.ok(result.isError, `${name} ${JSON.stringify(args)} is an error`);
    t.match(result.text, expected, `${name} ${JSON.stringify(args)}: ${result.text}`);
  }
});

t.test('a reader whose credential lacks the permission the route checks is refused the two tools, without data', async (t) => {
  // The reader's own API keys: one without facts:read, one without concepts:read.
  const keyWith = async (scopes: string[]) => {
    const created = await service.call('POST', '/api/v1/users/me/api-keys', { token: readerToken, body: { name: scopes.join(' '), scopes, repository: repoId } });
    t.equal(created.status, 201, created.body.message);
    const client = await connectClient(endpoint, created.body.key);
    t.teardown(() => client.close());
    return client;
  };
  const conceptsOnly = await keyWith(['concepts:read']);
  const factsOnly = await keyWith(['facts:read']);
  const refusals: [Client, string, Record<string, unknown>, string][] = [
    [conceptsOnly, 'getFactConcepts', { factId: facts[0].id }, 'facts:read'],
    [factsOnly, 'getConceptRelation', { concept: ids.curie, other: ids.radium }, 'concepts:read'],
  ];
  for (const [client, name, args, permission] of refusals) {
    const result = await call(client, name, { repository: repoId, ...args });
    t.equal(result.text, `permission denied: ${permission}`, `${name} is refused, naming ${permission}`);
  }
  t.notOk((await call(factsOnly, 'getFactConcepts', { repository: repoId, factId: facts[0].id })).isError, 'with facts:read the fact is read');
  t.notOk((await call(conceptsOnly, 'getConceptRelation', { repository: repoId, concept: ids.curie, other: ids.radium })).isError, 'with concepts:read the pair is read');
});

t.test('each tool call runs in the call context the permission audit reads', async (t) => {
  // The hybrid search the facts query calls sees the context (a spy around the real search; knex's
  // query event is no probe: its pool hands connections out of another async context).
  const seen: (CallContext | undefined)[] = [];
  const hybrid = service.context.hybrid;
  const search = hybrid.search;
  const original = search.bind(hybrid);
  hybrid.search = <Doc extends IndexedDocument>(collection: SearchCollection<Doc>, query: HybridQuery<Doc>) => {
    seen.push(currentCall());
    return original(collection, query);
  };
  try {
    const result = await call(reader, 'searchFacts', { repository: repoId, query: 'radium' });
    t.notOk(result.isError, result.text);
  } finally {
    hybrid.search = search;
  }
  t.equal(seen.length, 1, 'the call searched once');
  t.match(seen[0], { transport: 'mcp', operation: 'tool searchFacts', principal: { credential: { kind: 'oauth' } }, clientAddress: '127.0.0.1' });
  t.equal(currentCall(), undefined, 'and only inside the call');
});
