import t from 'tap';
import type { Principal } from '../../src/auth/rbac.js';
import { startTestApplication, type TestApplication } from '../helpers/application.js';
import { appendEvents, extractFacts, seedBakeryFacts, stabilize, type SeededFact } from '../api/seedGraph.js';

let harness: TestApplication;
let owner: Principal;
let repository: string;
let reportId: string;
let facts: Record<string, SeededFact>;

/**
 * An annotation is kept as made; the merges and the retraction below come after it, as
 * deduplication and a source's deletion do, so the fact ids it names are stale.
 */
t.before(async () => {
  harness = await startTestApplication({ name: 'Bakery' });
  ({ owner, repository } = harness);
  const { source } = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/bakery' });
  facts = await seedBakeryFacts(harness.service, repository, source.id);
  const text = 'Bakers need yeast and ovens. Yeast makes bread rise. Nothing here.';
  const report = await harness.app.reports.create(owner, { repository, text });
  reportId = report.id;
  const cite = (fact: SeededFact, score: number, posture: string) => ({ fact_id: fact.id, score, posture });
  await annotate(reportId, report.revision, [
    {
      index: 0,
      text: 'Bakers need yeast and ovens.',
      start: 0,
      end: 28,
      carried: false,
      facts: [cite(facts.twin, 0.9, 'supports'), cite(facts.knife, 0.8, 'related'), cite(facts.yeast, 0.7, 'contradicts'), cite(facts.oven, 0.6, 'supports'), cite(facts.gone, 0.5, 'supports')],
    },
    { index: 1, text: 'Yeast makes bread rise.', start: 29, end: 52, carried: false, facts: [cite(facts.yeast, 0.85, 'related')] },
    { index: 2, text: 'Nothing here.', start: 53, end: 66, carried: true, facts: [] },
  ]);
  // Deduplication: twin → yeast, then yeast → oven (a chain of two); `gone` lost its source and was retracted.
  await appendEvents(harness.service, repository, `fact-${facts.twin.id}`, [
    { type: 'FactMergedInto', data: { survivor_id: facts.yeast.id, similarity: 0.97, source_id: source.id, catchup: false } },
  ]);
  await appendEvents(harness.service, repository, `fact-${facts.yeast.id}`, [
    { type: 'FactMergedInto', data: { survivor_id: facts.oven.id, similarity: 0.95, source_id: null, catchup: true } },
  ]);
  await appendEvents(harness.service, repository, `fact-${facts.gone.id}`, [{ type: 'FactRetracted', data: { source_id: source.id, reason: 'source deleted' } }]);
});
t.teardown(() => harness.close());

/** Records the annotation of a report's revision with `sentences` (the built-in model's settings), as annotate_report would. */
async function annotate(report: string, revision: number, sentences: readonly object[]): Promise<void> {
  await appendEvents(harness.service, repository, `report-${report}`, [
    { type: 'ReportAnnotated', data: { revision, model_id: 'local', similarity_threshold: 0.3, max_facts_per_sentence: 5, min_sentence_runes: 5, sentences } },
  ]);
}

/** The facts of each annotated sentence, as the report's annotations show them (`?? null`: a stale read lacked `merged_from`). */
async function annotated(page: { limit?: number; offset?: number } = {}) {
  const annotations = await harness.app.reports.annotations(owner, { repository, report: reportId, ...page });
  return annotations.items.map((sentence) => ({
    index: sentence.index,
    facts: sentence.facts.map((fact) => ({ fact_id: fact.fact_id, status: fact.status, score: fact.score, posture: fact.posture, merged_from: fact.merged_from ?? null })),
  }));
}

t.test("a report's annotations follow merges of the facts they name, before and after cleanup", async (t) => {
  const expected = [
    {
      index: 0,
      // twin, yeast and oven all lead to oven: listed once, with the best score and its posture, saying which ids led there; gone is left out.
      facts: [
        { fact_id: facts.oven.id, status: 'stable', score: 0.9, posture: 'supports', merged_from: [facts.twin.id, facts.yeast.id] },
        { fact_id: facts.knife.id, status: 'stable', score: 0.8, posture: 'related', merged_from: [] },
      ],
    },
    // Once per sentence: another sentence shows the survivor again, for its own citation.
    { index: 1, facts: [{ fact_id: facts.oven.id, status: 'stable', score: 0.85, posture: 'related', merged_from: [facts.yeast.id] }] },
    { index: 2, facts: [] },
  ];
  t.same(await annotated(), expected, 'merged rows still present');
  t.same(await annotated({ offset: 1, limit: 1 }), [expected[1]], 'a page reads its own sentences');

  // cleanup_facts removes merged facts' rows seconds after the merge: their redirects stay.
  for (const gone of [facts.twin.id, facts.yeast.id]) {
    await appendEvents(harness.service, repository, `fact-${gone}`, [{ type: 'FactRemoved', data: { survivor_id: facts.oven.id } }]);
  }
  t.notOk(await harness.service.context.db.knex('facts').where({ id: facts.yeast.id }).first(), 'the merged row is gone');
  t.same(await annotated(), expected, 'merged rows removed');

  // REST answers the same, `merged_from` included (a response schema drops what it does not list).
  const { token } = await harness.service.context.identity.login({ email: 'owner@example.org', password: 'correct horse battery' });
  const rest = await harness.service.call('GET', `/api/v1/repositories/${repository}/reports/${reportId}/annotations`, { token });
  t.equal(rest.status, 200);
  t.same(rest.body, await harness.app.reports.annotations(owner, { repository, report: reportId }));
});

/** A new report whose one sentence the annotation links to `cited`, in that order; returns its id. */
async function reportCiting(cited: SeededFact[]): Promise<string> {
  const text = 'Bread is baked at dawn by the bakers.';
  const report = await harness.app.reports.create(owner, { repository, text });
  await annotate(report.id, report.revision, [
    { index: 0, text, start: 0, end: text.length, carried: false, facts: cited.map((fact, rank) => ({ fact_id: fact.id, score: 0.9 - rank / 10, posture: 'supports' })) },
  ]);
  return report.id;
}

/** The report's fact_count as the report, the report list and REST answer it, and the distinct facts its annotations show. */
async function factCounts(report: string) {
  const listed = (await harness.app.reports.list(owner, { repository, limit: 500 })).items.find((item) => item.id === report);
  const { token } = await harness.service.context.identity.login({ email: 'owner@example.org', password: 'correct horse battery' });
  const rest = await harness.service.call('GET', `/api/v1/repositories/${repository}/reports/${report}`, { token });
  const shown = (await harness.app.reports.annotations(owner, { repository, report })).items.flatMap((sentence) => sentence.facts.map((fact) => fact.fact_id));
  return {
    get: (await harness.app.reports.get(owner, { repository, report })).fact_count,
    list: listed?.fact_count,
    rest: (rest.body as { fact_count?: number }).fact_count,
    shown: new Set(shown).size,
  };
}

t.test("a report's fact_count counts the facts its annotations show, merges and retractions since included", async (t) => {
  const same = (n: number) => ({ get: n, list: n, rest: n, shown: n });
  t.same(await factCounts(reportId), same(2), 'five ids annotated: two lead to oven with it, one was retracted');

  const { source } = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/dawn' });
  const [a, b, c, d, e, f, g] = await extractFacts(harness.service, repository, source.id, ['Bakers start at dawn.', 'Bakers begin work at dawn.', 'Rye bread is dense.', 'Rye loaves are heavy.', 'Flour is milled wheat.', 'Salt tightens dough.', 'Salt strengthens gluten.']);
  await stabilize(harness.service, repository, source.id, [a, b, c, d, e, f, g]);
  const merging = await reportCiting([a, b]);
  const retracting = await reportCiting([c, d]);
  const retractingSurvivor = await reportCiting([e, f]);
  for (const report of [merging, retracting, retractingSurvivor]) t.same(await factCounts(report), same(2), 'two facts annotated, two shown');

  await appendEvents(harness.service, repository, `fact-${b.id}`, [{ type: 'FactMergedInto', data: { survivor_id: a.id, similarity: 0.97, source_id: null, catchup: true } }]);
  t.same(await factCounts(merging), same(1), 'B merged into A: one fact');
  await appendEvents(harness.service, repository, `fact-${d.id}`, [{ type: 'FactRetracted', data: { source_id: source.id, reason: 'source deleted' } }]);
  t.same(await factCounts(retracting), same(1), 'D retracted: one fact');
  // F merged into G, which the report does not cite, and G was retracted: F leads nowhere.
  await appendEvents(harness.service, repository, `fact-${f.id}`, [{ type: 'FactMergedInto', data: { survivor_id: g.id, similarity: 0.96, source_id: null, catchup: true } }]);
  t.same(await factCounts(retractingSurvivor), same(2), 'F merged into G: still two facts, E and G');
  await appendEvents(harness.service, repository, `fact-${g.id}`, [{ type: 'FactRetracted', data: { source_id: source.id, reason: 'source deleted' } }]);
  t.same(await factCounts(retractingSurvivor), same(1), "F's survivor retracted: one fact");
});

t.test('after an edit the annotations say which revision they are of: their offsets point into that text', async (t) => {
  const text = 'Ovens bake bread every morning. Yeast is alive.';
  const report = await harness.app.reports.create(owner, { repository, text });
  t.equal(report.annotated_revision, null, 'not annotated yet');
  t.equal((await harness.app.reports.annotations(owner, { repository, report: report.id })).annotated_revision, null);
  await annotate(report.id, report.revision, [{ index: 0, text: 'Ovens bake bread every morning.', start: 0, end: 31, carried: false, facts: [] }]);
  t.match(await harness.app.reports.get(owner, { repository, report: report.id }), { status: 'annotated', revision: 1, annotated_revision: 1 });

  const edited = await harness.app.reports.update(owner, { repository, report: report.id, text: `Flour first. ${text}` });
  t.match(edited, { status: 'pending', revision: 2, annotated_revision: 1 });
  const stale = await harness.app.reports.annotations(owner, { repository, report: report.id });
  t.match(stale, { status: 'pending', revision: 2, annotated_revision: 1 }, 'the sentences are of revision 1, not of the text as it is now');
  t.equal(text.slice(stale.items[0].start, stale.items[0].end), stale.items[0].text, "offsets into revision 1's text");
});

t.test('report search matches the prose, not fact citations written into the text', async (t) => {
  const cited = facts.oven.id;
  const report = await harness.app.reports.create(owner, { repository, title: 'Crumbs', text: `Crumbs fall from crusts (fact:${cited}) and from [loaves](<fact:${cited}>).` });
  const found = async (query: string) => (await harness.app.reports.list(owner, { repository, query, limit: 500 })).items.map((item: { id: string }) => item.id);
  t.same(await found('crumbs crusts'), [report.id], 'the prose is found');
  t.same(await found('fact'), [], 'not the word of the citations');
  t.same(await found(cited.split('-')[0]!), [], 'nor a piece of the id');
});

t.test("a report's fact_count leaves out a deleted source's facts at once, as its annotations do, before cleanup_facts retracts them", async (t) => {
  const same = (n: number) => ({ get: n, list: n, rest: n, shown: n });
  const { source: kept } = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/mill' });
  const { source: doomed } = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/mill-gone' });
  const [stays] = await extractFacts(harness.service, repository, kept.id, ['Mills grind grain.']);
  const [goes] = await extractFacts(harness.service, repository, doomed.id, ['Mills stand by rivers.']);
  await stabilize(harness.service, repository, kept.id, [stays]);
  await stabilize(harness.service, repository, doomed.id, [goes]);
  const report = await reportCiting([stays, goes]);
  t.same(await factCounts(report), same(2), 'two facts annotated, two shown');
  await harness.app.sources.remove(owner, { repository, source: doomed.id });
  t.same(await factCounts(report), same(1), "the deleted source's fact is neither shown nor counted");
});
