import { mkdtemp, open, rm, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';
import { freePort, spawnServe, stopProcess, waitHealthy } from '../helpers/processes.js';
import { TEST_SECRET } from '../helpers/service.js';
import {
  assertNoFailedTasks,
  createRepository,
  httpApi,
  pendingSources,
  PIPELINE_TEST_ENV,
  assertSameAsRecorded,
  recordedSnapshot,
  startCorpusServer,
  taskSummary,
  waitForPipeline,
  type Api,
} from '../helpers/corpus.js';

/**
 * Crash safety of the whole pipeline: `factlog serve` runs the corpus on a data dir and is
 * killed with SIGKILL at seeded random moments, several times, and restarted each time. Once
 * the pipeline completes, facts (as duplicate clusters), concepts and relations equal those of
 * an uninterrupted run of the same corpus: the recorded snapshot that
 * test/e2e/pipeline-corpus.test.ts checks an embedded run against.
 *
 * Seed: FACTLOG_CRASH_SEED (default 20261121); kills: FACTLOG_CRASH_KILLS (default 3).
 */
t.setTimeout(900_000);

const seed = Number(process.env.FACTLOG_CRASH_SEED ?? 20261121);
const kills = Number(process.env.FACTLOG_CRASH_KILLS ?? 3);

/** mulberry32: a small seeded generator, so a failing schedule can be replayed. */
function seededRandom(state: number): () => number {
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let value = Math.imul(state ^ (state >>> 15), 1 | state);
    value = (value + Math.imul(value ^ (value >>> 7), 61 | value)) ^ value;
    return ((value ^ (value >>> 14)) >>> 0) / 4294967296;
  };
}

function startService(dataDir: string, port: number, log: FileHandle) {
  return spawnServe({
    cwd: dataDir,
    port,
    env: {
      ...PIPELINE_TEST_ENV,
      STORAGE_DATA_DIR: path.join(dataDir, 'data'),
      AUTH_JWTSECRET: TEST_SECRET,
      LOGGING_LEVEL: 'warn',
      BOOTSTRAP_DEFAULT_REPOSITORY: 'false',
      // The jobs a killed process held are rescued at start-up (PGlite: one process per data dir).
    },
    // The service's own log, kept in the data dir for a failing run (FACTLOG_TEST_VERBOSE prints it).
    stdio: ['ignore', log.fd, log.fd],
  });
}

t.test('SIGKILL at random points during the corpus run changes nothing in the end', async (t) => {
  const random = seededRandom(seed);
  const web = await startCorpusServer();
  const dataDir = await mkdtemp(path.join(tmpdir(), 'factlog-crash-'));
  const log = await open(path.join(dataDir, 'serve.log'), 'a');
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  let child = startService(dataDir, port, log);
  t.teardown(async () => {
    await stopProcess(child, 'SIGTERM');
    await web.close();
    if (process.env.FACTLOG_TEST_VERBOSE) process.stderr.write(await log.readFile({ encoding: 'utf8', position: 0 } as never));
    await log.close();
    await rm(dataDir, { recursive: true, force: true });
  });

  await waitHealthy(base, undefined, child);
  const registered = await fetch(`${base}/api/v1/auth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'crash@example.org', password: 'correct horse battery' }),
  });
  t.equal(registered.status, 201);
  const api: Api = httpApi(base, ((await registered.json()) as { token: string }).token);
  const repositoryId = await createRepository(api, 'Corpus');

  // Registration goes on through the kills: a POST that meets a dead service is sent again once
  // it is back (adding a URL the repository has answers with the existing source).
  let allRegistered = false;
  const registration = (async () => {
    for (const document of web.documents) {
      for (;;) {
        try {
          const reply = await api('POST', `/api/v1/repositories/${repositoryId}/sources`, { url: document.url });
          if (reply.status === 200 || reply.status === 201) break;
          if (reply.status < 500) throw new Error(`register ${document.slug}: ${reply.status} ${JSON.stringify(reply.body)}`);
        } catch (error) {
          if (!(error instanceof TypeError)) throw error; // fetch failed: the service is down
        }
        await new Promise((resolve) => setTimeout(resolve, 200));
      }
    }
    allRegistered = true;
  })();

  // Kill at seeded random moments from the first registration on, while work is pending;
  // restart each time.
  const schedule: number[] = [];
  let killed = 0;
  for (let round = 0; round < kills; round++) {
    // Within 0.2-1.4 s: an embedded node finishes the 33 documents in a few seconds, so later
    // moments would often find nothing left to interrupt.
    const delayMs = Math.round(200 + random() * 1_200);
    schedule.push(delayMs);
    await new Promise((resolve) => setTimeout(resolve, delayMs));
    if (allRegistered) {
      const [summary, pending] = await Promise.all([taskSummary(api, repositoryId), pendingSources(api, repositoryId)]);
      if (summary.complete === true && pending === 0) break;
      if (summary.complete === true) t.comment(`round ${round}: no job queued or running, yet ${pending} sources are still in the pipeline`);
    }
    await stopProcess(child, 'SIGKILL');
    killed++;
    child = startService(dataDir, port, log);
    await waitHealthy(base, undefined, child);
  }
  await registration;
  t.comment(`seed ${seed}: ${killed} kills after ${schedule.join(', ')} ms`);
  t.ok(killed >= 2, `killed mid-run at least twice (killed ${killed} times)`);

  const crashed = await waitForPipeline(api, repositoryId, { timeoutMs: 600_000 });
  const uninterrupted = recordedSnapshot();

  t.same(
    crashed.sources.filter((source) => source.status !== 'processed'),
    [],
    'every source processed after the crashes',
  );
  await assertNoFailedTasks(t, api, repositoryId);
  t.ok(uninterrupted.facts.length > 100, 'the recorded run has the corpus facts');
  assertSameAsRecorded(t, 'pipeline-crash', crashed, uninterrupted);

  // Nothing recorded twice: one FactsExtracted per source, one merge decision per fact.
  const events = await api('GET', `/api/v1/repositories/${repositoryId}/events?types=FactsExtracted&limit=1000`);
  const perSource = new Map<string, number>();
  for (const event of events.body.events as Array<{ stream_id: string }>) perSource.set(event.stream_id, (perSource.get(event.stream_id) ?? 0) + 1);
  t.same([...perSource.values()].filter((count) => count !== 1), [], 'facts extracted once per source');
  t.same(await stopProcess(child, 'SIGTERM'), { code: 0, signal: null }, 'after the crashes, SIGTERM still ends the service cleanly');
});
