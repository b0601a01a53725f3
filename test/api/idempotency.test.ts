import { createHash } from 'node:crypto';
import { rm } from 'node:fs/promises';
import t from 'tap';
import { IDEMPOTENCY_KEY_REUSED } from '../../src/app/idempotency.js';
import { registerUser, startTestService, type TestService } from '../helpers/service.js';

let service: TestService;
t.before(async () => {
  service = await startTestService();
});
t.teardown(() => service.close());

const repositoriesNamed = async (token: string, name: string) =>
  ((await service.call('GET', '/api/v1/repositories?limit=500', { token })).body.items as { id: string; name: string }[]).filter((repository) => repository.name === name);

t.test('a creation retried with its Idempotency-Key makes one repository and answers the first answer again', async (t) => {
  const ada = await registerUser(service, 'ada@example.org');
  const send = (body: object, key = 'retry-1') => service.call('POST', '/api/v1/repositories', { token: ada.token, body, headers: { 'idempotency-key': key } });
  const first = await send({ name: 'Lost Answer', description: 'd' });
  t.equal(first.status, 201);
  t.notOk(first.headers['idempotent-replayed'], 'a first answer is no replay');
  // The client never saw that answer and sends the request again (its keys in another order).
  const retry = await send({ description: 'd', name: 'Lost Answer' });
  t.equal(retry.status, 201, 'the first status');
  t.same(retry.body, first.body, 'the first body: the same repository');
  t.equal(retry.headers['idempotent-replayed'], 'true');
  t.equal((await repositoriesNamed(ada.token, 'Lost Answer')).length, 1, 'one repository, not two');

  const other = await send({ name: 'Another Name' });
  t.equal(other.status, 422, 'the same key for another body');
  t.same(other.body, { error: 'unprocessable', message: 'this idempotency key was used for another request (another operation, or other arguments or body): a new request needs a new key' });
  t.same(await repositoriesNamed(ada.token, 'Another Name'), [], 'nothing created');
  t.equal((await send({ name: 'Lost Answer', description: 'd' }, '"retry-1"')).headers['idempotent-replayed'], 'true', 'a structured-field string is the key without its quotes');

  const plain = await service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name: 'Lost Answer', description: 'd' } });
  t.equal(plain.status, 201, 'without a key every request creates');
  t.not(plain.body.id, first.body.id);

  const grace = await registerUser(service, 'grace@example.org');
  const graces = await service.call('POST', '/api/v1/repositories', { token: grace.token, body: { name: 'Lost Answer', description: 'd' }, headers: { 'idempotency-key': 'retry-1' } });
  t.equal(graces.status, 201, "another user's key of the same text is another key");
  t.not(graces.body.id, first.body.id);
  t.notOk(graces.headers['idempotent-replayed']);
});

t.test('a refused request keeps no answer under its key; a malformed key is a 400', async (t) => {
  const ada = await registerUser(service, 'ada2@example.org');
  const send = (body: object, key: string) => service.call('POST', '/api/v1/repositories', { token: ada.token, body, headers: { 'idempotency-key': key } });
  t.equal((await send({ name: 'Taken', slug: 'taken-slug' }, 'a')).status, 201);
  const refused = await send({ name: 'Taken again', slug: 'taken-slug' }, 'b');
  t.equal(refused.status, 409);
  t.match(refused.body.message, /slug 'taken-slug' is taken/);
  t.equal((await service.context.db.knex('idempotency_keys').where({ key: 'b' })).length, 0, 'the refusal is not kept');
  await service.call('DELETE', '/api/v1/repositories/taken-slug', { token: ada.token });
  const again = await send({ name: 'Taken again', slug: 'taken-slug' }, 'b');
  t.equal(again.status, 201, 'its retry runs anew');
  t.notOk(again.headers['idempotent-replayed']);

  for (const key of ['', 'two words', 'x'.repeat(256), 'é']) {
    const bad = await send({ name: 'Bad Key' }, key);
    t.equal(bad.status, 400, JSON.stringify(key));
    t.match(bad.body, { error: 'bad_request', message: /Idempotency-Key/ });
  }
  t.same(await repositoriesNamed(ada.token, 'Bad Key'), [], 'nothing created');
});

t.test('two requests with one key sent at once make one repository', async (t) => {
  const ada = await registerUser(service, 'ada3@example.org');
  const send = () => service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name: 'Twice At Once' }, headers: { 'idempotency-key': 'together' } });
  const answers = await Promise.all([send(), send()]);
  t.same(answers.map((answer) => answer.status).sort(), answers.some((answer) => answer.status === 409) ? [201, 409] : [201, 201], JSON.stringify(answers.map((answer) => answer.body)));
  t.equal((await repositoriesNamed(ada.token, 'Twice At Once')).length, 1);
  const inFlight = answers.find((answer) => answer.status === 409);
  if (inFlight) t.match(inFlight.body, { error: 'conflict', message: /still running/ });
});

t.test('reports and investigations take a key too', async (t) => {
  const ada = await registerUser(service, 'ada4@example.org');
  const repository = (await service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name: 'Writing' } })).body.id;
  for (const [path, body] of [
    ['reports', { title: 'Once', text: 'Marie Curie won a prize.' }],
    ['investigations', { title: 'Once' }],
  ] as const) {
    const url = `/api/v1/repositories/${repository}/${path}`;
    const send = () => service.call('POST', url, { token: ada.token, body, headers: { 'idempotency-key': `${path}-key` } });
    const first = await send();
    t.equal(first.status, 201, path);
    const retry = await send();
    t.same([retry.status, retry.body.id], [201, first.body.id], `${path}: the first one again`);
    const listed = (await service.call('GET', `${url}?limit=100`, { token: ada.token })).body.items as { title: string }[];
    t.equal(listed.filter((item) => item.title === 'Once').length, 1, `${path}: one made`);
  }
});

/** A multipart upload of one file (and text fields before it), with its own boundary each time, as a client's retry would send it. */
function multipart(file: { name: string; type: string; content: string }, fields: Record<string, string> = {}) {
  const boundary = `----retry${Math.random().toString(36).slice(2)}`;
  const parts = Object.entries(fields).map(([name, value]) => `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`);
  const filePart = `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${file.name}"\r\nContent-Type: ${file.type}\r\n\r\n${file.content}\r\n--${boundary}--\r\n`;
  return { body: Buffer.from(parts.join('') + filePart), contentType: `multipart/form-data; boundary=${boundary}` };
}

t.test('an upload retried with its Idempotency-Key registers one source (and one report); another file with the key is a 422', async (t) => {
  const ada = await registerUser(service, 'ada5@example.org');
  const repository = (await service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name: 'Uploads' } })).body.id;
  const upload = (route: 'sources' | 'reports', key: string | undefined, file: { name: string; type: string; content: string }, fields?: Record<string, string>) => {
    const { body, contentType } = multipart(file, fields);
    return service.call('POST', `/api/v1/repositories/${repository}/${route}/upload`, {
      token: ada.token,
      body,
      headers: { 'content-type': contentType, ...(key === undefined ? {} : { 'idempotency-key': key }) },
    });
  };
  const notes = { name: 'notes.md', type: 'text/markdown', content: 'Otters hold hands while they sleep.' };
  const sourcesNamed = async (filename: string) =>
    ((await service.call('GET', `/api/v1/repositories/${repository}/sources?limit=500`, { token: ada.token })).body.items as { filename: string | null }[]).filter(
      (source) => source.filename === filename,
    ).length;

  const first = await upload('sources', 'upload-1', notes);
  t.equal(first.status, 201, JSON.stringify(first.body));
  const retry = await upload('sources', 'upload-1', notes);
  t.same([retry.status, retry.body, retry.headers['idempotent-replayed']], [201, first.body, 'true'], 'the first answer again, though the boundary changed');
  t.equal(await sourcesNamed('notes.md'), 1, 'one source, not two');
  // The file's SHA-256, computed once for the key, is the name its bytes are stored under.
  const digest = createHash('sha256').update(notes.content).digest('hex');
  const stored = await service.context.db.knex('sources').where({ id: first.body.id }).first('body_sha256');
  t.equal(stored?.body_sha256, digest, "the stored asset is named by the file's SHA-256");
  t.equal((await service.context.assets.get(digest)).toString('utf8'), notes.content, 'and holds its bytes');

  const otherContent = await upload('sources', 'upload-1', { ...notes, content: 'Otters float on their backs.' });
  t.same([otherContent.status, otherContent.body], [422, { error: 'unprocessable', message: IDEMPOTENCY_KEY_REUSED }], 'another file with the key');
  const otherName = await upload('sources', 'upload-1', { ...notes, name: 'renamed.md' });
  t.equal(otherName.status, 422, 'the same bytes under another name');
  t.equal(await sourcesNamed('renamed.md'), 0, 'nothing registered');

  const refused = await upload('sources', 'upload-2', { name: 'empty.txt', type: 'text/plain', content: '' });
  t.equal(refused.status, 400, 'an empty file');
  t.equal((await service.context.db.knex('idempotency_keys').where({ key: 'upload-2' })).length, 0, 'the refusal is not kept');
  const bad = await upload('sources', 'two words', notes);
  t.same([bad.status, bad.body.error], [400, 'bad_request'], 'a malformed key, before anything is read');
  t.equal(await sourcesNamed('notes.md'), 1, 'nothing registered');

  const withoutKey = [await upload('sources', undefined, notes), await upload('sources', undefined, notes)];
  t.same(withoutKey.map((answer) => answer.status), [201, 201], 'without a key each upload registers, as before');
  t.equal(await sourcesNamed('notes.md'), 3);

  const report = { name: 'report.md', type: 'text/markdown', content: 'Marie Curie won a prize.' };
  const made = await upload('reports', 'report-upload-1', report, { title: 'Uploaded once' });
  t.equal(made.status, 201, JSON.stringify(made.body));
  const again = await upload('reports', 'report-upload-1', report, { title: 'Uploaded once' });
  t.same([again.status, again.body.id, again.headers['idempotent-replayed']], [201, made.body.id, 'true']);
  const retitled = await upload('reports', 'report-upload-1', report, { title: 'Another title' });
  t.equal(retitled.status, 422, 'the same file with other fields');
  const reports = (await service.call('GET', `/api/v1/repositories/${repository}/reports?limit=100`, { token: ada.token })).body.items as { title: string }[];
  t.same(reports.map((item) => item.title), ['Uploaded once'], 'one report');
});

t.test('a key answers again only a caller who may make the request now: a key confined elsewhere, a read-only key, a deleted repository', async (t) => {
  const ada = await registerUser(service, 'ada6@example.org');
  const repository = (await service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name: 'Private' } })).body.id;
  const other = (await service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name: 'Other' } })).body.id;
  const body = { title: 'Confidential', text: 'The merger closes on Friday.' };
  const send = (token: string, key: string, sent: object = body, repo = repository) =>
    service.call('POST', `/api/v1/repositories/${repo}/reports`, { token, body: sent, headers: { 'idempotency-key': key } });
  const first = await send(ada.token, 'secret-1');
  t.equal(first.status, 201);
  const apiKey = async (scopes: string[], keyRepository: string) =>
    (await service.call('POST', '/api/v1/users/me/api-keys', { token: ada.token, body: { name: scopes.join(' '), scopes, repository: keyRepository } })).body.key as string;

  const confined = await apiKey(['*:read', 'reports:create'], other);
  const replay = await send(confined, 'secret-1');
  t.same([replay.status, replay.body, replay.headers['idempotent-replayed']], [404, { error: 'not_found', message: 'repository not found' }, undefined], 'a key of another repository: 404, as without the key');
  const guess = await send(confined, 'secret-1', { text: 'A guess.' });
  t.equal(guess.status, 404, 'and no 422 telling the key was used there');
  const readOnly = await apiKey(['*:read'], repository);
  const refused = await send(readOnly, 'secret-1');
  t.same([refused.status, refused.body.error, refused.headers['idempotent-replayed']], [403, 'forbidden', undefined], 'a read-only key: 403, as without the key');
  await service.context.audit.flush();
  const audited = await service.context.db
    .knex('permission_audit')
    .where({ user_id: ada.user.id, permission: 'reports:create', allowed: false })
    .orderBy('id')
    .select('operation', 'transport', 'repository_id');
  t.same(
    audited,
    [0, 1, 2].map(() => ({ operation: 'POST /api/v1/repositories/:repoID/reports', transport: 'rest', repository_id: repository })),
    'each refusal of a keyed request is in the permission audit, as a refusal by the handler is',
  );

  const created = await service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name: 'Short-lived' }, headers: { 'idempotency-key': 'doomed-1' } });
  const inside = await send(ada.token, 'doomed-2', body, created.body.id);
  t.equal(inside.status, 201);
  t.equal((await service.call('DELETE', `/api/v1/repositories/${created.body.id}`, { token: ada.token })).status, 204);
  const afterDelete = await send(ada.token, 'doomed-2', body, created.body.id);
  t.same([afterDelete.status, afterDelete.body.error], [404, 'not_found'], 'a creation in a repository deleted since: 404, as an upload answers');
  const repositoryAgain = await service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name: 'Short-lived' }, headers: { 'idempotency-key': 'doomed-1' } });
  t.same([repositoryAgain.status, repositoryAgain.body.id, repositoryAgain.headers['idempotent-replayed']], [201, created.body.id, 'true'], 'the deleted repository itself: its creation answered again');
});

t.test('a repository named by its slug or by its id is one repository to a key: a retry by its other name is a replay', async (t) => {
  const ada = await registerUser(service, 'ada7@example.org');
  const create = async (name: string, slug: string) => (await service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name, slug } })).body.id as string;
  const named = await create('Two Names', 'two-names');
  const other = await create('Another Repository', 'another-repository');
  const titled = async (repository: string, path: string, title: string) =>
    ((await service.call('GET', `/api/v1/repositories/${repository}/${path}?limit=100`, { token: ada.token })).body.items as { title: string }[]).filter(
      (item) => item.title === title,
    ).length;

  for (const [path, body] of [
    ['reports', { title: 'Named twice', text: 'Marie Curie won a prize.' }],
    ['investigations', { title: 'Named twice' }],
  ] as const) {
    for (const [firstName, retryName] of [
      ['two-names', named],
      [named, 'two-names'],
    ]) {
      const key = `${path}-${firstName}-first`;
      const send = (repository: string) => service.call('POST', `/api/v1/repositories/${repository}/${path}`, { token: ada.token, body, headers: { 'idempotency-key': key } });
      const first = await send(firstName);
      t.equal(first.status, 201, `${path} by ${firstName}`);
      const retry = await send(retryName);
      t.same([retry.status, retry.body, retry.headers['idempotent-replayed']], [201, first.body, 'true'], `${path}: by ${firstName}, then by ${retryName}: the first answer again`);
      const elsewhere = await send(other);
      t.same([elsewhere.status, elsewhere.body], [422, { error: 'unprocessable', message: IDEMPOTENCY_KEY_REUSED }], `${path}: the key in another repository is still another request`);
      const otherBody = await service.call('POST', `/api/v1/repositories/${retryName}/${path}`, { token: ada.token, body: { ...body, title: 'Other title' }, headers: { 'idempotency-key': key } });
      t.equal(otherBody.status, 422, `${path}: another body by the other name is still another request`);
    }
    t.equal(await titled(named, path, 'Named twice'), 2, `${path}: one per key, none twice`);
    t.equal(await titled(other, path, 'Named twice'), 0, `${path}: none in the other repository`);
    t.equal(await titled(named, path, 'Other title'), 0);
  }
  const wrongOperation = await service.call('POST', `/api/v1/repositories/${named}/investigations`, { token: ada.token, body: { title: 'Named twice' }, headers: { 'idempotency-key': 'reports-two-names-first' } });
  t.equal(wrongOperation.status, 422, 'the key of a report sent to investigations: another operation');

  const notes = { name: 'named.md', type: 'text/markdown', content: 'Otters have two names too.' };
  const upload = (repository: string) => {
    const { body, contentType } = multipart(notes);
    return service.call('POST', `/api/v1/repositories/${repository}/sources/upload`, { token: ada.token, body, headers: { 'content-type': contentType, 'idempotency-key': 'upload-named' } });
  };
  const uploaded = await upload('two-names');
  t.equal(uploaded.status, 201, JSON.stringify(uploaded.body));
  const uploadedAgain = await upload(named);
  t.same([uploadedAgain.status, uploadedAgain.body, uploadedAgain.headers['idempotent-replayed']], [201, uploaded.body, 'true'], 'an upload by slug, retried by id');
  t.equal((await upload(other)).status, 422, 'the upload in another repository');
  const sources = (await service.call('GET', `/api/v1/repositories/${named}/sources?limit=100`, { token: ada.token })).body.items as { filename: string | null }[];
  t.equal(sources.filter((source) => source.filename === 'named.md').length, 1, 'one source');

  // A slug that passed to another repository names that one: the key's answer is not given to it.
  const moving = await create('Moving', 'moving-slug');
  const report = { title: 'Before the move', text: 'A sentence.' };
  const sendMoving = () => service.call('POST', '/api/v1/repositories/moving-slug/reports', { token: ada.token, body: report, headers: { 'idempotency-key': 'moving-1' } });
  const beforeMove = await sendMoving();
  t.equal(beforeMove.status, 201);
  t.equal((await service.call('PUT', `/api/v1/repositories/${moving}`, { token: ada.token, body: { slug: 'moved-slug' } })).status, 200);
  const successor = await create('Successor', 'moving-slug');
  const afterMove = await sendMoving();
  t.same([afterMove.status, afterMove.body.error], [422, 'unprocessable'], "the slug now names another repository: a mismatch, not the first repository's report");
  t.equal(await titled(successor, 'reports', 'Before the move'), 0, 'nothing made in the successor');
  const byNewSlug = await service.call('POST', '/api/v1/repositories/moved-slug/reports', { token: ada.token, body: report, headers: { 'idempotency-key': 'moving-1' } });
  t.same([byNewSlug.status, byNewSlug.body.id, byNewSlug.headers['idempotent-replayed']], [201, beforeMove.body.id, 'true'], 'the renamed repository by its new slug: the first answer again');
});

t.test('a path spelt with percent-escapes is the path it spells to a key: a retry spelt otherwise is a replay', async (t) => {
  // The router decodes `%72` to `r`, so both spellings reach the one route; what a request asks is
  // that route, not the bytes of its path (docs/api.md, "Idempotent creation").
  const ada = await registerUser(service, 'ada9@example.org');
  const repository = (await service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name: 'Spelt', slug: 'spelt' } })).body.id as string;
  const body = { title: 'Spelt twice', text: 'Marie Curie won a prize.' };
  const send = (path: string) => service.call('POST', path, { token: ada.token, body, headers: { 'idempotency-key': 'spelt-1' } });
  const first = await send('/api/v1/repositories/spelt/reports');
  t.equal(first.status, 201);
  for (const path of ['/api/v1/%72epositories/spelt/reports', `/api/v1/repositories/${repository}/%72eports`, '/api/v1/repositories/sp%65lt/reports']) {
    const retry = await send(path);
    t.same([retry.status, retry.body, retry.headers['idempotent-replayed']], [201, first.body, 'true'], `${path}: the first answer again`);
  }
  const created = await service.call('POST', '/api/v1/%72epositories', { token: ada.token, body: { name: 'Spelt repository', slug: 'spelt-repository' }, headers: { 'idempotency-key': 'spelt-2' } });
  t.equal(created.status, 201);
  const createdAgain = await service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name: 'Spelt repository', slug: 'spelt-repository' }, headers: { 'idempotency-key': 'spelt-2' } });
  t.same([createdAgain.status, createdAgain.body, createdAgain.headers['idempotent-replayed']], [201, created.body, 'true'], 'POST /repositories spelt with an escape, retried plainly');
});

t.test('by slug as by id, a caller who may not make the request gets the answer it gets without a key', async (t) => {
  const ada = await registerUser(service, 'ada8@example.org');
  const repository = (await service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name: 'Guarded', slug: 'guarded' } })).body.id as string;
  const other = (await service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name: 'Elsewhere', slug: 'guarded-elsewhere' } })).body.id as string;
  const body = { title: 'Guarded report', text: 'The vault opens at noon.' };
  t.equal((await service.call('POST', '/api/v1/repositories/guarded/reports', { token: ada.token, body, headers: { 'idempotency-key': 'guarded-1' } })).status, 201);
  const apiKey = async (scopes: string[], keyRepository: string) =>
    (await service.call('POST', '/api/v1/users/me/api-keys', { token: ada.token, body: { name: scopes.join(' '), scopes, repository: keyRepository } })).body.key as string;
  const eve = await registerUser(service, 'eve8@example.org');
  for (const [who, token] of [
    ['a key confined to another repository', await apiKey(['*:read', 'reports:create'], other)],
    ['a read-only key', await apiKey(['*:read'], repository)],
    ['another user', eve.token],
  ] as const) {
    for (const name of ['guarded', repository]) {
      const send = (headers: Record<string, string>, sent: object = body) => service.call('POST', `/api/v1/repositories/${name}/reports`, { token, body: sent, headers });
      const withoutKey = await send({});
      const keyed = await send({ 'idempotency-key': 'guarded-1' });
      t.same([keyed.status, keyed.body, keyed.headers['idempotent-replayed']], [withoutKey.status, withoutKey.body, undefined], `${who}, by ${name}: ${withoutKey.status} as without the key`);
      t.ok(withoutKey.status === 403 || withoutKey.status === 404, `${who}: refused (${withoutKey.status})`);
      const guess = await send({ 'idempotency-key': 'guarded-1' }, { text: 'A guess.' });
      t.equal(guess.status, withoutKey.status, `${who}, by ${name}: no 422 telling the key was used`);
    }
  }
  const reports = (await service.call('GET', `/api/v1/repositories/${repository}/reports?limit=100`, { token: ada.token })).body.items as { title: string }[];
  t.same(reports.map((item) => item.title), ['Guarded report'], 'one report, and no other made');
});

t.test('the OpenAPI document names the header and its answers on the routes that take it', async (t) => {
  const document = (await service.call('GET', '/api/v1/openapi.json')).body;
  const create = document.paths['/api/v1/repositories'].post;
  t.ok(
    create.parameters.some((parameter: { in: string; name: string }) => parameter.in === 'header' && parameter.name === 'idempotency-key'),
    'the header',
  );
  t.ok(create.responses['422'], '422');
  t.match(create.responses['409'].description, /slug is taken.*idempotency key/);
  const replayedOn = (operation: { responses: Record<string, { headers?: Record<string, unknown> }> }) =>
    Object.keys(operation.responses).filter((code) => operation.responses[code].headers?.['idempotent-replayed'] !== undefined);
  t.same(replayedOn(create), ['201'], 'the answer a replay may be names Idempotent-Replayed');
  t.match(create.responses['201'].headers['idempotent-replayed'], { schema: { type: 'string', enum: ['true'] } });
  t.same(replayedOn(document.paths['/api/v1/repositories/{repoID}/sources'].post), [], 'not on a route without a key');
  for (const path of [
    '/api/v1/repositories/{repoID}/reports',
    '/api/v1/repositories/{repoID}/investigations',
    '/api/v1/repositories/{repoID}/sources/upload',
    '/api/v1/repositories/{repoID}/reports/upload',
  ]) {
    const upload = document.paths[path].post;
    t.same(replayedOn(upload), ['201'], `${path}: Idempotent-Replayed`);
    t.ok(
      upload.parameters.some((parameter: { in: string; name: string }) => parameter.in === 'header' && parameter.name === 'idempotency-key'),
      `${path}: the header`,
    );
    t.ok(upload.responses['422'], `${path}: 422`);
  }
  t.notOk(
    (document.paths['/api/v1/repositories/{repoID}/sources'].post.parameters ?? []).some((parameter: { name: string }) => parameter.name === 'idempotency-key'),
    'not on adding a URL or DOI, which answers the source the repository has',
  );
  const read = document.paths['/api/v1/repositories/{repoID}'].get;
  t.notOk((read.parameters ?? []).some((parameter: { name: string }) => parameter.name === 'idempotency-key'), 'not on a read');
});

t.test('a key outlives a restart', async (t) => {
  const persistent = await startTestService({ persistent: true });
  let closed = false;
  t.teardown(async () => {
    if (!closed) await persistent.close();
  });
  const ada = await registerUser(persistent, 'ada@example.org');
  const request = { token: ada.token, body: { name: 'Before Restart' }, headers: { 'idempotency-key': 'survives' } };
  const first = await persistent.call('POST', '/api/v1/repositories', request);
  t.equal(first.status, 201);
  await persistent.close({ keepData: true });
  closed = true;
  const restarted = await startTestService({ dataDir: persistent.dataDir });
  // A service given its directory leaves it behind: this one is the test's to remove.
  t.teardown(async () => {
    await restarted.close();
    await rm(persistent.dataDir, { recursive: true, force: true });
  });
  const retry = await restarted.call('POST', '/api/v1/repositories', request);
  t.same([retry.status, retry.body.id, retry.headers['idempotent-replayed']], [201, first.body.id, 'true']);
});
