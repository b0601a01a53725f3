import t from 'tap';
import { randomUUID } from 'node:crypto';
import { migrateReadModels } from '../../projections/migrations/index.js';
import { createScheduler } from '../../src/pipeline/scheduler.js';
import { scheduledTriggerId } from '../../src/pipeline/jobs.js';
import { createStageRuntime } from '../../src/pipeline/runtime.js';
import { stageMetadata } from '../../src/pipeline/stages/common.js';
import { SCHEDULED_TRIGGER_TYPE, type JobContext, type Stage } from '../../src/pipeline/types.js';
import { backends, fastSettings, openJobsFixture, recordingLog } from './helpers.js';

t.test('createScheduler rejects bad periodic jobs', async (t) => {
  const knex = {} as never;
  const log = recordingLog();
  t.throws(() => createScheduler({ knex, log, periodic: [{ kind: '', intervalMs: 60_000 }] }), TypeError);
  t.throws(() => createScheduler({ knex, log, periodic: [{ kind: 'k', intervalMs: 10 }] }), RangeError);
  t.throws(() => createScheduler({ knex, log, periodic: [{ kind: 'k', intervalMs: Number.NaN }] }), RangeError);
  t.throws(
    () =>
      createScheduler({
        knex,
        log,
        periodic: [
          { kind: 'k', intervalMs: 60_000 },
          { kind: 'k', intervalMs: 120_000 },
        ],
      }),
    /twice/,
  );
});

t.test('scheduledTriggerId is a UUID derived from kind, repository and bucket', async (t) => {
  const id = scheduledTriggerId('refresh_concept_relations', 'repo-1', 42);
  t.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  t.equal(scheduledTriggerId('refresh_concept_relations', 'repo-1', 42), id, 'deterministic');
  t.not(scheduledTriggerId('refresh_concept_relations', 'repo-1', 43), id, 'a new bucket is a new job');
  t.not(scheduledTriggerId('refresh_concept_relations', 'repo-2', 42), id);
  t.not(scheduledTriggerId('deduplicate_facts', 'repo-1', 42), id);
});

for (const backend of backends) {
  t.test(`scheduler on ${backend.name}`, async (t) => {
    const { db, jobs } = await openJobsFixture(t, backend);
    await migrateReadModels(db.knex);
    const live = [randomUUID(), randomUUID()].sort();
    const gone = randomUUID();
    const row = (id: string, deleted: boolean) => ({
      id,
      name: id,
      slug: id.slice(0, 8),
      preset: 'general',
      tier: 'shared',
      created_by: 'user-1',
      created_at: new Date(),
      updated_at: new Date(),
      deleted_at: deleted ? new Date() : null,
    });
    await db.knex('repositories').insert([row(live[0], false), row(live[1], false), row(gone, true)]);
    const periodic = [
      { kind: 'refresh_concept_relations', intervalMs: 3_600_000 },
      { kind: 'deduplicate_facts', intervalMs: 7_200_000 },
    ];

    t.test('one job per kind and live repository per bucket, however many workers tick', async (t) => {
      const woken: string[][] = [];
      const first = createScheduler({ knex: db.knex, periodic, log: recordingLog(), onEnqueued: (kinds) => woken.push([...kinds].sort()) });
      const second = createScheduler({ knex: db.knex, periodic, log: recordingLog() });
      const counts = await Promise.all([first.tick(), second.tick(), first.tick()]);
      t.equal(
        counts.reduce((sum, count) => sum + count, 0),
        4,
        'two kinds × two live repositories, inserted once across workers',
      );
      t.equal(await first.tick(), 0, 'a later tick in the same bucket enqueues nothing');
      const { jobs: rows, total } = await jobs.list({ limit: 100 });
      t.equal(total, 4);
      t.same(
        rows.map((job) => `${job.kind}:${job.subjectId}`).sort(),
        periodic.flatMap((job) => live.map((id) => `${job.kind}:${id}`)).sort(),
        'the deleted repository gets no job',
      );
      for (const job of rows) {
        t.match(job, { triggerPosition: 0, repositoryId: job.subjectId, sourceId: null, reportId: null, state: 'queued' });
        t.equal(job.correlationId, job.triggerEventId, 'a scheduled run correlates by its derived trigger id');
      }
      t.same(woken.flat().filter((kind) => !periodic.some((job) => job.kind === kind)), [], 'only scheduled kinds are woken');
    });

    t.test('a bucket gets no job while the previous scheduled job of its kind and repository is queued or running', async (t) => {
      const [repository, other, third] = [randomUUID(), randomUUID(), randomUUID()];
      const scheduled = (kind: string, repositoryId: string, bucket: number) => {
        const triggerEventId = scheduledTriggerId(kind, repositoryId, bucket);
        return { kind, subjectId: repositoryId, triggerEventId, triggerPosition: 0, repositoryId, correlationId: triggerEventId };
      };
      const enqueue = async (...inputs: Array<ReturnType<typeof scheduled>>) =>
        (await jobs.enqueueMany(inputs, { skipWhilePending: true })).map((result) => result.inserted);
      const kind = 'summarize_concepts';

      t.same(await enqueue(scheduled(kind, repository, 1)), [true]);
      t.same(
        await enqueue(scheduled(kind, repository, 2), scheduled(kind, other, 2), scheduled('deduplicate_facts', repository, 2)),
        [false, true, true],
        'queued: the next bucket is skipped; another repository and another kind are not held back',
      );
      const claims = await jobs.claimMany(kind, 'worker-1', 10, { leaseMs: 60_000 });
      t.equal(claims.length, 2);
      t.same(await enqueue(scheduled(kind, repository, 3), scheduled(kind, other, 3)), [false, false], 'running: skipped too');
      const mine = claims.find((claim) => claim.subjectId === repository);
      const theirs = claims.find((claim) => claim.subjectId === other);
      if (!mine || !theirs) throw new Error('both repositories claimed');
      t.ok(await jobs.succeed(mine));
      t.ok(await jobs.fail(theirs, { error: 'boom', permanent: true, retryDelayMs: 0 }));
      t.same(await enqueue(scheduled(kind, repository, 4), scheduled(kind, other, 4)), [true, true], 'a succeeded or failed pass holds nothing back');

      // A job with a trigger event (summarize_concepts has both kinds) is not a scheduled pass.
      await jobs.enqueue({ kind, subjectId: third, triggerEventId: randomUUID(), triggerPosition: 7, repositoryId: third, correlationId: null });
      t.same(await enqueue(scheduled(kind, third, 4)), [true], 'an event-triggered job does not hold the schedule back');
      const plain = await jobs.enqueueMany([scheduled(kind, third, 5)]);
      t.equal(plain[0].inserted, true, 'without skipWhilePending a job is enqueued beside a pending one');
    });

    t.test('the runtime runs a scheduled job with a synthetic trigger', async (t) => {
      const seen: JobContext[] = [];
      const stage: Stage = {
        kind: 'refresh_concept_relations',
        triggers: [],
        subjectOf: () => null,
        async run(context) {
          seen.push(context);
        },
      };
      const runtime = createStageRuntime({
        db,
        store: {
          readAll: async () => {
            t.fail('a scheduled job reads no trigger from the log');
            return [];
          },
        },
        stages: [stage],
        settings: fastSettings(),
        log: recordingLog(),
      });
      t.teardown(() => runtime.stop({ timeoutMs: 0 }));
      const scheduler = createScheduler({
        knex: db.knex,
        periodic: [{ kind: 'refresh_concept_relations', intervalMs: 60_000 }],
        log: recordingLog(),
        onEnqueued: (kinds) => kinds.forEach((kind) => runtime.wake(kind)),
      });
      t.teardown(() => scheduler.stop());
      await runtime.start();
      await scheduler.start();
      const deadline = Date.now() + 5000;
      while (Date.now() < deadline) {
        const { total } = await jobs.list({ kind: 'refresh_concept_relations', state: 'succeeded', limit: 1 });
        if (total === live.length) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const { total } = await jobs.list({ kind: 'refresh_concept_relations', state: 'succeeded', limit: 1 });
      t.equal(total, live.length, 'both scheduled jobs ran and succeeded');
      t.equal(seen.length, live.length, 'each live repository got its run');
      const context = seen[0];
      t.equal(context.scheduled, true);
      t.equal(context.trigger.type, SCHEDULED_TRIGGER_TYPE);
      t.equal(context.trigger.globalPosition, 0);
      t.equal(context.trigger.streamId, `repository-${context.job.repositoryId}`);
      t.equal(context.trigger.repositoryId, context.job.repositoryId);
      t.same(context.trigger.data, { kind: 'refresh_concept_relations' });
      const metadata = stageMetadata(context);
      t.equal(metadata.causationId, null, 'no event in the log caused it');
      t.equal(metadata.correlationId, context.job.triggerEventId);
      t.equal(metadata.actor, 'system:refresh_concept_relations');
    });
  });
}
