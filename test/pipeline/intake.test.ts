import t from 'tap';
import { createJobIntakeProjection } from '../../src/pipeline/intake.js';
import { backends, sleep, testStage, openJobsFixture } from './helpers.js';

const retrieve = testStage('retrieve_source', async () => undefined, ['SourceRegistered', 'SourceRefetchRequested']);
const embed = testStage('embed_facts', async () => undefined, ['FactsExtracted']);
const dedupe = testStage('deduplicate_facts', async () => undefined, ['FactsExtracted']);

t.test('the intake projection declares its triggers and owns no rebuildable table', async (t) => {
  const projection = createJobIntakeProjection([retrieve, embed, dedupe]);
  t.equal(projection.name, 'job-intake');
  t.same([...projection.eventTypes].sort(), ['FactsExtracted', 'SourceRefetchRequested', 'SourceRegistered']);
  t.same(projection.tables, [], 'jobs hold runtime state: a rebuild must not empty them');
  t.equal(createJobIntakeProjection([], { name: 'job-intake-b' }).name, 'job-intake-b');
  t.throws(() => createJobIntakeProjection([retrieve, retrieve]), /share the kind/);
  t.throws(() => createJobIntakeProjection([{ ...retrieve, kind: '' }]), TypeError);
});

for (const backend of backends) {
  t.test(`job intake on ${backend.name}`, async (t) => {
    const { db, jobs, log } = await openJobsFixture(t, backend);

    t.test('a trigger event enqueues one job per triggered stage, inside the transaction', async (t) => {
      const woken: string[][] = [];
      const projection = createJobIntakeProjection([retrieve, embed, dedupe], {
        afterCommit: (kinds) => woken.push([...kinds].sort()),
        maxAttempts: 4,
      });
      const registered = log.add('SourceRegistered');
      const extracted = log.add('FactsExtracted');
      const unrelated = log.add('ConceptCreated');
      await db.knex.transaction(async (trx) => {
        for (const event of [registered, extracted, unrelated]) await projection.apply(trx, event);
        const inside = await trx('jobs').count<{ count: string | number }[]>('* as count');
        t.equal(Number(inside[0]?.count), 3, 'visible inside the transaction');
        t.same(woken, [], 'nobody is woken before commit');
      });
      await sleep(0);
      t.same(woken, [['deduplicate_facts', 'embed_facts', 'retrieve_source']], 'one wake per committed batch');
      const { jobs: rows } = await jobs.list();
      t.same(rows.map((job) => job.kind).sort(), ['deduplicate_facts', 'embed_facts', 'retrieve_source']);
      const job = rows.find((row) => row.kind === 'retrieve_source');
      t.match(job, {
        subjectId: registered.data.sourceId,
        triggerEventId: registered.eventId,
        triggerPosition: registered.globalPosition,
        repositoryId: registered.repositoryId,
        correlationId: registered.correlationId,
        state: 'queued',
        maxAttempts: 4,
      });
    });

    t.test('rolling back the transaction leaves no job', async (t) => {
      const woken: string[][] = [];
      const projection = createJobIntakeProjection([retrieve], { afterCommit: (kinds) => woken.push([...kinds]) });
      const event = log.add('SourceRegistered');
      await t.rejects(
        db.knex.transaction(async (trx) => {
          await projection.apply(trx, event);
          throw new Error('the projection batch failed after intake');
        }),
        /batch failed/,
      );
      await sleep(0);
      t.equal((await jobs.list()).total, 0, 'no job without the checkpoint');
      t.same(woken, [], 'no wake for a rolled-back batch');
    });

    t.test('redelivery and rebuild re-enqueue only what is missing', async (t) => {
      const projection = createJobIntakeProjection([retrieve]);
      const first = log.add('SourceRegistered');
      const second = log.add('SourceRegistered');
      await db.knex.transaction((trx) => projection.apply(trx, first));
      const claim = await jobs.claim('retrieve_source', 'w', { leaseMs: 60_000 });
      t.equal(claim?.triggerEventId, first.eventId);
      if (claim) await jobs.succeed(claim);
      // A rebuild from position 0 replays both triggers.
      await db.knex.transaction(async (trx) => {
        await projection.apply(trx, first);
        await projection.apply(trx, second);
      });
      const rows = (await jobs.list()).jobs;
      t.equal(rows.length, 2);
      t.match(rows.find((job) => job.triggerEventId === first.eventId), { state: 'succeeded', attempts: 1 }, 'finished work is not redone');
      t.match(rows.find((job) => job.triggerEventId === second.eventId), { state: 'queued' });
    });

    t.test('a batch enqueues in one statement what its events would one by one', async (t) => {
      const woken: string[][] = [];
      const projection = createJobIntakeProjection([retrieve, embed, dedupe], { afterCommit: (kinds) => woken.push([...kinds].sort()) });
      const first = log.add('SourceRegistered');
      const events = [first, log.add('FactsExtracted'), log.add('ConceptCreated'), first];
      const statements: string[] = [];
      const record = (query: { sql: string }) => statements.push(query.sql);
      db.knex.on('query', record);
      try {
        await db.knex.transaction((trx) => (projection.applyBatch as NonNullable<typeof projection.applyBatch>)(trx, events));
      } finally {
        db.knex.removeListener('query', record);
      }
      t.equal(statements.filter((sql) => /INSERT INTO jobs/i.test(sql)).length, 1, 'one insert for the batch');
      await sleep(0);
      t.same(woken, [['deduplicate_facts', 'embed_facts', 'retrieve_source']]);
      const mine = (await jobs.list()).jobs.filter((job) => events.some((event) => event.eventId === job.triggerEventId));
      t.same(mine.map((job) => job.kind).sort(), ['deduplicate_facts', 'embed_facts', 'retrieve_source'], 'a repeated event adds no job');
      await db.knex.transaction((trx) => (projection.applyBatch as NonNullable<typeof projection.applyBatch>)(trx, events));
      await sleep(0);
      t.equal(woken.length, 1, 'a batch that enqueued nothing new wakes nobody');
    });

    t.test('a stage that ignores the event (no subject) gets no job', async (t) => {
      const picky = testStage('picky', async () => undefined, ['SourceRegistered']);
      const projection = createJobIntakeProjection([{ ...picky, subjectOf: () => null }]);
      await db.knex.transaction((trx) => projection.apply(trx, log.add('SourceRegistered')));
      t.equal((await jobs.list()).total, 0);
    });

    t.test('an event with a malformed id aborts the batch instead of enqueuing garbage', async (t) => {
      const projection = createJobIntakeProjection([retrieve]);
      const event = { ...log.add('SourceRegistered'), eventId: 'not-a-uuid' };
      await t.rejects(db.knex.transaction((trx) => projection.apply(trx, event)), TypeError);
      t.equal((await jobs.list()).total, 0);
    });
  });
}
