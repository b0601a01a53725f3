import t from 'tap';
import { startDistributedCluster } from '../helpers/distributedCluster.js';
import { eventually, registerUser, startTestService, waitForPipeline } from '../helpers/service.js';
import { CURIE_ARTICLE, startWebServer } from '../helpers/webServer.js';

/**
 * The foundation's walk-through on the distributed tier: EventStoreDB (the gRPC test server),
 * Kafka (a real broker), PostgreSQL read models (the local server) and OpenSearch (real, with
 * k-NN), with one API process and two worker processes. A worker is killed mid-run; the other
 * takes its partitions over (a rebalance) and nothing is lost or doubled. The facts equal the
 * embedded tier's for the same page.
 */
// Three service processes and four engines: more than tap's default file timeout.
t.setTimeout(900_000);

async function api(base: string, method: string, url: string, token?: string, body?: unknown) {
  const response = await fetch(base + url, {
    method,
    headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

t.test('walk-through on EventStoreDB + Kafka + PostgreSQL + OpenSearch with 1 API and 2 workers', async (t) => {
  const cluster = await startDistributedCluster({ database: 'factlog_distributed' });
  const { opensearch, prefix, readModels } = cluster;
  const web = await startWebServer({ '/curie': { body: CURIE_ARTICLE } });
  t.teardown(async () => {
    // A failing run shows what the service logged as errors (FACTLOG_TEST_VERBOSE: every one).
    if (!t.passing() || process.env.FACTLOG_TEST_VERBOSE) for (const line of await cluster.loggedErrors()) process.stderr.write(`${line.slice(0, 2000)}\n`);
    await cluster.close();
    await web.close();
  });

  // Workers first: they create the topics and join the consumer groups.
  const [worker1, worker2, apiNode] = await Promise.all([cluster.start('worker'), cluster.start('worker'), cluster.start('api')]);
  const base = apiNode.baseUrl;

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
  await cluster.stop(worker1, 'SIGKILL');
  const processed = await eventually(async () => {
    const current = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/sources/${source.body.id}`, token);
    return ['processed', 'failed'].includes(current.body.status) ? current.body : null;
  }, 120_000, 250);
  t.equal(processed.status, 'processed', processed.failure ?? '');
  // The rest of the pipeline (embedding, dedup, concepts) runs after the source is processed.
  // `complete` also means every read model has applied the log through its head: here, that the
  // relay published it and every projection's consumer group acknowledged it, the one that
  // lost worker 1 included (docs/api.md, "Tasks").
  await eventually(async () => {
    const tasks = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/tasks?source_id=${source.body.id}&limit=1`, token);
    return tasks.body.complete === true && tasks.body.total > 0;
  }, 120_000, 250);

  const found = await eventually(async () => {
    const result = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/facts?mode=lexical&query=${encodeURIComponent('"polonium and radium"')}`, token);
    return result.body.total >= 1 ? result.body : null;
  }, 120_000, 250);
  t.match(found.items[0].content, /polonium and radium/, 'found by phrase in OpenSearch');

  const events = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/events?stream=source-${source.body.id}`, token);
  t.same(
    events.body.events.map((e: { type: string }) => e.type),
    [
      'SourceRegistered',
      'SourceFetchStarted',
      'SourceFetched',
      'SourceDecompositionStarted',
      'FactsExtracted',
      'FactsEmbedded',
      'SourceFactsDeduplicated',
      ...Array.from({ length: events.body.events.find((e: { type: string; data: { batch_count?: number } }) => e.type === 'ConceptsExtracted')?.data.batch_count ?? 1 }, () => 'ConceptsExtracted'),
    ],
    'each pipeline event once, in order',
  );

  // Complete, so the facts read model already holds what the log says the source holds: its
  // extracted facts, less those deduplication merged away.
  const extracted = events.body.events.find((e: { type: string }) => e.type === 'FactsExtracted').data.facts as Array<{ fact_id: string }>;
  const mergedAway = events.body.events.find((e: { type: string }) => e.type === 'SourceFactsDeduplicated').data.merged as unknown[];
  const expectedFacts = new Set(extracted.map((fact) => fact.fact_id)).size - mergedAway.length;
  const facts = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/sources/${source.body.id}/facts?limit=500`, token);
  t.equal(facts.body.total, expectedFacts, 'the facts read model is caught up once the tasks say complete');
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
  await waitForPipeline(embedded, embeddedRepo.id, user.token);
  const embeddedFacts = await embedded.call('GET', `/api/v1/repositories/${embeddedRepo.id}/sources/${embeddedSource.id}/facts?limit=500`, { token: user.token });
  t.same(embeddedFacts.body.items.map((f: { content_hash: string }) => f.content_hash).sort(), distributedHashes, 'same facts as the embedded tier');
  const conceptNames = (body: { items: Array<{ canonical_name: string; context: string }> }) =>
    body.items.map((c) => `${c.context}:${c.canonical_name}`).sort();
  const distributedConcepts = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/concepts?show_small=true&limit=500`, token);
  const embeddedConcepts = await embedded.call('GET', `/api/v1/repositories/${embeddedRepo.id}/concepts?show_small=true&limit=500`, { token: user.token });
  t.ok(distributedConcepts.body.items.length > 0, 'concepts were extracted on the distributed tier');
  t.same(conceptNames(distributedConcepts.body), conceptNames(embeddedConcepts.body), 'same concepts as the embedded tier');

  // Rebuild the search index from the log into a new index and switch, while readers keep asking.
  const aliasBefore = (await (await fetch(`${opensearch}/_alias/${prefix}-facts`)).json()) as Record<string, unknown>;
  const rebuild = await api(base, 'POST', '/api/v1/projections/search-index/rebuild', token);
  t.equal(rebuild.status, 202);
  let answered = 0;
  let failed = 0;
  const deadline = Date.now() + 60_000;
  for (;;) {
    const aliasNow = (await (await fetch(`${opensearch}/_alias/${prefix}-facts`)).json()) as Record<string, unknown>;
    const result = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/facts?mode=lexical&query=${encodeURIComponent('"polonium and radium"')}`, token);
    if (result.status === 200 && result.body.total >= 1) answered++;
    else failed++;
    if (JSON.stringify(Object.keys(aliasNow)) !== JSON.stringify(Object.keys(aliasBefore)) || Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  t.not(Object.keys((await (await fetch(`${opensearch}/_alias/${prefix}-facts`)).json()) as Record<string, unknown>)[0], Object.keys(aliasBefore)[0], 'the alias moved to a new index');
  t.equal(failed, 0, `readers got answers throughout the rebuild (${answered} searches)`);
  const afterRebuild = await eventually(async () => {
    const result = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/facts?limit=500`, token);
    return result.body.total === distributedHashes.length ? result.body : null;
  }, 120_000, 250);
  t.equal(afterRebuild.total, distributedHashes.length, 'the new index holds every fact');

  await cluster.stop(worker2);
});
