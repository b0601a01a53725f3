import { randomUUID } from 'node:crypto';
import t from 'tap';
import { citedFactIds } from '../../../src/domain/concept/summaries.js';
import { createOpenAIChatModel } from '../../../src/providers/llm/openai.js';
import type { ChatModel } from '../../../src/providers/llm/port.js';
import { createSummarizeConceptsStage } from '../../../src/pipeline/stages/summarizeConcepts.js';
import { createSynthesizeConceptStage } from '../../../src/pipeline/stages/synthesizeConcept.js';
import { scheduledJobContext } from '../../helpers/jobContext.js';
import { startOpenAIServer } from '../../helpers/openaiServer.js';
import { registerUser, startTestService, type TestService } from '../../helpers/service.js';
import { createConcept, extractFacts, linkFacts, refreshRelations, stabilize, type SeededFact } from '../seedGraph.js';

t.setTimeout(300_000);

let service: TestService;
let token: string;
let strangerToken: string;
let repoId: string;
let otherRepoId: string;
let facts: SeededFact[];
let foreignFacts: SeededFact[];
const ids: Record<string, string> = {};

const url = (path: string, repository = repoId) => `/api/v1/repositories/${repository}${path}`;
const get = (path: string, as = token) => service.call('GET', url(path), { token: as });

function stagesWith(chat: ChatModel) {
  const { store, db, config } = service.context;
  return {
    summarize: createSummarizeConceptsStage({ store, knex: db.knex, chat, settings: { ...config.providers.summarization, batch_size: 3 } }),
    synthesize: createSynthesizeConceptStage({ store, knex: db.knex, chat, settings: config.providers.synthesis, summarization: { batchSize: 3 } }),
  };
}

/** Runs summarize for the repository, then synthesize for each concept, and waits for the read models. */
async function runPipeline(chat: ChatModel = service.context.chat, concepts = [ids.curie, ids.radium]) {
  const { summarize, synthesize } = stagesWith(chat);
  await summarize.run(scheduledJobContext(summarize, repoId, { subjectId: repoId }));
  for (const concept of concepts) await synthesize.run(scheduledJobContext(synthesize, repoId, { subjectId: concept }));
  // The embedded runner settles on the global position alone.
  await service.context.projections.settle({ position: await service.context.store.headPosition(), streamId: '', streamVersion: 0, types: [] }, 30_000);
}

t.before(async () => {
  // No workers: the test runs the two stages itself, so nothing else reacts to the seeded events.
  service = await startTestService({ workers: false, overrides: { providers: { embeddings: { provider: 'none' } } } });
  token = (await registerUser(service, 'owner@example.org')).token;
  strangerToken = (await registerUser(service, 'stranger@example.org')).token;
  repoId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Chemistry' } })).body.id;
  otherRepoId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Elsewhere' } })).body.id;
  const sourceId = randomUUID();
  facts = await extractFacts(service, repoId, sourceId, [
    'Marie Curie discovered radium in 1898.',
    'Radium glows in the dark.',
    'Marie Curie isolated radium chloride.',
    'Marie Curie was born in Warsaw.',
  ]);
  await stabilize(service, repoId, sourceId, facts);
  ids.curie = await createConcept(service, repoId, 'Marie Curie', 'person');
  ids.radium = await createConcept(service, repoId, 'Radium', 'chemical');
  const [f1, f2, f3, f4] = facts.map((fact) => fact.id);
  await linkFacts(service, repoId, sourceId, { [f1]: [ids.curie, ids.radium], [f2]: [ids.radium], [f3]: [ids.curie, ids.radium], [f4]: [ids.curie] });
  await refreshRelations(service, repoId, [[ids.curie, ids.radium, 2]]);
  foreignFacts = await extractFacts(service, otherRepoId, randomUUID(), ['Pierre Curie was born in Paris.']);
});
t.teardown(() => service.close());

t.test('before any run: no summaries, a null definition; unknown concepts are 404', async (t) => {
  const summaries = await get(`/concepts/${ids.curie}/summaries`);
  t.equal(summaries.status, 200);
  t.match(summaries.body, { concept: { id: ids.curie }, items: [], total: 0 });
  const definition = await get(`/concepts/${ids.curie}/definition`);
  t.equal(definition.status, 200);
  t.match(definition.body, { synthesis: null, facts: [], images: [] });
  t.equal((await get(`/concepts/${randomUUID()}/summaries`)).status, 404);
  t.equal((await get('/concepts/No%20Such%20Concept/definition')).status, 404);
  t.equal((await service.call('POST', url(`/concepts/${randomUUID()}/resynthesize`), { token })).status, 404);
  t.equal((await get(`/concepts/${ids.curie}/summaries`, strangerToken)).status, 404);
  t.equal((await get(`/concepts/${ids.curie}/summaries?limit=0`)).status, 400);
  t.equal((await get('/summaries?mode=sideways')).status, 400);
});

t.test('summaries, definition and summary search after a run of the built-in model', async (t) => {
  await runPipeline();
  const summaries = await get(`/concepts/${ids.curie}/summaries`);
  t.equal(summaries.status, 200);
  t.equal(summaries.body.total, 1);
  const [slice] = summaries.body.items;
  t.match(slice, { slice_number: 1, is_open: false, fact_count: 3, reason: 'facts_added' }, 'three facts freeze a slice of batch size 3');
  t.ok(citedFactIds(slice.content).every((id: string) => slice.fact_ids.includes(id)));
  const byName = await get('/concepts/Marie%20Curie/summaries');
  t.same(byName.body.items, summaries.body.items, 'by canonical name too');

  const definition = await get(`/concepts/${ids.curie}/definition`);
  t.equal(definition.status, 200);
  const cited = citedFactIds(definition.body.synthesis.content);
  t.ok(cited.length > 0);
  t.same(definition.body.facts.map((fact: { id: string }) => fact.id), cited, 'the facts it covers, in citation order');
  t.same(definition.body.related_concepts.map((concept: { id: string }) => concept.id), [ids.radium]);
  t.match(definition.body.synthesis, { reason: 'inputs_changed', model_id: service.context.chat.modelId });

  const found = await get('/summaries?query=Warsaw');
  t.equal(found.status, 200);
  t.ok(found.body.items.length >= 1);
  t.match(found.body.items[0], { concept_id: ids.curie, concept: { canonical_name: 'Marie Curie' } });
  t.equal(found.body.mode, 'lexical', 'summaries keep no vectors');
  const filtered = await get(`/summaries?query=radium&concept_id=${ids.radium}`);
  t.ok(filtered.body.items.every((item: { concept_id: string }) => item.concept_id === ids.radium));
  // As the facts' concept filter: an unknown concept is a 404, not an empty page.
  const unknown = await get('/summaries?query=radium&concept_id=00000000-0000-4000-8000-000000000000');
  t.equal(unknown.status, 404);
  t.equal(unknown.body.error, 'not_found');
  t.equal((await get('/summaries?query=Warsaw&concept_id=Marie%20Curie')).body.items[0]?.concept_id, ids.curie, 'a name names the concept too');
  // A name two concepts share: the 409 lists them, as every route that resolves a name does.
  const mercury = [await createConcept(service, repoId, 'Mercury', 'chemical'), await createConcept(service, repoId, 'Mercury', 'topic')];
  const ambiguous = await get('/summaries?concept_id=Mercury');
  t.equal(ambiguous.status, 409);
  t.equal(ambiguous.body.error, 'ambiguous_concept');
  t.same(ambiguous.body.contexts, ['chemical', 'topic']);
  t.same(ambiguous.body.candidates.map((candidate: { id: string }) => candidate.id).sort(), [...mercury].sort());
  // The 409 says to pass context=, and the route takes it: it picks the context of concept_id's name.
  t.match(ambiguous.body.message, /pass context= to pick one/);
  const picked = await get('/summaries?concept_id=Mercury&context=topic');
  t.equal(picked.status, 200, 'the advice of the 409 can be followed');
  t.same(picked.body.items, [], 'the topic concept has no slices yet');
  t.equal((await get('/summaries?query=Warsaw&concept_id=Marie%20Curie&context=person')).body.items[0]?.concept_id, ids.curie, 'a context that holds the name');
  t.equal((await get('/summaries?concept_id=Marie%20Curie&context=topic')).status, 404, 'not in that context');
  const alone = await get('/summaries?query=Warsaw&context=person');
  t.equal(alone.status, 400, 'a context without concept_id would narrow nothing: refused, not ignored');
  t.match(alone.body, { error: 'bad_request', message: /give concept_id too/ });
});

t.test('resynthesize records the request and names the task', async (t) => {
  const accepted = await service.call('POST', url(`/concepts/${ids.curie}/resynthesize`), { token, body: { reason: 'check' } });
  t.equal(accepted.status, 202);
  t.match(accepted.body, { task_id: /^[0-9a-f-]{36}$/, concept_id: ids.curie });
  t.match(accepted.body.task, { kind: 'synthesize_concept', state: 'queued' }, 'intake enqueued it before the reply');
  t.equal((await service.call('POST', url(`/concepts/${ids.curie}/resynthesize`), { token: strangerToken })).status, 404);
  t.equal((await service.call('POST', url(`/concepts/${ids.curie}/resynthesize`), { token, body: { reason: 'x'.repeat(501) } })).status, 400);
  // 251 characters (an emoji is one, as the schema's maxLength counts), 501 UTF-16 units.
  const emoji = `a${'😀'.repeat(250)}`;
  const counted = await service.call('POST', url(`/concepts/${ids.curie}/resynthesize`), { token, body: { reason: emoji } });
  t.equal(counted.status, 202, JSON.stringify(counted.body));
  const longest = `a${'😀'.repeat(499)}`;
  t.equal((await service.call('POST', url(`/concepts/${ids.curie}/resynthesize`), { token, body: { reason: longest } })).status, 202, '500 characters, 999 units');
  const recorded = await service.call('GET', `/api/v1/repositories/${repoId}/events?stream=concept-${ids.curie}&types=ConceptResynthesisRequested`, { token });
  t.same(recorded.body.events.slice(-2).map((event: { data: { reason: string } }) => event.data.reason), [emoji, longest], 'recorded whole');
  const { synthesize } = stagesWith(service.context.chat);
  await synthesize.run(scheduledJobContext(synthesize, repoId, { subjectId: ids.curie }));
  await runPipeline(service.context.chat, []);
  t.match((await get(`/concepts/${ids.curie}/definition`)).body.synthesis, { reason: 'requested' });
  const events = await service.call('GET', `/api/v1/repositories/${repoId}/events?stream=concept-${ids.curie}`, { token });
  t.ok(events.body.events.some((event: { type: string; actor: string }) => event.type === 'ConceptResynthesisRequested' && !event.actor.startsWith('system:')));
});

t.test('a model answer citing a fact of another repository or another slice is refused; nothing is stored', async (t) => {
  let answer: (document: Record<string, unknown>) => unknown = () => ({});
  const server = await startOpenAIServer({ chat: (document) => answer(document) });
  t.teardown(() => server.close());
  const chat = createOpenAIChatModel({ baseUrl: server.baseUrl, model: 'test-model', retry: { maxAttempts: 1, baseDelayMs: 1, maxDelayMs: 1, perCallTimeoutMs: 5_000 } });
  const { synthesize } = stagesWith(chat);
  const before = (await get(`/concepts/${ids.curie}/definition`)).body.synthesis;
  const head = await service.context.store.headPosition();

  answer = (document) => {
    const given = document.facts as Array<{ id: string }>;
    return { content: `[a](<fact:${given[0].id}>) [b](<fact:${foreignFacts[0].id}>)` };
  };
  await service.call('POST', url(`/concepts/${ids.curie}/resynthesize`), { token });
  await t.rejects(synthesize.run(scheduledJobContext(synthesize, repoId, { subjectId: ids.curie })), new RegExp(`refused after 2 answers .*outside its input: ${foreignFacts[0].id}`));
  t.equal(server.requests.chat, 2, 'asked again once, then refused');

  // Radium's fact f2 is not Marie Curie's: citing it is refused the same way.
  answer = (document) => ({ content: `[a](<fact:${(document.facts as Array<{ id: string }>)[0].id}>) [b](<fact:${facts[1].id}>)` });
  await t.rejects(synthesize.run(scheduledJobContext(synthesize, repoId, { subjectId: ids.curie })), /outside its input/);
  t.equal(await service.context.store.headPosition(), head + 1, 'only the request was recorded');
  t.same((await get(`/concepts/${ids.curie}/definition`)).body.synthesis, before, 'the definition is unchanged');
});
