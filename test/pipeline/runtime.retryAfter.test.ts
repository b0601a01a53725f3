import t from 'tap';
import { createOpenAIEmbedder } from '../../src/providers/embeddings/openai.js';
import { createOpenAIChatModel } from '../../src/providers/llm/openai.js';
import { createStageRuntime, nextAttemptDelayMs, type StageRuntime } from '../../src/pipeline/runtime.js';
import type { Stage } from '../../src/pipeline/types.js';
import { presentJob } from '../../src/read/present.js';
import { startOpenAIServer } from '../helpers/openaiServer.js';
import { backends, fastSettings, jobInputFor, nextOutcome, openJobsFixture, recordingLog, testStage } from './helpers.js';

// The job backoff alone would be at most 50 ms; the cap on a server's wish is 5 minutes.
const retry = { maxAttempts: 3, baseDelayMs: 10, maxDelayMs: 300_000 };
// Each call makes one request: a 429 asking for more than max_delay gives up at once anyway.
const llmRetry = { maxAttempts: 1, baseDelayMs: 10, maxDelayMs: 1_000, perCallTimeoutMs: 5_000 };

t.test('nextAttemptDelayMs: the backoff, or the Retry-After an error carries, capped at max_delay', async (t) => {
  t.equal(nextAttemptDelayMs(1, retry, new Error('plain'), () => 1), 10, 'no Retry-After: the backoff');
  t.equal(nextAttemptDelayMs(1, retry, { retryAfterMs: 120_000 }, () => 1), 120_000);
  t.equal(nextAttemptDelayMs(1, retry, { retryAfterMs: 3_600_000 }, () => 1), 300_000, 'capped at max_delay');
  t.equal(nextAttemptDelayMs(1, retry, { retryAfterMs: 1 }, () => 1), 10, 'never shorter than the backoff');
});

for (const backend of backends) {
  t.test(`on ${backend.name}: a provider's Retry-After on a 429 holds the job's next attempt`, async (t) => {
    const { db, jobs, log } = await openJobsFixture(t, backend);
    const server = await startOpenAIServer();
    t.teardown(server.close);
    const chat = createOpenAIChatModel({ baseUrl: server.baseUrl, model: 'gpt-test', retry: llmRetry });
    const embedder = createOpenAIEmbedder({ baseUrl: server.baseUrl, model: 'embed-test', dimensions: 100, retry: llmRetry, rateLimitWaitTimeoutMs: 1_000 });
    const stages: Stage[] = [
      testStage('source_decomposition', async (context) => void (await chat.extractFacts({ text: 'Marie Curie discovered polonium.', chunkIndex: 0 }, context.signal))),
      testStage('embed_facts', async (context) => void (await embedder.embed(['Marie Curie discovered polonium.'], context.signal))),
    ];
    const logger = recordingLog();
    const runtime: StageRuntime = createStageRuntime({ db, store: log, stages, settings: fastSettings({ retry }), log: logger });
    t.teardown(() => runtime.stop({ timeoutMs: 0 }));
    await runtime.start();

    /** Runs one job of `kind` whose model call is answered with `fault`; returns the wait it was given, as recorded. */
    async function waitAfter(kind: 'source_decomposition' | 'embed_facts', retryAfter: string): Promise<number> {
      server.queueFault(kind === 'embed_facts' ? 'embeddings' : 'chat', { status: 429, retryAfter });
      const { id } = await jobs.enqueue(jobInputFor(kind, log.add()));
      const finished = nextOutcome(runtime, id, 'retry_scheduled');
      runtime.wake(kind);
      const { job } = await finished;
      t.equal(job.state, 'queued');
      t.equal(presentJob(job).next_attempt_at, job.nextAttemptAt, 'the tasks API shows the held next attempt');
      // One statement set both from the database clock: their difference is the wait given.
      return Date.parse(job.nextAttemptAt) - Date.parse(job.updatedAt);
    }

    t.equal(await waitAfter('source_decomposition', '120'), 120_000, 'chat, delta-seconds: not sooner than asked');
    const date = new Date(Date.now() + 200_000).toUTCString();
    const fromDate = await waitAfter('embed_facts', date);
    t.ok(fromDate >= 190_000 && fromDate <= 200_000, `embeddings, an HTTP date 200 s ahead: about 200 s (${fromDate} ms)`);
    t.equal(await waitAfter('source_decomposition', '86400'), 300_000, 'a day asked: capped at task.retry.max_delay');
    const scheduled = logger.lines.filter((line) => line.message === 'job failed, retry scheduled');
    t.match(scheduled[0]?.details, { retryAfterMs: 120_000, nextAttemptAt: String }, 'the log says when and why');
  });
}
