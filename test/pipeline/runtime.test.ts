import { randomUUID } from 'node:crypto';
import t from 'tap';
import type { Test } from 'tap';
import type { Database } from '../../src/db/database.js';
import { ConcurrencyError } from '../../src/eventstore/port.js';
import { JobRepository, MAX_ATTEMPT_ERROR_CHARS, type ClaimedJob } from '../../src/pipeline/jobs.js';
import { runeLength } from '../../src/util/codePoints.js';
import {
  createStageRuntime,
  JobTimeoutError,
  LeaseLostError,
  retryDelayMs,
  WorkerShutdownError,
  type JobFinishedEvent,
  type StageRuntime,
  type StageRuntimeSettings,
} from '../../src/pipeline/runtime.js';
import { JOB_TRIGGER_TYPE, PermanentJobError, type JobContext, type Stage } from '../../src/pipeline/types.js';
import { backgroundLevel } from '../../src/db/priority.js';
import {
  backends,
  FakeLog,
  fastSettings,
  gate,
  jobInputFor,
  nextOutcome,
  recordingLog,
  sleep,
  testStage,
  openJobsFixture,
} from './helpers.js';

t.test('retryDelayMs grows exponentially, jitters within [ceiling/2, ceiling], and is capped', async (t) => {
  const retry = { maxAttempts: 10, baseDelayMs: 100, maxDelayMs: 1000 };
  t.equal(retryDelayMs(1, retry, () => 1), 100);
  t.equal(retryDelayMs(2, retry, () => 1), 200);
  t.equal(retryDelayMs(3, retry, () => 1), 400);
  t.equal(retryDelayMs(3, retry, () => 0), 200, 'jitter never goes below half');
  t.equal(retryDelayMs(9, retry, () => 1), 1000, 'capped at maxDelay');
  t.equal(retryDelayMs(5000, retry, () => 1), 1000, 'huge attempt numbers stay finite');
  t.equal(retryDelayMs(0, retry, () => 1), 100);
});

t.test('createStageRuntime rejects bad settings and stages', async (t) => {
  const log = new FakeLog();
  const db = { knex: {} as Database['knex'], kind: 'pglite', hasVector: false, close: async () => undefined } as Database;
  const build = (settings: Partial<StageRuntimeSettings>, stages: Stage[] = [testStage('k', async () => undefined)]) =>
    createStageRuntime({ db, store: log, stages, settings: fastSettings(settings), log: recordingLog() });
  t.throws(() => build({ leaseMs: 10, heartbeatIntervalMs: 20 }), RangeError, 'lease shorter than heartbeat');
  t.throws(() => build({ heartbeatTimeoutMs: 10 }), RangeError);
  t.throws(() => build({ pollIntervalMs: 0 }), RangeError);
  t.throws(() => build({ pollIntervalMs: 100, idlePollIntervalMs: 50 }), /idlePollIntervalMs must not be shorter/);
  t.throws(() => build({ jobTimeoutMs: -1 }), RangeError);
  t.throws(() => build({ retry: { maxAttempts: 0, baseDelayMs: 1, maxDelayMs: 2 } }), RangeError);
  t.throws(() => build({ retry: { maxAttempts: 3, baseDelayMs: 10, maxDelayMs: 2 } }), RangeError);
  t.throws(() => build({ concurrency: { k: -1 } }), RangeError);
  t.throws(() => build({ concurrency: { k: 1.5 } }), RangeError);
  t.throws(() => build({}, [testStage('k', async () => undefined), testStage('k', async () => undefined)]), /share the kind/);
  t.doesNotThrow(() => build({ jobTimeoutMs: 0 }), 'zero timeout means unlimited');
});

for (const backend of backends) {
  t.test(`stage runtime on ${backend.name}`, async (t) => {
    const { db, jobs, log } = await openJobsFixture(t, backend);

    function runtimeFor(
      t: Test,
      stages: Stage[],
      settings: Partial<StageRuntimeSettings> = {},
      extra: { workerId?: string; random?: () => number } = {},
    ): StageRuntime & { logLines: ReturnType<typeof recordingLog>['lines'] } {
      const logger = recordingLog();
      const runtime = createStageRuntime({
        db,
        store: log,
        stages,
        settings: fastSettings(settings),
        log: logger,
        ...extra,
      });
      t.teardown(() => runtime.stop({ timeoutMs: 0 }));
      return Object.assign(runtime, { logLines: logger.lines });
    }

    async function enqueue(kind: string, maxAttempts?: number): Promise<string> {
      const { id } = await jobs.enqueue({ ...jobInputFor(kind, log.add()), maxAttempts });
      return id;
    }

    t.test('runs a job with its trigger, actor and signal, then marks it succeeded', async (t) => {
      const seen: JobContext[] = [];
      const runtime = runtimeFor(t, [testStage('embed_facts', async (context) => void seen.push(context))]);
      const id = await enqueue('embed_facts');
      const done = nextOutcome(runtime, id, 'succeeded');
      await runtime.start();
      runtime.wake('embed_facts');
      const event = await done;
      t.equal(seen.length, 1, 'ran once');
      const context = seen[0];
      t.equal(context.job.id, id);
      t.equal(context.trigger.eventId, context.job.triggerEventId, 'the trigger event is loaded from the store');
      t.equal(context.actor, 'system:embed_facts');
      t.equal(context.signal.aborted, false);
      t.match(event.job, { state: 'succeeded', attempts: 1, lastError: null });
      t.match(await jobs.get(id), { state: 'succeeded', claimedBy: runtime.workerId });
      await sleep(50);
      t.equal(seen.length, 1, 'a succeeded job is not run again');
      await t.rejects(runtime.start(), /cannot start/, 'a runtime starts once');
    });

    t.test('a run covers the queued jobs of its kind and subject up to a position: they end without running', async (t) => {
      const ran: string[] = [];
      let covered = -1;
      const stage = testStage('covering', async (context) => {
        ran.push(context.job.id);
        covered = await context.coverQueued(context.job.triggerPosition + 1);
      });
      const runtime = runtimeFor(t, [stage], { concurrency: { covering: 1 } });
      const subjectId = randomUUID();
      const onSubject = () => jobInputFor('covering', log.add('SourceRegistered', {}, subjectId));
      const [first, next, later] = [onSubject(), onSubject(), onSubject()];
      const elsewhere = jobInputFor('covering', log.add());
      const [firstId, nextId, laterId, elsewhereId] = (await jobs.enqueueMany([first, next, later, elsewhere])).map((result) => result.id);
      const done = nextOutcome(runtime, firstId, 'succeeded');
      await runtime.start();
      await done;
      t.equal(covered, 1, 'the first run covered the next trigger of its subject');
      t.match(await jobs.get(nextId), { state: 'succeeded', attempts: 0 }, 'ended without a claim');
      await Promise.all([nextOutcome(runtime, laterId, 'succeeded'), nextOutcome(runtime, elsewhereId, 'succeeded')]);
      t.notOk(ran.includes(nextId), 'the covered job never ran');
      t.ok(ran.includes(laterId) && ran.includes(elsewhereId), 'a later trigger and another subject ran as usual');
    });

    t.test("a deferred stage's jobs run as deferred work, every other stage's as background work", async (t) => {
      const levels = new Map<string, string>();
      const record = (kind: string) => async () => {
        await sleep(1);
        levels.set(kind, backgroundLevel());
      };
      const derived: Stage = { ...testStage('summarize_concepts', record('summarize_concepts')), deferred: true };
      const runtime = runtimeFor(t, [testStage('embed_facts', record('embed_facts')), derived]);
      const ids = [await enqueue('embed_facts'), await enqueue('summarize_concepts')];
      const done = Promise.all(ids.map((id) => nextOutcome(runtime, id, 'succeeded')));
      await runtime.start();
      await done;
      t.same(Object.fromEntries(levels), { embed_facts: 'background', summarize_concepts: 'deferred' }, 'after an await, too');
      t.equal(backgroundLevel(), 'foreground', 'the caller is not');
    });

    t.test('with an idle poll interval, a kind whose queue is empty waits for a wake; a retry wakes its kind when due', async (t) => {
      const claimBatch = JobRepository.prototype.claimBatch;
      const claimsOf = new Map<string, number>();
      // Claims that came back: a claim under way when the job is enqueued may find it without a wake.
      const answeredClaimsOf = new Map<string, number>();
      JobRepository.prototype.claimBatch = async function counted(this: JobRepository, ...args: Parameters<JobRepository['claimBatch']>) {
        claimsOf.set(args[0], (claimsOf.get(args[0]) ?? 0) + 1);
        try {
          return await claimBatch.apply(this, args);
        } finally {
          answeredClaimsOf.set(args[0], (answeredClaimsOf.get(args[0]) ?? 0) + 1);
        }
      };
      t.teardown(() => {
        JobRepository.prototype.claimBatch = claimBatch;
      });
      let attempts = 0;
      const runtime = runtimeFor(
        t,
        [
          testStage('idle_kind', async () => undefined),
          testStage('woken', async () => {
            attempts += 1;
            if (attempts === 1) throw new Error('HTTP 503 from provider');
          }),
        ],
        { pollIntervalMs: 10, idlePollIntervalMs: 60_000, retry: { maxAttempts: 3, baseDelayMs: 30, maxDelayMs: 60 } },
      );
      await runtime.start();
      await sleep(300);
      t.ok((claimsOf.get('idle_kind') ?? 0) <= 2, `an empty queue looked at ${claimsOf.get('idle_kind')} times in 300 ms (every 10 ms would be ~30)`);
      // On a busy machine the start's first look at 'woken' can come later than 300 ms.
      while ((answeredClaimsOf.get('woken') ?? 0) === 0) await sleep(10);
      const id = await enqueue('woken');
      await sleep(100);
      t.equal(attempts, 0, 'a job enqueued without a wake waits for the idle poll');
      const done = nextOutcome(runtime, id, 'succeeded');
      runtime.wake('woken');
      await done;
      t.equal(attempts, 2, 'woken, failed once, and retried when its 30-60 ms backoff ended, not after the 60 s idle poll');
    });

    t.test('transient errors are retried with backoff, then succeed', async (t) => {
      // The backoffs the runtime records with each failure (the claim query holds the job back
      // until then), not the time between attempts, which says nothing on a loaded machine.
      const fail = JobRepository.prototype.fail;
      const retryDelays: number[] = [];
      JobRepository.prototype.fail = function recorded(this: JobRepository, ...args: Parameters<JobRepository['fail']>) {
        retryDelays.push(args[1].retryDelayMs);
        return fail.apply(this, args);
      };
      t.teardown(() => {
        JobRepository.prototype.fail = fail;
      });
      let attempts = 0;
      const runtime = runtimeFor(
        t,
        [
          testStage('flaky', async () => {
            attempts += 1;
            if (attempts < 3) throw new Error('HTTP 503 from provider');
          }),
        ],
        { retry: { maxAttempts: 5, baseDelayMs: 60, maxDelayMs: 1000 } },
        { random: () => 1 }, // no jitter: delays of exactly 60 then 120 ms
      );
      const id = await enqueue('flaky');
      const outcomes: JobFinishedEvent[] = [];
      runtime.onJobFinished((event) => outcomes.push(event));
      const done = nextOutcome(runtime, id, 'succeeded');
      await runtime.start();
      const final = await done;
      t.same(
        outcomes.map((event) => event.outcome),
        ['retry_scheduled', 'retry_scheduled', 'succeeded'],
      );
      t.match(outcomes[0].job, { state: 'queued', attempts: 1, lastError: /HTTP 503/ });
      t.same(retryDelays, [60, 120], 'backoffs of 60 then 120 ms');
      t.match(final.job, { state: 'succeeded', attempts: 3, lastError: null });
    });

    t.test('exhausted attempts end in failed with last_error; never permanent before that', async (t) => {
      let runs = 0;
      const runtime = runtimeFor(
        t,
        [
          testStage('always_503', async () => {
            runs += 1;
            throw new Error(`HTTP 503 (run ${runs})`);
          }),
        ],
        { retry: { maxAttempts: 3, baseDelayMs: 5, maxDelayMs: 10 } },
      );
      const id = await enqueue('always_503');
      const outcomes: string[] = [];
      runtime.onJobFinished((event) => outcomes.push(`${event.outcome}:${event.job.state}`));
      const failed = nextOutcome(runtime, id, 'failed');
      await runtime.start();
      const event = await failed;
      t.same(outcomes, ['retry_scheduled:queued', 'retry_scheduled:queued', 'failed:failed']);
      t.equal(runs, 3);
      t.match(await jobs.get(id), { state: 'failed', attempts: 3, maxAttempts: 3 });
      t.equal((await jobs.get(id))?.lastError, 'HTTP 503 (run 3)', 'the message, no class name before it');
      t.ok(event.job.finishedAt);
    });

    t.test('a permanent error fails the job at once', async (t) => {
      let runs = 0;
      const runtime = runtimeFor(t, [
        testStage('bad_url', async () => {
          runs += 1;
          throw new PermanentJobError('unsupported URL scheme ftp:');
        }),
        testStage('flagged', async () => {
          throw Object.assign(new Error('HTTP 404'), { permanent: true });
        }),
        testStage('blank', async () => {
          throw Object.assign(new RangeError(), { permanent: true });
        }),
      ]);
      const first = await enqueue('bad_url');
      const second = await enqueue('flagged');
      const third = await enqueue('blank');
      const both = Promise.all([nextOutcome(runtime, first, 'failed'), nextOutcome(runtime, second, 'failed'), nextOutcome(runtime, third, 'failed')]);
      await runtime.start();
      await both;
      t.equal(runs, 1);
      t.match(await jobs.get(first), { state: 'failed', attempts: 1 });
      t.equal((await jobs.get(first))?.lastError, 'unsupported URL scheme ftp:', 'the message, not `PermanentJobError: …`');
      t.match(await jobs.get(second), { state: 'failed', attempts: 1, lastError: /HTTP 404/ });
      t.equal((await jobs.get(third))?.lastError, 'RangeError', 'an error with no message says its class: never an empty last_error');
    });

    t.test("a long error keeps its start and the reason at its end in the task's last_error", async (t) => {
      const reason = 'bind message has 54464 parameter formats but 0 parameters 😀';
      const runtime = runtimeFor(t, [
        testStage('long_error', async () => {
          throw new PermanentJobError(`insert into "facts" values ${'($1, $2), '.repeat(2000)}- ${reason}`);
        }),
      ]);
      const id = await enqueue('long_error');
      const failed = nextOutcome(runtime, id, 'failed');
      await runtime.start();
      await failed;
      const lastError = (await jobs.get(id))?.lastError ?? '';
      t.match(lastError, /^insert into "facts" values \(\$1, \$2\), /, 'its start, no class name before it');
      t.ok(lastError.endsWith(`- ${reason}`), 'the reason at its end, the emoji whole');
      t.match(lastError, / … \(\d+ characters left out\) … /);
      t.equal(runeLength(lastError), MAX_ATTEMPT_ERROR_CHARS, 'bounded in characters, room left for a rescue\'s note');
    });

    t.test('a ConcurrencyError means a twin did the work: succeeded, logged at debug', async (t) => {
      const runtime = runtimeFor(t, [
        testStage('twin', async () => {
          throw new ConcurrencyError('source-1', 3, 4);
        }),
      ]);
      const id = await enqueue('twin');
      const done = nextOutcome(runtime, id, 'succeeded');
      await runtime.start();
      const event = await done;
      t.ok(event.error instanceof ConcurrencyError);
      t.match(await jobs.get(id), { state: 'succeeded', attempts: 1, lastError: null });
      t.ok(runtime.logLines.some((line) => line.level === 'debug' && /twin/.test(line.message)));
    });

    t.test('a job timeout aborts the signal and counts as transient', async (t) => {
      let runs = 0;
      let firstSignal: AbortSignal | undefined;
      const runtime = runtimeFor(
        t,
        [
          testStage('slow', async (context) => {
            runs += 1;
            if (runs === 1) {
              firstSignal = context.signal;
              // Honours the signal like a well-behaved stage.
              await new Promise((_, reject) => context.signal.addEventListener('abort', () => reject(context.signal.reason)));
            } else if (runs === 2) {
              await new Promise(() => undefined); // ignores its signal: the runtime must not wait
            }
          }),
        ],
        { jobTimeoutMs: 60, retry: { maxAttempts: 3, baseDelayMs: 5, maxDelayMs: 10 } },
      );
      const id = await enqueue('slow');
      const outcomes: JobFinishedEvent[] = [];
      runtime.onJobFinished((event) => outcomes.push(event));
      const done = nextOutcome(runtime, id, 'succeeded');
      await runtime.start();
      await done;
      t.equal(firstSignal?.aborted, true);
      t.ok(firstSignal?.reason instanceof JobTimeoutError);
      t.same(
        outcomes.map((event) => event.outcome),
        ['retry_scheduled', 'retry_scheduled', 'succeeded'],
        'timeouts were retried, not failed',
      );
      t.ok(outcomes[0].error instanceof JobTimeoutError);
      t.match(outcomes[1].job, { lastError: /timed out after 60 ms/ });
      t.match(await jobs.get(id), { state: 'succeeded', attempts: 3 });
    });

    t.test('a timeout on the last attempt fails the job', async (t) => {
      const runtime = runtimeFor(t, [testStage('stuck', () => new Promise(() => undefined))], {
        jobTimeoutMs: 30,
        retry: { maxAttempts: 1, baseDelayMs: 5, maxDelayMs: 10 },
      });
      const id = await enqueue('stuck');
      const failed = nextOutcome(runtime, id, 'failed');
      await runtime.start();
      await failed;
      t.match(await jobs.get(id), { state: 'failed' });
      t.equal((await jobs.get(id))?.lastError, 'job timed out after 30 ms', 'the message, not `JobTimeoutError: …`');
    });

    t.test('the per-stage concurrency is honoured', async (t) => {
      let running = 0;
      let maxRunning = 0;
      const runtime = runtimeFor(
        t,
        [
          testStage('limited', async () => {
            running += 1;
            maxRunning = Math.max(maxRunning, running);
            await sleep(40);
            running -= 1;
          }),
        ],
        { concurrency: { limited: 3 } },
      );
      const ids: string[] = [];
      for (let i = 0; i < 9; i++) ids.push(await enqueue('limited'));
      const all = Promise.all(ids.map((id) => nextOutcome(runtime, id, 'succeeded')));
      await runtime.start();
      await all;
      t.equal(maxRunning, 3, 'never more than 3 at once, and 3 were used');
      t.same((await jobs.counts()).limited, { queued: 0, running: 0, succeeded: 9, failed: 0, dead: 0 });
    });

    t.test('heartbeats renew the lease while a job runs', async (t) => {
      const held = gate();
      let started = false;
      const runtime = runtimeFor(
        t,
        [
          testStage('beating', async () => {
            started = true;
            await held.promise;
          }),
        ],
        // A long lease, so a loaded machine cannot let it lapse between two heartbeats: what is
        // checked is that each heartbeat moves the lease forward, not how fast they come.
        { heartbeatIntervalMs: 15, leaseMs: 60_000 },
      );
      const id = await enqueue('beating');
      const done = nextOutcome(runtime, id, 'succeeded');
      await runtime.start();
      while (!started) await sleep(5);
      const first = await jobs.get(id);
      let later = first;
      while (Date.parse(later?.heartbeatAt ?? '') <= Date.parse(first?.heartbeatAt ?? '')) {
        await sleep(20);
        later = await jobs.get(id);
      }
      t.equal(later?.state, 'running');
      t.ok(Date.parse(later?.heartbeatAt ?? '') > Date.parse(first?.heartbeatAt ?? ''), 'heartbeat_at advanced');
      t.ok(Date.parse(later?.leaseUntil ?? '') > Date.parse(first?.leaseUntil ?? ''), 'the heartbeat moved the lease forward');
      t.ok(Date.parse(later?.leaseUntil ?? '') > Date.now(), 'the lease is still in the future');
      t.same(await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000 }), { requeued: [], dead: [] }, 'not an orphan');
      held.open();
      await done;
    });

    t.test('a stage with concurrency 0 does not run', async (t) => {
      let runs = 0;
      const runtime = runtimeFor(t, [testStage('off', async () => void (runs += 1))], { concurrency: { off: 0 } });
      const id = await enqueue('off');
      await runtime.start();
      await sleep(60);
      t.equal(runs, 0);
      t.match(await jobs.get(id), { state: 'queued', attempts: 0 });
    });

    t.test('a job whose lease is taken away is abandoned, its signal aborted', async (t) => {
      const held = gate();
      let signal: AbortSignal | undefined;
      const runtime = runtimeFor(t, [
        testStage('robbed', async (context) => {
          signal = context.signal;
          await held.promise;
        }),
      ]);
      const id = await enqueue('robbed');
      const abandoned = nextOutcome(runtime, id, 'abandoned');
      await runtime.start();
      while (!signal) await sleep(5);
      // Another worker's rescue after a stall: the row no longer belongs to this claim.
      await db.knex('jobs').where({ id }).update({ state: 'queued', claim_token: null, next_attempt_at: db.knex.raw(`now() + interval '1 hour'`) });
      const event = await abandoned;
      t.ok(event.error instanceof LeaseLostError);
      t.equal(signal.aborted, true);
      held.open();
      await sleep(20);
      t.match(await jobs.get(id), { state: 'queued' }, 'the abandoned run wrote nothing');
    });

    t.test('rescue of an expired lease lets another worker run the job', async (t) => {
      const id = await enqueue('orphan');
      const claim = await jobs.claim('orphan', 'crashed-host', { leaseMs: 1 });
      t.equal(claim?.id, id);
      await sleep(10);
      let runs = 0;
      const runtime = runtimeFor(t, [testStage('orphan', async () => void (runs += 1))], {}, { workerId: 'other-host' });
      const done = nextOutcome(runtime, id, 'succeeded');
      await runtime.start();
      await done;
      t.equal(runs, 1);
      t.match(await jobs.get(id), { state: 'succeeded', attempts: 2, claimedBy: 'other-host' });
      t.ok(runtime.logLines.some((line) => line.message === 'rescued orphaned jobs'));
    });

    t.test('a job whose worker died during its last attempt is dead, and its stage records what it leaves behind', async (t) => {
      const id = await enqueue('lastgasp', 1);
      await jobs.claim('lastgasp', 'crashed-host', { leaseMs: 1, maxAttempts: 1 });
      await sleep(10);
      const died: Array<{ id: string; lastError: string | null }> = [];
      const stage: Stage = { ...testStage('lastgasp', async () => void t.fail('must not run again')), onDead: async (job) => void died.push({ id: job.id, lastError: job.lastError }) };
      const runtime = runtimeFor(t, [stage], {}, { workerId: 'other-host' });
      await runtime.start();
      await runtime.stop();
      t.match(await jobs.get(id), { state: 'dead', attempts: 1 });
      t.equal(died.length, 1, 'onDead ran once');
      t.match(died[0], { id, lastError: /orphaned: worker crashed-host stopped heartbeating during attempt 1/ });
    });

    t.test('crash simulation: a job claimed and never finished runs again after restart', async (t) => {
      // The first process claims the job and dies: no finish, no heartbeat, a lease still running.
      const id = await enqueue('crashy');
      const claim = (await jobs.claim('crashy', 'host-a', { leaseMs: 60_000, maxAttempts: 3 })) as ClaimedJob;
      t.equal(claim.id, id);

      // Without rescue, the orphan stays stuck while its lease runs.
      const noRescue = runtimeFor(t, [testStage('crashy', async () => void t.fail('must not run'))], { rescueOnStartup: false }, { workerId: 'host-a' });
      await noRescue.start();
      await sleep(50);
      await noRescue.stop();
      t.match(await jobs.get(id), { state: 'running', attempts: 1 });

      // The restarted process (same worker id) rescues its own orphan at start-up and runs it.
      let runs = 0;
      const restarted = runtimeFor(t, [testStage('crashy', async () => void (runs += 1))], {}, { workerId: 'host-a' });
      const done = nextOutcome(restarted, id, 'succeeded');
      await restarted.start();
      await done;
      t.equal(runs, 1);
      t.match(await jobs.get(id), { state: 'succeeded', attempts: 2 });
      // The dead process's late finish is fenced off by its claim token.
      t.equal(await jobs.succeed(claim), null);
    });

    if (backend.name === 'pglite') {
      t.test('on PGlite every running job is an orphan at start-up (one process per data directory)', async (t) => {
        const id = await enqueue('solo');
        await jobs.claim('solo', 'previous-process', { leaseMs: 60_000 });
        const runtime = runtimeFor(t, [testStage('solo', async () => undefined)], {}, { workerId: 'new-process' });
        const done = nextOutcome(runtime, id, 'succeeded');
        await runtime.start();
        await done;
        t.match(await jobs.get(id), { state: 'succeeded' });
      });
    } else {
      t.test('on a server a live lease of another worker is left alone at start-up', async (t) => {
        const id = await enqueue('shared');
        await jobs.claim('shared', 'busy-host', { leaseMs: 60_000 });
        const runtime = runtimeFor(t, [testStage('shared', async () => void t.fail('must not run'))], {}, { workerId: 'new-host' });
        await runtime.start();
        await sleep(50);
        t.match(await jobs.get(id), { state: 'running', claimedBy: 'busy-host' });
      });
    }

    t.test('retry() of a failed job runs it again', async (t) => {
      let runs = 0;
      const runtime = runtimeFor(t, [
        testStage('second_chance', async () => {
          runs += 1;
          if (runs === 1) throw new PermanentJobError('provider said no');
        }),
      ]);
      const id = await enqueue('second_chance');
      const failed = nextOutcome(runtime, id, 'failed');
      await runtime.start();
      await failed;
      t.match(await jobs.get(id), { state: 'failed', attempts: 1 });
      const succeeded = nextOutcome(runtime, id, 'succeeded');
      const result = await jobs.retry(id);
      t.equal(result.status, 'requeued');
      runtime.wake('second_chance');
      await succeeded;
      t.equal(runs, 2);
      t.match(await jobs.get(id), { state: 'succeeded', attempts: 1, lastError: null });
    });

    t.test('a stage that takes its trigger from the job row runs without reading the event', async (t) => {
      const seen: JobContext[] = [];
      const stage: Stage = { ...testStage('from_row', async (context) => void seen.push(context)), triggerFromJob: true };
      const event = log.add();
      // Position 1 holds another event: a read would fail the job as a mismatch, so none happens.
      const { id } = await jobs.enqueue({ ...jobInputFor('from_row', event), triggerPosition: 1 });
      const runtime = runtimeFor(t, [stage]);
      const done = nextOutcome(runtime, id, 'succeeded');
      await runtime.start();
      await done;
      t.equal(seen.length, 1);
      t.match(seen[0].trigger, {
        eventId: event.eventId,
        globalPosition: 1,
        type: JOB_TRIGGER_TYPE,
        data: {},
        repositoryId: event.repositoryId,
        correlationId: event.correlationId,
      }, 'what the row knows of the trigger');
      t.equal(seen[0].scheduled, false);
    });

    t.test('a trigger event that does not match the store fails permanently', async (t) => {
      const runtime = runtimeFor(t, [testStage('mismatch', async () => void t.fail('must not run'))]);
      const event = log.add();
      const { id } = await jobs.enqueue({ ...jobInputFor('mismatch', event), triggerPosition: 1 });
      const failed = nextOutcome(runtime, id, 'failed');
      await runtime.start();
      await failed;
      t.match(await jobs.get(id), { state: 'failed', attempts: 1, lastError: /not the trigger/ });
    });

    t.test('graceful stop waits for a running job', async (t) => {
      const release = gate();
      let started = false;
      const runtime = runtimeFor(t, [
        testStage('long', async () => {
          started = true;
          await release.promise;
        }),
      ]);
      const id = await enqueue('long');
      const queuedBehind = await enqueue('long');
      await runtime.start();
      while (!started) await sleep(5);
      let stopped = false;
      const stopping = runtime.stop({ timeoutMs: 5000 }).then(() => (stopped = true));
      await sleep(50);
      t.equal(stopped, false, 'stop waits while the job runs');
      release.open();
      await stopping;
      t.match(await jobs.get(id), { state: 'succeeded' }, 'the running job finished');
      t.match(await jobs.get(queuedBehind), { state: 'queued', attempts: 0 }, 'nothing new was claimed');
      t.equal(runtime.runningCount(), 0);
    });

    t.test('stop aborts jobs still running at the deadline and leaves their lease', async (t) => {
      let signal: AbortSignal | undefined;
      // The runtime's own stop deadline far beyond the test's: stop returning at all is then its
      // 50 ms one (the fast settings' 2 s, which the bound below once told apart from 50 ms, is a
      // moment on a loaded machine).
      const runtime = runtimeFor(
        t,
        [
          testStage('endless', async (context) => {
            signal = context.signal;
            await new Promise(() => undefined);
          }),
        ],
        { stopTimeoutMs: 3_600_000 },
      );
      const id = await enqueue('endless');
      const abandoned = nextOutcome(runtime, id, 'abandoned');
      await runtime.start();
      while (!signal) await sleep(5);
      // Returning at all is the proof that the 50 ms deadline ended stop: the job never ends and
      // the runtime's own hour is far past the test's timeout (no bound on elapsed time here).
      await runtime.stop({ timeoutMs: 50 });
      const event = await abandoned;
      t.ok(event.error instanceof WorkerShutdownError);
      t.equal(signal.aborted, true);
      t.ok(signal.reason instanceof WorkerShutdownError);
      const job = await jobs.get(id);
      t.match(job, { state: 'running', attempts: 1 }, 'left for its lease to expire');
      t.ok(job?.leaseUntil, 'the lease is still there');
      await runtime.stop(); // idempotent
    });

    /** A stage that runs groups with `runMany` (and single claims with `run`), recording both. */
    function groupStage(kind: string, runMany: NonNullable<Stage['runMany']>): Stage & { alone: JobContext[] } {
      const alone: JobContext[] = [];
      return { ...testStage(kind, async (context) => void alone.push(context)), runMany, alone };
    }

    t.test('a runMany stage gets the claimed jobs together; each job ends as its own outcome', async (t) => {
      const groups: JobContext[][] = [];
      let failTransient: string | null = null;
      const stage = groupStage('grouped', async (contexts) => {
        groups.push([...contexts]);
        return contexts.map((context, index) =>
          index === 1
            ? { ok: false, error: new PermanentJobError('bad input') }
            : index === 2 && context.job.id === failTransient
              ? { ok: false, error: new Error('HTTP 503') }
              : { ok: true },
        );
      });
      const runtime = runtimeFor(t, [stage], { concurrency: { grouped: 1 } });
      const ids = [await enqueue('grouped'), await enqueue('grouped'), await enqueue('grouped')];
      failTransient = ids[2];
      const outcomes = [
        nextOutcome(runtime, ids[0], 'succeeded'),
        nextOutcome(runtime, ids[1], 'failed'),
        nextOutcome(runtime, ids[2], 'retry_scheduled'),
      ];
      const retried = nextOutcome(runtime, ids[2], 'succeeded');
      await runtime.start();
      await Promise.all(outcomes);
      t.equal(groups.length, 1, 'one call for the three queued jobs');
      t.same(groups[0].map((context) => context.job.id), ids, 'in claim order');
      t.ok(groups[0].every((context) => context.actor === 'system:grouped' && context.signal.aborted === false));
      t.match(await jobs.get(ids[1]), { state: 'failed', lastError: /bad input/ });
      await retried;
      t.same(stage.alone.map((context) => context.job.id), [ids[2]], 'the retry, claimed alone, ran with run');
      t.match(await jobs.get(ids[0]), { state: 'succeeded', attempts: 1 });
    });

    t.test('a runMany outcome given as a promise records its job when it settles, not with the group', async (t) => {
      let releaseSlow!: () => void;
      const slowDone = new Promise<void>((resolve) => (releaseSlow = resolve));
      const stage = groupStage('grouped', async (contexts) => contexts.map((_, index) => (index === 0 ? slowDone.then(() => ({ ok: true as const })) : Promise.resolve({ ok: true as const }))));
      const runtime = runtimeFor(t, [stage], { concurrency: { grouped: 1 } });
      const ids = [await enqueue('grouped'), await enqueue('grouped')];
      const quick = nextOutcome(runtime, ids[1], 'succeeded');
      const slow = nextOutcome(runtime, ids[0], 'succeeded');
      await runtime.start();
      await quick;
      t.match(await jobs.get(ids[1]), { state: 'succeeded' }, 'the quick job is recorded');
      t.match(await jobs.get(ids[0]), { state: 'running' }, 'while the slow one still runs');
      releaseSlow();
      await slow;
    });

    t.test('a runMany that throws ends every job of its group with that error', async (t) => {
      const stage = groupStage('grouped', async () => {
        throw new PermanentJobError('the model is gone');
      });
      const runtime = runtimeFor(t, [stage]);
      const ids = [await enqueue('grouped'), await enqueue('grouped')];
      const failed = ids.map((id) => nextOutcome(runtime, id, 'failed'));
      await runtime.start();
      for (const event of await Promise.all(failed)) t.match(event.job, { state: 'failed', lastError: /the model is gone/ });
      t.same(stage.alone, [], 'run was not used');
    });

    t.test('stop settles while a group ignores its signal, and aborts the group once every job is', async (t) => {
      let groupSignal: AbortSignal | undefined;
      const stage = groupStage('grouped', async (_contexts, signal) => {
        groupSignal = signal;
        return new Promise(() => undefined);
      });
      const runtime = runtimeFor(t, [stage]);
      const ids = [await enqueue('grouped'), await enqueue('grouped')];
      const abandoned = ids.map((id) => nextOutcome(runtime, id, 'abandoned'));
      await runtime.start();
      while (!groupSignal) await sleep(5);
      t.equal(groupSignal.aborted, false);
      await runtime.stop({ timeoutMs: 20 });
      for (const event of await Promise.all(abandoned)) t.ok(event.error instanceof WorkerShutdownError);
      t.equal(groupSignal.aborted, true);
      t.ok(groupSignal.reason instanceof WorkerShutdownError);
      for (const id of ids) t.match(await jobs.get(id), { state: 'running' }, 'left for its lease to expire');
    });
  });
}
