import t from 'tap';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { repositoryDomain } from '../../../src/auth/rbac.js';
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

  const { issuer, endpoint } = await listen(service);
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
