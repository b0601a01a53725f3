import type { Config } from '../../config/types.js';
import type { EventStore } from '../../eventstore/port.js';
import { createPostgresEventStore, migrateEventStore } from '../../eventstore/postgres.js';
import type { EventSchemaRegistry } from '../../eventstore/schemas.js';
import type { Databases } from './databases.js';

/**
 * The event store of `eventstore.backend`: PostgreSQL tables (PGlite or a server), migrated, or
 * EventStoreDB, whose client (gRPC and its protocol definitions, about 30 MB of memory) is loaded
 * only when it is configured; so are the other tiers' adapters (docs/architecture.md, "Wiring").
 */
export async function openEventStore(config: Config, schemas: EventSchemaRegistry, databases: Databases): Promise<EventStore> {
  if (config.eventstore.backend === 'eventstoredb') {
    const { createEventStoreDbStore } = await import('../../eventstore/eventstoredb.js');
    return createEventStoreDbStore({ connectionString: config.eventstore.eventstoredb.connection_string, schemas });
  }
  const storeDb = await databases.open(config.eventstore.database);
  await migrateEventStore(storeDb.knex);
  return createPostgresEventStore(storeDb, { schemas });
}
