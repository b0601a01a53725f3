import t from 'tap';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { registerUser, startTestService } from '../helpers/service.js';
import { SdkAuthProvider, signInAndDecide, TestBrowser } from '../helpers/oauthClient.js';
import { createConcept, extractFacts, linkFacts, stabilize } from '../api/seedGraph.js';
import { listen, parsed } from './helpers.js';

/**
 * What a desktop assistant does with nothing but the MCP endpoint's URL: the official SDK client
 * (`Client` + `StreamableHTTPClientTransport` with an `OAuthClientProvider`) is refused with 401,
 * follows the challenge to the protected-resource and authorization-server documents, registers
 * itself, sends the user to the login and consent pages (driven here like a browser), redeems
 * the code, and then calls every tool with the token it got.
 */
const PASSWORD = 'correct horse battery';
const REDIRECT = 'http://127.0.0.1:33419/callback';

const service = await startTestService({ workers: false });
t.teardown(() => service.close());
const { issuer, endpoint } = await listen(service);
const ada = await registerUser(service, 'ada@example.org', PASSWORD, 'Ada');
const repository = (await service.call('POST', '/api/v1/repositories', { token: ada.token, body: { name: 'Radioactivity' } })).body;
const sourceId = (await service.call('POST', `/api/v1/repositories/${repository.id}/sources`, { token: ada.token, body: { url: 'http://127.0.0.1:9/curie' } })).body.id as string;
const facts = await extractFacts(service, repository.id, sourceId, ['Marie Curie discovered radium in 1898.', 'Marie Curie was born in Warsaw.']);
await stabilize(service, repository.id, sourceId, facts);
const curie = await createConcept(service, repository.id, 'Marie Curie', 'person');
const warsaw = await createConcept(service, repository.id, 'Warsaw', 'location');
await linkFacts(service, repository.id, sourceId, { [facts[0].id]: [curie], [facts[1].id]: [curie, warsaw] });

const provider = new SdkAuthProvider(REDIRECT);

t.test('discovery, registration, login and consent, token: all by the SDK client', async (t) => {
  const client = new Client({ name: 'desktop-assistant', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(endpoint, { authProvider: provider });
  const refusal = await client.connect(transport).then(() => null, (error: unknown) => error);
  t.ok(refusal instanceof UnauthorizedError, 'without a token the endpoint refuses and the SDK starts authorization');
  const authorization = provider.authorizationUrl;
  if (!authorization) throw new Error('the SDK did not send the user to the authorization page');
  t.equal(`${authorization.origin}${authorization.pathname}`, `${issuer}/api/v1/oauth/authorize`, 'found through the discovery documents');
  t.equal(authorization.searchParams.get('resource'), endpoint.href, 'the resource is the MCP endpoint');
  t.ok(provider.information?.client_id, 'registered dynamically');

  const back = await signInAndDecide(new TestBrowser(issuer), `${authorization.pathname}${authorization.search}`, { email: 'ada@example.org', password: PASSWORD });
  t.equal(back.searchParams.get('iss'), issuer, 'RFC 9207 iss on the redirect');
  await transport.finishAuth(back.searchParams.get('code') ?? '');
  t.ok(provider.saved?.access_token, 'the code was redeemed for tokens');
  await client.close();
});

t.test('with its token the client calls every tool', async (t) => {
  const client = new Client({ name: 'desktop-assistant', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(endpoint, { authProvider: provider }));
  t.teardown(() => client.close());
  const { tools } = await client.listTools();
  t.equal(tools.length, 22);

  const results: Record<string, ReturnType<typeof parsed>> = {};
  const call = async (name: string, args: Record<string, unknown> = {}) => {
    results[name] = parsed(await client.callTool({ name, arguments: args }));
    return results[name];
  };
  const repo = repository.slug as string;
  t.match((await call('getRepositories')).value, [{ id: repository.id, roles: ['owner'] }]);
  await call('listSearchProviders');
  await call('searchSources', { repository: repo, query: 'curie' });
  const found = await call('searchFacts', { repository: repo, query: 'radium' });
  t.match(found.value, { items: [{ id: facts[0].id }] }, 'results cite fact ids');
  await call('getFact', { repository: repo, factId: facts[0].id });
  t.match((await call('getFactConcepts', { repository: repo, factId: facts[1].id })).value, { items: [{ id: curie }, { id: warsaw }] });
  await call('searchConcepts', { repository: repo, query: 'curie', show_small: true });
  t.match((await call('getConcept', { repository: repo, concept: 'Marie Curie' })).value, { id: curie });
  await call('getConceptSummaries', { repository: repo, concept: curie });
  await call('getRelatedConcepts', { repository: repo, concept: curie, show_insignificant: true });
  t.match((await call('getConceptRelation', { repository: repo, concept: curie, other: 'Warsaw' })).value, { other: { id: warsaw }, facts: [{ id: facts[1].id }] });
  await call('getConceptSources', { repository: repo, concept: curie });
  const investigation = await call('createInvestigation', { repository: repo, title: 'Curie', topic: 'Where was Curie born?' });
  await call('getInvestigation', { repository: repo, investigationId: investigation.value.id });
  await call('addInvestigationSource', { repository: repo, investigationId: investigation.value.id, sourceId });
  await call('fetchAndProcessSource', { repository: repo, url: 'http://127.0.0.1:9/polonium', investigationId: investigation.value.id });
  await call('getSourceTasks', { repository: repo, sourceId });
  const report = await call('createReport', { repository: repo, title: 'Curie', text: 'Marie Curie discovered radium in 1898 in Paris.' });
  await call('getReport', { repository: repo, reportId: report.value.id });
  await call('listReports', { repository: repo });
  await call('getReportTasks', { repository: repo, reportId: report.value.id });
  await call('updateReport', { repository: repo, reportId: report.value.id, text: 'Marie Curie was born in Warsaw.' });

  t.same(Object.keys(results).sort(), tools.map((tool) => tool.name).sort(), 'every tool was called');
  for (const [name, result] of Object.entries(results)) t.notOk(result.isError, `${name} answered without error${result.isError ? `: ${result.text}` : ''}`);
  const events = await service.context.db.knex('repositories').where({ id: repository.id }).first('id');
  t.ok(events, 'the repository is the one the tools wrote to');
});

t.test('the refresh token keeps the client going; revoking it ends its access at once', async (t) => {
  const before = provider.saved;
  const refreshed = await fetch(`${issuer}/api/v1/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: before?.refresh_token ?? '', client_id: provider.information?.client_id ?? '' }),
  });
  t.equal(refreshed.status, 200);
  const tokens = (await refreshed.json()) as { access_token: string; refresh_token: string };
  const revoked = await fetch(`${issuer}/api/v1/oauth/revoke`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ token: tokens.refresh_token, client_id: provider.information?.client_id ?? '' }),
  });
  t.equal(revoked.status, 200);
  const refused = await fetch(endpoint, {
    method: 'POST',
    headers: { authorization: `Bearer ${tokens.access_token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  });
  t.equal(refused.status, 401, 'the revoked grant ends its access tokens before they expire');
  t.match(refused.headers.get('www-authenticate'), /error="invalid_token"/);
});
