import t from 'tap';
import { openDatabase } from '../../src/db/database.js';
import { migrateEventStore } from '../../src/eventstore/postgres.js';
import { migrateJobs } from '../../src/pipeline/jobs.js';
import { migrateReadModels } from '../../projections/migrations/index.js';
import { scratchPostgresWithSecondPool } from '../helpers/scratchPostgres.js';

t.test('nodes starting at once on a new database: one applies each step, the others find it applied', async (t) => {
  const { scratch, second } = await scratchPostgresWithSecondPool(t, 'migrate_race', 4);
  const url = (scratch.knex.client.config.connection as { connectionString: string }).connectionString;
  const more = await Promise.all([openDatabase({ kind: 'postgres', url, maxConns: 4 }), openDatabase({ kind: 'postgres', url, maxConns: 4 })]);
  t.teardown(() => Promise.all(more.map((db) => db.close())));
  const nodes = [scratch, second, ...more];
  // Each node asks first whether the schema is newer (outside the lock), as a starting node does:
  // that left the catalogue cache of every waiting node saying "no schema_migrations".
  const readModels = await Promise.all(nodes.map((db) => migrateReadModels(db.knex)));
  t.equal(readModels.flat().length, new Set(readModels.flat()).size, 'no read-model migration applied twice');
  t.ok(readModels.some((applied) => applied.length > 0), 'one node applied them');
  await Promise.all(nodes.map((db) => migrateEventStore(db.knex)));
  await Promise.all(nodes.map((db) => migrateJobs(db.knex)));
  t.same(await Promise.all(nodes.map((db) => migrateReadModels(db.knex))), nodes.map(() => []), 'afterwards nothing is pending on any node');
});
