import t from 'tap';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { claimIdempotencyKey, IDEMPOTENCY_KEY_IN_FLIGHT, IDEMPOTENCY_KEY_REUSED } from '../../src/app/idempotency.js';
import { REPLAYED_META } from '../../src/mcp/tools/common.js';
import { registerUser, startTestService, type TestService } from '../helpers/service.js';
import { accessToken, connectClient, listen, parsed } from './helpers.js';

let service: TestService;
let client: Client;
let restToken: string;
let userId: string;
let repository: string;
let mcpEndpoint: URL;

t.before(async () => {
  // No workers: a report's annotation and a source's fetch stay queued; the creations are what is looked at.
  service = await startTestService({ workers: false });
  await registerUser(service, 'admin@example.org'); // the first user is the sysadmin
  const writer = await registerUser(service, 'writer@example.org');
  restToken = writer.token;
  userId = writer.user.id;
  repository = (await service.call('POST', '/api/v1/repositories', { token: restToken, body: { name: 'Retried' } })).body.id;
  const { issuer, endpoint } = await listen(service);
  mcpEndpoint = endpoint;
  client = await connectClient(endpoint, await accessToken(service, issuer, userId));
});
t.teardown(async () => {
  await client.close();
  await service.close();
});

const callTool = async (name: string, args: Record<string, unknown>) => {
  const result = (await client.callTool({ name, arguments: args })) as CallToolResult;
  return { ...parsed(result), replayed: result._meta?.[REPLAYED_META] === true };
};
const titled = async (path: 'reports' | 'investigations', title: string) =>
  ((await service.call('GET', `/api/v1/repositories/${repository}/${path}?limit=500`, { token: restToken })).body.items as { title: string }[]).filter(
    (item) => item.title === title,
  ).length;

t.test('tools/list shows idempotency_key on the creating tools alone, with the rules of the header', async (t) => {
  const { tools } = await client.listTools();
  const withKey = tools.filter((tool) => 'idempotency_key' in (tool.inputSchema.properties ?? {})).map((tool) => tool.name);
  t.same(withKey.sort(), ['createInvestigation', 'createReport']);
  const createReport = tools.find((tool) => tool.name === 'createReport');
  t.match(createReport?.inputSchema.properties?.idempotency_key, { type: 'string', minLength: 1, maxLength: 255 });
  t.notOk(createReport?.inputSchema.required?.includes('idempotency_key'), 'optional');
});

t.test('a createReport retried with its idempotency_key answers the first result again and makes one report', async (t) => {
  const args = { repository, title: 'Lost result', text: 'Marie Curie won a prize.', idempotency_key: 'report-1' };
  const first = await callTool('createReport', args);
  t.notOk(first.isError, first.text);
  t.notOk(first.replayed, 'a first result is no replay');
  const retry = await callTool('createReport', { ...args });
  t.notOk(retry.isError, retry.text);
  t.same(retry.value, first.value, 'the first result: the same report');
  t.ok(retry.replayed, `_meta['${REPLAYED_META}'] says it is the first result given again`);
  t.equal(await titled('reports', 'Lost result'), 1, 'one report, not two');

  const mismatch = await callTool('createReport', { ...args, title: 'Other arguments' });
  t.same([mismatch.isError, mismatch.text], [true, `invalid: ${IDEMPOTENCY_KEY_REUSED}`], 'the same key with other arguments: the message of REST’s 422');
  t.equal(await titled('reports', 'Other arguments'), 0, 'nothing created');

  const otherTool = await callTool('createInvestigation', { repository, title: 'Lost result', idempotency_key: 'report-1' });
  t.same([otherTool.isError, otherTool.text], [true, `invalid: ${IDEMPOTENCY_KEY_REUSED}`], 'the same key sent to another tool is a mismatch, not a replay');
  t.equal(await titled('investigations', 'Lost result'), 0);

  const withoutKey = [await callTool('createReport', { repository, title: 'No key', text: 'A sentence.' }), await callTool('createReport', { repository, title: 'No key', text: 'A sentence.' })];
  t.not(withoutKey[0].value.id, withoutKey[1].value.id, 'without a key each call creates, as before');
});

t.test('createInvestigation takes a key too', async (t) => {
  const args = { repository, title: 'Gathered once', topic: 'why', idempotency_key: 'investigation-1' };
  const first = await callTool('createInvestigation', args);
  const retry = await callTool('createInvestigation', { idempotency_key: 'investigation-1', topic: 'why', title: 'Gathered once', repository });
  t.same([retry.isError, retry.replayed, retry.value], [false, true, first.value], 'its arguments in another order: the same call');
  t.equal(await titled('investigations', 'Gathered once'), 1);
});

t.test('a repository named by its slug or by its id is one repository to a key: the retry by its other name is a replay', async (t) => {
  const named = (await service.call('POST', '/api/v1/repositories', { token: restToken, body: { name: 'Named Twice', slug: 'mcp-named-twice' } })).body.id as string;
  const inRepository = async (title: string) =>
    ((await service.call('GET', `/api/v1/repositories/${named}/reports?limit=500`, { token: restToken })).body.items as { title: string }[]).filter((item) => item.title === title).length;
  for (const [firstName, retryName] of [
    ['mcp-named-twice', named],
    [named, 'mcp-named-twice'],
  ]) {
    const key = `named-by-${firstName}`;
    const args = { title: 'Named twice', text: 'Marie Curie won a prize.', idempotency_key: key };
    const first = await callTool('createReport', { ...args, repository: firstName });
    t.notOk(first.isError, first.text);
    const retry = await callTool('createReport', { ...args, repository: retryName });
    t.same([retry.isError, retry.replayed, retry.value], [false, true, first.value], `by ${firstName}, then by ${retryName}: the first result again`);
    const elsewhere = await callTool('createReport', { ...args, repository });
    t.same([elsewhere.isError, elsewhere.text], [true, `invalid: ${IDEMPOTENCY_KEY_REUSED}`], 'the key in another repository is still another call');
    const otherText = await callTool('createReport', { ...args, repository: retryName, text: 'Pierre Curie won it too.' });
    t.same([otherText.isError, otherText.text], [true, `invalid: ${IDEMPOTENCY_KEY_REUSED}`], 'other arguments by the other name are still another call');
  }
  t.equal(await inRepository('Named twice'), 2, 'one report per key, none twice');
  t.equal(await titled('reports', 'Named twice'), 0, 'none in the other repository');
});

t.test('a malformed idempotency_key is a tool error and creates nothing', async (t) => {
  for (const key of ['', 'two words', 'x'.repeat(256), 'é', 42, null, ['k']]) {
    const result = await callTool('createInvestigation', { repository, title: 'Bad key', idempotency_key: key });
    t.ok(result.isError, JSON.stringify(key));
    t.match(result.text, /idempotency_key/, `${JSON.stringify(key)}: the error names the argument`);
  }
  t.equal(await titled('investigations', 'Bad key'), 0, 'nothing created');
  const atLimit = await callTool('createInvestigation', { repository, title: 'Longest key', idempotency_key: '~'.repeat(255) });
  t.notOk(atLimit.isError, '255 printable characters are a key');
});

t.test('a refused call keeps nothing under its key: its retry runs anew', async (t) => {
  const refused = await callTool('createInvestigation', { repository: 'no-such-repository', title: 'Refused first', idempotency_key: 'refused-1' });
  t.match(refused, { isError: true, text: /not found/ });
  t.equal((await service.context.db.knex('idempotency_keys').where({ user_id: userId, key: 'refused-1' })).length, 0, 'the key was released');
  const again = await callTool('createInvestigation', { repository, title: 'Refused first', idempotency_key: 'refused-1' });
  t.same([again.isError, again.replayed], [false, false], 'the key is free for another call');
});

t.test('a call whose key is still claimed by its first call is a conflict, the message of REST’s 409', async (t) => {
  const args = { repository, title: 'Still running' };
  // The first call, as far as the key says, has claimed it and not answered yet.
  const first = await claimIdempotencyKey(
    service.context.idempotency,
    { principal: await service.context.identity.authenticate(restToken), permission: 'investigations:create', repository },
    'running-1',
    () => ['mcp', 'createInvestigation', args],
  );
  t.equal(first.kind, 'run');
  const second = await callTool('createInvestigation', { ...args, idempotency_key: 'running-1' });
  t.same([second.isError, second.text], [true, `conflict: ${IDEMPOTENCY_KEY_IN_FLIGHT}`]);
  t.equal(await titled('investigations', 'Still running'), 0, 'nothing created');
  if (first.kind === 'run') await first.settle(null);
  const retried = await callTool('createInvestigation', { ...args, idempotency_key: 'running-1' });
  t.same([retried.isError, retried.replayed], [false, false], 'released: the retry runs');
});

t.test("REST and MCP share a user's keys: a key sent over the other transport is a mismatch, never a second creation", async (t) => {
  const body = { title: 'Both ways', text: 'Marie Curie won a prize.' };
  const rest = await service.call('POST', `/api/v1/repositories/${repository}/reports`, { token: restToken, body, headers: { 'idempotency-key': 'shared-1' } });
  t.equal(rest.status, 201);
  const mcp = await callTool('createReport', { repository, ...body, idempotency_key: 'shared-1' });
  t.same([mcp.isError, mcp.text], [true, `invalid: ${IDEMPOTENCY_KEY_REUSED}`], 'the same report asked over MCP with the key REST used');

  const mcpFirst = await callTool('createInvestigation', { repository, title: 'MCP first', idempotency_key: 'shared-2' });
  t.notOk(mcpFirst.isError);
  const restAfter = await service.call('POST', `/api/v1/repositories/${repository}/investigations`, {
    token: restToken,
    body: { title: 'MCP first' },
    headers: { 'idempotency-key': 'shared-2' },
  });
  t.same([restAfter.status, restAfter.body], [422, { error: 'unprocessable', message: IDEMPOTENCY_KEY_REUSED }], 'REST answers a key MCP used with its 422, the same words');
  t.equal(await titled('reports', 'Both ways'), 1);
  t.equal(await titled('investigations', 'MCP first'), 1);

  const stranger = await registerUser(service, 'stranger@example.org');
  const theirs = await service.call('POST', '/api/v1/repositories', { token: stranger.token, body: { name: 'Theirs' }, headers: { 'idempotency-key': 'shared-3' } });
  t.equal(theirs.status, 201);
  const mine = await callTool('createInvestigation', { repository, title: 'Mine', idempotency_key: 'shared-3' });
  t.same([mine.isError, mine.replayed], [false, false], "another user's key of the same text is another key");
});

t.test('a key answers again only a credential that may make the call: a key confined elsewhere or read-only learns nothing of it', async (t) => {
  const args = { repository, title: 'Kept from others', idempotency_key: 'confined-1' };
  const first = await callTool('createInvestigation', args);
  t.notOk(first.isError);
  const other = (await service.call('POST', '/api/v1/repositories', { token: restToken, body: { name: 'Elsewhere' } })).body.id;
  const keyed = async (scopes: string[], keyRepository: string) => {
    const created = await service.call('POST', '/api/v1/users/me/api-keys', { token: restToken, body: { name: scopes.join(' '), scopes, repository: keyRepository } });
    t.equal(created.status, 201, JSON.stringify(created.body));
    const keyClient = await connectClient(mcpEndpoint, created.body.key);
    t.teardown(() => keyClient.close());
    return async (toolArgs: Record<string, unknown>) => {
      const result = (await keyClient.callTool({ name: 'createInvestigation', arguments: toolArgs })) as CallToolResult;
      return { ...parsed(result), replayed: result._meta?.[REPLAYED_META] === true };
    };
  };
  const confined = await keyed(['*:read', 'investigations:create'], other);
  const replayed = await confined(args);
  t.same([replayed.isError, replayed.replayed, replayed.text], [true, false, 'not found: repository not found'], 'a key of another repository: not found, as without the key');
  const guessed = await confined({ ...args, title: 'A guess' });
  t.same([guessed.isError, guessed.text], [true, 'not found: repository not found'], 'nor is a mismatch told');
  const readOnly = await keyed(['*:read'], repository);
  const refused = await readOnly(args);
  t.same([refused.isError, refused.replayed], [true, false]);
  t.equal(refused.text, 'permission denied: investigations:create', 'a read-only key: refused, as without the key');
  t.equal(await titled('investigations', 'Kept from others'), 1);
});
