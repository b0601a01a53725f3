import type { Logger } from 'pino';
import type { Config } from '../config/types.js';
import type { Database } from '../db/database.js';
import type { EventSchemaRegistry } from '../eventstore/schemas.js';
import type { EventStore } from '../eventstore/port.js';
import type { SchemaMigrations } from '../db/migrations.js';
import type { ReadModelRunner } from '../projection/types.js';
import type { JobRepository } from '../pipeline/jobs.js';
import type { StageRuntime } from '../pipeline/runtime.js';
import type { ChatModel } from '../providers/llm/port.js';
import type { Embedder } from '../providers/embeddings/port.js';
import type { HybridSearch } from '../search/hybrid.js';
import type { SearchIndex } from '../search/port.js';
import type { AssetStore } from '../storage/assets.js';
import type { IdentityService } from '../auth/identity.js';
import type { TokenService } from '../auth/tokens.js';
import type { OAuthServer } from './oauth.js';
import type { PermissionAudit } from './audit.js';
import type { CommandBus } from './commands.js';
import type { Metrics } from './metrics.js';
import type { RepositoryService } from './repositories.js';
import type { IdempotencyStore } from './idempotency.js';

/*
 * The service's parts as its callers see them, apart from the composition root (./context.ts)
 * that builds them: the query and command modules take `Pick<AppContext, ...>`, and a type of
 * the root would make each of them import the module that imports them.
 */
/** Everything a request handler or CLI command needs, built once per process from the config. */
export interface AppContext {
  config: Config;
  log: Logger;
  publicUrl: string;
  /** The read-model database (on the embedded tier also the event store's). */
  db: Database;
  /** The migrations this context applied, per schema (none unless `migrations` is `migrate`). */
  migrationsApplied: SchemaMigrations[];
  store: EventStore;
  /** The event types and their Avro schemas (`schemas/events/`): what the log may hold. */
  schemas: EventSchemaRegistry;
  assets: AssetStore;
  commands: CommandBus;
  identity: IdentityService;
  /** Signs and verifies session and OAuth access tokens (one signer for the OAuth server and the MCP endpoint). */
  tokens: TokenService;
  /** The OAuth 2.1 authorization server for MCP clients (src/app/oauth.ts). */
  oauth: OAuthServer;
  /** Where every permission decision of a route or tool is recorded (src/app/audit.ts). */
  audit: PermissionAudit;
  repositories: RepositoryService;
  /** The users' idempotency keys, which REST's Idempotency-Key and MCP's idempotency_key share (src/app/idempotency.ts). */
  idempotency: IdempotencyStore;
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
  /**
   * Checks what the boot-time bootstrap will do against the configuration (a default admin the
   * sign-up rules refuse is a ConfigError) and writes nothing: `serve` calls it before it listens.
   * start() uses its result, or makes the check itself when nobody called it.
   */
  checkBootstrap(): Promise<void>;
  /** Starts projections and workers, and runs the boot-time bootstrap steps. */
  start(): Promise<void>;
  /**
   * Stops workers (finishing in-flight jobs), projections, and closes the databases, one part
   * after another; `onStep` hears each part's name as it begins (a shutdown that hangs can say
   * which part it waits for).
   */
  close(onStep?: (step: string) => void): Promise<void>;
}
