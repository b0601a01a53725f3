import t from 'tap';
import { registerUser, startTestService, type TestService } from '../../helpers/service.js';
import { appendEvents, createConcept, extractFacts, linkFacts, refreshRelations, stabilize, type SeededFact } from '../seedGraph.js';

let service: TestService;
let token: string;
let strangerToken: string;
let repoId: string;
let sourceId: string;
let facts: SeededFact[];
const ids: Record<string, string> = {};

const url = (path: string) => `/api/v1/repositories/${repoId}${path}`;
const get = (path: string, as = token) => service.call('GET', url(path), { token: as });

t.before(async () => {
  // No workers: the events below are the pipeline's output; nothing else may react to them.
  service = await startTestService({ workers: false });
  token = (await registerUser(service, 'owner@example.org')).token;
  strangerToken = (await registerUser(service, 'stranger@example.org')).token;
  repoId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Chemistry' } })).body.id;
  sourceId = (await service.call('POST', url('/sources'), { token, body: { url: 'http://127.0.0.1:9/curie' } })).body.id;
  facts = await extractFacts(service, repoId, sourceId, [
    'Marie Curie discovered radium in 1898.',
    'Radium glows in the dark.',
    'Marie Curie isolated radium chloride.',
    'Radium was used in luminous paint.',
    'Marie Curie studied radium decay.',
    'Radium is highly radioactive.',
    'Marie Curie was born in Warsaw.',
    'Mercury is both a planet and an element.',
  ]);
  await stabilize(service, repoId, sourceId, facts);
  ids.curie = await createConcept(service, repoId, 'Marie Curie', 'person', ['Madame Curie']);
  ids.radium = await createConcept(service, repoId, 'Radium', 'chemical');
  ids.polonium = await createConcept(service, repoId, 'Polonium', 'chemical');
  ids.warsaw = await createConcept(service, repoId, 'Warsaw', 'location');
  ids.mercuryChemical = await createConcept(service, repoId, 'Mercury', 'chemical');
  ids.mercuryTopic = await createConcept(service, repoId, 'Mercury', 'topic');
  ids.oldCurie = await createConcept(service, repoId, 'M. Curie', 'person');
  const [f1, f2, f3, f4, f5, f6, f7, f8] = facts.map((fact) => fact.id);
  await linkFacts(service, repoId, sourceId, {
    [f1]: [ids.curie, ids.radium, ids.polonium],
    [f2]: [ids.curie, ids.radium, ids.polonium],
    [f3]: [ids.curie, ids.radium, ids.polonium],
    [f4]: [ids.curie, ids.radium],
    [f5]: [ids.curie, ids.radium],
    [f6]: [ids.curie, ids.radium],
    [f7]: [ids.curie, ids.warsaw],
    [f8]: [ids.oldCurie, ids.polonium, ids.mercuryChemical, ids.mercuryTopic],
  });
  // A duplicate folded into Marie Curie: its link to f8 moves to the survivor.
  await appendEvents(service, repoId, `concept-${ids.oldCurie}`, [{ type: 'ConceptMergedInto', data: { survivor_id: ids.curie, reason: 'duplicate' } }]);
  await refreshRelations(service, repoId, [
    [ids.curie, ids.radium, 6],
    [ids.curie, ids.polonium, 3],
    [ids.curie, ids.warsaw, 1],
  ]);
});
t.teardown(() => service.close());

t.test('the concept list hides small concepts unless show_small, filters by context', async (t) => {
  const listed = await get('/concepts');
  t.equal(listed.status, 200);
  t.same(listed.body.items.map((c: { id: string }) => c.id).sort(), [ids.curie, ids.radium].sort(), 'fewer than 5 facts: hidden');
  t.equal(listed.body.total, 2);
  t.match(listed.body, { mode: 'lexical', fallback_reason: /empty/ });
  const curie = listed.body.items.find((c: { id: string }) => c.id === ids.curie);
  t.match(curie, { canonical_name: 'Marie Curie', context: 'person', status: 'active', fact_count: 8, aliases: ['M. Curie', 'Madame Curie'] }, 'the merged concept\'s name became an alias');

  const all = await get('/concepts?show_small=true&limit=50');
  t.same(
    all.body.items.map((c: { id: string }) => c.id).sort(),
    [ids.curie, ids.radium, ids.polonium, ids.warsaw, ids.mercuryChemical, ids.mercuryTopic].sort(),
    'show_small lists every active concept; the merged one never',
  );
  const chemicals = await get('/concepts?show_small=true&context=CHEMICAL');
  t.same(chemicals.body.items.map((c: { id: string }) => c.id).sort(), [ids.radium, ids.polonium, ids.mercuryChemical].sort(), 'context, case-insensitive');
  const paged = await get('/concepts?show_small=true&limit=2&offset=2');
  t.equal(paged.body.items.length, 2);
  t.equal(paged.body.total, 6);
});

t.test('a context of only whitespace is a 400 on every route that takes one, as an empty concept is, not an empty page', async (t) => {
  const refused = (name: string) => ({ error: 'bad_request', message: `${name} must not be empty or only whitespace: name a context, or leave ${name} out` });
  for (const blank of ['%20', '%20%09%20']) {
    const paths = [
      `/concepts?context=${blank}`,
      `/concepts?show_small=true&query=radium&context=${blank}`,
      `/facts?context=${blank}`,
      `/facts?concept=Radium&context=${blank}`,
      `/concepts/Radium?context=${blank}`,
      `/concepts/${ids.curie}?context=${blank}`,
      `/concepts/${ids.curie}/relations?context=${blank}`,
      `/concepts/${ids.curie}/relations/Radium?context=${blank}`,
      `/concepts/${ids.curie}/facts?context=${blank}`,
      `/concepts/${ids.curie}/sources?context=${blank}`,
      `/concepts/${ids.curie}/summaries?context=${blank}`,
      `/concepts/${ids.curie}/definition?context=${blank}`,
      `/summaries?concept_id=Radium&context=${blank}`,
      `/summaries?context=${blank}`,
    ];
    for (const path of paths) {
      const answer = await get(path);
      t.equal(answer.status, 400, path);
      t.same(answer.body, refused('context'), path);
    }
    const other = await get(`/concepts/${ids.curie}/relations/Radium?other_context=${blank}`);
    t.same([other.status, other.body], [400, refused('other_context')], 'other_context likewise');
    const resynthesize = await service.call('POST', url(`/concepts/${ids.curie}/resynthesize?context=${blank}`), { token });
    t.same([resynthesize.status, resynthesize.body], [400, refused('context')], 'resynthesize likewise, and nothing queued');
  }
  // Padding around a context is not part of it: the lookups trim it, as before.
  const padded = await get('/concepts?show_small=true&context=%20chemical%20');
  t.same(padded.body.items.map((c: { id: string }) => c.id).sort(), [ids.radium, ids.polonium, ids.mercuryChemical].sort());
});

t.test('concept search: by name and alias, hybrid by default, lexical on request', async (t) => {
  const byAlias = await get('/concepts?query=madame');
  t.equal(byAlias.status, 200);
  t.same(byAlias.body.items.map((c: { id: string }) => c.id), [ids.curie], 'found by an alias');
  t.equal(byAlias.body.mode, 'hybrid');
  t.equal(byAlias.body.fallback_reason, null);
  t.ok(byAlias.body.items[0].score > 0, 'fused score');
  const small = await get('/concepts?query=polonium');
  t.same(small.body.items, [], 'a small concept stays hidden in search too');
  const shown = await get('/concepts?query=polonium&show_small=true&mode=lexical');
  t.match(shown.body, { mode: 'lexical', fallback_reason: null, total: 1, items: [{ id: ids.polonium, fact_count: 4 }] });
  const bad = await get('/concepts?mode=fuzzy');
  t.equal(bad.status, 400);
  t.equal(bad.body.error, 'bad_request');
  t.equal((await get('/concepts?show_small=perhaps')).status, 400, 'show_small must be a boolean');
  t.equal((await get('/concepts', strangerToken)).status, 404, 'no role on the repository: as if there were none');
});

t.test('one concept by id or canonical name; merged ones answer with the survivor', async (t) => {
  const byId = await get(`/concepts/${ids.curie}`);
  t.equal(byId.status, 200);
  t.match(byId.body, { id: ids.curie, canonical_name: 'Marie Curie', fact_count: 8, aliases: ['M. Curie', 'Madame Curie'], redirected_from: null });
  const byName = await get(`/concepts/${encodeURIComponent('marie CURIE')}`);
  t.equal(byName.body.id, ids.curie, 'canonical name, case-insensitive');
  t.equal((await get(`/concepts/${encodeURIComponent('Madame Curie')}`)).body.id, ids.curie, 'an alias also resolves');
  const ambiguous = await get('/concepts/Mercury');
  t.equal(ambiguous.status, 409);
  t.same(ambiguous.body, {
    error: 'ambiguous_concept',
    message: ambiguous.body.message,
    contexts: ['chemical', 'topic'],
    candidates: [
      { id: ids.mercuryChemical, canonical_name: 'Mercury', context: 'chemical' },
      { id: ids.mercuryTopic, canonical_name: 'Mercury', context: 'topic' },
    ],
  });
  t.match(ambiguous.body.message, /context=/);
  t.equal((await get('/concepts/Mercury?context=topic')).body.id, ids.mercuryTopic, 'context picks one');
  const merged = await get(`/concepts/${ids.oldCurie}`);
  t.equal(merged.status, 200);
  t.match(merged.body, { id: ids.curie, redirected_from: { id: ids.oldCurie, canonical_name: 'M. Curie', context: 'person' } });
  t.equal((await get(`/concepts/${encodeURIComponent('M. Curie')}`)).body.id, ids.curie, 'a merged name too');
  const unknown = await get('/concepts/Unobtainium');
  t.equal(unknown.status, 404);
  t.equal(unknown.body.error, 'not_found');
  t.equal((await get('/concepts/00000000-0000-4000-8000-000000000000')).status, 404, 'unknown uuid');
  t.equal((await get('/concepts/Radium?context=topic')).status, 404, 'not in that context');
  // An id is exact: a context that is not its own is a mistake to report, not a filter to ignore.
  for (const path of [`/concepts/${ids.curie}?context=topic`, `/concepts/${ids.curie}/summaries?context=topic`, `/concepts/${ids.curie}/relations?context=topic`]) {
    const mismatched = await get(path);
    t.equal(mismatched.status, 400, path);
    t.same(mismatched.body, { error: 'bad_request', message: `concept ${ids.curie} is in context person, not topic: context= only picks among concepts that share a name; leave it out with an id` });
  }
  t.equal((await get(`/concepts/${ids.curie}?context=Person`)).body.id, ids.curie, 'its own context is fine');
  // A name may hold 200 characters; percent-encoded, up to 12 each. The router cut path parameters at 100.
  for (const name of ['a'.repeat(200), '東'.repeat(200)]) {
    const long = await get(`/concepts/${encodeURIComponent(name)}`);
    t.equal(long.status, 404, `a ${name.length}-character name reaches the route (${encodeURIComponent(name).length} in the URL)`);
    t.equal(long.body.error, 'not_found');
  }
});

t.test('relations carry bands; insignificant ones only on request', async (t) => {
  const relations = await get(`/concepts/${ids.curie}/relations`);
  t.equal(relations.status, 200);
  t.same(
    relations.body.items.map((r: { concept: { id: string }; shared_fact_count: number; band: string }) => [r.concept.id, r.shared_fact_count, r.band]),
    [
      [ids.radium, 6, 'stable'],
      [ids.polonium, 3, 'weak'],
    ],
  );
  t.equal(relations.body.total, 2);
  t.equal(relations.body.concept.id, ids.curie);
  const all = await get(`/concepts/${encodeURIComponent('Marie Curie')}/relations?show_insignificant=true`);
  t.same(all.body.items.map((r: { band: string }) => r.band), ['stable', 'weak', 'insignificant', 'insignificant', 'insignificant']);
  // Both Mercurys through f8, which the merge of M. Curie brought along.
  t.same(all.body.items.slice(2).map((r: { concept: { id: string } }) => r.concept.id), [ids.mercuryChemical, ids.mercuryTopic].sort().concat(ids.warsaw));
  const fromOtherSide = await get(`/concepts/${ids.radium}/relations`);
  t.same(fromOtherSide.body.items.map((r: { concept: { id: string } }) => r.concept.id), [ids.curie], 'either side of the pair');

  const pair = await get(`/concepts/${ids.curie}/relations/Radium`);
  t.equal(pair.status, 200);
  t.match(pair.body, { concept: { id: ids.curie }, redirected_from: null, other: { id: ids.radium }, other_redirected_from: null, shared_fact_count: 6, band: 'stable', total: 6 });
  // A merged concept on either side: its survivor answers, and the pair says which was asked for.
  const merged = await get(`/concepts/${ids.oldCurie}/relations/Radium`);
  t.match(merged.body, { concept: { id: ids.curie }, redirected_from: { id: ids.oldCurie }, other: { id: ids.radium }, other_redirected_from: null, shared_fact_count: 6 });
  const mergedOther = await get(`/concepts/${ids.radium}/relations/${ids.oldCurie}`);
  t.match(mergedOther.body, { concept: { id: ids.radium }, redirected_from: null, other: { id: ids.curie }, other_redirected_from: { id: ids.oldCurie } });
  t.same(pair.body.facts.map((f: { id: string }) => f.id).sort(), facts.slice(0, 6).map((f) => f.id).sort());
  t.ok(pair.body.facts.every((f: { status: string }) => f.status === 'stable'));
  const none = await get(`/concepts/${ids.radium}/relations/Warsaw`);
  t.match(none.body, { shared_fact_count: 0, band: 'insignificant', total: 0, facts: [] });
  const ambiguousOther = await get(`/concepts/${ids.curie}/relations/Mercury`);
  t.equal(ambiguousOther.status, 409, 'an ambiguous other');
  // `context` is the first concept's (Marie Curie is a person): the other's is other_context, which the 409 names.
  t.match(ambiguousOther.body, { error: 'ambiguous_concept', message: /pass other_context= to pick one/, contexts: ['chemical', 'topic'] });
  t.equal((await get(`/concepts/${encodeURIComponent('Marie Curie')}/relations/Mercury?context=topic`)).status, 404, 'context looks Marie Curie up in topic');
  const picked = await get(`/concepts/${encodeURIComponent('Marie Curie')}/relations/Mercury?other_context=chemical`);
  t.equal(picked.status, 200);
  t.match(picked.body, { concept: { id: ids.curie }, other: { id: ids.mercuryChemical }, total: 1 });
  t.same(picked.body.facts.map((f: { id: string }) => f.id), [facts[7].id], 'the fact the merged M. Curie brought');
  t.equal((await get(`/concepts/Mercury/relations/Mercury?context=topic&other_context=chemical`)).body.other.id, ids.mercuryChemical, 'both names, each in its context');
  t.equal((await get(`/concepts/${ids.curie}/relations/Radium?other_context=topic`)).status, 404, 'not in that context');
  t.equal((await get(`/concepts/${ids.curie}/relations/Radium?other_context=`)).status, 400);
  t.equal((await get(`/concepts/${ids.curie}/relations/${ids.curie}`)).status, 400, 'itself');
  t.equal((await get(`/concepts/${ids.curie}/relations/Nothing`)).status, 404);
});

t.test('a concept\'s facts and sources', async (t) => {
  const linked = await get(`/concepts/${ids.curie}/facts?limit=5`);
  t.equal(linked.status, 200);
  t.equal(linked.body.total, 8, 'its own facts and those of the concept merged into it');
  t.equal(linked.body.items.length, 5);
  t.match(linked.body.items[0], { status: 'stable', content_hash: /^[0-9a-f]{64}$/ });
  const sources = await get(`/concepts/${ids.warsaw}/sources`);
  t.equal(sources.status, 200);
  t.match(sources.body, { total: 1, items: [{ id: sourceId, fact_count: 1, url: 'http://127.0.0.1:9/curie' }] });
  t.equal((await get('/concepts/Nothing/facts')).status, 404);
  t.equal((await get('/concepts/Mercury/sources')).status, 409);
});

t.test('the facts of one fact\'s concepts', async (t) => {
  const response = await get(`/facts/${facts[7].id}/concepts`);
  t.equal(response.status, 200);
  t.same(
    response.body.items.map((c: { canonical_name: string; context: string }) => `${c.canonical_name}/${c.context}`),
    ['Marie Curie/person', 'Mercury/chemical', 'Mercury/topic', 'Polonium/chemical'],
    'the merged concept\'s link landed on its survivor',
  );
  t.equal(response.body.merged_from, null);
  t.equal((await get('/facts/00000000-0000-4000-8000-000000000000/concepts')).status, 404);
  t.equal((await get('/facts/not-a-uuid/concepts')).status, 400);
});

t.test('migrate-context records the request and names the task to watch', async (t) => {
  const post = (body: unknown, as = token) => service.call('POST', url('/concepts/migrate-context'), { token: as, body });
  const accepted = await post({ from_context: 'location', to_context: 'topic' });
  t.equal(accepted.status, 202);
  t.match(accepted.body, { task_id: /^[0-9a-f-]{36}$/, from_context: 'location', to_context: 'topic' });
  t.not(accepted.body.task, null, 'intake enqueued the task before the reply (read-your-writes)');
  t.equal(accepted.body.task.id, accepted.body.task_id);
  t.equal(accepted.body.task.kind, 'migrate_context');
  t.equal((await get(`/tasks/${accepted.body.task_id}`)).status, 200, 'the task is readable');
  const events = await service.call('GET', `/api/v1/repositories/${repoId}/events?stream=repository-${repoId}`, { token });
  t.ok(events.body.events.some((e: { type: string }) => e.type === 'ContextMigrationRequested'));
  t.equal((await post({ from_context: 'location', to_context: 'no-such-context' })).status, 400, 'unknown target context');
  t.equal((await post({ from_context: 'topic', to_context: 'topic' })).status, 400, 'the same context');
  const typo = await post({ from_context: 'locaton', to_context: 'topic' });
  t.equal(typo.status, 400, 'a source context that is neither the repository\'s nor any concept\'s');
  t.match(typo.body, { error: 'bad_request', message: /'locaton' is neither a context of this repository nor the context of any of its concepts/ });
  t.equal((await post({ from_context: 'LOCATION', to_context: 'topic' })).status, 202, 'contexts are matched without case');
  t.equal((await post({ from_context: 'location' })).status, 400, 'to_context missing');
  t.equal((await post({ from_context: 'location', to_context: 'topic' }, strangerToken)).status, 404);
});
