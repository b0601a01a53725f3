import t from 'tap';
import { createLocalEmbedder } from '../../../src/providers/embeddings/local.js';
import { registerUser, startTestService, type TestService } from '../../helpers/service.js';
import { appendEvents, createConcept, embedFacts, extractFacts, linkFacts, stabilize, type SeededFact } from '../seedGraph.js';

let service: TestService;
let token: string;
let repoId: string;
let facts: Record<string, SeededFact>;
const ids: Record<string, string> = {};

const url = (path: string) => `/api/v1/repositories/${repoId}${path}`;
const get = (path: string) => service.call('GET', url(path), { token });
const contentsOf = (body: { items: { content: string }[] }) => body.items.map((item) => item.content).sort();

t.before(async () => {
  // No workers: the events below stand for the pipeline's output.
  service = await startTestService({ workers: false });
  token = (await registerUser(service, 'owner@example.org')).token;
  repoId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Garage' } })).body.id;
  const sourceId = (await service.call('POST', url('/sources'), { token, body: { url: 'http://127.0.0.1:9/garage' } })).body.id;
  const seeded = await extractFacts(service, repoId, sourceId, [
    'The automobile needs fuel to run.',
    'Diesel engines burn fuel efficiently.',
    'Tyres wear out after many miles.',
    'Mechanics repair broken gearboxes.',
    'The automobile needs petrol to run.',
    'Fresh paint protects the bodywork.',
  ]);
  facts = { automobile: seeded[0], diesel: seeded[1], tyres: seeded[2], mechanics: seeded[3], duplicate: seeded[4], paint: seeded[5] };
  await stabilize(service, repoId, sourceId, [facts.automobile, facts.diesel, facts.tyres, facts.mechanics]);
  // `paint` stays new (not deduplicated yet); `duplicate` merged into `automobile`.
  await appendEvents(service, repoId, `fact-${facts.duplicate.id}`, [
    { type: 'FactMergedInto', data: { survivor_id: facts.automobile.id, similarity: 0.97, source_id: sourceId, catchup: false } },
  ]);
  await embedFacts(service, repoId, sourceId, createLocalEmbedder(), seeded);
  ids.fuel = await createConcept(service, repoId, 'Fuel', 'chemical');
  ids.engine = await createConcept(service, repoId, 'Engine', 'technology');
  ids.tyre = await createConcept(service, repoId, 'Tyre', 'product');
  ids.workshop = await createConcept(service, repoId, 'Workshop', 'location');
  ids.workshopTopic = await createConcept(service, repoId, 'Workshop', 'topic');
  await linkFacts(service, repoId, sourceId, {
    [facts.automobile.id]: [ids.fuel],
    [facts.diesel.id]: [ids.fuel, ids.engine],
    [facts.tyres.id]: [ids.tyre],
    [facts.mechanics.id]: [ids.workshop, ids.engine],
    [facts.duplicate.id]: [ids.workshopTopic],
  });
});
t.teardown(() => service.close());

t.test('listing: merged facts hidden, each fact with its status', async (t) => {
  const listed = await get('/facts?limit=50');
  t.equal(listed.status, 200);
  t.equal(listed.body.total, 5, 'the merged fact is not listed');
  t.notOk(listed.body.items.some((f: { id: string }) => f.id === facts.duplicate.id));
  t.match(listed.body, { mode: 'lexical', fallback_reason: /empty/, query: '' });
  const statuses = Object.fromEntries(listed.body.items.map((f: { id: string; status: string }) => [f.id, f.status]));
  t.equal(statuses[facts.automobile.id], 'stable');
  t.equal(statuses[facts.paint.id], 'new', 'not yet deduplicated');
});

t.test('hybrid search finds a paraphrase lexical search misses', async (t) => {
  const lexical = await get('/facts?query=car&mode=lexical');
  t.equal(lexical.status, 200);
  t.match(lexical.body, { mode: 'lexical', fallback_reason: null, total: 0, items: [] }, 'no fact has the word "car"');
  const hybrid = await get('/facts?query=car');
  t.equal(hybrid.body.mode, 'hybrid');
  t.equal(hybrid.body.fallback_reason, null);
  t.ok(hybrid.body.items.some((f: { id: string }) => f.id === facts.automobile.id), 'the automobile fact, by meaning');
  t.notOk(hybrid.body.items.some((f: { id: string }) => f.id === facts.duplicate.id), 'never a merged fact');
  t.ok(hybrid.body.items.every((f: { score: number }) => f.score > 0 && f.score <= 2 / 61), 'fused scores');
  const both = await get('/facts?query=fuel');
  t.equal(both.body.mode, 'hybrid');
  t.ok([facts.automobile.id, facts.diesel.id].includes(both.body.items[0].id), 'a fact both rankings hold comes first');
  const excluding = await get(`/facts?query=${encodeURIComponent('fuel -diesel')}`);
  t.match(excluding.body, { mode: 'hybrid', fallback_reason: null });
  t.ok(excluding.body.items.some((f: { id: string }) => f.id === facts.automobile.id));
  t.notOk(excluding.body.items.some((f: { id: string }) => f.id === facts.diesel.id), 'an excluded word keeps its facts out of the vector side too');
  for (const query of ['-', '!!!', '-diesel']) {
    const wordless = await get(`/facts?query=${encodeURIComponent(query)}`);
    const lexical = await get(`/facts?query=${encodeURIComponent(query)}&mode=lexical`);
    t.match(wordless.body, { mode: 'lexical', fallback_reason: /no word to look for/ }, `${query}: no meaning to rank by`);
    t.same(wordless.body.items, lexical.body.items, `${query}: the lexical answer (documented: no match, or every fact without the word)`);
  }
  const bad = await get('/facts?query=fuel&mode=semantic');
  t.equal(bad.status, 400);
  t.equal(bad.body.error, 'bad_request');
  t.equal((await get('/facts?limit=0')).status, 400, 'limit below 1');
});

t.test('concept and context filters', async (t) => {
  const byName = await get('/facts?concept=fuel');
  t.equal(byName.status, 200);
  t.same(contentsOf(byName.body), [facts.diesel.content, facts.automobile.content].sort(), 'concept by canonical name, case-insensitive');
  t.same(contentsOf((await get(`/facts?concept=${ids.engine}`)).body), [facts.diesel.content, facts.mechanics.content].sort(), 'concept by id');
  const all = await get(`/facts?concepts=${encodeURIComponent(`Fuel, ${ids.engine}`)}`);
  t.same(contentsOf(all.body), [facts.diesel.content], 'concepts: facts shared by all of them');
  const searched = await get('/facts?concept=Engine&query=gearboxes&mode=lexical');
  t.same(contentsOf(searched.body), [facts.mechanics.content], 'a query within the concept');
  const hybridWithin = await get('/facts?concept=Tyre&query=car');
  t.same(hybridWithin.body.items.map((f: { id: string }) => f.id), [facts.tyres.id], 'hybrid stays within the concept');
  t.same(contentsOf((await get('/facts?context=technology')).body), [facts.diesel.content, facts.mechanics.content].sort(), 'context: any concept of it');
  t.same(contentsOf((await get('/facts?context=topic')).body), [facts.automobile.content], 'a link to a merged fact lands on its survivor');

  const ambiguous = await get('/facts?concept=Workshop');
  t.equal(ambiguous.status, 409);
  t.same(ambiguous.body.contexts, ['location', 'topic']);
  t.same(contentsOf((await get('/facts?concept=Workshop&context=location')).body), [facts.mechanics.content], 'context picks the concept');
  t.equal((await get('/facts?concept=Carburettor')).status, 404, 'unknown concept');
  t.equal((await get('/facts?concept=00000000-0000-4000-8000-000000000000')).status, 404, 'unknown concept id');
  t.equal((await get('/facts?concepts=,')).status, 400, 'an empty list');
  t.equal((await get(`/facts?concepts=${Array.from({ length: 21 }, (_, i) => `c${i}`).join(',')}`)).status, 400, 'too many');
});

t.test('the concepts of a fact; a merged fact answers with its survivor\'s', async (t) => {
  const own = await get(`/facts/${facts.diesel.id}/concepts`);
  t.equal(own.status, 200);
  t.same(own.body.items.map((c: { canonical_name: string }) => c.canonical_name), ['Engine', 'Fuel']);
  t.equal(own.body.merged_from, null);
  const merged = await get(`/facts/${facts.duplicate.id}/concepts`);
  t.equal(merged.body.fact_id, facts.automobile.id);
  t.equal(merged.body.merged_from, facts.duplicate.id);
  t.same(merged.body.items.map((c: { canonical_name: string; context: string }) => `${c.canonical_name}/${c.context}`), ['Fuel/chemical', 'Workshop/topic']);
  t.equal((await get('/facts/not-a-uuid/concepts')).status, 400);
});
