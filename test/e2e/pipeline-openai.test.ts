import t from 'tap';
import { eventually, registerUser, startTestService } from '../helpers/service.js';
import {
  assertNoFailedTasks,
  createRepository,
  injectApi,
  listAll,
  PIPELINE_TEST_OVERRIDES,
  assertSameAsRecorded,
  recordedSnapshot,
  registerCorpus,
  startCorpusServer,
  waitForPipeline,
} from '../helpers/corpus.js';
import { startOpenAIServer, type Fault, type OpenAIPath } from '../helpers/openaiServer.js';

/**
 * The corpus through the OpenAI-compatible providers (chat and embeddings) against a real local
 * server speaking that wire format, backed by the local models: the result equals the local
 * models' recorded snapshot (test/fixtures/corpus/snapshot.json), although the server answers the first requests of each kind with 429, 500, a timeout
 * or malformed JSON (the clients retry; nothing is lost). Then a permanent failure (401) for a
 * late document: the source shows failed with the reason, and a retry after the fix completes it.
 */
t.setTimeout(900_000);

const API_KEY = 'sk-test-corpus';
// A call takes milliseconds, but the test server shares this process (and its event loop) with
// the service, whose PGlite and local models can block it for many seconds on a loaded CI
// machine (a 15 s timeout ran out on all four attempts of one call there): a generous per-call
// timeout, and the timeout fault waits a little longer than it.
const PER_CALL_TIMEOUT_MS = 45_000;
const TIMEOUT_FAULT: Fault = { delayMs: PER_CALL_TIMEOUT_MS + 2_000 };
// Faults for the first requests on each path, one per request, in order.
const CHAT_FAULTS: Fault[] = [
  { status: 429, retryAfter: 0 },
  { status: 500 },
  TIMEOUT_FAULT,
  { malformedContent: true },
  { malformedBody: true },
  { status: 503 },
  { invalidContent: { facts: 'not a list' } },
];
const EMBEDDING_FAULTS: Fault[] = [{ status: 429, retryAfter: 0 }, { status: 500 }, { malformedBody: true }, TIMEOUT_FAULT, { status: 502 }];

const LATE_PAGE = `<!doctype html>
<html><head><title>Coffee in Sweden | The Coffee Almanac</title></head>
<body><nav><a href="/">Home</a></nav>
<article><h1>Coffee in Sweden</h1>
<p>Coffee arrived in Sweden in 1674. King Gustav III tried to ban coffee in 1746. Sweden became a large market for coffee.</p>
</article><footer>The Coffee Almanac</footer></body></html>`;

t.test('the OpenAI-compatible providers give the local result through faults, and report a permanent failure', async (t) => {
  const web = await startCorpusServer({ '/late/coffee-in-sweden.html': { body: LATE_PAGE } });
  const openai = await startOpenAIServer({ apiKey: API_KEY, faults: { chat: [...CHAT_FAULTS], embeddings: [...EMBEDDING_FAULTS] } });
  let remote: Awaited<ReturnType<typeof startTestService>> | null = null;
  t.teardown(async () => {
    await remote?.close();
    await openai.close();
    await web.close();
  });

  const run = async (service: NonNullable<typeof remote>, email: string) => {
    const { token } = await registerUser(service, email);
    const api = injectApi(service, token);
    const repositoryId = await createRepository(api, 'Corpus');
    await registerCorpus(api, repositoryId, web.documents);
    const started = Date.now();
    let lastComment = started;
    const onPoll = (summary: { complete: boolean }) => {
      if (Date.now() - lastComment < 15_000) return;
      lastComment = Date.now();
      t.comment(`${email}: ${Math.round((Date.now() - started) / 1000)} s, complete ${summary.complete}, requests ${JSON.stringify(openai.requests)}`);
    };
    const snapshot = await waitForPipeline(api, repositoryId, { timeoutMs: 600_000, onPoll });
    t.comment(`${email}: settled after ${Math.round((Date.now() - started) / 1000)} s`);
    return { api, repositoryId, snapshot };
  };
  remote = await startTestService({
    overrides: {
      ...PIPELINE_TEST_OVERRIDES,
      providers: {
        ...PIPELINE_TEST_OVERRIDES.providers,
        llm: { provider: 'openai', model: 'test-chat-model', base_url: openai.baseUrl, api_key: API_KEY },
        embeddings: { provider: 'openai', model: 'test-embedding-model', base_url: openai.baseUrl, api_key: API_KEY, dimensions: 100 },
        // More attempts than faults on either path: even if every fault lands on one call (the
        // first document can be alone in the pipeline on a slow machine), it still succeeds.
        llm_retry: { max_attempts: Math.max(CHAT_FAULTS.length, EMBEDDING_FAULTS.length) + 1, base_delay: '20ms', max_delay: '100ms', per_call_timeout: `${PER_CALL_TIMEOUT_MS / 1000}s` },
      },
    },
  });
  const viaOpenAI = await run(remote, 'remote@example.org');

  t.same(viaOpenAI.snapshot.sources.filter((source) => source.status !== 'processed'), [], 'every source processed despite the faults');
  await assertNoFailedTasks(t, viaOpenAI.api, viaOpenAI.repositoryId);
  const viaLocal = recordedSnapshot();
  t.ok(viaLocal.facts.length > 100, 'the recorded local run has the corpus facts');
  assertSameAsRecorded(t, 'pipeline-openai', viaOpenAI.snapshot, viaLocal);

  // Every injected fault was answered with a retry: a request body sent again.
  for (const [path, faults] of [['chat', CHAT_FAULTS], ['embeddings', EMBEDDING_FAULTS]] as Array<[OpenAIPath, Fault[]]>) {
    const seen = new Set<string>();
    let repeated = 0;
    for (const request of openai.bodies.filter((body) => body.path === path)) {
      const key = JSON.stringify(request.body);
      if (seen.has(key)) repeated++;
      seen.add(key);
    }
    t.ok(repeated >= faults.length, `${path}: ${repeated} requests sent again after ${faults.length} faults (${openai.requests[path]} requests, ${seen.size} distinct)`);
  }
  t.ok(openai.bodies.every((request) => request.authorization === `Bearer ${API_KEY}`), 'every request carries the API key');
  const embeddingModels = new Set(openai.bodies.filter((request) => request.path === 'embeddings').map((request) => request.body.model));
  t.same([...embeddingModels], ['test-embedding-model'], 'the configured embedding model is asked for');

  // A permanent failure: the provider refuses the key for a late document.
  const { api, repositoryId } = viaOpenAI;
  openai.setStandingFault('chat', { status: 401 });
  const before = openai.requests.chat;
  const late = await api('POST', `/api/v1/repositories/${repositoryId}/sources`, { url: `${web.baseUrl}/late/coffee-in-sweden.html` });
  t.equal(late.status, 201);
  const failed = await eventually(async () => {
    const source = await api('GET', `/api/v1/repositories/${repositoryId}/sources/${late.body.id}`);
    return source.body.status === 'failed' ? source.body : null;
  }, 180_000, 100);
  t.match(failed.failure, /401|api key|unauthori[sz]ed/i, `the failure says why: ${failed.failure}`);
  t.ok(openai.requests.chat - before <= 2, `a 401 is not retried (${openai.requests.chat - before} chat requests)`);
  // The source's failure (an event, applied by the projections) can show before the job runtime
  // has recorded the job's end (a statement of the pipeline's, which waits behind projections on
  // PGlite's connection): the tasks reply catches up within moments.
  const tasks = await eventually(async () => {
    const reply = await api('GET', `/api/v1/repositories/${repositoryId}/tasks?source_id=${late.body.id}`);
    return reply.status !== 200 || reply.body.complete !== false ? reply : null;
  }, 30_000, 100);
  t.equal(tasks.status, 200);
  t.not(tasks.body.complete, undefined, 'the tasks reply says whether the source is done');
  t.equal(tasks.body.complete, true, 'nothing left to run for the failed source');
  const failedJobs = await api('GET', `/api/v1/repositories/${repositoryId}/tasks?source_id=${late.body.id}&state=failed`);
  t.equal(failedJobs.status, 200);
  const job = failedJobs.body.items.find((item: { kind: string }) => item.kind === 'source_decomposition');
  t.ok(job, 'the failed decomposition job is listed');
  t.match(job?.last_error, /401|api key|unauthori[sz]ed/i, 'with the reason');
  t.equal(job?.attempts, 1, 'a permanent failure is not retried by the job runtime');

  // Fixed: the retry completes the source, and nothing of the corpus changed meanwhile.
  openai.setStandingFault('chat', null);
  const retried = await api('POST', `/api/v1/repositories/${repositoryId}/sources/${late.body.id}/retry`);
  t.equal(retried.status, 202);
  const processed = await eventually(async () => {
    const source = await api('GET', `/api/v1/repositories/${repositoryId}/sources/${late.body.id}`);
    return source.body.status === 'processed' ? source.body : null;
  }, 180_000, 100);
  t.equal(processed.fact_count, 3, 'the late document yields its three facts after the retry');
  const lateFacts = await listAll(api, `/api/v1/repositories/${repositoryId}/sources/${late.body.id}/facts`);
  t.same(lateFacts.map((fact) => fact.content).sort(), [
    'Coffee arrived in Sweden in 1674.',
    'King Gustav III tried to ban coffee in 1746.',
    'Sweden became a large market for coffee.',
  ]);
});
