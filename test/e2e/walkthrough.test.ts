import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import { freePort, spawnServe, stopProcess, waitHealthy } from '../helpers/processes.js';
import { eventually, TEST_SECRET } from '../helpers/service.js';
import { CURIE_ARTICLE, startWebServer } from '../helpers/webServer.js';

/**
 * The README walk-through against real `factlog serve` processes over HTTP: register, create a
 * repository, add a URL, reach `processed`, find a fact by a phrase, list the events. Then the
 * crash case: SIGKILL the service mid-fetch, restart it, and the source completes with every fact
 * exactly once.
 */

function startService(dataDir: string, port: number) {
  return spawnServe({
    cwd: dataDir,
    port,
    env: {
      STORAGE_DATA_DIR: path.join(dataDir, 'data'),
      AUTH_JWTSECRET: TEST_SECRET,
      LOGGING_LEVEL: 'warn',
      TASK_POLL_INTERVAL: '50ms',
      BOOTSTRAP_DEFAULT_REPOSITORY: 'false',
    },
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

// Several service starts and a full pipeline: more than tap's default file timeout on a busy machine.
t.setTimeout(600_000);

t.test('walk-through, restart, and crash mid-pipeline', async (t) => {
  let release: () => void = () => {};
  const held = new Promise<void>((resolve) => (release = resolve));
  const web = await startWebServer({ '/curie': { body: CURIE_ARTICLE }, '/slow-curie': { body: CURIE_ARTICLE.replace('Marie Curie</title>', 'Slow Curie</title>'), holdUntil: held } });
  const dataDir = await mkdtemp(path.join(tmpdir(), 'factlog-e2e-'));
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  let child = startService(dataDir, port);
  t.teardown(async () => {
    release();
    await stopProcess(child);
    await web.close();
    await rm(dataDir, { recursive: true, force: true });
  });
  await waitHealthy(base, undefined, child);

  const registered = await api(base, 'POST', '/api/v1/auth/register', undefined, { email: 'walker@example.org', password: 'correct horse battery', name: 'Walker' });
  t.equal(registered.status, 201);
  const token = registered.body.token;
  const repo = await api(base, 'POST', '/api/v1/repositories', token, { name: 'Walkthrough' });
  t.equal(repo.status, 201);
  const source = await api(base, 'POST', `/api/v1/repositories/${repo.body.id}/sources`, token, { url: `${web.baseUrl}/curie` });
  t.equal(source.status, 201);
  const processed = await eventually(async () => {
    const current = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/sources/${source.body.id}`, token);
    return current.body.status === 'processed' ? current.body : null;
  });
  const found = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/facts?query=${encodeURIComponent('"polonium and radium"')}`, token);
  t.ok(found.body.total >= 1, 'a fact found by phrase');
  const events = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/events`, token);
  t.ok(events.body.events.some((e: { type: string }) => e.type === 'FactsExtracted'));

  // Restart: everything is still there.
  t.same(await stopProcess(child), { code: 0, signal: null }, 'SIGTERM ends the service cleanly');
  child = startService(dataDir, port);
  await waitHealthy(base, undefined, child);
  const afterRestart = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/facts`, token);
  t.equal(afterRestart.status, 200, 'the session survives a restart');
  t.equal(afterRestart.body.total, processed.fact_count, 'facts survive a restart');

  // Crash mid-pipeline: the fetch hangs, the service is killed, then restarted.
  const slow = await api(base, 'POST', `/api/v1/repositories/${repo.body.id}/sources`, token, { url: `${web.baseUrl}/slow-curie` });
  await eventually(async () => (web.hits.get('/slow-curie') ?? 0) >= 1);
  await stopProcess(child, 'SIGKILL');
  release();
  child = startService(dataDir, port);
  await waitHealthy(base, undefined, child);
  const slowDone = await eventually(async () => {
    const current = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/sources/${slow.body.id}`, token);
    return ['processed', 'failed'].includes(current.body.status) ? current.body : null;
  }, 180_000);
  t.equal(slowDone.status, 'processed', 'the source completes after the crash');
  const slowFacts = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/sources/${slow.body.id}/facts?limit=500`, token);
  const hashes = slowFacts.body.items.map((f: { content_hash: string }) => f.content_hash);
  t.equal(new Set(hashes).size, hashes.length, 'no fact doubled');
  t.equal(slowFacts.body.total, processed.fact_count, 'no fact lost: same article, same facts');
  const slowEvents = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/events?stream=source-${slow.body.id}`, token);
  t.equal(slowEvents.body.events.filter((e: { type: string }) => e.type === 'FactsExtracted').length, 1, 'facts recorded once');
  const total = await api(base, 'GET', `/api/v1/repositories/${repo.body.id}/facts`, token);
  t.equal(total.body.total, processed.fact_count, 'the same facts from two sources are one set of facts');
});
