import type { Knex } from 'knex';
import { migrateEventStore } from '../../src/eventstore/postgres.js';
import { migrateJobs } from '../../src/pipeline/jobs.js';
import { migrateProjectionCheckpoints } from '../../src/projection/runner.js';
import { migrateReadModels } from '../../projections/migrations/index.js';

/**
 * Every schema the embedded tier keeps in its one database: what createAppContext, the event
 * store's wiring and the projection runner each migrate when a service starts. Test fixtures
 * that build a database without a service migrate it here, so a new schema is added once.
 */
export async function migrateEmbeddedSchema(knex: Knex): Promise<void> {
  await migrateEventStore(knex);
  await migrateReadModels(knex);
  await migrateJobs(knex);
  await migrateProjectionCheckpoints(knex);
}
