import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import t from 'tap';
import { eventually, registerUser, startTestService, type TestService } from '../../helpers/service.js';
import { CURIE_ARTICLE, startWebServer } from '../../helpers/webServer.js';

let service: TestService;
let web: Awaited<ReturnType<typeof startWebServer>>;
let token: string;
let repoId: string;

t.before(async () => {
  web = await startWebServer({
    '/curie': { body: CURIE_ARTICLE },
    '/gone': { status: 410, body: 'gone' },
    '/image': { contentType: 'image/png', body: Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0, 0, 0]) },
  });
  service = await startTestService();
  token = (await registerUser(service, 'editor@example.org')).token;
  repoId = (await service.call('POST', '/api/v1/repositories', { token, body: { name: 'Science' } })).body.id;
});
t.teardown(async () => {
  await service.close();
  await web.close();
});

const waitForStatus = (sourceId: string, statuses: string[]) =>
  eventually(async () => {
    const response = await service.call('GET', `/api/v1/repositories/${repoId}/sources/${sourceId}`, { token });
    return statuses.includes(response.body.status) ? response.body : null;
  });

t.test('a URL source is fetched, decomposed and searchable', async (t) => {
  const added = await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body: { url: `${web.baseUrl}/curie` } });
  t.equal(added.status, 201);
  t.equal(added.body.status, 'pending');
  const source = await waitForStatus(added.body.id, ['processed', 'failed']);
  t.equal(source.status, 'processed', source.failure ?? '');
  t.equal(source.title, 'Marie Curie');
  t.equal(source.kind, 'html');
  t.equal(source.published_at, '2024-03-01');
  t.ok(source.fact_count >= 5, `fact_count ${source.fact_count}`);

  const again = await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body: { url: `${web.baseUrl}/curie` } });
  t.equal(again.status, 200, 'the same URL returns the existing source');
  t.equal(again.body.id, added.body.id);

  const facts = await service.call('GET', `/api/v1/repositories/${repoId}/sources/${added.body.id}/facts`, { token });
  t.equal(facts.status, 200);
  t.equal(facts.body.total, source.fact_count);
  const contents: string[] = facts.body.items.map((f: { content: string }) => f.content);
  t.ok(contents.some((c) => /Marie Curie was the first woman to win a Nobel Prize/.test(c)), 'leading pronoun resolved');
  t.notOk(contents.some((c) => /Click here/.test(c)), 'boilerplate dropped');

  const search = await service.call('GET', `/api/v1/repositories/${repoId}/facts?query=${encodeURIComponent('"first woman" nobel')}&mode=lexical`, { token });
  t.equal(search.status, 200);
  t.ok(search.body.total >= 1);
  t.match(search.body.items[0].content, /first woman/);
  t.ok(search.body.items[0].score > 0);
  const negated = await service.call('GET', `/api/v1/repositories/${repoId}/facts?query=${encodeURIComponent('polonium -Poland')}&mode=lexical`, { token });
  t.ok(negated.body.items.every((f: { content: string }) => !/Poland/.test(f.content)), 'websearch negation');
  const none = await service.call('GET', `/api/v1/repositories/${repoId}/facts?query=zeppelin&mode=lexical`, { token });
  t.same([none.body.total, none.body.items], [0, []]);
  const paged = await service.call('GET', `/api/v1/repositories/${repoId}/facts?limit=2&offset=1`, { token });
  t.equal(paged.body.items.length, 2);
  t.equal(paged.body.total, source.fact_count);

  const fact = await service.call('GET', `/api/v1/repositories/${repoId}/facts/${search.body.items[0].id}`, { token });
  t.equal(fact.status, 200);
  t.equal(fact.body.sources[0].source_id, added.body.id);
  t.match(fact.body.content_hash, /^[0-9a-f]{64}$/);
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}/facts/00000000-0000-4000-8000-000000000000`, { token })).status, 404);
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}/facts/not-a-uuid`, { token })).status, 400);

  const events = await service.call('GET', `/api/v1/repositories/${repoId}/events?stream=source-${added.body.id}`, { token });
  // The later stages (embedding, deduplication, concepts) append more; these come first.
  t.same(
    events.body.events.slice(0, 5).map((e: { type: string }) => e.type),
    ['SourceRegistered', 'SourceFetchStarted', 'SourceFetched', 'SourceDecompositionStarted', 'FactsExtracted'],
  );
  const [registered, started] = events.body.events;
  t.equal(started.actor, 'system:retrieve_source');
  t.equal(started.causation_id, registered.event_id);
  t.equal(started.correlation_id, registered.correlation_id, 'one correlation id through the pipeline');
  const typed = await service.call('GET', `/api/v1/repositories/${repoId}/events?types=FactsExtracted`, { token });
  t.equal(typed.body.events.length, 1);
  const after = await service.call('GET', `/api/v1/repositories/${repoId}/events?from=${typed.body.next_from}`, { token });
  t.ok(after.body.events.every((e: { global_position: number }) => e.global_position > typed.body.next_from));
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}/events?types=bad;type`, { token })).status, 400);
  // A misspelt type is named, not answered with an empty page that looks like no history.
  const misspelt = await service.call('GET', `/api/v1/repositories/${repoId}/events?types=FactsExtracted,FactExtracted,SourceFetchd`, { token });
  t.equal(misspelt.status, 400);
  t.match(misspelt.body.message, /^unknown event types FactExtracted, SourceFetchd /);

  // The source reads processed once its events are projected; its jobs' success is recorded by
  // the runtime after the stage returns, in a statement of its own: wait for that record too.
  const taskStates = async () => {
    const reply = await service.call('GET', `/api/v1/repositories/${repoId}/tasks?source_id=${added.body.id}&limit=100`, { token });
    return { tasks: reply, kinds: (reply.body.items as Array<{ kind: string; state: string }>).map((j) => `${j.kind}:${j.state}`) };
  };
  const { tasks, kinds } = await eventually(async () => {
    const states = await taskStates();
    return states.kinds.includes('retrieve_source:succeeded') && states.kinds.includes('source_decomposition:succeeded') ? states : null;
  }).catch(taskStates);
  t.ok(kinds.includes('retrieve_source:succeeded') && kinds.includes('source_decomposition:succeeded'), `the source's tasks: ${kinds.join(', ')}`);
  t.ok(tasks.body.items.every((j: { source_id: string }) => j.source_id === added.body.id), 'all of them the source\'s');
  t.equal(tasks.body.counts.retrieve_source.succeeded, 1);
});

t.test('a second source with a shared fact links to the same fact', async (t) => {
  const upload = await uploadFile('notes.md', 'text/markdown', '# Notes\n\nMarie Curie was the first woman to win a Nobel Prize.\n\nPierre Curie was a French physicist who studied magnetism.\n');
  t.equal(upload.status, 201, JSON.stringify(upload.body));
  t.equal(upload.body.origin, 'upload');
  const source = await waitForStatus(upload.body.id, ['processed', 'failed']);
  t.equal(source.status, 'processed', source.failure ?? '');
  t.equal(source.kind, 'markdown');
  const search = await service.call('GET', `/api/v1/repositories/${repoId}/facts?query=${encodeURIComponent('"first woman to win a Nobel Prize"')}&mode=lexical`, { token });
  t.equal(search.body.total, 1, 'deduplicated by content hash');
  const fact = await service.call('GET', `/api/v1/repositories/${repoId}/facts/${search.body.items[0].id}`, { token });
  t.equal(fact.body.sources.length, 2, 'one fact, two sources');
});

t.test('bad sources', async (t) => {
  for (const body of [{}, { url: 'not a url' }, { url: 'ftp://example.org/x' }, { doi: 'nonsense' }, { url: `${web.baseUrl}/x`, doi: '10.1000/1' }]) {
    const response = await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body });
    t.equal(response.status, 400, `400 for ${JSON.stringify(body)}`);
    t.type(response.body.message, 'string');
  }
  // A misspelt or extra field is named, though the body also breaks the one-field rule.
  for (const body of [{ url: `${web.baseUrl}/curie`, x: 1 }, { ur1: `${web.baseUrl}/curie` }]) {
    const misspelt = await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body });
    t.equal(misspelt.status, 400);
    t.match(misspelt.body.message, /^body must NOT have additional properties \('(x|ur1)'\)$/, `the field named for ${JSON.stringify(Object.keys(body))}`);
  }
  t.equal((await service.call('POST', `/api/v1/repositories/nope/sources`, { token, body: { url: `${web.baseUrl}/curie` } })).status, 404);
  t.equal((await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { body: { url: `${web.baseUrl}/curie` } })).status, 401);
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}/sources/00000000-0000-4000-8000-000000000000`, { token })).status, 404);
  const tooDeep = await service.call('GET', `/api/v1/repositories/${repoId}/facts?query=curie&offset=100000`, { token });
  t.equal(tooDeep.status, 400, 'paging past the result window is a bad request');
  t.match(tooDeep.body.message, /offset/);

  const unsupported = await uploadFile('photo.png', 'image/png', 'PNG');
  t.equal(unsupported.status, 415);
  // Named or typed as a PDF but not one: refused now, as other types are, not failed later as a corrupt PDF.
  const notPdf = await uploadFile('paper.pdf', 'application/pdf', 'Plain words, no PDF at all.');
  t.equal(notPdf.status, 415);
  t.match(notPdf.body.message, /not a PDF/);
  const empty = await uploadFile('empty.txt', 'text/plain', '');
  t.equal(empty.status, 400);
  // The file name is kept without control characters; a NUL in it was refused with the event store's wording.
  const oddName = await uploadFile('notes\u0000\u0001\u202e.md', 'text/markdown', 'Otters hold hands while they sleep.');
  t.equal(oddName.status, 201, JSON.stringify(oddName.body));
  t.equal(oddName.body.filename, 'notes.md');
  const misnamed = await service.call('POST', `/api/v1/repositories/${repoId}/sources/upload`, {
    token,
    body: Buffer.from('--b\r\nContent-Disposition: form-data; name="upload"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nOtters float.\r\n--b--\r\n'),
    headers: { 'content-type': 'multipart/form-data; boundary=b' },
  });
  t.equal(misnamed.status, 400, 'a file part not named file');
  t.match(misnamed.body.message, /named 'upload': name it 'file'/);
  // busboy drops a part whose Content-Disposition holds a bare CR or LF, and cuts a quoted name at a
  // CRLF: a file so named read "no file part in the upload" or kept the name's first line
  // (test/api/uploads.http.test.ts sends the other malformed part headers, in small writes).
  const malformed = /^a part's header is malformed: (a header line holds a raw line break|a line of it is not a header)/;
  for (const [what, name] of [['a line feed', 'a\nb.txt'], ['a carriage return', 'a\rb.txt'], ['a CRLF', 'a\r\nb.txt']]) {
    for (const route of ['sources/upload', 'reports/upload']) {
      const reply = await service.call('POST', `/api/v1/repositories/${repoId}/${route}`, {
        token,
        body: Buffer.from(`--b\r\nContent-Disposition: form-data; name="file"; filename="${name}"\r\nContent-Type: text/plain\r\n\r\nOtters float.\r\n--b--\r\n`),
        headers: { 'content-type': 'multipart/form-data; boundary=b' },
      });
      t.equal(reply.status, 400, `${route}, ${what} in the file name`);
      t.match(reply.body, { error: 'bad_request', message: malformed }, `${route}, ${what}`);
    }
  }
  // A text field so named was dropped without a word (the upload went on without it: a 201 here,
  // where a field is refused) or read under the name's first line ("unknown form field 'ti'").
  const fileParts = 'Content-Disposition: form-data; name="file"; filename="otters.txt"\r\nContent-Type: text/plain\r\n\r\nOtters float on their backs.\r\n--b--\r\n';
  for (const [what, name] of [['a line feed', 'ti\ntle'], ['a carriage return', 'ti\rtle'], ['a CRLF', 'ti\r\ntle'], ['a line feed after it', 'title\n']]) {
    const body = `--b\r\nContent-Disposition: form-data; name="${name}"\r\n\r\nOtters\r\n--b\r\n${fileParts}`;
    for (const [route, chunks] of [['sources/upload', 1], ['reports/upload', 1], ['reports/upload', body.length]] as const) {
      const reply = await service.call('POST', `/api/v1/repositories/${repoId}/${route}`, {
        token,
        body: chunks === 1 ? Buffer.from(body, 'latin1') : Readable.from([...body].map((character) => Buffer.from(character, 'latin1'))),
        headers: { 'content-type': 'multipart/form-data; boundary=b' },
      });
      const how = chunks === 1 ? '' : ', a byte per chunk';
      t.equal(reply.status, 400, `${route}, ${what} in a field name${how}`);
      t.match(reply.body, { error: 'bad_request', message: malformed }, `${route}, ${what} in a field name${how}`);
    }
  }
  const noFile = await service.call('POST', `/api/v1/repositories/${repoId}/sources/upload`, {
    token,
    body: Buffer.from('--b\r\nContent-Disposition: form-data; name="title"\r\n\r\nOtters\r\n--b--\r\n'),
    headers: { 'content-type': 'multipart/form-data; boundary=b' },
  });
  t.match(noFile.body, { error: 'bad_request', message: 'no file part in the upload' }, 'no file part is still said so');
  // Bodies that do not parse as multipart were a 500: cut before the closing boundary, a closing boundary without its `--`, no boundary at all.
  const part = '--cut\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nNiels Bohr proposed a model of the atom in 1913.';
  for (const [what, body, type] of [
    ['cut short', part, 'multipart/form-data; boundary=cut'],
    ['an unclosed boundary', `${part}\r\n--cut`, 'multipart/form-data; boundary=cut'],
    ['no boundary', `${part}\r\n--cut--\r\n`, 'multipart/form-data'],
  ]) {
    for (const route of ['sources/upload', 'reports/upload']) {
      const reply = await service.call('POST', `/api/v1/repositories/${repoId}/${route}`, { token, body: Buffer.from(body), headers: { 'content-type': type } });
      t.equal(reply.status, 400, `${route}, ${what}: ${JSON.stringify(reply.body)}`);
      t.match(reply.body, { error: 'bad_request', message: /multipart/ });
    }
  }

  const gone = await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body: { url: `${web.baseUrl}/gone` } });
  const failed = await waitForStatus(gone.body.id, ['failed', 'processed']);
  t.equal(failed.status, 'failed');
  t.match(failed.failure, /retrieve_source: .*410/);
  t.equal(web.hits.get('/gone'), 1, 'a 410 is permanent: fetched once');
  const image = await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body: { url: `${web.baseUrl}/image` } });
  const imageFailed = await waitForStatus(image.body.id, ['failed', 'processed']);
  t.equal(imageFailed.status, 'failed');
  t.match(imageFailed.failure, /image\/png/);

  // As above: the source can read failed before the runtime has recorded the job's failure.
  const failedTask = async () => {
    const jobs = await service.call('GET', `/api/v1/repositories/${repoId}/tasks?state=failed`, { token });
    return jobs.body.items.find((j: { subject_id: string }) => j.subject_id === gone.body.id);
  };
  const failedJob = await eventually(failedTask).catch(failedTask);
  t.ok(failedJob, 'the failed job is visible');
  t.match(failedJob.last_error, /410/);
  const list = await service.call('GET', `/api/v1/repositories/${repoId}/sources?status=failed`, { token });
  t.equal(list.body.total, 2);

  // Retry: the server now serves the page.
  const retried = await service.call('POST', `/api/v1/repositories/${repoId}/sources/${gone.body.id}/retry`, { token });
  t.equal(retried.status, 202);
  t.equal(retried.body.status, 'pending');
  await waitForStatus(gone.body.id, ['failed']);
  t.equal(web.hits.get('/gone'), 2, 'the retry fetched again');
  const notFailed = await service.call('POST', `/api/v1/repositories/${repoId}/sources/${(await firstProcessed()).id}/retry`, { token });
  t.equal(notFailed.status, 409, 'only failed sources can be retried');
});

t.test('a source an older release stored under another spelling answers 200 to every spelling (upgrade QA)', async (t) => {
  // SourceRegistered as a release before the canonical spelling appended it: the url as given.
  const stored = new Map<string, string>();
  for (const url of ['http://127.0.0.1:9/k02.html?', 'http://127.0.0.1:9/%6b04.html', 'https://doi.org/10.1000/QA-DOI-URL']) {
    const id = randomUUID();
    await service.context.store.append(
      `source-${id}`,
      [{ type: 'SourceRegistered', data: { origin: 'url', url, doi: null, filename: null, content_type: null, body_sha256: null, body_bytes: null }, metadata: { repositoryId: repoId, actor: 'user-of-an-older-release', causationId: null, correlationId: null } }],
      'no_stream',
    );
    stored.set(url, id);
  }
  await eventually(async () => Number((await service.context.db.knex('sources').whereIn('id', [...stored.values()]).count({ n: '*' }).first())?.n) === stored.size);
  const before = (await service.call('GET', `/api/v1/repositories/${repoId}/sources?limit=1`, { token })).body.total;
  for (const [body, storedAs] of [
    [{ url: 'http://127.0.0.1:9/k02.html' }, 'http://127.0.0.1:9/k02.html?'],
    [{ url: 'http://127.0.0.1:9/k02.html?' }, 'http://127.0.0.1:9/k02.html?'],
    [{ url: 'http://127.0.0.1:9/%6b04.html' }, 'http://127.0.0.1:9/%6b04.html'],
    [{ url: 'http://127.0.0.1:9/k04.html' }, 'http://127.0.0.1:9/%6b04.html'],
    [{ url: 'https://doi.org/10.1000/QA-DOI-URL' }, 'https://doi.org/10.1000/QA-DOI-URL'],
    [{ doi: '10.1000/qa-doi-url' }, 'https://doi.org/10.1000/QA-DOI-URL'],
  ] as const) {
    const again = await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body });
    t.equal(again.status, 200, `${JSON.stringify(body)}: the existing source`);
    t.equal(again.body.id, stored.get(storedAs));
    t.equal(again.body.url, storedAs, 'as stored');
    t.notOk('reference_key' in again.body, 'the lookup key is not part of a source');
  }
  t.equal((await service.call('GET', `/api/v1/repositories/${repoId}/sources?limit=1`, { token })).body.total, before, 'no source added');
});

t.test('a URL added again with its escapes in the other case answers 200 with the source (RFC 3986 6.2.2.1)', async (t) => {
  const added = await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body: { url: 'http://127.0.0.1:9/escapes/a%2fb?q=%c3%a9' } });
  t.equal(added.status, 201);
  t.equal(added.body.url, 'http://127.0.0.1:9/escapes/a%2Fb?q=%C3%A9', 'shown in the canonical spelling');
  const again = await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body: { url: 'http://127.0.0.1:9/escapes/a%2Fb?q=%C3%a9' } });
  t.equal(again.status, 200, 'the existing source');
  t.equal(again.body.id, added.body.id);
  const unescaped = await service.call('POST', `/api/v1/repositories/${repoId}/sources`, { token, body: { url: 'http://127.0.0.1:9/escapes/a/b?q=%C3%A9' } });
  t.equal(unescaped.status, 201, 'an unescaped slash is another address');
  t.not(unescaped.body.id, added.body.id);
});

async function firstProcessed() {
  return (await service.call('GET', `/api/v1/repositories/${repoId}/sources?status=processed`, { token })).body.items[0];
}

async function uploadFile(filename: string, type: string, content: string) {
  const boundary = '----factlogtest';
  const payload = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${filename}"\r\nContent-Type: ${type}\r\n\r\n${content}\r\n--${boundary}--\r\n`,
  );
  return service.call('POST', `/api/v1/repositories/${repoId}/sources/upload`, {
    token,
    body: payload,
    headers: { 'content-type': `multipart/form-data; boundary=${boundary}` },
  });
}
