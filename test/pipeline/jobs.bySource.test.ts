import t from 'tap';
import { randomUUID } from 'node:crypto';
import { migrateJobs, unfilteredJobColumns } from '../../src/pipeline/jobs.js';
import { createJobIntakeProjection, sourceIdOf } from '../../src/pipeline/intake.js';
import type { RecordedEvent } from '../../src/eventstore/envelope.js';
import { backends, FakeLog, jobInputFor, openJobsFixture, testStage } from './helpers.js';

/** An event on any stream, for intake's source/report rules. */
function eventOn(log: FakeLog, streamId: string, type: string, data: Record<string, unknown>): RecordedEvent {
  const event = log.add(type, data);
  event.streamId = streamId;
  return event;
}

t.test('sourceIdOf: the source stream, else data.source_id, else null', async (t) => {
  const log = new FakeLog();
  const source = randomUUID();
  t.equal(sourceIdOf(eventOn(log, `source-${source}`, 'FactsExtracted', {})), source);
  t.equal(sourceIdOf(eventOn(log, `fact-${randomUUID()}`, 'FactMergedInto', { source_id: source })), source);
  t.equal(sourceIdOf(eventOn(log, `fact-${randomUUID()}`, 'FactMergedInto', { source_id: null })), null);
  t.equal(sourceIdOf(eventOn(log, `concept-${randomUUID()}`, 'ConceptCreated', { source_id: '' })), null);
  t.equal(sourceIdOf(eventOn(log, `repository-${randomUUID()}`, 'ContextMigrationRequested', {})), null);
});

for (const backend of backends) {
  t.test(`jobs by source and report on ${backend.name}`, async (t) => {
    const { db, jobs, log } = await openJobsFixture(t, backend);

    t.test('the migration adds the columns to an existing table, and runs again harmlessly', async (t) => {
      await db.knex.raw('ALTER TABLE jobs DROP COLUMN source_id, DROP COLUMN report_id');
      await migrateJobs(db.knex);
      await migrateJobs(db.knex);
      const columns = await db.knex.raw<{ rows: Array<{ column_name: string }> }>(
        `SELECT column_name FROM information_schema.columns WHERE table_name = 'jobs' AND column_name IN ('source_id', 'report_id') ORDER BY column_name`,
      );
      t.same(columns.rows.map((row) => row.column_name), ['report_id', 'source_id']);
    });

    t.test('ANALYZE keeps no statistics of the columns no statement filters on', async (t) => {
      // A table migrated before the setting existed: every column with statistics.
      await db.knex.raw(`ALTER TABLE jobs ${unfilteredJobColumns.map((column) => `ALTER COLUMN ${column} SET STATISTICS -1`).join(', ')}`);
      for (let n = 0; n < 30; n++) await jobs.enqueue(jobInputFor('fetch_source', log.add('SourceAdded', { sourceId: `source-${n}` })));
      await migrateJobs(db.knex);
      await migrateJobs(db.knex); // again: leaves the setting as it is
      await db.knex.raw('ANALYZE jobs');
      const { rows } = (await db.knex.raw(`SELECT attname FROM pg_stats WHERE tablename = 'jobs' ORDER BY attname`)) as { rows: Array<{ attname: string }> };
      const analyzed = rows.map((row) => row.attname);
      t.same(analyzed.filter((column) => (unfilteredJobColumns as readonly string[]).includes(column)), [], 'none of the unfiltered columns');
      for (const column of ['id', 'kind', 'state', 'subject_id', 'repository_id', 'next_attempt_at', 'trigger_position', 'created_at', 'claim_token']) {
        t.ok(analyzed.includes(column), `${column} has statistics`);
      }
    });

    if (backend.name === 'postgres') {
      t.test('on a migrated table the migration takes no lock: a node joining busy workers does not deadlock', async (t) => {
        // A worker's open transaction holds a lock on jobs, as claims do; ALTER TABLE would wait for it.
        let release!: () => void;
        const held = new Promise<void>((resolve) => (release = resolve));
        let locked!: () => void;
        const hasLock = new Promise<void>((resolve) => (locked = resolve));
        const worker = db.knex.transaction(async (trx) => {
          await trx.raw('LOCK TABLE jobs IN ROW EXCLUSIVE MODE');
          locked();
          await held;
        });
        await hasLock;
        try {
          await migrateJobs(db.knex);
          t.pass('migrated while a worker holds its lock');
        } finally {
          release();
          await worker;
        }
      });
    }

    t.test('intake fills source_id and report_id; list and countsFor filter by them', async (t) => {
      const sourceA = randomUUID();
      const sourceB = randomUUID();
      const report = randomUUID();
      const bySourceOf = testStage('cleanup_facts', async () => undefined, ['FactMergedInto']);
      const explicit = { ...testStage('extract_concepts', async () => undefined, ['FactsExtracted']), sourceOf: () => sourceB };
      const onSource = testStage('embed_facts', async () => undefined, ['FactsExtracted']);
      const onReport = testStage('annotate_report', async () => undefined, ['ReportSubmitted']);
      const projection = createJobIntakeProjection([bySourceOf, explicit, onSource, onReport]);
      const extracted = eventOn(log, `source-${sourceA}`, 'FactsExtracted', {});
      const merged = eventOn(log, `fact-${randomUUID()}`, 'FactMergedInto', { source_id: sourceA });
      const submitted = eventOn(log, `report-${report}`, 'ReportSubmitted', {});
      await db.knex.transaction(async (trx) => {
        for (const event of [extracted, merged, submitted]) await projection.apply(trx, event);
      });
      const all = await jobs.list({ limit: 100 });
      const byKind = Object.fromEntries(all.jobs.map((job) => [job.kind, job]));
      t.equal(byKind.embed_facts.sourceId, sourceA, 'from the source stream');
      t.equal(byKind.extract_concepts.sourceId, sourceB, "the stage's sourceOf wins");
      t.equal(byKind.cleanup_facts.sourceId, sourceA, 'from data.source_id');
      t.equal(byKind.annotate_report.sourceId, null);
      t.equal(byKind.annotate_report.reportId, report, 'from the report stream');
      t.equal(byKind.embed_facts.reportId, null);

      const ofA = await jobs.list({ repositoryId: 'repo-1', sourceId: sourceA, limit: 1, offset: 0 });
      t.equal(ofA.total, 2);
      t.equal(ofA.jobs.length, 1, 'paged');
      t.equal((await jobs.list({ sourceId: sourceA, limit: 10, offset: 1 })).jobs.length, 1);
      t.equal((await jobs.list({ reportId: report })).total, 1);
      t.equal((await jobs.list({ sourceId: sourceA, kind: 'embed_facts', state: 'queued' })).total, 1);
      t.equal((await jobs.list({ sourceId: sourceA, state: 'failed' })).total, 0);
      await t.rejects(jobs.list({ state: 'sleeping' as never }), RangeError);

      const counts = await jobs.countsFor({ repositoryId: 'repo-1', sourceId: sourceA });
      t.same(counts, {
        cleanup_facts: { queued: 1, running: 0, succeeded: 0, failed: 0, dead: 0 },
        embed_facts: { queued: 1, running: 0, succeeded: 0, failed: 0, dead: 0 },
      });
      t.same(Object.keys(await jobs.countsFor({ repositoryId: 'repo-1', reportId: report })), ['annotate_report']);
      t.same(await jobs.countsFor({ repositoryId: 'another-repo' }), {});
      await t.rejects(jobs.countsFor({ repositoryId: '' }), TypeError);

      // What the tasks API's `complete` starts from (src/read/tasks.ts): nothing queued or running.
      const pending = async (sourceId: string) =>
        Object.values(await jobs.countsFor({ repositoryId: 'repo-1', sourceId })).reduce((sum, byState) => sum + byState.queued + byState.running, 0);
      t.equal(await pending(sourceA), 2, 'jobs are queued');
      const claimed = await jobs.claim('embed_facts', 'worker-1', { leaseMs: 60_000 });
      t.ok(claimed);
      await jobs.succeed(claimed!);
      t.equal(await pending(sourceA), 1, 'cleanup is still queued');
      const cleanup = await jobs.claim('cleanup_facts', 'worker-1', { leaseMs: 60_000 });
      t.equal(await pending(sourceA), 1, 'a running job is not done');
      await jobs.fail(cleanup!, { error: 'boom', permanent: true, retryDelayMs: 0 });
      t.equal(await pending(sourceA), 0, 'failed counts as finished');
      t.equal(await pending(randomUUID()), 0, 'a source without jobs has none pending');
    });
  });
}
