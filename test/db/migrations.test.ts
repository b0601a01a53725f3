import t from 'tap';
import { readModelMigrator } from '../../projections/migrations/index.js';
import { applyMigrations, describeMigrations, pendingMigrations, relationsExist } from '../../src/db/migrations.js';
import { eventStoreMigrator } from '../../src/eventstore/postgres.js';
import { jobsMigrator } from '../../src/pipeline/jobs.js';
import { openMigratedDatabase } from '../helpers/migratedDatabase.js';

t.test('one pending check for every schema: each migrator names the steps a database lacks, and applying them empties the list', async (t) => {
  const db = await openMigratedDatabase();
  t.teardown(() => db.close());
  const migrators = [readModelMigrator, jobsMigrator, eventStoreMigrator];
  for (const migrator of migrators) t.same(await pendingMigrations(db.knex, migrator), [], `${migrator.schema}: a migrated database lacks nothing`);

  // What older releases left: a read-model migration not applied, jobs' and events' statistics kept, an older append function.
  await db.knex('schema_migrations').where({ id: '020_oauth_answered_requests' }).delete();
  await db.knex.raw('DROP TABLE oauth_answered_requests');
  await db.knex.raw('ALTER TABLE jobs ALTER COLUMN attempts SET STATISTICS -1');
  await db.knex.raw('DROP INDEX jobs_list_idx, jobs_list_state_idx');
  await db.knex.raw('CREATE INDEX jobs_repository_idx ON jobs (repository_id, created_at DESC)');
  await db.knex.raw('DROP TABLE streams');
  await db.knex.raw(`CREATE OR REPLACE FUNCTION factlog_append_to_streams(p_appends jsonb)
    RETURNS TABLE (out_index integer, out_conflict boolean, out_actual integer, out_position bigint, out_version integer, out_time timestamptz)
    LANGUAGE plpgsql AS $fn$ BEGIN RETURN; END $fn$`);
  const before = await db.knex.raw(`SELECT count(*)::int AS n FROM pg_class`);

  const pending = [];
  for (const migrator of migrators) pending.push({ schema: migrator.schema, ids: await pendingMigrations(db.knex, migrator) });
  t.same(pending, [
    { schema: 'read models', ids: ['020_oauth_answered_requests'] },
    { schema: 'jobs', ids: ['jobs_planner_statistics', 'jobs_list_order'] },
    { schema: 'event store', ids: ['streams', 'factlog_append_to_streams'] },
  ]);
  t.equal(describeMigrations(pending), 'read models: 020_oauth_answered_requests; jobs: jobs_planner_statistics, jobs_list_order; event store: streams, factlog_append_to_streams');
  t.same(await db.knex.raw(`SELECT count(*)::int AS n FROM pg_class`), before, 'looking changed nothing');

  for (const [i, migrator] of migrators.entries()) t.same(await applyMigrations(db.knex, migrator), pending[i].ids, `${migrator.schema}: applies what was pending`);
  for (const migrator of migrators) t.same(await pendingMigrations(db.knex, migrator), [], `${migrator.schema}: nothing left`);
  t.ok(await relationsExist(db.knex, 'jobs_list_idx', 'jobs_list_state_idx'), "the jobs list's indexes are made");
  t.notOk(await relationsExist(db.knex, 'jobs_repository_idx'), 'and the one jobs_list_idx begins with is gone');
  for (const migrator of migrators) t.same(await applyMigrations(db.knex, migrator), [], `${migrator.schema}: applying again does nothing`);
});
