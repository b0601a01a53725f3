import pino, { type Logger } from 'pino';
import type { Config } from '../config/types.js';
import { parseDuration } from '../config/duration.js';
import { databaseOptions, dataPaths, publicBaseUrl, oauthIssuer } from '../config/derived.js';
import { bootstrapAdminFromEnv, checkSecrets } from '../config/load.js';
import { openDatabase, type Database } from '../db/database.js';
import { EventSchemaRegistry } from '../eventstore/schemas.js';
import { createPostgresEventStore, migrateEventStore } from '../eventstore/postgres.js';
import type { EventStore } from '../eventstore/port.js';
import { migrateReadModels } from '../../projections/migrations/index.js';
import { readModelProjections } from '../../projections/index.js';
import { ProjectionRunner } from '../projection/runner.js';
import { BusProjectionRunner } from '../projection/busRunner.js';
import type { ReadModelRunner } from '../projection/types.js';
import type { Bus } from '../bus/port.js';
import { createKafkaBus, createKafkaRelay, type KafkaOptions } from '../bus/kafka.js';
import { runAsLeader, type Leadership } from '../bus/leader.js';
import { createEventStoreDbStore } from '../eventstore/eventstoredb.js';
import { createOpenSearchIndex, type OpenSearchSearchIndex } from '../search/opensearch.js';
import { reindexSearch } from './reindex.js';
import { createSearchIndexProjection } from '../../projections/searchIndex.js';
import { JobRepository, migrateJobs } from '../pipeline/jobs.js';
import { createJobIntakeProjection } from '../pipeline/intake.js';
import { createStageRuntime, type StageRuntime } from '../pipeline/runtime.js';
import type { Stage } from '../pipeline/types.js';
import { createRetrieveSourceStage } from '../pipeline/stages/retrieveSource.js';
import { createSourceDecompositionStage } from '../pipeline/stages/sourceDecomposition.js';
import { createEmbedFactsStage } from '../pipeline/stages/embedFacts.js';
import { createDeduplicateFactsStage } from '../pipeline/stages/deduplicateFacts.js';
import { createCleanupFactsStage } from '../pipeline/stages/cleanupFacts.js';
import { createExtractConceptsStage } from '../pipeline/stages/extractConcepts.js';
import { createRefineConceptsStage } from '../pipeline/stages/refineConcepts.js';
import { createEmbedConceptsStage } from '../pipeline/stages/embedConcepts.js';
import { createMigrateContextStage } from '../pipeline/stages/migrateContext.js';
import { createRefreshConceptRelationsStage } from '../pipeline/stages/refreshConceptRelations.js';
import { promptsetLookup } from '../pipeline/stages/repositorySettings.js';
import { createScheduler, type PeriodicJob, type Scheduler } from '../pipeline/scheduler.js';
import { createHttpFetcher, fetchSettingsFromConfig } from '../providers/fetch/http.js';
import { imageFetchSettings } from '../providers/fetch/images.js';
import { createHostHealthReader } from '../providers/fetch/hostHealth.js';
import { createChatModel, createEmbedder } from '../providers/factory.js';
import type { ChatModel } from '../providers/llm/port.js';
import type { Embedder } from '../providers/embeddings/port.js';
import { createHybridSearch, type HybridSearch } from '../search/hybrid.js';
import { createPostgresSearchIndex } from '../search/postgres.js';
import type { SearchIndex } from '../search/port.js';
import { createFileAssetStore, type AssetStore } from '../storage/assets.js';
import { createTokenService } from '../auth/tokens.js';
import { createIdentityService, type IdentityService } from '../auth/identity.js';
import { createCommandBus, type CommandBus } from './commands.js';
import { createMetrics, type Metrics } from './metrics.js';
import { createRepositoryService, type RepositoryService } from './repositories.js';
import { instrumentEventStore } from './instrumentedStore.js';

/** Everything a request handler or CLI command needs, built once per process from the config. */
export interface AppContext {
  config: Config;
  log: Logger;
  publicUrl: string;
  /** The read-model database (on the embedded tier also the event store's). */
  db: Database;
  store: EventStore;
  assets: AssetStore;
  commands: CommandBus;
  identity: IdentityService;
  repositories: RepositoryService;
  search: SearchIndex;
  /** Hybrid (lexical + k-NN, RRF) search over `search`, falling back to lexical when it cannot run. */
  hybrid: HybridSearch;
  /** The chat model of `providers.llm`. */
  chat: ChatModel;
  /** The embedder of `providers.embeddings`; null when the provider is `none` (no vectors). */
  embedder: Embedder | null;
  jobs: JobRepository;
  projections: ReadModelRunner;
  runtime: StageRuntime;
  metrics: Metrics;
  /** Pokes idle workers (after a job retry). */
  wakeWorkers(): void;
  /** Starts projections and workers, and runs the boot-time bootstrap steps. */
  start(): Promise<void>;
  /** Stops workers (finishing in-flight jobs), projections, and closes the databases. */
  close(): Promise<void>;
}

export interface ContextOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  logger?: Logger;
  /** Run pipeline workers in this process (default true). */
  workers?: boolean;
  /**
   * `serve --role`: `api` serves HTTP only, `worker` runs projections, stages and the relay,
   * `all` both (default). On the embedded log bus an API process still runs its projections,
   * since no other process can.
   */
  role?: 'api' | 'worker' | 'all';
}

/** Opens the databases, migrates them, and wires every port to its adapter. */
export async function createAppContext(config: Config, options: ContextOptions = {}): Promise<AppContext> {
  const cwd = options.cwd ?? process.cwd();
  const log = options.logger ?? pino({ level: config.logging.level });
  checkSecrets(config, { warn: (message: string) => log.warn(message) });

  // Databases are opened once per name: on the embedded tier the event store and read models share one PGlite.
  const opened = new Map<string, Database>();
  const open = async (name: string) => {
    let db = opened.get(name);
    if (!db) {
      db = await openDatabase(databaseOptions(config, name, cwd));
      opened.set(name, db);
    }
    return db;
  };
  const role = options.role ?? (options.workers === false ? 'api' : 'all');
  const db = await open(config.readmodels.database);
  await migrateReadModels(db.knex);
  await migrateJobs(db.knex);

  const schemas = await EventSchemaRegistry.load();
  const projectionStatus = () => projections.status();
  const jobs = new JobRepository(db.knex);
  const metrics = createMetrics({ projectionStatus, jobCounts: () => jobs.counts() });
  const store = instrumentEventStore(await openEventStore(config, schemas, open), metrics);
  const { search, opensearch } = openSearchIndex(config, db, log);
  const assets = createFileAssetStore(dataPaths(config, cwd).assetsDir);
  const chat = createChatModel(config);
  const embedder = createEmbedder(config);
  const hybrid = createHybridSearch({
    search,
    embedder,
    settings: {
      enabled: config.search.hybrid.enabled,
      rrfK: config.search.hybrid.rrf_k,
      minScore: config.search.hybrid.min_score,
      overFetchMultiplier: config.search.hybrid.over_fetch_multiplier,
    },
  });

  const retry = {
    maxAttempts: config.task.retry.max_attempts,
    baseDelayMs: parseDuration(config.task.retry.base_delay),
    maxDelayMs: parseDuration(config.task.retry.max_delay),
  };
  const fetchSettings = fetchSettingsFromConfig(config.providers.resolution);
  const imageLimits = {
    maxImageBytes: config.providers.decomposition.image_extraction.max_image_bytes,
    maxImagesPerSource: config.providers.decomposition.image_extraction.max_images_per_source,
  };
  const { decomposition, dedup, refinement } = config.providers;
  const stages: Stage[] = [
    createRetrieveSourceStage({
      store,
      assets,
      fetcher: createHttpFetcher(fetchSettings),
      imageFetcher: createHttpFetcher(imageFetchSettings(fetchSettings, imageLimits)),
      images: imageLimits,
      hostHealth: { reader: createHostHealthReader(db.knex), settings: fetchSettings.autoSkip },
      doiResolver: config.providers.resolution.doi_resolver,
      maxAttempts: retry.maxAttempts,
    }),
    createSourceDecompositionStage({
      store,
      assets,
      chat,
      promptsetFor: promptsetLookup(db.knex),
      chunking: { chunkSize: decomposition.chunking.chunk_size, chunkOverlap: decomposition.chunking.chunk_overlap },
      concurrency: { fact: decomposition.concurrency.fact, image: decomposition.concurrency.image },
      maxAttempts: retry.maxAttempts,
    }),
    // Without an embedder there are no vectors: deduplication follows decomposition directly.
    ...(embedder ? [createEmbedFactsStage({ store, embedder, batchSize: config.providers.ai.embed_batch_size, maxAttempts: retry.maxAttempts })] : []),
    createDeduplicateFactsStage({
      store,
      knex: db.knex,
      search,
      embedderModelId: embedder?.modelId ?? null,
      threshold: dedup.threshold,
      catchupMaxAgeMs: parseDuration(dedup.catchup_max_age),
    }),
    createCleanupFactsStage({ store }),
    createExtractConceptsStage({
      store,
      knex: db.knex,
      chat,
      batchSize: decomposition.concept.fact_batch_size,
      concurrency: decomposition.concurrency.concept,
      maxAttempts: retry.maxAttempts,
    }),
    ...(embedder ? [createEmbedConceptsStage({ store, embedder })] : []),
    ...(refinement.enabled
      ? [
          createRefineConceptsStage({
            store,
            knex: db.knex,
            chat,
            maxCandidates: refinement.max_candidates_per_run,
            pruneThreshold: refinement.prune_threshold,
            maxConcurrency: refinement.max_concurrency,
          }),
        ]
      : []),
    createMigrateContextStage({ store, knex: db.knex }),
    createRefreshConceptRelationsStage({ store, knex: db.knex }),
  ];
  const relationsIntervalMs = parseDuration(config.task.refresh_concept_relations_interval);
  const periodic: PeriodicJob[] = [
    { kind: 'refresh_concept_relations', intervalMs: relationsIntervalMs },
    ...(embedder ? [{ kind: 'deduplicate_facts', intervalMs: parseDuration(dedup.catchup_interval) }] : []),
    ...(refinement.enabled ? [{ kind: 'refine_concepts', intervalMs: relationsIntervalMs }] : []),
  ];
  const runtime = createStageRuntime({
    db,
    store,
    stages,
    settings: {
      concurrency: config.task.queues,
      jobTimeoutMs: parseDuration(config.task.job_timeout),
      heartbeatIntervalMs: parseDuration(config.task.heartbeat_interval),
      heartbeatTimeoutMs: parseDuration(config.task.heartbeat_timeout),
      leaseMs: parseDuration(config.task.heartbeat_timeout),
      pollIntervalMs: parseDuration(config.task.poll_interval),
      retry,
      rescueOnStartup: config.task.rescue_on_startup,
    },
    log: log.child({ component: 'pipeline' }),
  });
  const intake = createJobIntakeProjection(stages, {
    maxAttempts: retry.maxAttempts,
    afterCommit: (kinds) => kinds.forEach((kind) => runtime.wake(kind)),
  });
  // Both backends: on PostgreSQL the projection writes vectors (pgvector) and statuses in the projection's transaction.
  const allProjections = [...readModelProjections, intake, createSearchIndexProjection(search)];
  const projectionLog = log.child({ component: 'projections' });
  let relay: Leadership | null = null;
  let bus: Bus | null = null;
  let projections: ReadModelRunner;
  if (config.bus.backend === 'kafka') {
    const kafka = kafkaOptions(config);
    bus = createKafkaBus({
      kafka,
      registry: schemas,
      log: log.child({ component: 'bus' }),
      consumer: { sessionTimeoutMs: parseDuration(config.bus.kafka.session_timeout) },
    });
    projections = new BusProjectionRunner(bus, store, db, allProjections, { groupPrefix: kafka.topicPrefix, log: projectionLog });
  } else {
    projections = new ProjectionRunner(store, db, allProjections, { log: projectionLog });
  }
  const startRelay = () => {
    if (config.bus.backend !== 'kafka' || !config.bus.kafka.relay) return null;
    const kafkaRelay = createKafkaRelay({ store, kafka: kafkaOptions(config), registry: schemas, db, log: log.child({ component: 'relay' }) });
    return runAsLeader(db, 'relay', kafkaRelay, { log });
  };
  if (opensearch) {
    // The search-index projection owns no tables: its rebuild fills a new index and moves the alias.
    const rebuildReadModel = projections.rebuild.bind(projections);
    projections.rebuild = (name, onProgress) =>
      name === 'search-index' ? reindexSearch({ store, db, search: opensearch }, onProgress).then(() => undefined) : rebuildReadModel(name, onProgress);
  }
  const commands = createCommandBus(store, (write) => projections.settle(write, 30_000), log);
  const identity = createIdentityService({
    knex: db.knex,
    store,
    commands,
    tokens: createTokenService({
      secret: config.auth.jwt_secret,
      issuer: oauthIssuer(config),
      sessionTtlMs: parseDuration(config.auth.token_ttl),
      accessTtlMs: parseDuration(config.oauth.access_token_ttl),
    }),
    settings: {
      passwordMinLength: config.auth.password_min_length,
      refreshTtlMs: parseDuration(config.auth.refresh_token_ttl),
      autoPromoteFirstUser: config.bootstrap.auto_promote_first_user,
    },
    log,
  });
  const repositories = createRepositoryService({ knex: db.knex, commands, defaultPreset: config.default_repository_preset });
  const runWorkers = role !== 'api';
  const runProjections = role !== 'api' || config.bus.backend === 'log';
  // Periodic jobs are enqueued by workers only; the derived job ids make several workers enqueue each once.
  const scheduler: Scheduler | null = runWorkers
    ? createScheduler({
        knex: db.knex,
        periodic,
        log: log.child({ component: 'scheduler' }),
        maxAttempts: retry.maxAttempts,
        onEnqueued: (kinds) => kinds.forEach((kind) => runtime.wake(kind)),
      })
    : null;

  return {
    config,
    log,
    publicUrl: publicBaseUrl(config),
    db,
    store,
    assets,
    commands,
    identity,
    repositories,
    search,
    hybrid,
    chat,
    embedder,
    jobs,
    projections,
    runtime,
    metrics,
    wakeWorkers: () => runtime.wake(),
    async start() {
      if (runWorkers) relay = startRelay();
      if (runProjections) await projections.start();
      await bootstrap(config, options.env ?? process.env, { identity, repositories, db, log });
      if (runWorkers) await runtime.start();
      await scheduler?.start();
    },
    async close() {
      await scheduler?.stop();
      await runtime.stop();
      await projections.stop();
      await relay?.stop();
      await bus?.close();
      await opensearch?.close();
      await store.close();
      for (const database of opened.values()) await database.close();
    },
  };
}

/** The event store of `eventstore.backend`: PostgreSQL tables (PGlite or a server) or EventStoreDB. */
async function openEventStore(
  config: Config,
  schemas: EventSchemaRegistry,
  open: (name: string) => Promise<Database>,
): Promise<EventStore> {
  if (config.eventstore.backend === 'eventstoredb') {
    return createEventStoreDbStore({ connectionString: config.eventstore.eventstoredb.connection_string, schemas });
  }
  const storeDb = await open(config.eventstore.database);
  await migrateEventStore(storeDb.knex);
  return createPostgresEventStore(storeDb, { schemas });
}

/** The search index of `search.backend`; the OpenSearch one is also returned as such, for alias rebuilds. */
function openSearchIndex(config: Config, db: Database, log: Logger): { search: SearchIndex; opensearch: OpenSearchSearchIndex | null } {
  const { url, index_prefix } = config.search.opensearch;
  // One embedding model per deployment: the index's vectors have its dimensions.
  const dimensions = config.providers.embeddings.dimensions;
  if (config.search.backend === 'opensearch') {
    const opensearch = createOpenSearchIndex({ node: url, indexPrefix: index_prefix, dimensions, log: log.child({ component: 'search' }) });
    return { search: opensearch, opensearch };
  }
  return { search: createPostgresSearchIndex(db.knex, { hasVector: db.hasVector, vectorDimensions: dimensions }), opensearch: null };
}

export function kafkaOptions(config: Config): KafkaOptions {
  const { brokers, client_id, topic_prefix, partitions, replication_factor } = config.bus.kafka;
  return { brokers, clientId: client_id, topicPrefix: topic_prefix, partitions, replicationFactor: replication_factor };
}

/** Boot-time bootstrap moves of the spec: default admin first, then the starter repository. */
async function bootstrap(
  config: Config,
  env: NodeJS.ProcessEnv,
  deps: { identity: IdentityService; repositories: RepositoryService; db: Database; log: Logger },
): Promise<void> {
  if (config.bootstrap.default_admin) {
    const admin = bootstrapAdminFromEnv(env);
    if (admin) await deps.identity.seedDefaultAdmin(admin);
    else deps.log.warn('bootstrap.default_admin is true but SVC_BOOTSTRAP_DEFAULT_ADMIN_EMAIL/PASSWORD are not both set: no admin seeded');
  }
  if (config.bootstrap.default_repository && !(await deps.db.knex('repositories').first('id'))) {
    await deps.repositories.create(
      { name: 'Starter', slug: 'starter', description: 'A first repository, created at boot (bootstrap.default_repository).' },
      { actor: 'system:bootstrap', causationId: null, correlationId: null },
      null,
    );
    deps.log.info('starter repository created (bootstrap.default_repository)');
  }
}

