import t from 'tap';
import { MAX_REPORT_BYTES } from '../../../src/domain/report/decider.js';
import { eventually, registerUser, startTestService, waitForPipeline, type TestService } from '../../helpers/service.js';

t.setTimeout(600_000);

let service: TestService;
let token: string;
let repoId: string;

t.before(async () => {
  service = await startTestService();
  token = (await registerUser(service, 'writer@example.org')).token;
  repoId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Science' } })).body.id;
  for (const [name, text] of [
    ['curie.md', '# Marie Curie\n\nMarie Curie was born in Warsaw in 1867.\n\nMarie Curie was the first woman to win a Nobel Prize.\n\nIn 1911, Marie Curie won the Nobel Prize in Chemistry.\n'],
    ['coffee.md', '# Coffee\n\nCoffee was first brewed in Yemen in the fifteenth century.\n\nThe coffee plant grows in the highlands of Ethiopia.\n'],
  ]) {
    const uploaded = await upload('sources/upload', name, 'text/markdown', text);
    if (uploaded.status !== 201) throw new Error(`upload ${name}: ${uploaded.status} ${JSON.stringify(uploaded.body)}`);
  }
  await waitForPipeline(service, repoId, token);
});
t.teardown(async () => service.close());

const url = (path = '') => `/api/v1/repositories/${repoId}/reports${path}`;

/** A multipart upload of one file, with form fields sent before it. */
async function upload(path: string, filename: string, type: string, content: string | Buffer, fields: Record<string, string> = {}) {
  const boundary = '----factlogreports';
  const parts = Object.entries(fields).map(([name, value]) => `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`);
  const payload = Buffer.concat([
    Buffer.from(`${parts.join('')}--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${filename}"\r\nContent-Type: ${type}\r\n\r\n`),
    Buffer.isBuffer(content) ? content : Buffer.from(content),
    Buffer.from(`\r\n--${boundary}--\r\n`),
  ]);
  return service.call('POST', `/api/v1/repositories/${repoId}/${path}`, { token, body: payload, headers: { 'content-type': `multipart/form-data; boundary=${boundary}` } });
}

/** Polls the report's tasks until `complete`, then answers the report. */
/**
 * The report once its tasks are done and the read model shows their outcome: a job's end is
 * recorded by the job runtime, its events reach the `reports` read model through the
 * projections, and either can come first.
 */
async function annotated(id: string) {
  await eventually(async () => {
    const tasks = await service.call('GET', `/api/v1/repositories/${repoId}/tasks?report_id=${id}`, { token });
    return tasks.body.complete && tasks.body.total > 0;
  }, 60_000);
  return eventually(async () => {
    const report = (await service.call('GET', url(`/${id}`), { token })).body;
    return ['pending', 'processing'].includes(report.status) ? null : report;
  }, 60_000);
}

const TEXT = 'Marie Curie was the first woman to win a Nobel Prize, as every biography says. Marie Curie did not win the Nobel Prize in Chemistry in 1911. Short one.';

t.test('a report is annotated through the pipeline; tasks of a report can be polled', async (t) => {
  const created = await service.call('POST', url(), { token, body: { title: 'Curie', text: TEXT, topic: 'physics' } });
  t.equal(created.status, 201, JSON.stringify(created.body));
  t.match(created.body, { title: 'Curie', topic: 'physics', parent_id: null, children_ids: [], origin: 'text', revision: 1, text: TEXT });
  t.ok(['pending', 'processing', 'annotated'].includes(created.body.status));

  const report = await annotated(created.body.id);
  t.equal(report.status, 'annotated', report.failure ?? '');
  t.equal(report.sentence_count, 2, 'the short sentence is not annotated');
  const tasks = await service.call('GET', `/api/v1/repositories/${repoId}/tasks?report_id=${created.body.id}`, { token });
  t.same(tasks.body.items.map((task: { kind: string; report_id: string; source_id: string | null }) => [task.kind, task.report_id, task.source_id]), [['annotate_report', created.body.id, null]]);
  // A report's tasks work for no source: with a source or an investigation as well, the filters
  // would match nothing and answer `complete: true` at once to a poller waiting for the report.
  const sourceId = (await service.call('GET', `/api/v1/repositories/${repoId}/sources`, { token })).body.items[0].id;
  for (const other of [`source_id=${sourceId}`, `investigation_id=${created.body.id}`]) {
    const both = await service.call('GET', `/api/v1/repositories/${repoId}/tasks?report_id=${created.body.id}&${other}`, { token });
    t.equal(both.status, 400, `report_id with ${other.split('=')[0]}`);
    t.match(both.body, { error: 'bad_request', message: /report_id/ });
  }

  const annotations = await service.call('GET', url(`/${created.body.id}/annotations`), { token });
  t.equal(annotations.status, 200);
  t.match(annotations.body, { report_id: created.body.id, status: 'annotated', revision: 1, total: 2 });
  const [first, second] = annotations.body.items;
  t.match(first, { index: 0, text: /first woman/, start: 0, carried: false });
  t.match(first.facts[0], { content: 'Marie Curie was the first woman to win a Nobel Prize.', posture: 'supports' });
  t.ok(first.facts[0].score >= 0.7);
  t.ok(first.facts.every((fact: { content: string }) => !/coffee/i.test(fact.content)), 'no coffee fact');
  t.match(second.facts.find((fact: { content: string }) => /Chemistry/.test(fact.content)), { posture: 'contradicts' }, 'the built-in rule sees the negation');
  t.equal(TEXT.slice(second.start, second.end), second.text);
  // Paged when asked: the second sentence alone, the total still the report's.
  const paged = (await service.call('GET', url(`/${created.body.id}/annotations?limit=1&offset=1`), { token })).body;
  t.same([paged.total, paged.items.map((item: { index: number }) => item.index)], [2, [1]]);
  t.equal((await service.call('GET', url(`/${created.body.id}/annotations?limit=0`), { token })).status, 400, 'a limit out of range');

  t.test('an edit re-annotates only the changed sentence', async (t) => {
    const text = TEXT.replace('Marie Curie did not win the Nobel Prize in Chemistry in 1911.', 'Marie Curie was born in Warsaw in 1867, long before radium.');
    const edited = await service.call('PUT', url(`/${created.body.id}`), { token, body: { text } });
    t.equal(edited.status, 200, JSON.stringify(edited.body));
    t.equal(edited.body.revision, 2);
    await eventually(async () => (await service.call('GET', url(`/${created.body.id}`), { token })).body.status === 'annotated', 60_000);
    const after = (await service.call('GET', url(`/${created.body.id}/annotations`), { token })).body;
    t.same(after.items.map((item: { carried: boolean }) => item.carried), [true, false]);
    t.same(after.items[0].facts, first.facts, 'the unchanged sentence kept its facts');
    t.match(after.items[1].facts[0], { content: /born in Warsaw/, posture: 'supports' });
  });

  t.test('annotate re-annotates every sentence', async (t) => {
    const requested = await service.call('POST', url(`/${created.body.id}/annotate`), { token });
    t.equal(requested.status, 202);
    t.equal(requested.body.revision, 3);
    await eventually(async () => (await service.call('GET', url(`/${created.body.id}`), { token })).body.status === 'annotated', 60_000);
    const after = (await service.call('GET', url(`/${created.body.id}/annotations`), { token })).body;
    t.same(after.items.map((item: { carried: boolean }) => item.carried), [false, false]);
  });
});

t.test('upload, list, search, filter, page', async (t) => {
  const uploaded = await upload('reports/upload', 'coffee-notes.md', 'text/markdown', '# Coffee notes\n\nCoffee was first brewed in Yemen in the fifteenth century, the notes say.\n', {
    topic: 'coffee',
  });
  t.equal(uploaded.status, 201, JSON.stringify(uploaded.body));
  t.match(uploaded.body, { title: 'Coffee notes', topic: 'coffee', origin: 'upload', filename: 'coffee-notes.md' });
  const titled = await upload('reports/upload', 'plain.txt', 'text/plain', 'Just some words about tea and nothing else at all.', { title: 'Tea' });
  t.equal(titled.body.title, 'Tea');
  await annotated(uploaded.body.id);
  await annotated(titled.body.id);

  const all = await service.call('GET', url(), { token });
  t.equal(all.status, 200);
  t.ok(all.body.total >= 3);
  t.equal(all.body.items[0].id, titled.body.id, 'newest first');
  t.notOk('text' in all.body.items[0], 'lists leave the text out');
  t.ok(all.body.items[0].text_chars > 0);
  const search = await service.call('GET', url(`?query=${encodeURIComponent('yemen')}`), { token });
  t.same(search.body.items.map((item: { id: string }) => item.id), [uploaded.body.id], 'full-text search over title and text');
  t.equal(search.body.query, 'yemen');
  const byStatus = await service.call('GET', url('?status=annotated&limit=1&offset=1'), { token });
  t.equal(byStatus.body.items.length, 1);
  t.equal(byStatus.body.total, all.body.total);
  t.equal((await service.call('GET', url('?status=failed'), { token })).body.total, 0);
  t.equal((await service.call('GET', url('?status=nonsense'), { token })).status, 400);
  // The 1,000 characters are counted in code points, as the schema and the MCP tool count them:
  // 600 emoji (1,200 UTF-16 units) were a 400 "at most 1000 characters".
  const emoji = await service.call('GET', url(`?query=${encodeURIComponent('🫖'.repeat(600))}`), { token });
  t.match([emoji.status, emoji.body], [200, { total: 0 }], '600 characters are fewer than 1,000');
  const longer = await service.call('GET', url(`?query=${encodeURIComponent('🫖'.repeat(1001))}`), { token });
  t.equal(longer.status, 400, '1,001 are more');
});

t.test('parents and children; deleting', async (t) => {
  const parent = (await service.call('POST', url(), { token, body: { text: '# Overview\n\nAn overview of the radioactivity reports.' } })).body;
  t.equal(parent.title, 'Overview', 'the first line is the default title');
  const child = (await service.call('POST', url(), { token, body: { title: 'Part one', text: 'The first part.', parent_id: parent.id } })).body;
  t.equal(child.parent_id, parent.id);
  t.same((await service.call('GET', url(`/${parent.id}`), { token })).body.children_ids, [child.id]);
  const grandchild = (await service.call('POST', url(), { token, body: { title: 'Part one, a', text: 'A detail.', parent_id: child.id } })).body;

  const cycle = await service.call('PUT', url(`/${parent.id}`), { token, body: { parent_id: grandchild.id } });
  t.equal(cycle.status, 400);
  t.match(cycle.body, { error: 'bad_request', message: /cycle/ });
  const self = await service.call('PUT', url(`/${parent.id}`), { token, body: { parent_id: parent.id } });
  t.match(self.body, { error: 'bad_request', message: /cycle/ });
  t.equal((await service.call('GET', url(`/${parent.id}`), { token })).body.parent_id, null, 'nothing written');

  // Two edits at once that would each be fine alone but together close a cycle: one is refused.
  const a = (await service.call('POST', url(), { token, body: { title: 'A', text: 'Report A.' } })).body;
  const b = (await service.call('POST', url(), { token, body: { title: 'B', text: 'Report B.' } })).body;
  const racing = await Promise.all([
    service.call('PUT', url(`/${a.id}`), { token, body: { parent_id: b.id } }),
    service.call('PUT', url(`/${b.id}`), { token, body: { parent_id: a.id } }),
  ]);
  t.same(racing.map((answer) => answer.status).sort(), [200, 400], 'one of two racing edits closes no cycle');
  const parents = [(await service.call('GET', url(`/${a.id}`), { token })).body.parent_id, (await service.call('GET', url(`/${b.id}`), { token })).body.parent_id];
  t.equal(parents.filter((parentId) => parentId !== null).length, 1, 'exactly one parent link was written');

  const moved = await service.call('PUT', url(`/${grandchild.id}`), { token, body: { parent_id: null, topic: 'detail' } });
  t.match(moved.body, { parent_id: null, topic: 'detail', revision: 1 }, 'a parent or topic change is no new revision');

  const refused = await service.call('DELETE', url(`/${parent.id}`), { token });
  t.equal(refused.status, 409);
  t.match(refused.body.message, /child report/);
  t.equal((await service.call('DELETE', url(`/${child.id}`), { token })).status, 204);
  t.equal((await service.call('GET', url(`/${child.id}`), { token })).status, 404);
  t.equal((await service.call('GET', url(`/${child.id}/annotations`), { token })).status, 404);
  t.equal((await service.call('DELETE', url(`/${parent.id}`), { token })).status, 204);
  t.equal((await service.call('PUT', url(`/${parent.id}`), { token, body: { title: 'x' } })).status, 404);
});

t.test('children_ids on POST and PUT replaces a report\'s children, as MCP childrenIds does; a refused list moves none', async (t) => {
  const first = (await service.call('POST', url(), { token, body: { title: 'First', text: 'The first chapter.' } })).body;
  const second = (await service.call('POST', url(), { token, body: { title: 'Second', text: 'The second chapter.' } })).body;
  const book = await service.call('POST', url(), { token, body: { title: 'Book', text: 'A book of chapters.', children_ids: [first.id] } });
  t.equal(book.status, 201, JSON.stringify(book.body));
  t.same(book.body.children_ids, [first.id], 'created with its child');
  const both = await service.call('PUT', url(`/${book.body.id}`), { token, body: { children_ids: [first.id, second.id] } });
  t.equal(both.status, 200, JSON.stringify(both.body));
  t.same([...both.body.children_ids].sort(), [first.id, second.id].sort());
  t.equal((await service.call('GET', url(`/${second.id}`), { token })).body.parent_id, book.body.id, 'the child has it as parent');

  const unknown = await service.call('PUT', url(`/${book.body.id}`), { token, body: { title: 'Renamed', children_ids: [second.id, '00000000-0000-4000-8000-000000000000'] } });
  t.equal(unknown.status, 400);
  t.match(unknown.body, { error: 'bad_request', message: /child report 00000000-0000-4000-8000-000000000000 not found/ });
  const own = await service.call('PUT', url(`/${book.body.id}`), { token, body: { children_ids: [book.body.id] } });
  t.match(own.body, { error: 'bad_request', message: /own child/ });
  const after = (await service.call('GET', url(`/${book.body.id}`), { token })).body;
  t.equal(after.title, 'Book', 'a refused list writes none of the edit');
  t.same([...after.children_ids].sort(), [first.id, second.id].sort(), 'and moves no child');

  const none = await service.call('PUT', url(`/${book.body.id}`), { token, body: { children_ids: [] } });
  t.same(none.body.children_ids, [], 'an empty list lets every child go');
  t.equal((await service.call('GET', url(`/${first.id}`), { token })).body.parent_id, null);
});

t.test('bad input is refused clearly and nothing is written', async (t) => {
  const events = async () => (await service.call('GET', `/api/v1/repositories/${repoId}/events?types=ReportCreated,ReportUpdated&limit=1000`, { token })).body.events.length;
  const before = { reports: (await service.call('GET', url(), { token })).body.total, events: await events() };

  const large = await service.call('POST', url(), { token, body: { text: 'x'.repeat(MAX_REPORT_BYTES + 1) } });
  t.equal(large.status, 413);
  t.match(large.body, { error: 'payload_too_large', message: /262145 bytes; the limit is 262144 bytes/ });
  const largeUpload = await upload('reports/upload', 'big.md', 'text/markdown', 'y'.repeat(MAX_REPORT_BYTES + 10));
  t.equal(largeUpload.status, 413);
  const crlfPastBound = 'y'.repeat(MAX_REPORT_BYTES - 5) + '\r\n'.repeat(6);
  const largeCrlfUpload = await upload('reports/upload', 'big.md', 'text/markdown', crlfPastBound);
  t.match([largeCrlfUpload.status, largeCrlfUpload.body.message], [413, /262145 bytes/], 'measured as stored: line ends normalised');
  const empty = await service.call('POST', url(), { token, body: { text: '  \n ' } });
  t.match([empty.status, empty.body], [400, { error: 'bad_request', message: /empty/ }]);
  t.equal((await service.call('POST', url(), { token, body: {} })).status, 400, 'text is required');
  t.equal((await service.call('POST', url(), { token, body: { text: 'x', colour: 'red' } })).status, 400, 'unknown fields');
  const orphan = await service.call('POST', url(), { token, body: { text: 'An orphan.', parent_id: '00000000-0000-4000-8000-000000000000' } });
  t.match([orphan.status, orphan.body], [400, { error: 'bad_request', message: /parent report .* not found/ }]);
  const emptyUpload = await upload('reports/upload', 'empty.md', 'text/markdown', '');
  t.match([emptyUpload.status, emptyUpload.body.message], [400, /empty/]);
  const image = await upload('reports/upload', 'photo.png', 'image/png', 'PNG');
  t.match([image.status, image.body.error], [415, 'unsupported_media_type']);
  const binary = await upload('reports/upload', 'bad.txt', 'text/plain', Buffer.from([0xff, 0xfe, 0xfd]));
  t.match([binary.status, binary.body.message], [400, /not UTF-8/]);
  const withNul = await upload('reports/upload', 'nul.txt', 'text/plain', Buffer.from('A line with a NUL \u0000 in it.', 'utf8'));
  t.same([withNul.status, withNul.body], [400, { error: 'bad_request', message: 'the uploaded report contains a NUL character' }]);
  const notMultipart = await service.call('POST', url('/upload'), { token, body: { text: 'x' } });
  t.match([notMultipart.status, notMultipart.body.error], [415, 'unsupported_media_type']);

  const existing = (await service.call('GET', url('?limit=1'), { token })).body.items[0];
  const emptied = await service.call('PUT', url(`/${existing.id}`), { token, body: { text: '' } });
  t.equal(emptied.status, 400);
  t.equal((await service.call('PUT', url(`/${existing.id}`), { token, body: {} })).status, 400, 'an edit changes something');
  t.equal((await service.call('GET', url('/not-a-uuid'), { token })).status, 400);
  t.equal((await service.call('GET', url('/00000000-0000-4000-8000-000000000000'), { token })).status, 404);

  t.same({ reports: (await service.call('GET', url(), { token })).body.total, events: await events() }, before, 'no report and no event was written');
});

t.test('an upload is measured as a typed text is: as stored, without its byte-order mark, line ends normalised', async (t) => {
  const atBound = 'y'.repeat(MAX_REPORT_BYTES - 10) + '\r\n'.repeat(10);
  const typed = await service.call('POST', url(), { token, body: { text: atBound } });
  t.equal(typed.status, 201, JSON.stringify(typed.body).slice(0, 200));
  const uploaded = await upload('reports/upload', 'at-bound.txt', 'text/plain', Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(atBound)]));
  t.equal(uploaded.status, 201, JSON.stringify(uploaded.body).slice(0, 200));
  t.equal(uploaded.body.text_chars, typed.body.text_chars, 'the same text, typed or uploaded');
  for (const id of [typed.body.id, uploaded.body.id]) t.equal((await service.call('DELETE', url(`/${id}`), { token })).status, 204);
});

t.test('a default title is never half a character, wherever the first line with words starts', async (t) => {
  // The title is looked for in the text's first 2,000 UTF-16 units: an emoji there was cut in
  // half, and the half (a lone surrogate) could not be stored: a 500, typed or uploaded.
  const text = `${'\n'.repeat(1999)}😀 An emoji starts the first line with words.`;
  const typed = await service.call('POST', url(), { token, body: { text } });
  t.equal(typed.status, 201, JSON.stringify(typed.body).slice(0, 200));
  t.equal(typed.body.title, '😀 An emoji starts the first line with words.', 'blank lines before it are no part of the span looked at');
  const uploaded = await upload('reports/upload', 'emoji.md', 'text/markdown', `${' '.repeat(1999)}😀 rest.`);
  t.equal(uploaded.status, 201, JSON.stringify(uploaded.body).slice(0, 200));
  t.equal(uploaded.body.title, '😀 rest.');
  const cut = await service.call('POST', url(), { token, body: { text: `${'#'.repeat(1999)}😀 rest.` } });
  t.equal(cut.status, 201, JSON.stringify(cut.body).slice(0, 200));
  t.match(cut.body.title, /^#+…$/, 'a line longer than the span is cut before the emoji, not inside it');
  t.equal((await service.call('DELETE', url(`/${cut.body.id}`), { token })).status, 204);
  for (const id of [typed.body.id, uploaded.body.id]) t.equal((await service.call('DELETE', url(`/${id}`), { token })).status, 204);
});

t.test('permissions', async (t) => {
  const stranger = (await registerUser(service, 'stranger@example.org')).token;
  t.equal((await service.call('GET', url(), { token: stranger })).status, 404);
  t.equal((await service.call('POST', url(), { token: stranger, body: { text: 'x' } })).status, 404);
  t.equal((await service.call('GET', url())).status, 401);
});

t.test('the OpenAPI document describes the report routes', async (t) => {
  const { paths } = (await service.call('GET', '/api/v1/openapi.json')).body;
  for (const path of ['/api/v1/repositories/{repoID}/reports', '/api/v1/repositories/{repoID}/reports/upload', '/api/v1/repositories/{repoID}/reports/{reportID}', '/api/v1/repositories/{repoID}/reports/{reportID}/annotate', '/api/v1/repositories/{repoID}/reports/{reportID}/annotations']) {
    t.ok(paths[path], path);
  }
  t.ok(paths['/api/v1/repositories/{repoID}/reports'].post.responses['413'], 'the size limit is documented');
  t.same(Object.keys(paths['/api/v1/repositories/{repoID}/reports/{reportID}']).sort(), ['delete', 'get', 'put']);
});

t.test('deletions of one report sent together: one deletes it, the others find it deleted', async (t) => {
  for (let round = 0; round < 3; round++) {
    const report = (await service.call('POST', url(), { token, body: { title: `Deleted thrice ${round}`, text: 'Soon gone.' } })).body;
    const deletions = await Promise.all([0, 1, 2].map(() => service.call('DELETE', url(`/${report.id}`), { token })));
    t.same(deletions.map((reply) => reply.status).sort(), [204, 404, 404], 'as a deletion sent after it would');
    t.same(deletions.filter((reply) => reply.status === 404).map((reply) => reply.body.error), ['not_found', 'not_found']);
    const deleted = (await service.context.store.readStream(`report-${report.id}`)).filter((event) => event.type === 'ReportDeleted');
    t.equal(deleted.length, 1, 'one deletion recorded');
  }
});
