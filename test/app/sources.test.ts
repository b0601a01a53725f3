import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import { createApplication } from '../../src/app/application.js';
import { uploadContentType } from '../../src/app/sources.js';
import { normalizeReference, referenceKeyOfRegistered } from '../../src/domain/source/reference.js';
import { UnsupportedContentError } from '../../src/app/errors.js';
import type { Principal } from '../../src/auth/rbac.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';
import { eventually, startTestService } from '../helpers/service.js';

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
  t.same(normalizeReference({ url: 'HTTP://Example.org/a b' }), { url: 'http://example.org/a%20b', doi: null });
  t.same(normalizeReference({ url: 'http://example.org/page?q=1#part' }), { url: 'http://example.org/page?q=1', doi: null }, 'the fragment dropped');
  // Spellings of one address are one source (QA: each of these pairs made two).
  t.same(normalizeReference({ url: 'http://example.org/base?' }), { url: 'http://example.org/base', doi: null }, 'an empty query dropped');
  t.same(normalizeReference({ url: 'http://example.org/%62ase?q=%7Ex%2Fy' }), { url: 'http://example.org/base?q=~x%2Fy', doi: null }, 'unreserved characters unescaped, others kept');
  t.same(normalizeReference({ url: 'http://localhost.:8080/a' }), { url: 'http://localhost:8080/a', doi: null }, "a host's trailing dot dropped");
  t.same(normalizeReference({ url: 'https://doi.org/10.1000/ABC' }), { url: null, doi: '10.1000/ABC' }, 'a doi.org URL is its DOI');
  t.same(normalizeReference({ url: 'http://dx.doi.org/10.1000%2Fabc' }), { url: null, doi: '10.1000/abc' });
  t.same(normalizeReference({ url: 'https://doi.org/about' }), { url: 'https://doi.org/about', doi: null }, 'other doi.org pages are pages');
  t.same(normalizeReference({ doi: 'https://doi.org/10.1000/ABC' }), { url: null, doi: '10.1000/ABC' });
  t.throws(() => normalizeReference({ url: 'not a url' }), { code: 'invalid', message: /valid absolute URL/ });
  t.throws(() => normalizeReference({ url: 'ftp://example.org/file' }), { code: 'invalid', message: /http or https/ });
  t.throws(() => normalizeReference({ doi: 'no doi here' }), { code: 'invalid' });
  t.throws(() => normalizeReference({}), { code: 'invalid', message: /exactly one/ });
  t.throws(() => normalizeReference({ url: 'http://example.org/', doi: '10.1000/x' }), { code: 'invalid', message: /exactly one/ });
});

t.test('references: percent-escapes in one case (RFC 3986 6.2.2.1); reserved characters stay escaped, unreserved ones are unescaped', async (t) => {
  const url = (given: string) => normalizeReference({ url: given }).url;
  t.equal(url('https://example.org/a%2fb'), 'https://example.org/a%2Fb', 'hex digits in upper case');
  t.equal(url('https://example.org/a%2Fb'), 'https://example.org/a%2Fb');
  t.equal(
    url('http://example.org/%2f%2F/caf%c3%A9/%7euser?q=%2fx%3d%3D&r=%c3%a9#%2f'),
    'http://example.org/%2F%2F/caf%C3%A9/~user?q=%2Fx%3D%3D&r=%C3%A9',
    'mixed cases in the path and the query; the fragment dropped',
  );
  t.equal(url('http://example.org/%6B%6beep?%41=%5f'), 'http://example.org/kkeep?A=_', 'unreserved characters unescaped whatever their case');
  t.equal(url('http://example.org/a b?c d'), 'http://example.org/a%20b?c%20d', "the parser's own escapes are upper case already");
  t.not(url('http://example.org/a%2fb'), url('http://example.org/a/b'), 'an escaped slash is not a path separator: not unescaped');
  t.not(url('http://example.org/?q=a%26b'), url('http://example.org/?q=a&b'), 'nor an escaped & in the query');
  t.equal(url('http://example.org/100%zz'), 'http://example.org/100%zz', 'a % that begins no escape is left as it is');
  t.equal(url('http://h.example/%%4141'), 'http://h.example/%%4141', 'an escaped hex digit after a stray % stays escaped');
  t.not(url('http://h.example/%%4141'), url('http://h.example/%A41'), 'so it makes no new escape: two addresses, two keys');
  t.equal(url('http://h.example/%A%42?q=%%34%31'), 'http://h.example/%A%42?q=%%341', 'after a % and one hex digit too; a later digit is unescaped');
  for (const given of ['http://h.example/%%4141', 'http://h.example/%A%42?q=%%34%31', 'http://h.example/%4%31']) {
    t.equal(url(url(given) ?? ''), url(given), `the canonical spelling of ${given} is its own`);
  }
  t.equal(url(url('http://example.org/a%2fb%c3%a9') ?? ''), 'http://example.org/a%2Fb%C3%A9', 'the canonical spelling is its own');
  t.equal(
    referenceKeyOfRegistered({ url: 'https://example.org/a%2fb?x=%c3%a9', doi: null }),
    referenceKeyOfRegistered({ url: 'https://example.org/a%2Fb?x=%C3%A9', doi: null }),
    'both spellings of a stored URL have one key',
  );
  t.equal(referenceKeyOfRegistered({ url: 'https://example.org/a%2fb', doi: null }), 'url:https://example.org/a%2Fb');
  t.equal(referenceKeyOfRegistered({ url: null, doi: '10.1000/A%2Fb' }), 'doi:10.1000/a%2fb', 'a DOI is keyed in lower case, escapes and all');
  t.same(normalizeReference({ doi: '10.1000/A%2fB' }), { url: null, doi: '10.1000/A%2fB' }, 'a DOI keeps the letters it was added with');
  t.same(normalizeReference({ url: 'https://doi.org/10.1000%2fAbc' }), { url: null, doi: '10.1000/Abc' }, 'a doi.org URL is still its DOI');
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

t.test('a URL as long as the API takes is stored, projected and found again', async (t) => {
  // Random characters do not compress: a btree entry for this key would be past PostgreSQL's
  // 2,704-byte limit, and the projection's insert would fail (the key's index is a hash index).
  let seed = 12_345;
  const path = Array.from({ length: 4_000 }, () => {
    seed = (seed * 1_103_515_245 + 12_345) & 0x7fffffff;
    return 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_~.'[seed % 66];
  }).join('');
  const url = `http://127.0.0.1:9/${path}`;
  t.ok(url.length <= 4_096, "within the API's limit");
  const first = await harness.app.sources.add(owner, { repository, url });
  t.equal(first.created, true);
  const again = await harness.app.sources.add(owner, { repository, url: `${url}#a-part` });
  t.same(again, { created: false, source: first.source }, 'found by its key');
});

t.test('a URL added with its escapes in one case is found by the other (RFC 3986 6.2.2.1)', async (t) => {
  const first = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/hex/a%2fb?q=%c3%a9' });
  t.equal(first.created, true);
  t.match(first.source, { url: 'http://127.0.0.1:9/hex/a%2Fb?q=%C3%A9' }, 'stored in the canonical spelling, as the other rules store it');
  for (const url of ['http://127.0.0.1:9/hex/a%2Fb?q=%C3%A9', 'http://127.0.0.1:9/hex/a%2Fb?q=%c3%A9', 'http://127.0.0.1:9/hex/a%2fb?q=%c3%a9#x']) {
    const again = await harness.app.sources.add(owner, { repository, url });
    t.same(again, { created: false, source: first.source }, `${url}: the existing source`);
    t.equal((await harness.app.sources.find(repository, { url }))?.id, first.source.id, 'find answers it too');
  }
  const other = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/hex/a/b?q=%C3%A9' });
  t.equal(other.created, true, 'an unescaped slash is another address');

  // Both spellings at once: one source.
  const raced = await Promise.all(['http://127.0.0.1:9/hex/raced%2f', 'http://127.0.0.1:9/hex/raced%2F'].map((url) => harness.app.sources.add(owner, { repository, url })));
  t.equal(raced.filter((added) => added.created).length, 1, 'one created');
  t.equal(new Set(raced.map((added) => added.source.id)).size, 1, 'both answer it');

  // A source stored with lower-case hex (this release's predecessors kept the case as given).
  const stored = await registeredByAnOlderRelease({ url: 'http://127.0.0.1:9/hex/older%2fpage%3f' });
  for (const url of ['http://127.0.0.1:9/hex/older%2Fpage%3F', 'http://127.0.0.1:9/hex/older%2fpage%3f']) {
    const again = await harness.app.sources.add(owner, { repository, url });
    t.equal(again.created, false, `${url}: no second source`);
    t.equal(again.source.id, stored);
    t.match(again.source, { url: 'http://127.0.0.1:9/hex/older%2fpage%3f' }, 'as it was stored');
  }
});

t.test('after an upgrade (022), a URL stored with lower-case escapes is found by the upper-case spelling; two sources that now share a key stay two, the older answered', async (t) => {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'factlog-escapes-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  // The release before: each key kept the escapes' case as the URL was added.
  const older = await startTestService({ dataDir, persistent: true, workers: false });
  const { token } = await older.context.identity.register({ email: 'ada@example.org', password: 'correct horse battery' });
  const { id: library } = await createApplication(older.context).repositories.create(await older.context.identity.authenticate(token), { name: 'Upgraded' });
  const actor = (await older.context.identity.authenticate(token)).userId;
  const stored = new Map<string, string>();
  for (const url of ['http://127.0.0.1:9/up/a%2fb?q=%c3%a9', 'http://127.0.0.1:9/up/both%2F', 'http://127.0.0.1:9/up/both%2f']) {
    const id = randomUUID();
    const data = { origin: 'url', url, doi: null, filename: null, content_type: null, body_sha256: null, body_bytes: null };
    await older.context.store.append(`source-${id}`, [{ type: 'SourceRegistered', data, metadata: { repositoryId: library, actor, causationId: null, correlationId: null } }], 'no_stream');
    await eventually(async () => older.context.db.knex('sources').where({ id }).first('id'));
    await older.context.db.knex('sources').where({ id }).update({ reference_key: `url:${url}` });
    stored.set(url, id);
  }
  await older.context.db.knex('schema_migrations').where({ id: '022_sources_reference_key_escapes' }).delete();
  await older.close({ keepData: true });

  const upgraded = await startTestService({ dataDir, persistent: true, workers: false });
  t.teardown(() => upgraded.close());
  const app = createApplication(upgraded.context);
  const ada = await upgraded.context.identity.authenticate(token);
  for (const url of ['http://127.0.0.1:9/up/a%2Fb?q=%C3%A9', 'http://127.0.0.1:9/up/a%2fb?q=%c3%a9']) {
    const again = await app.sources.add(ada, { repository: library, url });
    t.equal(again.created, false, `${url}: no second source`);
    t.equal(again.source.id, stored.get('http://127.0.0.1:9/up/a%2fb?q=%c3%a9'), 'the stored one is answered');
    t.match(again.source, { url: 'http://127.0.0.1:9/up/a%2fb?q=%c3%a9' }, 'as it was stored');
  }
  for (const url of ['http://127.0.0.1:9/up/both%2f', 'http://127.0.0.1:9/up/both%2F']) {
    const again = await app.sources.add(ada, { repository: library, url });
    t.equal(again.created, false, `${url}: no third source`);
    t.equal(again.source.id, stored.get('http://127.0.0.1:9/up/both%2F'), 'the older of the two is answered');
  }
  const listed = await app.sources.list(ada, { repository: library });
  t.equal(listed.total, 3, 'both sources of one key kept');
});

t.test('the same URL added several times at once is one source', async (t) => {
  const url = 'http://127.0.0.1:9/raced';
  const results = await Promise.all(Array.from({ length: 6 }, (_, i) => harness.app.sources.add(owner, { repository, url: i % 2 ? url : `${url}#part-${i}` })));
  t.equal(results.filter((result) => result.created).length, 1, 'one created');
  t.same(new Set(results.map((result) => result.source.id)).size, 1, 'every answer is that source');
  const stored = await harness.service.context.db.knex('sources').where({ repository_id: repository, url }).count({ count: '*' }).first();
  t.equal(Number(stored?.count), 1, 'stored once');
});

t.test('a URL added again while the sources read model lags is not registered twice', async (t) => {
  // The settle wait is 200 ms (two thirds of the connection deadline): the read models are held
  // back past it by stopping them, as a failed or lagging sources projection would be.
  const lagging = await startTestApplication({ name: 'Lagging' }, undefined, { server: { read_timeout: '300ms', write_timeout: '0s' } });
  t.teardown(() => lagging.close());
  const { app, service } = lagging;
  const url = 'http://127.0.0.1:9/lagging';
  await service.context.projections.stop();
  const first = await app.sources.add(lagging.owner, { repository: lagging.repository, url }).catch((error: unknown) => error);
  t.match(first, { created: true, source: { origin: 'url', url, status: 'pending', repository_id: lagging.repository } }, 'the write is stored: the caller is told so, not 404');
  const second = await app.sources.add(lagging.owner, { repository: lagging.repository, url: `${url}#again` }).catch((error: unknown) => error);
  t.match(second, { name: 'ReadModelsBehindError', message: /sources/ }, 'refused while the read model cannot say whether the repository has it');
  const registered = await service.context.store.readAll({ types: ['SourceRegistered'], repositoryId: lagging.repository });
  t.equal(registered.length, 1, 'nothing appended by the second');
  // Marks on the locks of the two references, for the sources read model (src/app/lockMarks.ts).
  const referenceLock = (address: string) => `factlog.source-reference.${lagging.repository}.url:${address}`;
  const pending = () => service.context.db.knex('lock_pending_positions').whereLike('lock_name', `factlog.source-reference.${lagging.repository}.%`).select('lock_name', 'projection');
  t.same(await pending(), [{ lock_name: referenceLock(url), projection: 'sources' }], 'the first add left a mark on its reference lock');
  // Only the marked reference waits: another URL is added while the read models are stopped.
  const other = await app.sources.add(lagging.owner, { repository: lagging.repository, url: 'http://127.0.0.1:9/other' });
  t.equal(other.created, true, 'another URL is registered meanwhile');
  await service.context.projections.start();
  const third = await app.sources.add(lagging.owner, { repository: lagging.repository, url });
  t.same(third, { created: false, source: (first as { source: unknown }).source }, 'once it caught up: the first source');
  t.same(await pending(), [{ lock_name: referenceLock('http://127.0.0.1:9/other'), projection: 'sources' }], "and its mark is gone (the other URL's stays until that URL is added again)");
});

/** Appends a SourceRegistered as an older release did (its url or doi as that release spelt it) and waits for its row. */
async function registeredByAnOlderRelease(data: { url: string } | { doi: string }): Promise<string> {
  const { context } = harness.service;
  const id = randomUUID();
  const origin = 'url' in data ? 'url' : 'doi';
  await context.store.append(
    `source-${id}`,
    [
      {
        type: 'SourceRegistered',
        data: { origin, url: null, doi: null, filename: null, content_type: null, body_sha256: null, body_bytes: null, ...data },
        metadata: { repositoryId: repository, actor: owner.userId, causationId: null, correlationId: null },
      },
    ],
    'no_stream',
  );
  await eventually(async () => context.db.knex('sources').where({ id }).first('id'));
  return id;
}

t.test('sources an older release stored under another spelling are found by every spelling (upgrade QA)', async (t) => {
  const cases: Array<{ stored: { url: string } | { doi: string }; added: Array<{ url: string } | { doi: string }> }> = [
    { stored: { url: 'http://127.0.0.1:9/k02.html?' }, added: [{ url: 'http://127.0.0.1:9/k02.html' }, { url: 'http://127.0.0.1:9/k02.html?' }, { url: 'http://127.0.0.1:9/k02.html?#top' }] },
    { stored: { url: 'http://127.0.0.1:9/%6b04.html' }, added: [{ url: 'http://127.0.0.1:9/k04.html' }, { url: 'http://127.0.0.1:9/%6b04.html' }, { url: 'http://127.0.0.1:9/%6B04.html' }] },
    { stored: { url: 'http://localhost.:9/trailing-dot' }, added: [{ url: 'http://localhost:9/trailing-dot' }, { url: 'http://LOCALHOST.:9/trailing-dot' }] },
    { stored: { url: 'http://127.0.0.1:9/%6bept?#old-fragment' }, added: [{ url: 'http://127.0.0.1:9/kept' }] },
    // A doi.org URL stored as a URL source is its DOI, both ways.
    { stored: { url: 'https://doi.org/10.1000/QA-DOI-URL' }, added: [{ doi: '10.1000/QA-DOI-URL' }, { doi: 'doi:10.1000/qa-doi-url' }, { url: 'https://doi.org/10.1000/QA-DOI-URL' }, { url: 'http://dx.doi.org/10.1000%2Fqa-doi-url' }] },
    { stored: { doi: '10.1000/QA-DOI-BACK' }, added: [{ url: 'https://doi.org/10.1000/qa-doi-back' }, { doi: '10.1000/qa-doi-back' }] },
    { stored: { doi: 'doi:10.1000/QA-SCHEME' }, added: [{ doi: '10.1000/QA-SCHEME' }, { url: 'https://doi.org/10.1000/qa-scheme' }] },
  ];
  for (const { stored, added } of cases) {
    const id = await registeredByAnOlderRelease(stored);
    for (const reference of added) {
      const result = await harness.app.sources.add(owner, { repository, ...reference });
      t.equal(result.created, false, `stored ${JSON.stringify(stored)}, added ${JSON.stringify(reference)}: no second source`);
      t.equal(result.source.id, id, 'the stored one is answered');
      t.match(result.source, stored, 'as it was stored');
      t.notOk('reference_key' in result.source, 'the key is the read model\'s, not part of the answer');
      t.equal((await harness.app.sources.find(repository, reference))?.id, id, 'find answers it too');
    }
  }
  const sibling = await harness.app.sources.add(owner, { repository, url: 'http://127.0.0.1:9/k02.html?x' });
  t.equal(sibling.created, true, 'a query that is not empty is another document');
});

t.test('two spellings of one document added at once are one source, also beside a source stored under a third spelling', async (t) => {
  const fresh = await Promise.all(
    ['http://127.0.0.1:9/spelt', 'http://127.0.0.1:9/sp%65lt?', 'http://127.0.0.1:9/spelt#a', 'http://127.0.0.1:9/%73pelt'].map((url) => harness.app.sources.add(owner, { repository, url })),
  );
  t.equal(fresh.filter((added) => added.created).length, 1, 'one created');
  t.equal(new Set(fresh.map((added) => added.source.id)).size, 1, 'every answer is that source');
  const dois = await Promise.all([{ doi: '10.5555/Raced-DOI' }, { url: 'https://doi.org/10.5555/raced-doi' }].map((reference) => harness.app.sources.add(owner, { repository, ...reference })));
  t.equal(new Set(dois.map((added) => added.source.id)).size, 1, 'a DOI and its doi.org URL at once: one source');

  const stored = await registeredByAnOlderRelease({ url: 'http://127.0.0.1:9/%6bept-raced?' });
  const raced = await Promise.all(['http://127.0.0.1:9/kept-raced', 'http://127.0.0.1:9/k%65pt-raced?'].map((url) => harness.app.sources.add(owner, { repository, url })));
  t.same(
    raced.map((added) => [added.created, added.source.id]),
    [
      [false, stored],
      [false, stored],
    ],
    'both answer the stored source',
  );
  const keyed = await harness.service.context.db.knex('sources').where({ repository_id: repository, reference_key: 'url:http://127.0.0.1:9/kept-raced' }).pluck('id');
  t.same(keyed, [stored], 'one source of the document');
});

t.test('the reference key of a registered source: today\'s spelling, and never an error for one refused today', async (t) => {
  t.equal(referenceKeyOfRegistered({ url: 'HTTP://Example.ORG.:80/%7euser/%62?#x', doi: null }), 'url:http://example.org/~user/b');
  t.equal(referenceKeyOfRegistered({ url: 'https://dx.doi.org/10.1000/ABC', doi: null }), 'doi:10.1000/abc', 'a doi.org URL is keyed as its DOI');
  t.equal(referenceKeyOfRegistered({ url: null, doi: 'doi:10.1000/ABC' }), 'doi:10.1000/abc');
  t.equal(referenceKeyOfRegistered({ url: null, doi: null }), null, 'an upload has no key');
  t.equal(referenceKeyOfRegistered({ url: 'ftp://example.org/file#part', doi: null }), 'url:ftp://example.org/file', 'refused today: as written, without the fragment');
  t.equal(referenceKeyOfRegistered({ url: 'http://user:secret@example.org/a#b', doi: null }), 'url:http://user:secret@example.org/a');
  t.equal(referenceKeyOfRegistered({ url: 'not a url', doi: null }), 'url:not a url');
  t.equal(referenceKeyOfRegistered({ url: null, doi: 'Not A DOI' }), 'doi:not a doi');
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
  await rejectsWith(t, harness.app.sources.add(stranger, { repository, url: 'ftp://nowhere' }), 'not_found', /^repository not found$/);
  let read = false;
  const content = async () => {
    read = true;
    return { filename: 'a.txt', declaredType: 'text/plain', body: Buffer.from('text') };
  };
  await rejectsWith(t, harness.app.sources.upload(stranger, { repository, content }), 'not_found', /^repository not found$/);
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
  await rejectsWith(t, harness.app.sources.retry(stranger, { repository, source: source.id }), 'not_found', /^repository not found$/);
});
