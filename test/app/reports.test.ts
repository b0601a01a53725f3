import t from 'tap';
import { createApplication, type Application } from '../../src/app/application.js';
import { defaultTitle, MAX_REPORT_DEPTH, reportUploadType } from '../../src/app/reports.js';
import { UnsupportedContentError } from '../../src/app/errors.js';
import type { Principal } from '../../src/auth/rbac.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';
import { racingCommandBus } from '../helpers/racedWrites.js';

let harness: TestApplication;
let owner: Principal;
let stranger: Principal;
let repository: string;

t.before(async () => {
  harness = await startTestApplication({ name: 'Writing' });
  ({ owner, stranger, repository } = harness);
});
t.teardown(() => harness.close());

t.test('titles and upload types', async (t) => {
  t.equal(defaultTitle('\n\n## The *first* line\nmore'), 'The first line');
  t.equal(defaultTitle('x'.repeat(200)).length, 120);
  t.equal(defaultTitle('Results\tand methods\nmore'), 'Results and methods', 'a tab in the first line becomes a space: a title is one line');
  t.equal(defaultTitle('', 'notes.md'), 'notes');
  t.equal(defaultTitle(''), 'Untitled report');
  t.equal(defaultTitle('😀'.repeat(61 * 2)), `${'😀'.repeat(119)}…`, 'shortened by characters: an emoji is never cut in half');
  t.equal(reportUploadType({ filename: 'a.md', declaredType: 'application/octet-stream' }), 'text/markdown', 'by extension when the declared type says nothing');
  t.equal(reportUploadType({ filename: null, declaredType: 'text/plain; charset=utf-8' }), 'text/plain');
  try {
    reportUploadType({ filename: 'a.pdf', declaredType: 'application/pdf' });
    t.fail('a PDF report was accepted');
  } catch (error) {
    t.ok(error instanceof UnsupportedContentError, 'a PDF is not a report (415 over HTTP)');
    t.match((error as Error).message, /upload Markdown \(\.md\) or plain text/);
  }
});

t.test('the application layer, without HTTP: create, edit, parents, delete; the read model rebuilds equal', async (t) => {
  const created = await harness.app.reports.create(owner, { repository, text: 'A report about radium.' }, { correlationId: 'report-1' });
  t.match(created, { title: 'A report about radium.', status: 'pending', revision: 1, created_by: owner.userId, children_ids: [] });
  const child = await harness.app.reports.create(owner, { repository, title: 'Child', text: 'More.', parent_id: created.id });
  t.same((await harness.app.reports.get(owner, { repository, report: created.id })).children_ids, [child.id]);
  await rejectsWith(t, harness.app.reports.update(owner, { repository, report: created.id, parent_id: child.id }), 'invalid', /cycle/);
  await rejectsWith(t, harness.app.reports.create(owner, { repository, text: 'x', parent_id: 'no-such-report' }), 'invalid', /not found/);
  const edited = await harness.app.reports.update(owner, { repository, report: child.id, text: 'Other text.', topic: 'radium' });
  t.match(edited, { revision: 2, topic: 'radium', status: 'pending' });
  const requested = await harness.app.reports.annotate(owner, { repository, report: child.id });
  t.equal(requested.revision, 3);
  await rejectsWith(t, harness.app.reports.delete(owner, { repository, report: created.id }), 'conflict', /child/);

  const { projections, db } = harness.service.context;
  const live = await db.knex('reports').orderBy('id').select();
  await projections.rebuild('reports');
  t.same(await db.knex('reports').orderBy('id').select(), live, 'a rebuild equals the live rows');

  await harness.app.reports.delete(owner, { repository, report: child.id });
  await rejectsWith(t, harness.app.reports.get(owner, { repository, report: child.id }), 'not_found');
  t.same((await harness.app.reports.list(owner, { repository })).items.map((item) => item.id), [created.id]);
});

t.test('access is checked before the input', async (t) => {
  await rejectsWith(t, harness.app.reports.create(stranger, { repository, text: '' }), 'not_found', /^repository not found$/);
  await rejectsWith(t, harness.app.reports.list(stranger, { repository }), 'not_found', /^repository not found$/);
  let read = false;
  const content = async () => {
    read = true;
    return { filename: 'a.md', declaredType: 'text/markdown', body: Buffer.from('x') };
  };
  await rejectsWith(t, harness.app.reports.upload(stranger, { repository, content }), 'not_found', /^repository not found$/);
  t.notOk(read, 'a refused upload is never read');
  await rejectsWith(t, harness.app.reports.list(owner, { repository, limit: 0 }), 'invalid', /limit/);
});

t.test('a report whose first line is emoji gets a title; lengths count characters, not UTF-16 units', async (t) => {
  const untitled = await harness.app.reports.create(owner, { repository, text: '😀'.repeat(61) });
  t.equal(untitled.title, '😀'.repeat(61), 'stored as sent: no half character for the database to refuse');
  const long = await harness.app.reports.create(owner, { repository, text: `${'😀'.repeat(200)}\nmore` });
  t.equal(long.title, `${'😀'.repeat(119)}…`);
  const titled = await harness.app.reports.create(owner, { repository, text: 'x', title: '😀'.repeat(300), topic: '😀'.repeat(500) });
  t.equal(titled.title, '😀'.repeat(300), 'a 300-character title of emoji is within 500 characters');
  await rejectsWith(t, harness.app.reports.create(owner, { repository, text: 'x', title: '😀'.repeat(501) }), 'invalid', /longer than 500 characters/);
});

t.test('reports nest at most 100 deep, also when a report moves with the reports below it', async (t) => {
  const root = await harness.app.reports.create(owner, { repository, title: 'Root', text: 'Root.' });
  const chain = [root.id];
  for (let depth = 1; depth <= MAX_REPORT_DEPTH; depth++) {
    chain.push((await harness.app.reports.create(owner, { repository, title: `Level ${depth}`, text: 'Deeper.', parent_id: chain.at(-1) })).id);
  }
  await rejectsWith(t, harness.app.reports.create(owner, { repository, title: 'Too deep', text: 'x', parent_id: chain.at(-1) }), 'invalid', /nest at most 100 deep/);
  const top = await harness.app.reports.create(owner, { repository, title: 'New top', text: 'Top.' });
  await rejectsWith(t, harness.app.reports.update(owner, { repository, report: root.id, parent_id: top.id }), 'invalid', /reports below it would reach deeper/);
  t.equal((await harness.app.reports.get(owner, { repository, report: root.id })).parent_id, null, 'the root stays a root');
  const middle = chain[50] as string;
  t.equal((await harness.app.reports.update(owner, { repository, report: middle, parent_id: top.id })).parent_id, top.id, 'a move that stays within the limit is made');
});

t.test('a report deleted while a child is made under it: one of the two is refused', async (t) => {
  for (let round = 0; round < 4; round++) {
    const parent = await harness.app.reports.create(owner, { repository, title: `Parent ${round}`, text: 'Parent.' });
    const [child, deletion] = await Promise.allSettled([
      harness.app.reports.create(owner, { repository, title: `Child ${round}`, text: 'Child.', parent_id: parent.id }),
      harness.app.reports.delete(owner, { repository, report: parent.id }),
    ]);
    t.equal([child.status, deletion.status].filter((status) => status === 'fulfilled').length, 1, `round ${round}: ${child.status} / ${deletion.status}`);
  }
});

t.test('children are checked before any is moved: a refused list changes nothing and makes no report', async (t) => {
  const a = await harness.app.reports.create(owner, { repository, title: 'A', text: 'A.' });
  const b = await harness.app.reports.create(owner, { repository, title: 'B', text: 'B.' });
  const c = await harness.app.reports.create(owner, { repository, title: 'C', text: 'C.', parent_id: b.id });
  const parentOf = async (id: string) => (await harness.app.reports.get(owner, { repository, report: id })).parent_id;

  await rejectsWith(t, harness.app.reports.setChildren(owner, { repository, report: c.id, children_ids: [a.id, b.id] }), 'invalid', /cycle/);
  t.equal(await parentOf(a.id), null, 'the child listed before the refused one was not moved');
  await rejectsWith(t, harness.app.reports.setChildren(owner, { repository, report: a.id, children_ids: [c.id, 'no-such-report'] }), 'invalid', /child report no-such-report not found/);
  t.equal(await parentOf(c.id), b.id, 'an unknown child is a 400, as an unknown parent is, and nothing moved');
  await rejectsWith(t, harness.app.reports.update(owner, { repository, report: c.id, title: 'C, renamed', children_ids: [b.id] }), 'invalid', /cycle/);
  t.equal((await harness.app.reports.get(owner, { repository, report: c.id })).title, 'C', 'the fields of a refused edit are not written either');

  const total = (await harness.app.reports.list(owner, { repository })).total;
  await rejectsWith(t, harness.app.reports.create(owner, { repository, title: 'Orphaned?', text: 'x', parent_id: c.id, children_ids: [a.id, b.id] }), 'invalid', /cycle/);
  t.equal((await harness.app.reports.list(owner, { repository })).total, total, 'no report is made when its children are refused');
  t.equal(await parentOf(a.id), null);

  const made = await harness.app.reports.create(owner, { repository, title: 'Holder', text: 'x', children_ids: [a.id, a.id] });
  t.same(made.children_ids, [a.id], 'a child listed twice is taken once');
  const edited = await harness.app.reports.update(owner, { repository, report: made.id, topic: 'kept', children_ids: [c.id] });
  t.match(edited, { topic: 'kept', children_ids: [c.id] });
  t.equal(await parentOf(a.id), null, 'a former child left out of the list loses its parent');
});

t.test('children taken with the reports below them nest at most 100 deep', async (t) => {
  const makeChain = async (name: string, levels: number) => {
    const ids = [(await harness.app.reports.create(owner, { repository, title: `${name} 0`, text: 'x' })).id];
    for (let depth = 1; depth < levels; depth++) ids.push((await harness.app.reports.create(owner, { repository, title: `${name} ${depth}`, text: 'x', parent_id: ids.at(-1) })).id);
    return ids;
  };
  const upper = await makeChain('Upper', 60);
  const lower = await makeChain('Lower', 60);
  const deepest = upper.at(-1) as string;
  await rejectsWith(t, harness.app.reports.setChildren(owner, { repository, report: deepest, children_ids: [lower[0] as string] }), 'invalid', /nest at most 100 deep/);
  t.equal((await harness.app.reports.get(owner, { repository, report: lower[0] as string })).parent_id, null, 'the lower chain stays a root');
  t.same((await harness.app.reports.setChildren(owner, { repository, report: deepest, children_ids: [lower[30] as string] })).children_ids, [lower[30]], 'a subtree that fits is moved');
});

t.test('an edit or an annotation request stored before a deletion answers the report, not 404; the deletion then lands', async (t) => {
  const { service } = harness;
  const { commands } = service.context;
  for (const [type, request] of [
    ['ReportUpdated', (app: Application, report: string) => app.reports.update(owner, { repository, report, title: 'After' })],
    ['ReportAnnotationRequested', (app: Application, report: string) => app.reports.annotate(owner, { repository, report })],
  ] as const) {
    const report = await harness.app.reports.create(owner, { repository, title: 'Before', text: 'A sentence.' });
    const racing = racingCommandBus(commands, type, () => app.reports.delete(owner, { repository, report: report.id }));
    const app = createApplication({ ...service.context, commands: racing.bus });
    const answered = await request(app, report.id).catch((error: unknown) => error);
    t.match(answered, { id: report.id }, `${type}: stored before the deletion, so answered`);
    t.equal(await racing.raced(), undefined, `${type}: the deletion then succeeds`);
    await rejectsWith(t, harness.app.reports.get(owner, { repository, report: report.id }), 'not_found');
  }
});
