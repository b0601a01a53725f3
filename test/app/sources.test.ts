import { randomUUID } from 'node:crypto';
import t from 'tap';
import { normalizeReference, uploadContentType } from '../../src/app/sources.js';
import { UnsupportedContentError } from '../../src/app/errors.js';
import type { Principal } from '../../src/auth/rbac.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';
import { eventually } from '../helpers/service.js';

let harness: TestApplication;
let owner: Principal;
let stranger: Principal;
let repository: string;

t.before(async () => {
  harness = await startTestApplication({ name: 'Library' });
  ({ owner, stranger, repository } = harness);
});
t.teardown(() => harness.close());

t.test('references: URLs normalised, DOIs checked', async (t) => {
  const resolver = 'https://doi.org/';
  t.same(normalizeReference({ url: 'HTTP://Example.org/a b' }, resolver), { url: 'http://example.org/a%20b', doi: null });
  t.same(normalizeReference({ url: 'http://example.org/page?q=1#part' }, resolver), { url: 'http://example.org/page?q=1', doi: null }, 'the fragment dropped');
  // Spellings of one address are one source (QA: each of these pairs made two).
  t.same(normalizeReference({ url: 'http://example.org/base?' }, resolver), { url: 'http://example.org/base', doi: null }, 'an empty query dropped');
  t.same(normalizeReference({ url: 'http://example.org/%62ase?q=%7Ex%2Fy' }, resolver), { url: 'http://example.org/base?q=~x%2Fy', doi: null }, 'unreserved characters unescaped, others kept');
  t.same(normalizeReference({ url: 'http://localhost.:8080/a' }, resolver), { url: 'http://localhost:8080/a', doi: null }, "a host's trailing dot dropped");
  t.same(normalizeReference({ url: 'https://doi.org/10.1000/ABC' }, resolver), { url: null, doi: '10.1000/ABC' }, 'a doi.org URL is its DOI');
  t.same(normalizeReference({ url: 'http://dx.doi.org/10.1000%2Fabc' }, resolver), { url: null, doi: '10.1000/abc' });
  t.same(normalizeReference({ url: 'https://doi.org/about' }, resolver), { url: 'https://doi.org/about', doi: null }, 'other doi.org pages are pages');
  t.same(normalizeReference({ doi: 'https://doi.org/10.1000/ABC' }, resolver), { url: null, doi: '10.1000/ABC' });
  t.throws(() => normalizeReference({ url: 'not a url' }, resolver), { code: 'invalid', message: /valid absolute URL/ });
  t.throws(() => normalizeReference({ url: 'ftp://example.org/file' }, resolver), { code: 'invalid', message: /http or https/ });
  t.throws(() => normalizeReference({ doi: 'no doi here' }, resolver), { code: 'invalid' });
  t.throws(() => normalizeReference({}, resolver), { code: 'invalid', message: /exactly one/ });
  t.throws(() => normalizeReference({ url: 'http://example.org/', doi: '10.1000/x' }, resolver), { code: 'invalid', message: /exactly one/ });
});

t.test('adding a URL twice answers the first source', async (t) => {
  const first = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/page' }, { correlationId: 'add-1' });
  t.match(first, { created: true, source: { origin: 'url', url: 'http://127.0.0.1:9/page', status: 'pending', created_by: owner.userId } });
  const again = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/page' });
  t.same(again, { created: false, source: first.source });
  const doi = await harness.app.sources.add(owner, { repository, doi: 'doi:10.1000/XYZ' });
  t.match(doi.source, { origin: 'doi', doi: '10.1000/XYZ', url: null });
  t.equal((await harness.app.sources.add(owner, { repository, doi: 'https://doi.org/10.1000/XYZ' })).created, false, 'the same DOI, spelt otherwise');
  const lowerCase = await harness.app.sources.add(owner, { repository, doi: '10.1000/xyz' });
  t.equal(lowerCase.created, false, 'in other letters: DOIs compare case-insensitively');
  t.match(lowerCase.source, { id: doi.source.id, doi: '10.1000/XYZ' }, 'the source as first added');
  // Added side by side in different letters: still one source.
  const sideBySide = await Promise.all(['10.5555/Twice', 'doi:10.5555/twice', '10.5555/TWICE'].map((spelling) => harness.app.sources.add(owner, { repository, doi: spelling })));
  t.equal(new Set(sideBySide.map((added) => added.source.id)).size, 1);
  t.equal(sideBySide.filter((added) => added.created).length, 1);
});

t.test('the same URL added several times at once is one source', async (t) => {
  const url = 'http://127.0.0.1:9/raced';
  const results = await Promise.all(Array.from({ length: 6 }, (_, i) => harness.app.sources.add(owner, { repository, url: i % 2 ? url : `${url}#part-${i}` })));
  t.equal(results.filter((result) => result.created).length, 1, 'one created');
  t.same(new Set(results.map((result) => result.source.id)).size, 1, 'every answer is that source');
  const stored = await harness.service.context.db.knex('sources').where({ repository_id: repository, url }).count({ count: '*' }).first();
  t.equal(Number(stored?.count), 1, 'stored once');
});

t.test('a source stored with a #fragment, as before fragments were dropped, is found by its document', async (t) => {
  // Its SourceRegistered as an older version appended it: the url as given, fragment and all.
  const { context } = harness.service;
  const oldId = randomUUID();
  const url = 'http://127.0.0.1:9/older-page';
  await context.store.append(
    `source-${oldId}`,
    [
      {
        type: 'SourceRegistered',
        data: { origin: 'url', url: `${url}#section-2`, doi: null, filename: null, content_type: null, body_sha256: null, body_bytes: null },
        metadata: { repositoryId: repository, actor: owner.userId, causationId: null, correlationId: null },
      },
    ],
    'no_stream',
  );
  await eventually(async () => context.db.knex('sources').where({ id: oldId }).first('id'));
  for (const given of [url, `${url}#other`]) {
    const added = await harness.app.sources.add(owner, { repository, url: given });
    t.equal(added.created, false, `${given}: no second source`);
    t.equal(added.source.id, oldId, 'the stored one is answered');
  }
  const other = await harness.app.sources.add(owner, { repository, url: `${url}-2` });
  t.equal(other.created, true, 'a URL that only begins the same is another document');
});

t.test('adding is denied without sources:create, before the input is looked at', async (t) => {
  await rejectsWith(t, harness.app.sources.add(stranger, { repository, url: 'ftp://nowhere' }), 'forbidden', /sources:create/);
  let read = false;
  const content = async () => {
    read = true;
    return { filename: 'a.txt', declaredType: 'text/plain', body: Buffer.from('text') };
  };
  await rejectsWith(t, harness.app.sources.upload(stranger, { repository, content }), 'forbidden');
  t.notOk(read, 'a refused upload is never read');
});

t.test('uploads: the type from the declaration or the extension; empty and unknown refused', async (t) => {
  t.equal(uploadContentType({ filename: 'notes.md', declaredType: 'application/octet-stream' }), 'text/markdown');
  t.equal(uploadContentType({ filename: null, declaredType: 'text/html; charset=utf-8' }), 'text/html; charset=utf-8', 'a declared charset is kept: the text is read in it');
  t.equal(uploadContentType({ filename: 'l1.txt', declaredType: 'text/plain; charset="ISO-8859-1"' }), 'text/plain; charset=iso-8859-1');
  t.equal(uploadContentType({ filename: 'a.pdf', declaredType: 'application/pdf; charset=utf-8' }), 'application/pdf', 'not on a PDF');
  const unsupported = (call: () => unknown) => {
    try {
      call();
    } catch (error) {
      return error instanceof UnsupportedContentError ? error.message : null;
    }
    return null;
  };
  t.match(unsupported(() => uploadContentType({ filename: 'image.png', declaredType: 'image/png' })), /unsupported upload type 'image\/png'/);
  t.match(unsupported(() => uploadContentType({ filename: null, declaredType: null })), /'unknown'/);
  const upload = (filename: string, body: string) =>
    harness.app.sources.upload(owner, { repository, content: async () => ({ filename, declaredType: null, body: Buffer.from(body) }) });
  t.match(await upload('paper.txt', 'Plain words.'), { origin: 'upload', filename: 'paper.txt', content_type: 'text/plain', body_bytes: 12 });
  await rejectsWith(t, upload('empty.txt', ''), 'invalid', /empty/);
  const binary = await harness.app.sources
    .upload(owner, { repository, content: async () => ({ filename: 'random.bin', declaredType: 'text/plain', body: Buffer.from('02467e16efbfbd2c5c6d834200', 'hex') }) })
    .catch((error: unknown) => error);
  t.ok(binary instanceof UnsupportedContentError, 'binary data declared as text/plain is refused (415)');
  t.match((binary as Error).message, /binary data, not text\/plain text/);
  t.match(await upload('photo.jpg', 'jpeg bytes').catch((error: unknown) => error instanceof UnsupportedContentError && error.message), /'\.jpg'/);
});

t.test('retrying: nothing failed is a conflict; an unknown source is not found', async (t) => {
  const { source } = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/retry' });
  await rejectsWith(t, harness.app.sources.retry(owner, { repository, source: source.id }), 'conflict', /nothing to retry/);
  await rejectsWith(t, harness.app.sources.retry(owner, { repository, source: 'f00dbabe-0000-4000-8000-000000000000' }), 'not_found', /source not found/);
  await rejectsWith(t, harness.app.sources.retry(stranger, { repository, source: source.id }), 'forbidden', /sources:write/);
});
