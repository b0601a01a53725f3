import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import { openScratchPostgres } from '../../src/db/database.js';
import { ensureBroker, deleteTestTopics } from '../bus/helpers.js';
import { deleteIndices, ensureOpenSearch } from '../search/helpers.js';
import { startFakeEventStoreDb } from '../eventstore/fake-esdb/server.js';
import { eventually, registerUser, startTestService, TEST_SECRET } from '../helpers/service.js';
import { CURIE_ARTICLE, startWebServer } from '../helpers/webServer.js';

/**
 * The foundation's walk-through on the distributed tier: EventStoreDB (the gRPC test server),
 * Kafka (a real broker), PostgreSQL read models (the local server) and OpenSearch (real, with
 * k-NN), with one API process and two worker processes. A worker is killed mid-run; the other
 * takes its partitions over (a rebalance) and nothing is lost or doubled. The facts equal the
 * embedded tier's for the same page.
 */
const root = path.resolve(import.meta.dirname, '../..');
// Three service processes and four engines: more than tap's default file timeout.
t.setTimeout(480_000);

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

async function api(base: string, method: string, url: string, token?: string, body?: unknown) {
  const response = await fetch(base + url, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

async function stop(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM') {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill(signal);
  await exited;
}

t.test('walk-through on EventStoreDB + Kafka + PostgreSQL + OpenSearch with 1 API and 2 workers', async (t) => {
  const [brokers, opensearch] = await Promise.all([ensureBroker(), ensureOpenSearch()]);
  const esdb = await startFakeEventStoreDb();
  const readModels = await openScratchPostgres(undefined, 'factlog_distributed');
  const prefix = `fl${Date.now().toString(36)}`;
  const web = await startWebServer({ '/curie': { body: CURIE_ARTICLE } });
  const dataDir = await mkdtemp(path.join(tmpdir(), 'factlog-dist-'));
  const children: ChildProcess[] = [];
  t.teardown(async () => {
    for (const child of children) await stop(child);
    await web.close();
    await readModels.close();
    await esdb.close();
    await deleteTestTopics(brokers, prefix).catch(() => undefined);
    await deleteIndices(opensearch, prefix).catch(() => undefined);
    await rm(dataDir, { recursive: true, force: true });
  });

  const env = {
    ...process.env,
    PROFILE: 'distributed',
    AUTH_JWTSECRET: TEST_SECRET,
    EVENTSTORE_EVENTSTOREDB_CONNECTION_STRING: esdb.connectionString,
    BUS_KAFKA_BROKERS: brokers.join(','),
    BUS_KAFKA_TOPIC_PREFIX: prefix,
    BUS_KAFKA_PARTITIONS: '4',
    SEARCH_OPENSEARCH_URL: opensearch,
    SEARCH_OPENSEARCH_INDEX_PREFIX: prefix,
    DATABASES_DEFAULT_URL: (readModels.knex.client.config.connection as { connectionString: string }).connectionString,
    STORAGE_DATA_DIR: path.join(dataDir, 'shared'),
    LOGGING_LEVEL: 'warn',
    TASK_POLL_INTERVAL: '100ms',
    // A killed worker's jobs are taken over once its heartbeat is this old (10m in production).
    TASK_HEARTBEAT_INTERVAL: '500ms',
    TASK_HEARTBEAT_TIMEOUT: '4s',
    BOOTSTRAP_DEFAULT_REPOSITORY: 'false',
    SERVER_HOST: '127.0.0.1',
  };
  const start = async (role: 'api' | 'worker') => {
    const port = await freePort();
    const child = spawn(process.execPath, [`--import=${import.meta.resolve('tsx')}`, path.join(root, 'src/main.ts'), 'serve', '--role', role], {
      cwd: dataDir,
      env: { ...env, SERVER_PORT: String(port) },
      stdio: ['ignore', 'ignore', process.env.FACTLOG_TEST_VERBOSE ? 'inherit' : 'ignore'],
    });
    children.push(child);
    const base = `http://127.0.0.1:${port}`;
    await eventually(async () => {
      try {
        return (await fetch(`${base}/healthz`)).status === 200;
      } catch {
        return false;
      }
    }, 120_000, 250);
    return { child, base };
  };
  // Workers first: they create the topics and join the consumer groups.
  const [worker1, worker2, apiNode] = await Promise.all([start('worker'), start('worker'), start('api')]);
  const base = apiNode.base;

  const registered = await api(base, 'POST', '/api/v1/auth/register', undefined, { email: 'dist@example.org', password: 'correct horse battery' });
  t.equal(registered.status, 201, JSON.stringify(registered.body));
  const token = registered.body.token;
  const me = await api(base, 'GET', '/api/v1/users/me', token);
  t.equal(me.status, 200, 'the API node reads its own write through the workers’ projections');
  const repo = await api(base, 'POST', '/api/v1/repositories', token, { name: 'Distributed' });
  t.equal(repo.status, 201, JSON.stringify(repo.body));
  t.same(repo.body.roles, ['owner']);

  const source = await api(base, 'POST', `/api/v1/repositories/${repo.body.id}/sources`, token, { url: `${web.baseUrl}/curie` });
  t.equal(source.status, 201);
  // Kill one worker while the pipeline runs: the other takes over its partitions and jobs.
  await stop(worker1.child, 'SIGKILL');
  const processed = await eventually(async () => {
    const current = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/sources/${source.body.id}`, token);
    return ['processed', 'failed'].includes(current.body.status) ? current.body : null;
  }, 120_000, 250);
  t.equal(processed.status, 'processed', processed.failure ?? '');

  const found = await eventually(async () => {
    const result = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/facts?query=${encodeURIComponent('"polonium and radium"')}`, token);
    return result.body.total >= 1 ? result.body : null;
  }, 30_000, 250);
  t.match(found.items[0].content, /polonium and radium/, 'found by phrase in OpenSearch');

  const events = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/events?stream=source-${source.body.id}`, token);
  t.same(
    events.body.events.map((e: { type: string }) => e.type),
    ['SourceRegistered', 'SourceFetchStarted', 'SourceFetched', 'SourceDecompositionStarted', 'FactsExtracted'],
    'each pipeline event once, in order',
  );

  const facts = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/sources/${source.body.id}/facts?limit=500`, token);
  const distributedHashes: string[] = facts.body.items.map((f: { content_hash: string }) => f.content_hash).sort();
  t.equal(new Set(distributedHashes).size, distributedHashes.length, 'no fact doubled');
  const dbFacts = await readModels.knex('facts').count<{ n: string }[]>('* as n');
  t.equal(Number(dbFacts[0].n), distributedHashes.length, 'the facts read model holds each fact once');

  // The same page on the embedded tier gives the same facts.
  const embedded = await startTestService();
  t.teardown(() => embedded.close());
  const user = await registerUser(embedded, 'embedded@example.org');
  const embeddedRepo = (await embedded.call('POST', '/api/v1/repositories', { token: user.token, body: { name: 'Embedded' } })).body;
  const embeddedSource = (await embedded.call('POST', `/api/v1/repositories/${embeddedRepo.id}/sources`, { token: user.token, body: { url: `${web.baseUrl}/curie` } })).body;
  await eventually(async () => (await embedded.call('GET', `/api/v1/repositories/${embeddedRepo.id}/sources/${embeddedSource.id}`, { token: user.token })).body.status === 'processed');
  const embeddedFacts = await embedded.call('GET', `/api/v1/repositories/${embeddedRepo.id}/sources/${embeddedSource.id}/facts?limit=500`, { token: user.token });
  t.same(embeddedFacts.body.items.map((f: { content_hash: string }) => f.content_hash).sort(), distributedHashes, 'same facts as the embedded tier');

  // Rebuild the search index from the log into a new index and switch, while readers keep asking.
  const aliasBefore = await (await fetch(`${opensearch}/_alias/${prefix}-facts`)).json();
  const rebuild = await api(base, 'POST', '/api/v1/projections/search-index/rebuild', token);
  t.equal(rebuild.status, 202);
  let answered = 0;
  let failed = 0;
  const deadline = Date.now() + 60_000;
  for (;;) {
    const aliasNow = await (await fetch(`${opensearch}/_alias/${prefix}-facts`)).json();
    const result = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/facts?query=${encodeURIComponent('"polonium and radium"')}`, token);
    if (result.status === 200 && result.body.total >= 1) answered++;
    else failed++;
    if (JSON.stringify(Object.keys(aliasNow)) !== JSON.stringify(Object.keys(aliasBefore)) || Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  t.not(Object.keys(await (await fetch(`${opensearch}/_alias/${prefix}-facts`)).json())[0], Object.keys(aliasBefore)[0], 'the alias moved to a new index');
  t.equal(failed, 0, `readers got answers throughout the rebuild (${answered} searches)`);
  const afterRebuild = await eventually(async () => {
    const result = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/facts?limit=500`, token);
    return result.body.total === distributedHashes.length ? result.body : null;
  }, 30_000, 250);
  t.equal(afterRebuild.total, distributedHashes.length, 'the new index holds every fact');

  await stop(worker2.child);
});
