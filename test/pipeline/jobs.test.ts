import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import t, { type Test } from 'tap';
import { ENDED_PER_STATEMENT, JobRepository, jobIdFor, MAX_ATTEMPT_ERROR_CHARS, MAX_TASK_ERROR_CHARS, migrateJobs, type ClaimedJob, type JobCounts } from '../../src/pipeline/jobs.js';
import { runeLength } from '../../src/util/codePoints.js';
import { boundedErrorMessage } from '../../src/util/errorMessage.js';
import type { JobState } from '../../src/pipeline/types.js';
import { backends, FakeLog, jobInputFor, sleep } from './helpers.js';

for (const backend of backends) {
  t.test(`JobRepository on ${backend.name}`, async (t) => {
    const db = await backend.open();
    t.teardown(() => db.close());
    // Twice, and concurrently on the server: the DDL is idempotent and serialized.
    await Promise.all([migrateJobs(db.knex), migrateJobs(db.knex)]);
    await migrateJobs(db.knex);
    const jobs = new JobRepository(db.knex);
    const log = new FakeLog();
    t.beforeEach(async () => {
      await db.knex.raw('TRUNCATE jobs');
    });

    /** The counts by a group-by of `jobs` itself, as `counts` answered before it kept them. */
    const countedRows = async (repositoryId?: string): Promise<JobCounts> => {
      const query = db.knex('jobs').select('kind', 'state').count<Array<{ kind: string; state: JobState; count: string | number }>>('* as count').groupBy('kind', 'state');
      if (repositoryId !== undefined) query.where('repository_id', repositoryId);
      const counts: JobCounts = {};
      for (const row of await query) {
        counts[row.kind] ??= { queued: 0, running: 0, succeeded: 0, failed: 0, dead: 0 };
        counts[row.kind][row.state] = Number(row.count);
      }
      return counts;
    };
    // Every operation the tests below make keeps the kept counts equal to the rows' (createJobCounts' triggers).
    const test = (name: string, body: (t: Test) => Promise<void>) =>
      t.test(name, async (t) => {
        await body(t);
        t.same(await jobs.counts(), await countedRows(), 'the kept counts of every job are the rows counted');
        for (const repositoryId of ['repo-1', 'repo-2']) {
          t.same(await jobs.counts({ repositoryId }), await countedRows(repositoryId), `the kept counts of ${repositoryId} are its rows counted`);
        }
      });

    test('a duplicate enqueue is harmless', async (t) => {
      const event = log.add();
      const first = await jobs.enqueue(jobInputFor('embed_facts', event));
      const again = await jobs.enqueue(jobInputFor('embed_facts', event));
      t.equal(first.inserted, true);
      t.equal(again.inserted, false);
      t.equal(again.id, first.id, 'same key, same deterministic id');
      t.equal(first.id, jobIdFor('embed_facts', String(event.data.sourceId), event.eventId));
      const other = await jobs.enqueue(jobInputFor('extract_concepts', event));
      t.equal(other.inserted, true, 'another kind on the same trigger is another job');
      t.not(other.id, first.id);
      const { total } = await jobs.list();
      t.equal(total, 2);
      const job = await jobs.get(first.id);
      t.match(job, {
        kind: 'embed_facts',
        state: 'queued',
        attempts: 0,
        triggerEventId: event.eventId,
        triggerPosition: event.globalPosition,
        repositoryId: 'repo-1',
        correlationId: event.correlationId,
        lastError: null,
      });
      t.equal(typeof job?.triggerPosition, 'number');
    });

    test('enqueue rejects bad input', async (t) => {
      const input = jobInputFor('embed_facts', log.add());
      await t.rejects(jobs.enqueue({ ...input, kind: '' }), TypeError);
      await t.rejects(jobs.enqueue({ ...input, subjectId: ' ' }), TypeError);
      await t.rejects(jobs.enqueue({ ...input, triggerEventId: 'not-a-uuid' }), TypeError);
      await t.rejects(jobs.enqueue({ ...input, triggerPosition: -1 }), RangeError);
      await t.rejects(jobs.enqueue({ ...input, triggerPosition: 1.5 }), RangeError);
      await t.rejects(jobs.enqueue({ ...input, maxAttempts: 0 }), RangeError);
      t.equal((await jobs.list()).total, 0, 'nothing was inserted');
    });

    test('claim hands each job to exactly one of many concurrent claimers', async (t) => {
      const jobCount = 40;
      for (let i = 0; i < jobCount; i++) await jobs.enqueue(jobInputFor('embed_facts', log.add()));
      const claimedBy = new Map<string, string[]>();
      const claimer = async (worker: string): Promise<void> => {
        for (;;) {
          const claim = await jobs.claim('embed_facts', worker, { leaseMs: 60_000 });
          if (!claim) return;
          claimedBy.set(claim.id, [...(claimedBy.get(claim.id) ?? []), worker]);
        }
      };
      await Promise.all(Array.from({ length: 16 }, (_, i) => claimer(`worker-${i}`)));
      t.equal(claimedBy.size, jobCount, 'every job was claimed');
      t.ok(
        [...claimedBy.values()].every((workers) => workers.length === 1),
        'no job was claimed twice',
      );
      const counts = await jobs.counts();
      t.same(counts.embed_facts, { queued: 0, running: jobCount, succeeded: 0, failed: 0, dead: 0 });
      if (backend.name === 'postgres') {
        t.ok(new Set([...claimedBy.values()].flat()).size > 1, 'the work was spread over several connections');
      }
    });

    test('claim takes only due jobs of its own kind and counts the attempt', async (t) => {
      const event = log.add();
      const { id } = await jobs.enqueue(jobInputFor('embed_facts', event));
      t.equal(await jobs.claim('extract_concepts', 'w', { leaseMs: 1000 }), null, 'other kind');
      // A lease long enough that a loaded machine cannot outlast it between the claim and the check.
      const claim = await jobs.claim('embed_facts', 'w', { leaseMs: 60_000, maxAttempts: 7 });
      t.ok(claim);
      t.match(claim, { id, state: 'running', attempts: 1, maxAttempts: 7, claimedBy: 'w' });
      t.ok(claim?.leaseUntil && Date.parse(claim.leaseUntil) > Date.now(), 'lease in the future');
      t.equal(await jobs.claim('embed_facts', 'w', { leaseMs: 1000 }), null, 'a running job is not claimable');
      await t.rejects(jobs.claim('embed_facts', '', { leaseMs: 1000 }), TypeError);
      await t.rejects(jobs.claim('embed_facts', 'w', { leaseMs: -5 }), RangeError);
    });

    test('claimMany takes up to its limit, oldest first, each with its own token', async (t) => {
      const enqueued = [];
      for (let i = 0; i < 5; i++) enqueued.push(await jobs.enqueue(jobInputFor('embed_facts', log.add())));
      await jobs.enqueue(jobInputFor('extract_concepts', log.add()));
      const first = await jobs.claimMany('embed_facts', 'w', 3, { leaseMs: 1000 });
      t.same(first.map((claim) => claim.id), enqueued.slice(0, 3).map((job) => job.id), 'the three oldest, in trigger order');
      t.equal(new Set(first.map((claim) => claim.claimToken)).size, 3, 'one token per claim');
      t.ok(first.every((claim) => claim.state === 'running' && claim.attempts === 1));
      const rest = await jobs.claimMany('embed_facts', 'w', 10, { leaseMs: 1000 });
      t.same(rest.map((claim) => claim.id), enqueued.slice(3).map((job) => job.id), 'only what is left, no other kind');
      t.same(await jobs.claimMany('embed_facts', 'w', 10, { leaseMs: 1000 }), [], 'nothing due');
      await t.rejects(jobs.claimMany('embed_facts', 'w', 0, { leaseMs: 1000 }), RangeError);
    });

    test('enqueueMany inserts in one call what enqueue would, one by one', async (t) => {
      const [a, b] = [log.add(), log.add()];
      const existing = await jobs.enqueue(jobInputFor('cleanup_facts', a));
      const results = await jobs.enqueueMany([
        jobInputFor('cleanup_facts', a),
        jobInputFor('cleanup_facts', b),
        { ...jobInputFor('cleanup_facts', b), sourceId: 'ignored-twice' },
        jobInputFor('refine_concepts', b),
      ]);
      t.same(results.map((result) => result.inserted), [false, true, false, true], 'a known job and a repeated one are not inserted again');
      t.equal(results[0].id, existing.id, 'the same derived id as enqueue');
      t.equal(results[1].id, results[2].id);
      t.match(await jobs.get(results[1].id), { kind: 'cleanup_facts', state: 'queued', triggerPosition: b.globalPosition, correlationId: b.correlationId });
      t.same(await jobs.enqueueMany([]), []);
      await t.rejects(jobs.enqueueMany([jobInputFor('cleanup_facts', a), { ...jobInputFor('x', b), triggerEventId: 'not-a-uuid' }]), TypeError, 'a bad input fails the whole call');
    });

    test('claimBatch tells whether due jobs were left queued', async (t) => {
      const enqueued = [];
      for (let i = 0; i < 3; i++) enqueued.push(await jobs.enqueue(jobInputFor('migrate_context', log.add())));
      const first = await jobs.claimBatch('migrate_context', 'w', 2, { leaseMs: 1000 });
      t.same(first.claims.map((claim) => claim.id), enqueued.slice(0, 2).map((job) => job.id), 'the two oldest');
      t.equal(first.more, true, 'a third is still due');
      const last = await jobs.claimBatch('migrate_context', 'w', 1, { leaseMs: 1000 });
      t.same(last.claims.map((claim) => claim.id), [enqueued[2].id], 'exactly the limit, though the picked set was one larger');
      t.equal(last.more, false, 'none left behind');
      t.same(await jobs.claimBatch('migrate_context', 'w', 5, { leaseMs: 1000 }), { claims: [], more: false }, 'nothing due');
      t.match(await jobs.get(enqueued[2].id), { state: 'running', attempts: 1 }, 'the extra job the first batch picked was claimed by the second alone');
    });

    test('succeedMany records held claims and leaves lost ones alone', async (t) => {
      for (let i = 0; i < 3; i++) await jobs.enqueue(jobInputFor('k', log.add()));
      const [held, lost, other] = await jobs.claimMany('k', 'w', 3, { leaseMs: 60_000 });
      if (!held || !lost || !other) throw new Error('three claims expected');
      // The lost claim was rescued and claimed again meanwhile: its old token no longer holds it.
      await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000, claimedBy: 'w' });
      const [heldAgain, lostAgain, otherAgain] = await jobs.claimMany('k', 'w2', 3, { leaseMs: 60_000 });
      if (!heldAgain || !lostAgain || !otherAgain) throw new Error('three claims expected');
      const recorded = await jobs.succeedMany([heldAgain, lost, otherAgain]);
      t.same([...recorded.keys()].sort(), [heldAgain.claimToken, otherAgain.claimToken].sort(), 'only claims still held');
      t.match(recorded.get(heldAgain.claimToken), { id: heldAgain.id, state: 'succeeded' });
      t.match(await jobs.get(lostAgain.id), { state: 'running', claimedBy: 'w2' }, 'the stale token changed nothing');
      t.same(await jobs.succeedMany([]), new Map());
      t.match(await jobs.succeed(lostAgain), { id: lostAgain.id, state: 'succeeded' }, 'the current claim still succeeds');
      t.equal(await jobs.succeed(lost), null, 'the stale one does not, even after');
    });

    test('endCovered ends the queued jobs of one kind and subject up to a position, and nothing else', async (t) => {
      const subject = randomUUID();
      const onSubject = (kind: string) => jobInputFor(kind, log.add('SourceRegistered', {}, subject));
      const [early, running, retrying, atLimit, later] = [onSubject('k'), onSubject('k'), onSubject('k'), onSubject('k'), onSubject('k')];
      const otherKind = onSubject('other');
      const otherSubject = jobInputFor('k', log.add());
      const scheduled = { ...onSubject('k'), triggerPosition: 0 };
      await jobs.enqueueMany([early, running, retrying, atLimit, later, otherKind, otherSubject, scheduled]);
      const idOf = (input: { kind: string; subjectId: string; triggerEventId: string }) => jobIdFor(input.kind, input.subjectId, input.triggerEventId);
      // One is running, one waits out a retry's backoff after a failed attempt.
      await db.knex('jobs').where({ id: idOf(running) }).update({ state: 'running' });
      await db.knex('jobs').where({ id: idOf(retrying) }).update({ attempts: 1, last_error: 'HTTP 503', next_attempt_at: new Date(Date.now() + 60_000) });

      t.equal(await jobs.endCovered('k', subject, atLimit.triggerPosition), 4, 'the scheduled job, the early one, the retrying one and the one at the position');
      for (const input of [scheduled, early, atLimit]) t.match(await jobs.get(idOf(input)), { state: 'succeeded', attempts: 0, lastError: null, finishedAt: String });
      t.match(await jobs.get(idOf(retrying)), { state: 'succeeded', attempts: 1, lastError: null }, 'a retry still due covered too, its attempt kept');
      t.match(await jobs.get(idOf(running)), { state: 'running' }, 'a running job is its worker’s to end');
      for (const input of [later, otherKind, otherSubject]) t.match(await jobs.get(idOf(input)), { state: 'queued' }, 'a later trigger, another kind or subject stays queued');
      t.equal(await jobs.endCovered('k', subject, atLimit.triggerPosition), 0, 'a second call finds nothing more');
      await t.rejects(jobs.endCovered('k', subject, -1), RangeError);
      await t.rejects(jobs.endCovered('', subject, 1), TypeError);
    });

    test('endCovered ends more queued jobs than one statement takes', async (t) => {
      const subject = randomUUID();
      const inputs = Array.from({ length: ENDED_PER_STATEMENT * 2 + 7 }, () => jobInputFor('many', log.add('SourceRegistered', {}, subject)));
      await jobs.enqueueMany(inputs);
      const last = Math.max(...inputs.map((input) => input.triggerPosition));
      t.equal(await jobs.endCovered('many', subject, last), inputs.length, 'every one, over three statements');
      const states = (await db.knex('jobs').where({ kind: 'many', subject_id: subject }).select('state').count({ n: '*' }).groupBy('state')) as Array<{ state: string; n: string | number }>;
      t.same(states.map((row) => ({ state: row.state, n: Number(row.n) })), [{ state: 'succeeded', n: inputs.length }]);
      t.equal(await jobs.endCovered('many', subject, last), 0);
    });

    test('fail: transient backs off, permanent and exhausted are final', async (t) => {
      const transient = await jobs.enqueue({ ...jobInputFor('k', log.add()), maxAttempts: 2 });
      const first = (await jobs.claim('k', 'w', { leaseMs: 1000 })) as ClaimedJob;
      t.equal(first.id, transient.id);
      const before = Date.now();
      const queued = await jobs.fail(first, { error: 'HTTP 503', permanent: false, retryDelayMs: 60_000 });
      t.match(queued, { state: 'queued', attempts: 1, lastError: 'HTTP 503', finishedAt: null, leaseUntil: null });
      const due = Date.parse(queued?.nextAttemptAt ?? '');
      t.ok(due >= before + 59_000 && due <= Date.now() + 61_000, 'due after the backoff');
      t.equal(await jobs.claim('k', 'w', { leaseMs: 1000 }), null, 'not claimable during its backoff');

      await db.knex('jobs').where({ id: transient.id }).update({ next_attempt_at: db.knex.fn.now() });
      const second = (await jobs.claim('k', 'w', { leaseMs: 1000 })) as ClaimedJob;
      t.equal(second.attempts, 2);
      const exhausted = await jobs.fail(second, { error: 'HTTP 503 again', permanent: false, retryDelayMs: 10 });
      t.match(exhausted, { state: 'failed', attempts: 2, lastError: 'HTTP 503 again' });
      t.ok(exhausted?.finishedAt, 'finished_at set');

      const permanent = await jobs.enqueue({ ...jobInputFor('k', log.add()), maxAttempts: 5 });
      const claim = (await jobs.claim('k', 'w', { leaseMs: 1000 })) as ClaimedJob;
      t.equal(claim.id, permanent.id);
      const failed = await jobs.fail(claim, { error: 'HTTP 404', permanent: true, retryDelayMs: 10 });
      t.match(failed, { state: 'failed', attempts: 1, lastError: 'HTTP 404' });

      const long = await jobs.enqueue(jobInputFor('k', log.add()));
      const longClaim = (await jobs.claim('k', 'w', { leaseMs: 1000 })) as ClaimedJob;
      t.equal(longClaim.id, long.id);
      const reason = 'the server closed the connection: 😀 quota exceeded';
      const truncated = await jobs.fail(longClaim, { error: `😀 ${'x'.repeat(10_000)}${reason}`, permanent: true, retryDelayMs: 0 });
      const lastError = truncated?.lastError ?? '';
      t.equal(runeLength(lastError), MAX_ATTEMPT_ERROR_CHARS, 'last_error is bounded, in characters, room left for a rescue\'s note');
      t.ok(lastError.startsWith('😀 xxx'), 'its start, the emoji whole');
      t.ok(lastError.endsWith(`xxx${reason}`), 'and the reason at its end');
      t.match(lastError, / … \(\d+ characters left out\) … /, 'what was cut is said between them');
      t.equal((await jobs.get(long.id))?.lastError, lastError, 'as stored');
      await t.rejects(jobs.fail(longClaim, { error: 'e', permanent: false, retryDelayMs: Number.NaN }), RangeError);
    });

    test('writes are fenced by the claim token', async (t) => {
      await jobs.enqueue(jobInputFor('k', log.add()));
      const claim = (await jobs.claim('k', 'w', { leaseMs: 1000 })) as ClaimedJob;
      const stranger = { id: claim.id, claimToken: randomUUID() };
      t.equal(await jobs.succeed(stranger), null);
      t.equal(await jobs.fail(stranger, { error: 'e', permanent: true, retryDelayMs: 0 }), null);
      t.same(await jobs.heartbeat([stranger.claimToken, claim.claimToken], 1000), new Set([claim.claimToken]));
      t.same(await jobs.heartbeat([], 1000), new Set());
      const done = await jobs.succeed(claim);
      t.match(done, { state: 'succeeded', lastError: null });
      t.ok(done?.finishedAt);
      t.equal(await jobs.succeed(claim), null, 'a second finish changes nothing');
      t.same(await jobs.heartbeat([claim.claimToken], 1000), new Set(), 'a finished job holds no lease');
    });

    test('heartbeat extends the lease', async (t) => {
      await jobs.enqueue(jobInputFor('k', log.add()));
      const claim = (await jobs.claim('k', 'w', { leaseMs: 50 })) as ClaimedJob;
      await sleep(20);
      // The renewed lease runs from the heartbeat: bracketed by the clock, not bounded by elapsed time.
      const beating = Date.now();
      await jobs.heartbeat([claim.claimToken], 60_000);
      const job = await jobs.get(claim.id);
      t.ok(Date.parse(job?.leaseUntil ?? '') >= beating + 60_000, 'lease renewed');
      t.ok(Date.parse(job?.heartbeatAt ?? '') > Date.parse(claim.heartbeatAt ?? ''), 'heartbeat_at advanced');
    });

    test('rescueOrphans requeues expired leases and stale heartbeats, and kills the exhausted', async (t) => {
      const expired = await jobs.enqueue(jobInputFor('k', log.add()));
      await jobs.claim('k', 'dead-worker', { leaseMs: 1 });
      const live = await jobs.enqueue(jobInputFor('k', log.add()));
      await jobs.claim('k', 'live-worker', { leaseMs: 60_000 });
      const exhausted = await jobs.enqueue({ ...jobInputFor('k', log.add()), maxAttempts: 1 });
      await jobs.claim('k', 'dead-worker', { leaseMs: 1 });
      const stale = await jobs.enqueue(jobInputFor('k', log.add()));
      await jobs.claim('k', 'stalled-worker', { leaseMs: 60_000 });
      await db.knex('jobs').where({ id: stale.id }).update({ heartbeat_at: db.knex.raw(`now() - interval '1 hour'`) });
      await sleep(10);

      const result = await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000 });
      t.same(result.requeued.map((job) => job.id).sort(), [expired.id, stale.id].sort());
      t.same(result.dead.map((job) => job.id), [exhausted.id]);
      t.match(await jobs.get(expired.id), { state: 'queued', attempts: 1, leaseUntil: null, lastError: /orphaned/ });
      t.match(await jobs.get(exhausted.id), { state: 'dead', lastError: /orphaned/ });
      t.match(await jobs.get(live.id), { state: 'running' }, 'a live lease is left alone');

      const byWorker = await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000, claimedBy: 'live-worker' });
      t.same(byWorker.requeued.map((job) => job.id), [live.id], 'a restarted worker reclaims its own jobs');

      await jobs.claim('k', 'another', { leaseMs: 60_000 });
      const everything = await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000, everyRunning: true });
      t.equal(everything.requeued.length, 1);
      t.same(await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000 }), { requeued: [], dead: [] });
      await t.rejects(jobs.rescueOrphans({ heartbeatTimeoutMs: -1 }), RangeError);
    });

    /** Fails attempt 1 of a new job (of a kind of its own) of `maxAttempts` with `error` and claims it again for `worker`. */
    const failedOnceThenClaimed = async (t: Test, maxAttempts: number, error: string, worker: string): Promise<ClaimedJob> => {
      const kind = `orphan-${randomUUID()}`;
      const job = await jobs.enqueue({ ...jobInputFor(kind, log.add()), maxAttempts });
      const first = (await jobs.claim(kind, 'w1', { leaseMs: 60_000 })) as ClaimedJob;
      t.match(await jobs.fail(first, { error, permanent: false, retryDelayMs: 0 }), { id: job.id, state: 'queued', attempts: 1 }, 'attempt 1 failed');
      const second = (await jobs.claim(kind, worker, { leaseMs: 60_000 })) as ClaimedJob;
      t.equal(second.id, job.id, 'attempt 2 claimed');
      return second;
    };

    test('rescueOrphans keeps the reason the attempt before failed with', async (t) => {
      const claim = await failedOnceThenClaimed(t, 2, 'the model server answered 500: out of memory', 'w2');
      const { dead } = await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000, claimedBy: 'w2' });
      t.same(dead.map((job) => job.lastError), [(await jobs.get(claim.id))?.lastError], 'the result shows it as stored');
      t.equal(
        (await jobs.get(claim.id))?.lastError,
        'orphaned: worker w2 stopped heartbeating during attempt 2; attempt 1 failed: the model server answered 500: out of memory',
      );
      t.match(await jobs.get(claim.id), { state: 'dead', attempts: 2 }, 'dead, its last attempt orphaned');

      const first = await jobs.enqueue(jobInputFor('orphan', log.add()));
      await jobs.claim('orphan', 'w3', { leaseMs: 60_000 });
      await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000, claimedBy: 'w3' });
      t.equal((await jobs.get(first.id))?.lastError, 'orphaned: worker w3 stopped heartbeating during attempt 1', 'a first attempt has no attempt before');
      await jobs.claim('orphan', 'w4', { leaseMs: 60_000 });
      await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000, claimedBy: 'w4' });
      t.equal((await jobs.get(first.id))?.lastError, 'orphaned: worker w4 stopped heartbeating during attempt 2', 'an orphaned attempt before has no reason to keep');
    });

    test('rescueOrphans carries the last real reason over repeated rescues, not a chain of notes', async (t) => {
      const reason = 'HTTP 500\nthe upstream said: stopped heartbeating during attempt 7; attempt 6 failed: no';
      const claim = await failedOnceThenClaimed(t, 4, reason, 'a');
      for (const [attempt, worker, next] of [[2, 'a', 'b'], [3, 'b', 'c'], [4, 'c', null]] as const) {
        await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000, claimedBy: worker });
        t.equal((await jobs.get(claim.id))?.lastError, `orphaned: worker ${worker} stopped heartbeating during attempt ${attempt}; attempt 1 failed: ${reason}`, `rescue of attempt ${attempt}`);
        if (next !== null) t.equal((await jobs.claim(claim.kind, next, { leaseMs: 60_000 }))?.id, claim.id);
      }
      t.match(await jobs.get(claim.id), { state: 'dead' });

      const later = await failedOnceThenClaimed(t, 5, 'first reason', 'x');
      await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000, claimedBy: 'x' });
      const third = (await jobs.claim(later.kind, 'y', { leaseMs: 60_000 })) as ClaimedJob;
      await jobs.fail(third, { error: 'second reason', permanent: false, retryDelayMs: 0 });
      await jobs.claim(later.kind, 'z', { leaseMs: 60_000 });
      await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000, claimedBy: 'z' });
      t.equal((await jobs.get(later.id))?.lastError, 'orphaned: worker z stopped heartbeating during attempt 4; attempt 3 failed: second reason', 'the latest failure, with its attempt');
    });

    test('rescueOrphans keeps no reason of the run before a retry by hand', async (t) => {
      const job = await jobs.enqueue(jobInputFor('orphan', log.add()));
      const claim = (await jobs.claim('orphan', 'w', { leaseMs: 60_000 })) as ClaimedJob;
      await jobs.fail(claim, { error: 'HTTP 404', permanent: true, retryDelayMs: 0 });
      t.equal((await jobs.retry(job.id)).status, 'requeued');
      await jobs.claim('orphan', 'again', { leaseMs: 60_000 });
      await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000, claimedBy: 'again' });
      t.equal((await jobs.get(job.id))?.lastError, 'orphaned: worker again stopped heartbeating during attempt 1');
    });

    test('a rescued reason stays within the bound of last_error', async (t) => {
      const reason = 'the statement failed: bind message has 70000 parameters 😀';
      const long = `insert 😀 ${'x'.repeat(20_000)} ${reason}`;
      const worker = `${'h'.repeat(64)}:4194304:abcdef12`;
      const claim = await failedOnceThenClaimed(t, 5, long, worker);
      const stored = boundedErrorMessage(long, MAX_ATTEMPT_ERROR_CHARS);
      t.equal((await jobs.get(claim.id))?.lastError, stored, 'attempt 1 stored its error bounded');
      await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000, claimedBy: worker });
      const lastError = (await jobs.get(claim.id))?.lastError ?? '';
      t.equal(lastError, `orphaned: worker ${worker} stopped heartbeating during attempt 2; attempt 1 failed: ${stored}`, 'the stored reason whole');
      t.ok(runeLength(lastError) <= MAX_TASK_ERROR_CHARS, `${runeLength(lastError)} characters at most ${MAX_TASK_ERROR_CHARS}`);
      t.ok(lastError.endsWith(reason), 'the reason at its end');
      t.equal(lastError.match(/characters left out/g)?.length, 1, 'one marker, the one of the stored reason');

      const hugeWorker = 'w'.repeat(500);
      const overlong = await failedOnceThenClaimed(t, 5, long, hugeWorker);
      await jobs.rescueOrphans({ heartbeatTimeoutMs: 60_000, claimedBy: hugeWorker });
      t.equal((await jobs.get(overlong.id))?.lastError, `orphaned: worker ${hugeWorker} stopped heartbeating during attempt 2`, 'a note that leaves no room keeps no reason');
    });

    test('retry requeues failed and dead jobs only', async (t) => {
      const failing = await jobs.enqueue({ ...jobInputFor('k', log.add()), maxAttempts: 1 });
      const claim = (await jobs.claim('k', 'w', { leaseMs: 1000 })) as ClaimedJob;
      await jobs.fail(claim, { error: 'boom', permanent: false, retryDelayMs: 0 });
      t.match(await jobs.get(failing.id), { state: 'failed', attempts: 1 });

      const retried = await jobs.retry(failing.id);
      t.equal(retried.status, 'requeued');
      t.match(await jobs.get(failing.id), { state: 'queued', attempts: 0, finishedAt: null });
      const again = await jobs.claim('k', 'w', { leaseMs: 1000 });
      t.equal(again?.id, failing.id, 'claimable at once');

      const notRetryable = await jobs.retry(failing.id);
      t.equal(notRetryable.status, 'not_retryable', 'a running job cannot be retried');
      t.equal((await jobs.retry(randomUUID())).status, 'not_found');
      t.equal((await jobs.retry('not-a-uuid')).status, 'not_found');
    });

    test('get, list and counts', async (t) => {
      const a = await jobs.enqueue(jobInputFor('embed_facts', log.add()));
      const b = await jobs.enqueue({ ...jobInputFor('embed_facts', log.add()), repositoryId: 'repo-2' });
      const c = await jobs.enqueue(jobInputFor('extract_concepts', log.add()));
      await jobs.claim('extract_concepts', 'w', { leaseMs: 1000 });

      t.equal(await jobs.get(randomUUID()), null);
      t.equal(await jobs.get('nope'), null, 'a malformed id is simply not found');
      t.equal((await jobs.list()).total, 3);
      t.same((await jobs.list({ kind: 'embed_facts' })).jobs.map((job) => job.id).sort(), [a.id, b.id].sort());
      t.same((await jobs.list({ repositoryId: 'repo-2' })).jobs.map((job) => job.id), [b.id]);
      t.same((await jobs.list({ state: 'running' })).jobs.map((job) => job.id), [c.id]);
      const subject = (await jobs.get(a.id))?.subjectId ?? '';
      t.same((await jobs.list({ subjectId: subject })).jobs.map((job) => job.id), [a.id]);
      const page = await jobs.list({ limit: 2, offset: 2 });
      t.equal(page.jobs.length, 1);
      t.equal(page.total, 3, 'total ignores paging');
      await t.rejects(jobs.list({ limit: 0 }), RangeError);
      await t.rejects(jobs.list({ limit: 5000 }), RangeError);
      await t.rejects(jobs.list({ offset: -1 }), RangeError);
      // @ts-expect-error: a state the API might receive from a query string
      await t.rejects(jobs.list({ state: 'paused' }), RangeError);

      t.same(await jobs.counts(), {
        embed_facts: { queued: 2, running: 0, succeeded: 0, failed: 0, dead: 0 },
        extract_concepts: { queued: 0, running: 1, succeeded: 0, failed: 0, dead: 0 },
      });
      t.same(await jobs.counts({ repositoryId: 'repo-2' }), {
        embed_facts: { queued: 1, running: 0, succeeded: 0, failed: 0, dead: 0 },
      });
      // Totals of a filter by repository, kind and state come from the kept counts; the others count rows.
      t.equal((await jobs.list({ repositoryId: 'repo-1', kind: 'embed_facts', state: 'queued' })).total, 1);
      t.equal((await jobs.list({ repositoryId: 'repo-1', state: 'queued' })).total, 1);
      t.equal((await jobs.list({ kind: 'embed_facts', state: 'running' })).total, 0);
      t.equal((await jobs.list({ kind: 'no_such_kind' })).total, 0);
      t.equal((await jobs.list({ repositoryId: 'repo-3' })).total, 0);
      t.equal((await jobs.list({ repositoryId: 'repo-1', subjectId: subject })).total, 1);
    });

    test('list pages after a position in its order, ties on the time and on the trigger position included', async (t) => {
      // One statement: one created_at for all; two events' jobs share each event's position.
      const [first, second] = [log.add(), log.add()];
      await jobs.enqueueMany(['embed_facts', 'extract_concepts', 'deduplicate_facts'].flatMap((kind) => [jobInputFor(kind, first), jobInputFor(kind, second)]));
      const third = log.add();
      const older = await jobs.enqueue(jobInputFor('embed_facts', third));
      // A microsecond before the six: not a tie.
      await db.knex.raw("UPDATE jobs SET created_at = (SELECT min(created_at) FROM jobs) - interval '1 microsecond' WHERE id = ?", [older.id]);
      const { count } = (await db.knex('jobs').whereNot({ id: older.id }).countDistinct({ count: 'created_at' }))[0] as { count: string | number };
      t.equal(Number(count), 1, 'the six share the time');
      const all = (await jobs.list()).jobs;
      t.same(all.map((job) => job.triggerPosition), [second, second, second, first, first, first, third].map((event) => event.globalPosition), 'newest first, then the latest trigger');
      t.same(all.slice(0, 3).map((job) => job.id), all.slice(0, 3).map((job) => job.id).sort(), 'then by id');
      t.equal(all.at(-1)?.id, older.id, 'a microsecond older is later in the list');
      t.equal((await jobs.list()).next, null, 'one page: no next');
      for (const limit of [1, 2, 3]) {
        const walked: string[] = [];
        let page = await jobs.list({ limit });
        walked.push(...page.jobs.map((job) => job.id));
        while (page.next !== null) {
          t.match(page.next, { at: /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/, position: /^\d+$/, id: page.jobs.at(-1)?.id });
          page = await jobs.list({ limit, after: page.next });
          walked.push(...page.jobs.map((job) => job.id));
        }
        t.same(walked, all.map((job) => job.id), `${limit} a page: the list, each job once`);
      }
      // A filter and a position together: the jobs of the filter after it.
      const firstPage = await jobs.list({ kind: 'embed_facts', limit: 1 });
      t.same((await jobs.list({ kind: 'embed_facts', after: firstPage.next! })).jobs.map((job) => job.id), all.filter((job) => job.kind === 'embed_facts').slice(1).map((job) => job.id));
    });

    test('a keyset page deep in a repository reads its own rows from an index in the list order, with no sort', async (t) => {
      // 6,000 jobs in each of two repositories: nine of a statement share the time, three of an
      // event the position (as the intake makes them); one in 8 failed, so the failed jobs are a
      // state's page among many other jobs and several pages of their own.
      await db.knex.raw(`INSERT INTO jobs (id, kind, repository_id, subject_id, trigger_event_id, trigger_position, state, created_at)
        SELECT gen_random_uuid(), 'kind-' || (i % 3), 'repo-' || (1 + i % 2), 'subject-' || i, gen_random_uuid(), i / 6,
               CASE WHEN i % 16 < 2 THEN 'failed' ELSE 'succeeded' END, timestamptz '2026-01-01' + (i / 18) * interval '1 second'
          FROM generate_series(0, 11999) AS i`);
      await db.knex.raw('ANALYZE jobs');
      const limit = 50;
      // The list's own statement, explained with its bindings as it ran.
      const explained = async (filter: { state?: JobState; at: number }) => {
        const after = (await jobs.list({ repositoryId: 'repo-1', state: filter.state, limit: 1, offset: filter.at })).next!;
        const statements: Array<{ sql: string; bindings: readonly unknown[] }> = [];
        const record = (query: { sql: string; bindings?: readonly unknown[] }) => statements.push({ sql: query.sql, bindings: query.bindings ?? [] });
        db.knex.on('query', record);
        const page = await jobs.list({ repositoryId: 'repo-1', state: filter.state, limit, after });
        db.knex.removeListener('query', record);
        const listed = statements.find((statement) => /list_at/.test(statement.sql))!;
        const { rows } = await db.knex.raw<{ rows: Array<{ 'QUERY PLAN': unknown }> }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${listed.sql.replace(/\$\d+/g, '?')}`, [...listed.bindings] as Knex.RawBinding[]);
        const output = rows[0]['QUERY PLAN'];
        const plan = (typeof output === 'string' ? JSON.parse(output) : output) as Array<{ Plan: PlanNode }>;
        return { page, nodes: planNodes(plan[0].Plan) };
      };
      for (const [name, filter, index] of [
        ['every state', { at: 3000 }, 'jobs_list_idx'],
        ['one state', { state: 'failed' as const, at: 300 }, 'jobs_list_state_idx'],
      ] as const) {
        const { page, nodes } = await explained(filter);
        t.equal(page.jobs.length, limit, `${name}: a whole page`);
        t.same(nodes.filter((node) => /Sort/.test(node['Node Type'])).map((node) => node['Node Type']), [], `${name}: nothing sorted`);
        const scans = nodes.filter((node) => node['Relation Name'] === 'jobs');
        t.match(scans, [{ 'Node Type': 'Index Scan', 'Index Name': index }], `${name}: one scan of ${index}`);
        const read = (scans[0]['Actual Rows'] ?? 0) + (scans[0]['Rows Removed by Filter'] ?? 0);
        // The page and the row that says a next one follows; the position's job and its earlier ties
        // (three of a repository share a position) at most besides.
        t.ok(read <= limit + 1 + 3, `${name}: the scan read ${read} rows, the page's and not the ones before its position`);
      }
    });

    test('the kept counts follow many changes, and a read that finds many rows folds them', async (t) => {
      const inputs = Array.from({ length: 600 }, (_, i) => ({ ...jobInputFor(i % 3 === 0 ? 'embed_facts' : 'extract_concepts', log.add()), repositoryId: i % 2 === 0 ? 'repo-1' : 'repo-2' }));
      for (const input of inputs) await jobs.enqueue(input);
      for (let i = 0; i < 120; i++) {
        const claim = await jobs.claim(i % 2 === 0 ? 'embed_facts' : 'extract_concepts', 'w', { leaseMs: 60_000 });
        if (!claim) continue;
        if (i % 5 === 0) await jobs.fail(claim, { error: 'no', permanent: true, retryDelayMs: 0 });
        else await jobs.succeed(claim);
      }
      const deltaRows = async () => Number((await db.knex('job_count_deltas').count<Array<{ n: string | number }>>('* as n'))[0].n);
      t.ok((await deltaRows()) > 500, 'the changes left more rows than a read keeps');
      const counted = await countedRows('repo-1');
      t.same(await jobs.counts({ repositoryId: 'repo-1' }), counted, 'the read that folds answers the rows counted');
      const kept = await deltaRows();
      t.ok(kept <= 2 * 2 * 5, `folded into one row per repository, kind and state (${kept})`);
      t.same(await jobs.counts({ repositoryId: 'repo-1' }), counted, 'and reads the same after');
      t.same(await jobs.counts(), await countedRows());
    });

    test('a database whose jobs predate the kept counts gets them counted by the migration', async (t) => {
      for (let i = 0; i < 4; i++) await jobs.enqueue(jobInputFor('embed_facts', log.add()));
      const claim = await jobs.claim('embed_facts', 'w', { leaseMs: 60_000 });
      if (claim) await jobs.succeed(claim);
      await db.knex.raw('DROP TABLE job_count_deltas');
      for (const event of ['insert', 'update', 'delete', 'truncate']) {
        await db.knex.raw(`DROP TRIGGER factlog_job_counts_${event} ON jobs`);
        await db.knex.raw(`DROP FUNCTION factlog_job_counts_${event}()`);
      }
      await migrateJobs(db.knex);
      t.same(await jobs.counts(), { embed_facts: { queued: 3, running: 0, succeeded: 1, failed: 0, dead: 0 } });
    });
  });
}

/** A node of PostgreSQL's EXPLAIN (FORMAT JSON) plan: the fields the tests read. */
interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows'?: number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

function planNodes(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(planNodes)];
}

