import type { Config } from '../../config/types.js';
import type { EventStore } from '../../eventstore/port.js';
import { coalescingEventStore } from '../../eventstore/coalescing.js';
import { createPostgresEventStore } from '../../eventstore/postgres.js';
import { connectionLocation } from '../../db/database.js';
import type { EventSchemaRegistry } from '../../eventstore/schemas.js';
import type { Databases } from './databases.js';
import { errorMessage } from '../../util/errorMessage.js';

/**
 * The event store of `eventstore.backend`: PostgreSQL tables (PGlite or a server; migrated
 * beforehand with the other schemas, src/app/context.ts), or
 * EventStoreDB, whose client (gRPC and its protocol definitions, about 30 MB of memory) is loaded
 * only when it is configured; so are the other tiers' adapters (docs/architecture.md, "Wiring").
 */
export async function openEventStore(
  config: Config,
  schemas: EventSchemaRegistry,
  databases: Databases,
  { reach = true }: { reach?: boolean } = {},
): Promise<OpenedEventStore> {
  if (config.eventstore.backend === 'eventstoredb') {
    const { createEventStoreDbStore } = await import('../../eventstore/eventstoredb.js');
    const { connection_string: connectionString } = config.eventstore.eventstoredb;
    const store = createEventStoreDbStore({ connectionString, schemas });
    if (reach) await reachEventStoreDb(store, connectionString);
    return { store, oneConnection: false };
  }
  const storeDb = await databases.open(config.eventstore.database);
  return { store: createPostgresEventStore(storeDb, { schemas }), oneConnection: storeDb.kind === 'pglite' };
}

/**
 * Reaches EventStoreDB now (its client connects on first use), so that one it cannot reach is
 * named with the setting: the first read said only gRPC's `14 UNAVAILABLE: No connection
 * established. Last error: …`, naming neither EventStoreDB nor where the address came from (the
 * CLI's commands, and `serve`, which ended so after listening).
 */
async function reachEventStoreDb(store: EventStore, connectionString: string): Promise<void> {
  try {
    await store.headPosition();
  } catch (error) {
    await store.close().catch(() => undefined);
    const reason = errorMessage(error);
    throw new Error(
      `cannot use the EventStoreDB event store at ${connectionLocation(connectionString) ?? 'its connection string'} (eventstore.eventstoredb.connection_string, EVENTSTORE_EVENTSTOREDB_CONNECTION_STRING; its password left out): ${reason}`,
      { cause: error },
    );
  }
}

export interface OpenedEventStore {
  store: EventStore;
  /** Whether every caller queues for one connection (PGlite). */
  oneConnection: boolean;
}

/**
 * The store the pipeline's stages use. On one connection their jobs' single-stream reads and
 * appends go together (coalescingEventStore): dozens of jobs at once then queue a statement per
 * step instead of one each. A server's pool runs them side by side, so there they go as called.
 */
export function pipelineEventStore(opened: OpenedEventStore, store: EventStore): EventStore {
  return opened.oneConnection ? coalescingEventStore(store) : store;
}
