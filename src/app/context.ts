import pino, { type Logger } from 'pino';
import type { Config } from '../config/types.js';
import type { AppContext } from './appContext.js';
import { databaseOptions, dataPaths, publicBaseUrl } from '../config/derived.js';
import { checkSecrets } from '../config/load.js';
import { trustConfiguredCertificates } from '../config/tls.js';
import type { Database, DatabaseOptions } from '../db/database.js';
import { namedLocks } from '../db/namedLock.js';
import { EventSchemaRegistry } from '../eventstore/schemas.js';
import type { EventStore } from '../eventstore/port.js';
import { readModelMigrator, refuseNewerSchema } from '../../projections/migrations/index.js';
import { applyMigrations, describeMigrations, pendingMigrations, PendingMigrationsError, type Migrator, type SchemaMigrations } from '../db/migrations.js';
import { healConceptTwins } from './conceptTwins.js';
import { eventStoreMigrator } from '../eventstore/postgres.js';
import { readModelProjections } from '../../projections/index.js';
import { createSearchIndexProjection } from '../../projections/searchIndex.js';
import { JobRepository, jobsMigrator } from '../pipeline/jobs.js';
import type { Leadership } from '../bus/leader.js';
import { createFileAssetStore } from '../storage/assets.js';
import type { ClientDocumentFetch } from '../auth/oauth/clientDocuments.js';
import { createPermissionAudit } from './audit.js';
import { bootstrap, defaultAdminToSeed } from './bootstrap.js';
import { createRepositoryFence } from './repositoryFence.js';
import { createCommandBus, settleWaitMs } from './commands.js';
import { createLockMarks } from './lockMarks.js';
import { createMetrics } from './metrics.js';
import { createRepositoryService } from './repositories.js';
import { createIdempotencyStore } from './idempotency.js';
import { instrumentEventStore } from './instrumentedStore.js';
import { openBus, relayedPosition, startRelay } from './wiring/bus.js';
import { createDatabases, type Databases } from './wiring/databases.js';
import { openEventStore, pipelineEventStore, type OpenedEventStore } from './wiring/eventStore.js';
import { createIdentity, withSigningSecret, createTokens } from './wiring/identity.js';
import { createOAuth } from './wiring/oauth.js';
import { createPipeline } from './wiring/pipeline.js';
import { createProjectionRunner } from './wiring/projections.js';
import { createChatModel, createDocumentExtractor, createEmbedder } from './wiring/providers.js';
import type { ModelWorkerOptions } from '../providers/modelWorkers/models.js';
import { openSearch } from './wiring/search.js';

export interface ContextOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  logger?: Logger;
  /** Run pipeline workers in this process (default true). */
  workers?: boolean;
  /**
   * `serve --role`: `api` serves HTTP only, `worker` runs projections, stages and the relay,
   * `all` both (default). On the embedded tier (`bus.backend: log`) an API process still runs its projections,
   * since no other process can.
   */
  role?: 'api' | 'worker' | 'all';
  /** The built-in models' worker threads (test services start them at the first call). */
  localModels?: ModelWorkerOptions;
  /** How Client ID Metadata Documents are fetched (default: the HTTP fetcher; tests serve them locally). */
  clientDocumentFetch?: ClientDocumentFetch;
  /** How a configured database is opened (default: openDatabase; test services take emptied ones kept from earlier services). */
  openDatabase?: (options: DatabaseOptions) => Promise<Database>;
  /**
   * What a database whose schema is behind this release gets. `migrate` (the default: `serve`,
   * `factlog migrate`) applies the migrations it lacks. `refuse` throws PendingMigrationsError
   * naming them before anything is written (CLI commands that change data). `read-only` refuses
   * the same way, opens an embedded database without ever writing it (src/db/pgliteSnapshot.ts)
   * and a server's in read-only transactions, installing nothing (src/db/database.ts), and stores
   * no signing secret (CLI commands that only read: a role with SELECT rights, or a replica, runs them).
   */
  migrations?: 'migrate' | 'refuse' | 'read-only';
}

/**
 * The composition root: opens the databases, migrates them, and wires every port to its adapter.
 * Each concern's choice of adapter lives in `src/app/wiring/` (docs/architecture.md, "Wiring").
 */
export async function createAppContext(configured: Config, options: ContextOptions = {}): Promise<AppContext> {
  const cwd = options.cwd ?? process.cwd();
  const log = options.logger ?? pino({ level: configured.logging.level });
  checkSecrets(configured, { warn: (message: string) => log.warn(message) });
  trustConfiguredCertificates(configured, cwd, { warn: (message) => log.warn(message) });
  const role = options.role ?? (options.workers === false ? 'api' : 'all');
  const runWorkers = role !== 'api';
  // On the embedded tier no other process can run the projections, so an API process runs them too.
  const runProjections = role !== 'api' || configured.bus.backend === 'log';

  const mode = options.migrations ?? 'migrate';
  // A refusal leaves an embedded directory as it was: opened to write, PostgreSQL writes it even
  // to look (its control file, a checkpoint), so the schemas are checked on a read-only open first.
  if (mode === 'refuse' && databaseOptions(configured, configured.readmodels.database, cwd).kind === 'pglite') {
    const probe = createDatabases(configured, cwd, options.openDatabase, { readOnly: true });
    try {
      await migrateSchemas(configured, probe, await probe.open(configured.readmodels.database), 'refuse');
    } finally {
      await probe.close();
    }
  }
  const databases = createDatabases(configured, cwd, options.openDatabase, { readOnly: mode === 'read-only' });
  let db: Database;
  let migrationsApplied: SchemaMigrations[];
  try {
    db = await databases.open(configured.readmodels.database);
    migrationsApplied = await migrateSchemas(configured, databases, db, mode);
  } catch (error) {
    await databases.close();
    throw error;
  }
  if (migrationsApplied.some((schema) => schema.ids.length > 0)) {
    log.info({ migrations: migrationsApplied }, `migrated the database: ${describeMigrations(migrationsApplied)}`);
  }
  const config = await withSigningSecret(configured, db, log, { readOnly: mode === 'read-only' });
  const schemas = await EventSchemaRegistry.load();
  const jobs = new JobRepository(db.knex);
  // On the bus tier: where the relay has published the log through, whichever node relays.
  const publishedPosition = config.bus.backend === 'kafka' ? relayedPosition(config, db) : undefined;
  const metrics = createMetrics({
    projectionStatus: () => projections.status(),
    jobCounts: () => jobs.counts(),
    relayLag: publishedPosition && (async () => Math.max(0, (await store.headPosition()) - (await publishedPosition()))),
  });
  // `factlog migrate` (no workers, migrating) has nothing to do on EventStoreDB: it is not reached for.
  const openedStore = await openEventStore(config, schemas, databases, { reach: !(options.workers === false && mode === 'migrate') }).catch(async (error: unknown) => {
    await databases.close();
    throw error;
  });
  const store = instrumentEventStore(openedStore.store, metrics);
  const assets = createFileAssetStore(dataPaths(config, cwd).assetsDir);
  const chat = createChatModel(config, { localModels: options.localModels });
  const embedder = createEmbedder(config, { localModels: options.localModels });
  const documents = createDocumentExtractor(config);
  const search = await openSearch(config, db, embedder, log);

  const pipeline = createPipeline({
    config,
    db,
    store,
    deps: { config, store: pipelineEventStore(openedStore, store), knex: db.knex, assets, search: search.index, chat, embedder, documents, locks: namedLocks(db) },
    runWorkers,
    log,
  });
  const bus = await openBus(config, schemas, log);
  const projections = createProjectionRunner({
    store,
    db,
    bus,
    // Both backends: on PostgreSQL the search-index projection writes vectors (pgvector) and statuses in its transaction.
    projections: [...readModelProjections, pipeline.intake, createSearchIndexProjection(search.index)],
    rebuildStrategies: search.rebuildStrategies({ store, db }),
    groupPrefix: config.bus.kafka.topic_prefix,
    publishedPosition,
    log,
  });
  // The fence asks the identity service, made with the bus: it is only called once both exist.
  const fence = createRepositoryFence({ db, roleAssignments: (userId) => identity.roleAssignments(userId) });
  // Every named lock of the database waits for what its last holder left unprojected (src/app/lockMarks.ts).
  const lockMarks = createLockMarks({ db, projections, waitMs: settleWaitMs(config.server) });
  const commands = createCommandBus(store, (write) => projections.settle(write, settleWaitMs(config.server)), log, fence, lockMarks);
  const tokens = createTokens(config);
  const identity = createIdentity(config, { db, store, commands, log, tokens });
  const oauth = createOAuth(config, { db, commands, tokens, identity, clientDocumentFetch: options.clientDocumentFetch });
  const audit = createPermissionAudit({ knex: db.knex, log: log.child({ component: 'audit' }), settings: { retentionDays: config.audit.retention_days } });
  const repositories = createRepositoryService({ db, commands, defaultPreset: config.default_repository_preset });
  const { runtime, scheduler } = pipeline;
  let relay: Leadership | null = null;
  // Checked once, by checkBootstrap() before serve listens or else by start().
  let defaultAdmin: ReturnType<typeof defaultAdminToSeed> | undefined;
  const checkedDefaultAdmin = () => (defaultAdmin ??= defaultAdminToSeed(config, options.env ?? process.env, { db, log }));

  return {
    config,
    log,
    publicUrl: publicBaseUrl(config),
    db,
    migrationsApplied,
    store,
    schemas,
    assets,
    commands,
    identity,
    tokens,
    oauth,
    audit,
    repositories,
    idempotency: createIdempotencyStore(db.knex),
    search: search.index,
    hybrid: search.hybrid,
    chat,
    embedder,
    jobs,
    projections,
    runtime,
    metrics,
    wakeWorkers: () => runtime.wake(),
    async checkBootstrap() {
      await checkedDefaultAdmin();
    },
    async start() {
      if (runWorkers) relay = await startRelay(config, { store, schemas, db, log });
      if (runProjections) await projections.start();
      await bootstrap(config, await checkedDefaultAdmin(), { identity, repositories, db, log });
      if (runWorkers) await healConceptTwins(db.knex, store, log);
      if (runWorkers) await runtime.start();
      await scheduler?.start();
      if (runWorkers) await audit.startRetention();
    },
    async close(onStep) {
      const parts: Array<[string, () => Promise<void> | undefined]> = [
        ['scheduler', () => scheduler?.stop()],
        ['stage runtime', () => runtime.stop()],
        ['projections', () => projections.stop()],
        ['relay', () => relay?.stop()],
        ['permission audit', () => audit.close()],
        ['bus', () => bus?.close()],
        ['search', () => search.close()],
        ['event store', () => store.close()],
        ['databases', () => databases.close()],
        // The built-in models' and document extraction's worker threads.
        ['chat model', () => chat.close?.()],
        ['embedder', () => embedder?.close?.()],
        ['document extraction', () => documents.close()],
      ];
      for (const [name, stop] of parts) {
        onStep?.(name);
        await stop();
      }
    },
  };
}

/** The event log alone, opened to read: what `factlog events tail` and `events copy` need. */
export interface EventLogReader {
  config: Config;
  log: Logger;
  store: EventStore;
  /** The event types and their Avro schemas (`schemas/events/`): what the log may hold. */
  schemas: EventSchemaRegistry;
  /** Closes the store and its database (releasing an embedded directory's lock). */
  close(): Promise<void>;
}

/**
 * Opens the event store of `eventstore.backend` and nothing else, to read (as createAppContext's
 * `read-only`: nothing migrated or written, pending migrations refused, naming them), through the
 * same wiring as createAppContext (openEventStore on createDatabases). Where the log has a
 * database of its own (a PostgreSQL server's, or EventStoreDB) the read models' database is
 * neither opened nor, when embedded, locked: `serve` can start on it while a tail follows the
 * log, and the CLI does not pay its open. Where the log shares the read models' database (the
 * embedded tier) that database is opened and its directory locked as by createAppContext, and
 * every schema in it checked: one database, one release.
 */
export async function openEventLogReader(configured: Config, options: Pick<ContextOptions, 'cwd' | 'logger' | 'openDatabase'> = {}): Promise<EventLogReader> {
  const cwd = options.cwd ?? process.cwd();
  const log = options.logger ?? pino({ level: configured.logging.level });
  checkSecrets(configured, { warn: (message: string) => log.warn(message) });
  trustConfiguredCertificates(configured, cwd, { warn: (message) => log.warn(message) });
  const databases = createDatabases(configured, cwd, options.openDatabase, { readOnly: true });
  let schemas: EventSchemaRegistry;
  let opened: OpenedEventStore;
  try {
    if (configured.eventstore.backend !== 'eventstoredb') {
      const eventStoreName = configured.eventstore.database;
      const storeDb = await databases.open(eventStoreName);
      if (eventStoreName === configured.readmodels.database) await migrateSchemas(configured, databases, storeDb, 'read-only');
      else await applyOrCheck([{ migrator: eventStoreMigrator, db: storeDb }], 'read-only');
    }
    schemas = await EventSchemaRegistry.load();
    opened = await openEventStore(configured, schemas, databases);
  } catch (error) {
    await databases.close();
    throw error;
  }
  const { store } = opened;
  return {
    config: configured,
    log,
    store,
    schemas,
    async close() {
      try {
        await store.close();
      } finally {
        await databases.close();
      }
    },
  };
}

/**
 * The schemas of the configured databases, brought to this release (`migrate`) or checked
 * (`refuse`, `read-only`: PendingMigrationsError naming what is missing, nothing written). A
 * database a newer factlog migrated is refused first, whatever the mode (NewerSchemaError).
 */
async function migrateSchemas(config: Config, databases: Databases, db: Database, mode: NonNullable<ContextOptions['migrations']>): Promise<SchemaMigrations[]> {
  await refuseNewerSchema(db.knex);
  const schemas: Array<{ migrator: Migrator; db: Database }> = [
    { migrator: readModelMigrator, db },
    { migrator: jobsMigrator, db },
  ];
  if (config.eventstore.backend !== 'eventstoredb') schemas.push({ migrator: eventStoreMigrator, db: await databases.open(config.eventstore.database) });
  return applyOrCheck(schemas, mode);
}

/** Applies (`migrate`) or checks (the other modes: PendingMigrationsError naming what is missing) each schema's migrations. */
async function applyOrCheck(schemas: ReadonlyArray<{ migrator: Migrator; db: Database }>, mode: NonNullable<ContextOptions['migrations']>): Promise<SchemaMigrations[]> {
  const result: SchemaMigrations[] = [];
  for (const schema of schemas) {
    const ids = mode === 'migrate' ? await applyMigrations(schema.db.knex, schema.migrator) : await pendingMigrations(schema.db.knex, schema.migrator);
    result.push({ schema: schema.migrator.schema, ids });
  }
  if (mode === 'migrate') return result;
  if (result.some((schema) => schema.ids.length > 0)) throw new PendingMigrationsError(result);
  return [];
}
