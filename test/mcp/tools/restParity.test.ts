import t from 'tap';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { registerUser, startTestService, type TestService } from '../../helpers/service.js';
import { appendEvents, createConcept, extractFacts, linkFacts, refreshRelations, stabilize, type SeededFact } from '../../api/seedGraph.js';
import { accessToken, connectClient, listen, parsed } from '../helpers.js';

/**
 * Each MCP tool answers what its REST counterpart answers for the same data (docs/mcp.md): the
 * same read and app functions, so every field REST gives is in the tool's answer, merges are
 * followed alike, and bad input is refused alike. Differences docs/mcp.md gives a reason for are
 * asserted as documented.
 */

let service: TestService;
let ownerToken: string;
let readerToken: string;
let owner: Client;
let reader: Client;
let endpoint: URL;
let repoId: string;
let sourceId: string;
let facts: SeededFact[];
let twin: SeededFact;
const ids: Record<string, string> = {};
const UNKNOWN = '00000000-0000-4000-8000-000000000000';

const call = async (client: Client, name: string, args: Record<string, unknown> = {}) => parsed(await client.callTool({ name, arguments: args }));
const rest = async (path: string, token = readerToken) => {
  const reply = await service.call('GET', `/api/v1/repositories/${repoId}${path}`, { token });
  if (reply.status !== 200) throw new Error(`GET ${path}: ${reply.status} ${JSON.stringify(reply.body)}`);
  return reply.body;
};

t.before(async () => {
  service = await startTestService({ workers: false });
  await registerUser(service, 'admin@example.org');
  const ownerUser = await registerUser(service, 'owner@example.org');
  const readerUser = await registerUser(service, 'reader@example.org');
  ownerToken = ownerUser.token;
  readerToken = readerUser.token;
  repoId = (await service.call('POST', '/api/v1/repositories', { token: ownerToken, body: { name: 'Chemistry' } })).body.id;
  const members = await service.call('PUT', `/api/v1/repositories/${repoId}/members`, { token: ownerToken, body: { user_id: readerUser.user.id, role: 'reader' } });
  t.equal(members.status, 200, 'reader added');

  sourceId = (await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token: ownerToken, body: { url: 'http://127.0.0.1:9/curie' } })).body.id;
  facts = await extractFacts(service, repoId, sourceId, [
    'Marie Curie discovered radium in 1898.',
    'Radium glows in the dark.',
    'Marie Curie isolated radium chloride.',
    'A photograph of Marie Curie in her laboratory.',
    'Marie Curie was born in Warsaw.',
    'Marie Curie found radium in 1898.',
  ]);
  await stabilize(service, repoId, sourceId, facts);
  twin = facts[5];
  ids.curie = await createConcept(service, repoId, 'Marie Curie', 'person', ['Madame Curie']);
  ids.radium = await createConcept(service, repoId, 'Radium', 'chemical');
  ids.warsaw = await createConcept(service, repoId, 'Warsaw', 'location');
  ids.sklodowska = await createConcept(service, repoId, 'Maria Sklodowska', 'person');
  ids.mercuryPlanet = await createConcept(service, repoId, 'Mercury', 'astronomy');
  ids.mercuryMetal = await createConcept(service, repoId, 'Mercury', 'chemical');
  const [f1, f2, f3, f4, f5, f6] = facts.map((fact) => fact.id);
  await linkFacts(service, repoId, sourceId, {
    [f1]: [ids.curie, ids.radium],
    [f2]: [ids.radium],
    [f3]: [ids.curie, ids.radium],
    [f4]: [ids.curie],
    [f5]: [ids.curie, ids.warsaw],
    [f6]: [ids.curie, ids.radium],
  });
  await refreshRelations(service, repoId, [
    [ids.curie, ids.radium, 3],
    [ids.curie, ids.warsaw, 1],
  ]);
  await appendEvents(service, repoId, `concept-${ids.curie}`, [
    {
      type: 'SummarySliceWritten',
      data: { slice_id: 'slice-1', slice_number: 1, is_open: true, fact_ids: [f1, f3], content: `[Radium](<fact:${f1}>) and [its chloride](<fact:${f3}>).`, model_id: 'local', reason: 'facts_added' },
    },
    {
      type: 'ConceptSynthesized',
      data: {
        synthesis_id: 'synthesis-curie',
        content: `She [found radium](<fact:${f6}>) and [was born in Warsaw](<fact:${f5}>).`,
        fact_ids: [f6, f5],
        slice_ids: ['slice-1'],
        related_concept_ids: [ids.radium, ids.sklodowska, ids.warsaw],
        related_synthesis_ids: [],
        image_fact_ids: [f4],
        model_id: 'local',
        inputs_hash: 'h',
        reason: 'inputs_changed',
      },
    },
  ]);
  // Deduplication after the synthesis: the twin merged into the first fact; a refinement merged Sklodowska into Curie.
  await appendEvents(service, repoId, `fact-${twin.id}`, [{ type: 'FactMergedInto', data: { survivor_id: f1, similarity: 0.97, source_id: sourceId, catchup: false } }]);
  await appendEvents(service, repoId, `concept-${ids.sklodowska}`, [{ type: 'ConceptMergedInto', data: { survivor_id: ids.curie, reason: 'same person' } }]);

  const listening = await listen(service);
  const issuer = listening.issuer;
  endpoint = listening.endpoint;
  owner = await connectClient(endpoint, await accessToken(service, issuer, ownerUser.user.id));
  reader = await connectClient(endpoint, await accessToken(service, issuer, readerUser.user.id));
});
t.teardown(async () => {
  for (const client of [owner, reader]) await client?.close();
  await service.close();
});

t.test('getConceptSummaries answers what the summaries and definition routes answer: images and related concepts included', async (t) => {
  const summaries = await rest(`/concepts/${ids.curie}/summaries`);
  const definition = await rest(`/concepts/${ids.curie}/definition`);
  const tool = await call(reader, 'getConceptSummaries', { repository: repoId, concept: ids.curie });
  t.notOk(tool.isError, tool.text);
  t.has(tool.value, {
    concept: summaries.concept,
    redirected_from: null,
    summaries: summaries.items,
    total: summaries.total,
    synthesis: definition.synthesis,
    cited_facts: definition.facts,
    images: definition.images,
    related_concepts: definition.related_concepts,
  });
  t.match(tool.value.images, [{ fact_id: facts[3].id }], 'the image the synthesis shows');
  t.match(tool.value.related_concepts, [{ id: ids.radium }, { id: ids.warsaw }], 'Sklodowska merged into Curie itself: no longer related');
  t.match(tool.value.cited_facts, [{ id: facts[0].id, merged_from: [twin.id] }, { id: facts[4].id }], 'a cited fact merged since is its survivor');

  const merged = await call(reader, 'getConceptSummaries', { repository: repoId, concept: 'Maria Sklodowska' });
  t.match(merged.value, { concept: { id: ids.curie }, redirected_from: { id: ids.sklodowska }, total: 1, synthesis: { id: 'synthesis-curie' } }, 'a merged concept answers with its survivor');
  const none = await call(reader, 'getConceptSummaries', { repository: repoId, concept: 'Warsaw' });
  t.same(
    { synthesis: none.value.synthesis, cited_facts: none.value.cited_facts, images: none.value.images, related_concepts: none.value.related_concepts },
    { synthesis: null, cited_facts: [], images: [], related_concepts: [] },
    'no synthesis yet',
  );
});

t.test('the fact tools answer what the fact routes answer', async (t) => {
  const search = await rest('/facts?query=radium&limit=10');
  const tool = await call(reader, 'searchFacts', { repository: repoId, query: 'radium' });
  t.notOk(tool.isError, tool.text);
  t.has(tool.value, search, 'same items, total, mode');
  const filtered = await rest(`/facts?concepts=${ids.curie},Radium&limit=50`);
  const toolFiltered = await call(reader, 'searchFacts', { repository: repoId, concepts: [ids.curie, 'Radium'], limit: 50 });
  t.has(toolFiltered.value, filtered);

  // `mode` as the route takes it: lexical answers by words alone, with no fallback to explain.
  const lexical = await rest('/facts?query=radium&mode=lexical&limit=10');
  t.equal(lexical.fallback_reason, null);
  t.has((await call(reader, 'searchFacts', { repository: repoId, query: 'radium', mode: 'lexical' })).value, lexical);
  t.has((await call(reader, 'searchConcepts', { repository: repoId, query: 'curie', mode: 'lexical', show_small: true })).value, await rest('/concepts?query=curie&mode=lexical&show_small=true'));
  t.match((await call(reader, 'searchFacts', { repository: repoId, query: 'radium', mode: 'vector' })).text, /Input validation error: .*mode/);

  const merged = await rest(`/facts/${twin.id}`);
  const toolMerged = await call(reader, 'getFact', { repository: repoId, factId: twin.id });
  t.has(toolMerged.value, merged);
  t.match(toolMerged.value, { id: facts[0].id, merged_from: twin.id }, 'a merged fact answers with its survivor');
  const upper = await call(reader, 'getFact', { repository: repoId, factId: facts[1].id.toUpperCase() });
  t.match(upper.value, { id: facts[1].id, merged_from: null }, 'ids compare in any case');

  const linked = await call(reader, 'getFactConcepts', { repository: repoId, factId: facts[0].id });
  t.notOk(linked.isError, linked.text);
  t.has(linked.value, await rest(`/facts/${facts[0].id}/concepts`));
  t.match(linked.value, { fact_id: facts[0].id, merged_from: null, items: [{ id: ids.curie }, { id: ids.radium }], total: 2 });
  const linkedMerged = await call(reader, 'getFactConcepts', { repository: repoId, factId: twin.id.toUpperCase() });
  t.has(linkedMerged.value, await rest(`/facts/${twin.id.toUpperCase()}/concepts`));
  t.match(linkedMerged.value, { fact_id: facts[0].id, merged_from: twin.id }, "a merged fact answers with its survivor's concepts");
});

t.test('the concept tools answer what the concept routes answer', async (t) => {
  t.has((await call(reader, 'searchConcepts', { repository: repoId, query: 'curie', show_small: true })).value, await rest('/concepts?query=curie&show_small=true'));
  t.has((await call(reader, 'searchConcepts', { repository: repoId, show_small: true, limit: 2, offset: 1 })).value, await rest('/concepts?show_small=true&limit=2&offset=1'));
  t.has((await call(reader, 'getConcept', { repository: repoId, concept: 'madame curie' })).value, await rest('/concepts/madame%20curie'));
  const merged = await call(reader, 'getConcept', { repository: repoId, concept: ids.sklodowska });
  t.has(merged.value, await rest(`/concepts/${ids.sklodowska}`));
  t.match(merged.value, { id: ids.curie, redirected_from: { id: ids.sklodowska } });
  t.has((await call(reader, 'getConcept', { repository: repoId, concept: 'Mercury', context: 'chemical' })).value, await rest('/concepts/Mercury?context=chemical'));
  const related = await call(reader, 'getRelatedConcepts', { repository: repoId, concept: 'Maria Sklodowska', show_insignificant: true });
  t.has(related.value, await rest('/concepts/Maria%20Sklodowska/relations?show_insignificant=true'));
  t.match(related.value, { redirected_from: { id: ids.sklodowska }, total: 2 });
  t.has((await call(reader, 'getRelatedConcepts', { repository: repoId, concept: ids.curie })).value, await rest(`/concepts/${ids.curie}/relations`));
  t.has((await call(reader, 'getConceptSources', { repository: repoId, concept: 'Maria Sklodowska' })).value, await rest('/concepts/Maria%20Sklodowska/sources'));
  const relation = await call(reader, 'getConceptRelation', { repository: repoId, concept: 'Maria Sklodowska', other: 'radium' });
  t.notOk(relation.isError, relation.text);
  t.has(relation.value, await rest('/concepts/Maria%20Sklodowska/relations/radium'));
  t.match(relation.value, { concept: { id: ids.curie }, redirected_from: { id: ids.sklodowska }, other: { id: ids.radium }, other_redirected_from: null, shared_fact_count: 2, total: 2 }, 'refreshed at 3, recounted when the twin merged');
  t.same(
    relation.value.facts.map((fact: { id: string }) => fact.id).sort(),
    [facts[0].id, facts[2].id].sort(),
    'the facts both are linked to now: the merged twin is left out',
  );
  const reversed = await call(reader, 'getConceptRelation', { repository: repoId, concept: ids.radium, other: ids.sklodowska });
  t.has(reversed.value, await rest(`/concepts/${ids.radium}/relations/${ids.sklodowska}`));
  t.match(reversed.value, { other: { id: ids.curie }, other_redirected_from: { id: ids.sklodowska } }, 'the other concept is followed to its survivor too');
  const relationPage = await call(reader, 'getConceptRelation', { repository: repoId, concept: ids.curie, other: ids.radium, limit: 1, offset: 1 });
  t.has(relationPage.value, await rest(`/concepts/${ids.curie}/relations/${ids.radium}?limit=1&offset=1`));
  t.equal(relationPage.value.facts.length, 1);
  const unrelated = await call(reader, 'getConceptRelation', { repository: repoId, concept: 'Mercury', context: 'chemical', other: 'Mercury', other_context: 'astronomy' });
  t.notOk(unrelated.isError, unrelated.text);
  t.has(unrelated.value, await rest('/concepts/Mercury/relations/Mercury?context=chemical&other_context=astronomy'));
  t.match(unrelated.value, { concept: { id: ids.mercuryMetal }, other: { id: ids.mercuryPlanet }, shared_fact_count: 0, band: 'insignificant', facts: [], total: 0 }, 'each name in its own context');
  const summariesPage = await call(reader, 'getConceptSummaries', { repository: repoId, concept: ids.curie, limit: 1, offset: 1 });
  const restPage = await rest(`/concepts/${ids.curie}/summaries?limit=1&offset=1`);
  t.same([summariesPage.value.summaries, summariesPage.value.total], [restPage.items, restPage.total], 'the slices page alike');
});

t.test('the investigation tools answer what the investigation routes answer', async (t) => {
  const created = await call(owner, 'createInvestigation', { repository: repoId, title: 'Radioactivity', topic: 'Who found radium?' });
  t.notOk(created.isError, created.text);
  const investigationId = created.value.id;
  t.has(created.value, await rest(`/investigations/${investigationId}`), 'the created investigation as GET answers it');
  const added = await call(owner, 'addInvestigationSource', { repository: repoId, investigationId, sourceId });
  t.match(added.value, { added: true, registered: false, source: { id: sourceId } });
  const again = await service.call('POST', `/api/v1/repositories/${repoId}/investigations/${investigationId}/sources`, { token: ownerToken, body: { source_id: sourceId } });
  const addedAgain = await call(owner, 'addInvestigationSource', { repository: repoId, investigationId, sourceId });
  t.has(addedAgain.value, again.body, 'added twice: as REST answers it');
  const tool = await call(reader, 'getInvestigation', { repository: repoId, investigationId });
  const investigation = await rest(`/investigations/${investigationId}`);
  const sources = await rest(`/investigations/${investigationId}/sources`);
  t.has(tool.value, { ...investigation, sources: sources.items });

  // Its sources page as GET .../sources pages them: an investigation holds up to 1,000, more than one answer of 100.
  for (const path of ['a', 'b', 'c']) await call(owner, 'fetchAndProcessSource', { repository: repoId, url: `http://127.0.0.1:9/${path}`, investigationId });
  const page = await call(reader, 'getInvestigation', { repository: repoId, investigationId, limit: 2, offset: 1 });
  t.notOk(page.isError, page.text);
  t.has(page.value, { source_count: 4, sources: (await rest(`/investigations/${investigationId}/sources?limit=2&offset=1`)).items });
  t.equal(page.value.sources.length, 2);
  const all = await call(reader, 'getInvestigation', { repository: repoId, investigationId });
  t.equal(all.value.sources.length, 4, 'the first 100 by default');
  t.match((await call(reader, 'getInvestigation', { repository: repoId, investigationId, limit: 501 })).text, /limit/);
});

t.test('the report tools answer what the report routes answer', async (t) => {
  const created = await call(owner, 'createReport', { repository: repoId, title: 'Curie', text: 'Marie Curie discovered radium in 1898. She was born in Warsaw.', topic: 'biography' });
  t.notOk(created.isError, created.text);
  const reportId = created.value.id;
  const report = await rest(`/reports/${reportId}`);
  t.has(created.value, report, 'the created report as GET answers it');
  const tool = await call(reader, 'getReport', { repository: repoId, reportId });
  t.has(tool.value, { ...report, annotations: await rest(`/reports/${reportId}/annotations`) });
  t.has((await call(reader, 'listReports', { repository: repoId, search: 'warsaw' })).value, await rest('/reports?query=warsaw'));
  t.has((await call(reader, 'listReports', { repository: repoId, status: 'pending', limit: 1 })).value, await rest('/reports?status=pending&limit=1'));
  const tasks = await call(reader, 'getReportTasks', { repository: repoId, reportId, verbose: true, byKind: true });
  const restTasks = await rest(`/tasks?report_id=${reportId}`);
  t.has(tasks.value, { complete: restTasks.complete, total: restTasks.total, tasks: restTasks.items, by_kind: restTasks.counts });
  const updated = await call(owner, 'updateReport', { repository: repoId, reportId, text: 'Marie Curie discovered polonium.' });
  t.has(updated.value, await rest(`/reports/${reportId}`), 'the updated report as GET answers it');

  // As PUT takes any one field: a title, a parent or children change without the text sent again.
  const renamed = await call(owner, 'updateReport', { repository: repoId, reportId, title: 'Curie, renamed' });
  t.notOk(renamed.isError, renamed.text);
  t.match(renamed.value, { title: 'Curie, renamed', text: 'Marie Curie discovered polonium.', revision: updated.value.revision }, 'the text and its annotation stay');
  const viaRest = await service.call('PUT', `/api/v1/repositories/${repoId}/reports/${reportId}`, { token: ownerToken, body: { title: 'Curie, by REST' } });
  t.same(Object.keys(renamed.value).sort(), Object.keys(viaRest.body).sort(), 'the fields PUT answers');
  const child = await call(owner, 'createReport', { repository: repoId, text: 'Radium glows in the dark.' });
  const adopted = await call(owner, 'updateReport', { repository: repoId, reportId, childrenIds: [child.value.id] });
  t.notOk(adopted.isError, adopted.text);
  t.match(adopted.value, { title: 'Curie, by REST', children_ids: [child.value.id] });
  const moved = await call(owner, 'updateReport', { repository: repoId, reportId: child.value.id, parentId: '' });
  t.match(moved.value, { parent_id: null, text: 'Radium glows in the dark.' });
  const byReader = await call(reader, 'updateReport', { repository: repoId, reportId, childrenIds: [] });
  t.match(byReader.text, /^permission denied: reports:write$/, 'children alone still need reports:write');
  t.same((await rest(`/reports/${reportId}`)).children_ids, [], 'the child left when it was moved; nothing else changed');
  const nothing = await call(owner, 'updateReport', { repository: repoId, reportId });
  t.match(nothing.text, /^invalid: give at least one of/, 'a call that changes nothing, as PUT {} is a 400');
});

t.test('the source and task tools answer what the source and task routes answer', async (t) => {
  const found = await call(reader, 'searchSources', { repository: repoId, query: 'curie' });
  t.has(found.value.items, [await rest(`/sources/${sourceId}`)]);
  const fetched = await call(owner, 'fetchAndProcessSource', { repository: repoId, doi: '10.1000/xyz123' });
  t.notOk(fetched.isError, fetched.text);
  t.has(fetched.value.source, await rest(`/sources/${fetched.value.source.id}`));
  const viaRest = await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token: ownerToken, body: { doi: '10.1000/XYZ123' } });
  const again = await call(owner, 'fetchAndProcessSource', { repository: repoId, doi: '10.1000/XYZ123' });
  t.has(again.value, { created: false, source: viaRest.body });
  const tasks = await call(reader, 'getSourceTasks', { repository: repoId, sourceId: fetched.value.source.id, verbose: true, byKind: true });
  const restTasks = await rest(`/tasks?source_id=${fetched.value.source.id}`);
  t.has(tasks.value, { complete: restTasks.complete, total: restTasks.total, tasks: restTasks.items, by_kind: restTasks.counts });
  const repositories = await call(reader, 'getRepositories');
  const restRepositories = (await service.call('GET', '/api/v1/repositories', { token: readerToken })).body;
  // Deliberately compact (docs/mcp.md): what a tool needs to name a repository, each field as REST gives it.
  const compact = restRepositories.items.map(({ id, name, slug, tier, description, roles }: Record<string, unknown>) => ({ id, name, slug, tier, description, roles }));
  t.same(repositories.value, compact);
});

t.test('unknown ids, ambiguous names and bad arguments are the tool errors docs/mcp.md states, as REST refuses them', async (t) => {
  const cases: [string, Record<string, unknown>, RegExp][] = [
    ['getFact', { factId: UNKNOWN }, /^not found: fact not found$/],
    ['getConcept', { concept: UNKNOWN }, /^not found: concept not found$/],
    ['getConcept', { concept: 'Einstein' }, /^not found: concept not found$/],
    ['getConceptSummaries', { concept: 'Einstein' }, /^not found: concept not found$/],
    ['getRelatedConcepts', { concept: 'Einstein' }, /^not found: concept not found$/],
    ['getConceptSources', { concept: 'Einstein' }, /^not found: concept not found$/],
    ['searchFacts', { concept: 'Einstein' }, /^not found: concept not found$/],
    ['getConceptRelation', { concept: 'Einstein', other: 'Radium' }, /^not found: concept not found$/],
    ['getConceptRelation', { concept: 'Radium', other: 'Einstein' }, /^not found: concept not found$/],
    ['getConceptRelation', { concept: 'Radium', other: UNKNOWN }, /^not found: concept not found$/],
    ['getFactConcepts', { factId: UNKNOWN }, /^not found: fact not found$/],
    ['getInvestigation', { investigationId: UNKNOWN }, /^not found: investigation not found$/],
    ['addInvestigationSource', { investigationId: UNKNOWN, sourceId: UNKNOWN }, /^not found: investigation not found$/],
    ['getReport', { reportId: UNKNOWN }, /^not found: report not found$/],
    ['getReportTasks', { reportId: UNKNOWN }, /^not found: report not found$/],
    ['updateReport', { reportId: UNKNOWN, text: 'x' }, /^not found: report not found$/],
    ['getSourceTasks', { sourceId: UNKNOWN }, /^not found: source not found$/],
    ['getConcept', { concept: 'Mercury' }, /^conflict: concept 'Mercury' exists in several contexts \(astronomy, chemical\): pass context= to pick one$/],
    ['getConceptSummaries', { concept: 'Mercury' }, /^conflict: concept 'Mercury' exists in several contexts/],
    ['getRelatedConcepts', { concept: 'Mercury' }, /^conflict: concept 'Mercury' exists in several contexts/],
    ['getConceptSources', { concept: 'Mercury' }, /^conflict: concept 'Mercury' exists in several contexts/],
    ['searchFacts', { concept: 'Mercury' }, /^conflict: concept 'Mercury' exists in several contexts/],
    ['getConceptRelation', { concept: 'Mercury', other: 'Radium' }, /^conflict: concept 'Mercury' exists in several contexts \(astronomy, chemical\): pass context= to pick one$/],
    ['getConceptRelation', { concept: 'Radium', other: 'Mercury' }, /^conflict: concept 'Mercury' exists in several contexts \(astronomy, chemical\): pass other_context= to pick one$/],
    ['getConceptRelation', { concept: 'Radium', other: 'Mercury', context: 'astronomy' }, /^not found: concept not found$/],
    ['getConceptRelation', { concept: 'Marie Curie', other: 'Maria Sklodowska' }, /^invalid: a concept has no relation to itself$/],
    // A context of only whitespace, as REST's ?context=%20: refused, not matched against an empty context.
    ...(['searchConcepts', 'getConcept', 'getConceptSummaries', 'getRelatedConcepts', 'getConceptRelation', 'getConceptSources', 'searchFacts'] as const).map(
      (name): [string, Record<string, unknown>, RegExp] => [
        name,
        { ...(name === 'searchConcepts' ? {} : { concept: 'Mercury' }), ...(name === 'getConceptRelation' ? { other: 'Radium' } : {}), context: ' \t ' },
        /^invalid: context must not be empty or only whitespace: name a context, or leave context out$/,
      ],
    ),
    ['getConceptRelation', { concept: 'Radium', other: 'Mercury', other_context: ' ' }, /^invalid: other_context must not be empty or only whitespace: name a context, or leave other_context out$/],
    ['getFactConcepts', { factId: 'not-a-uuid' }, /Input validation error: .*must be a UUID/],
    ['getFact', { factId: 'not-a-uuid' }, /Input validation error: .*must be a UUID/],
    ['getReport', { reportId: 'not-a-uuid' }, /Input validation error: .*must be a UUID/],
    ['getInvestigation', { investigationId: 'not-a-uuid' }, /Input validation error: .*must be a UUID/],
    ['getReportTasks', { reportId: 'not-a-uuid' }, /Input validation error: .*must be a UUID/],
    ['getSourceTasks', { sourceId: 'not-a-uuid' }, /Input validation error: .*must be a UUID/],
    ['addInvestigationSource', { investigationId: 'not-a-uuid', sourceId: 'not-a-uuid' }, /Input validation error: .*must be a UUID/],
    ['updateReport', { reportId: 'not-a-uuid', text: 'x' }, /Input validation error: .*must be a UUID/],
    ['createReport', { text: 'x', parentId: 'not-a-uuid' }, /Input validation error: .*must be a UUID/],
    ['fetchAndProcessSource', { url: 'http://127.0.0.1:9/x', investigationId: 'not-a-uuid' }, /Input validation error: .*must be a UUID/],
    ['searchConcepts', { limit: 0 }, /limit/],
    ['searchConcepts', { limit: 501 }, /limit/],
    ['searchConcepts', { offset: -1 }, /offset/],
    ['getRelatedConcepts', { concept: ids.curie, limit: 501 }, /limit/],
    ['getConceptRelation', { concept: ids.curie, other: ids.radium, limit: 0 }, /limit/],
    ['getConceptRelation', { concept: ids.curie, other: ids.radium, offset: -1 }, /offset/],
    ['getConceptRelation', { concept: ids.curie }, /Input validation error: .*other/],
    ['listReports', { limit: 501 }, /limit/],
    ['searchFacts', { offset: 99_995, limit: 10 }, /100,?000|window/],
  ];
  for (const [name, args, expected] of cases) {
    const result = await call(owner, name, { repository: repoId, ...args });
    t.ok(result.isError, `${name} ${JSON.stringify(args)} is an error`);
    t.match(result.text, expected, `${name} ${JSON.stringify(args)}: ${result.text}`);
  }
  // The routes of the two newer tools refuse the same inputs (404, 409, 400 for invalid).
  const restRefusals: [string, number][] = [
    ['/concepts/Radium/relations/Einstein', 404],
    ['/concepts/Radium/relations/Mercury', 409],
    ['/concepts/Marie%20Curie/relations/Maria%20Sklodowska', 400],
    ['/concepts/Radium/relations/Mercury?other_context=%20', 400],
    [`/facts/${UNKNOWN}/concepts`, 404],
    ['/facts/not-a-uuid/concepts', 400],
  ];
  for (const [path, status] of restRefusals) {
    t.equal((await service.call('GET', `/api/v1/repositories/${repoId}${path}`, { token: ownerToken })).status, status, `GET ${path}: ${status}`);
  }
});

t.test('text arguments are bounded in characters as REST bounds them: what REST takes, the tool takes', async (t) => {
  // 150 emoji are 150 characters (JSON Schema's and the domain's count) and 300 UTF-16 units.
  const emojiTitle = '🧪'.repeat(150);
  const viaRest = await service.call('POST', `/api/v1/repositories/${repoId}/investigations`, { token: ownerToken, body: { title: emojiTitle, topic: '⚛'.repeat(1500) + '🧪'.repeat(400) } });
  t.equal(viaRest.status, 201, 'REST takes it');
  const viaTool = await call(owner, 'createInvestigation', { repository: repoId, title: emojiTitle, topic: '⚛'.repeat(1500) + '🧪'.repeat(400) });
  t.notOk(viaTool.isError, viaTool.text);
  t.equal(viaTool.value.title, emojiTitle);
  const tooLong = await call(owner, 'createInvestigation', { repository: repoId, title: 'x'.repeat(201) });
  t.match(tooLong.text, /Input validation error: .*at most 200 characters/, 'one character over is refused');

  // A URL of 3,000 characters: REST takes up to 4,096.
  const longUrl = `http://127.0.0.1:9/${'a'.repeat(3000)}`;
  const restSource = await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token: ownerToken, body: { url: longUrl } });
  t.equal(restSource.status, 201, 'REST takes it');
  const toolSource = await call(owner, 'fetchAndProcessSource', { repository: repoId, url: longUrl });
  t.notOk(toolSource.isError, toolSource.text);
  t.has(toolSource.value, { created: false, source: restSource.body }, 'the source REST added');
  const tooLongUrl = await call(owner, 'fetchAndProcessSource', { repository: repoId, url: `http://127.0.0.1:9/${'a'.repeat(4096)}` });
  t.match(tooLongUrl.text, /Input validation error: .*at most 4096 characters/);

  // A query and a concept name of emoji, at REST's bounds in characters.
  const query = '🧪'.repeat(1000);
  t.has((await call(reader, 'searchConcepts', { repository: repoId, query })).value, await rest(`/concepts?query=${encodeURIComponent(query)}`));
  const name = '🧪'.repeat(500);
  const restConcept = await service.call('GET', `/api/v1/repositories/${repoId}/concepts/${encodeURIComponent(name)}`, { token: readerToken });
  t.equal(restConcept.status, 404, 'REST looks the name up');
  t.match((await call(reader, 'getConcept', { repository: repoId, concept: name })).text, /^not found: concept not found$/, 'so does the tool');
});

t.test('a credential without a permission is refused by the tool as by the route', async (t) => {
  // A reader's API key scoped to concepts and investigations only: no facts:read, no sources:read.
  const created = await service.call('POST', '/api/v1/users/me/api-keys', { token: readerToken, body: { name: 'concepts only', scopes: ['concepts:read', 'investigations:read'], repository: repoId } });
  t.equal(created.status, 201, created.body.message);
  const key: string = created.body.key;
  const client = await connectClient(endpoint, key);
  t.teardown(() => client.close());
  const refused: [string, Record<string, unknown>, string, string][] = [
    ['searchFacts', { query: 'radium' }, '/facts?query=radium', 'facts:read'],
    ['getFact', { factId: facts[0].id }, `/facts/${facts[0].id}`, 'facts:read'],
    ['getFactConcepts', { factId: facts[0].id }, `/facts/${facts[0].id}/concepts`, 'facts:read'],
    ['searchSources', { query: 'curie' }, `/sources/${sourceId}`, 'sources:read'],
    ['getSourceTasks', { sourceId }, `/tasks?source_id=${sourceId}`, 'jobs:read'],
    ['listReports', {}, '/reports', 'reports:read'],
  ];
  for (const [name, args, path, permission] of refused) {
    const viaRest = await service.call('GET', `/api/v1/repositories/${repoId}${path}`, { token: key });
    t.equal(viaRest.status, 403, `GET ${path} is refused`);
    const result = await call(client, name, { repository: repoId, ...args });
    t.equal(result.text, `permission denied: ${permission}`, `${name} is refused, naming the permission`);
  }
  // Documented: getInvestigation answers its sources too, so it needs sources:read as GET .../sources does.
  const investigation = await call(owner, 'createInvestigation', { repository: repoId, title: 'Scoped' });
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}/investigations/${investigation.value.id}`, { token: key })).status, 200);
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}/investigations/${investigation.value.id}/sources`, { token: key })).status, 403);
  t.equal((await call(client, 'getInvestigation', { repository: repoId, investigationId: investigation.value.id })).text, 'permission denied: sources:read');
  const allowed = await call(client, 'getConceptSummaries', { repository: repoId, concept: ids.curie });
  t.notOk(allowed.isError, 'what the key may read it reads');
  t.has(allowed.value.related_concepts, (await rest(`/concepts/${ids.curie}/definition`, key)).related_concepts);
});
