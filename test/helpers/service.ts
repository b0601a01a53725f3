import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Test } from 'tap';
import pino from 'pino';
import { buildConfig } from '../../src/config/load.js';
import type { Config } from '../../src/config/types.js';
import type { AppContext } from '../../src/app/appContext.js';
import { createAppContext, type ContextOptions } from '../../src/app/context.js';
import { buildApp } from '../../src/api/app.js';
import { databaseOptions } from '../../src/config/derived.js';
import { openScratchPostgres, type Database, type DatabaseOptions } from '../../src/db/database.js';
import { needsInitdb } from '../../src/db/pgliteThread.js';
import { createWorkerEmbedder, type ClosableEmbedder } from '../../src/providers/modelWorkers/models.js';
import { atGroupEnd, isGroupedRun } from './groupedRun.js';
import { migratedTemplate, openMigratedDatabase } from './migratedDatabase.js';
import { openTestDatabase, seedPgliteDir } from './pglite.js';

export interface TestService {
  context: AppContext;
  app: FastifyInstance;
  dataDir: string;
  config: Config;
  /** JSON request through fastify's inject (no socket). */
  call(method: string, url: string, options?: { token?: string; body?: unknown; headers?: Record<string, string> }): Promise<{ status: number; body: any; headers: Record<string, unknown> }>;
  close(options?: { keepData?: boolean }): Promise<void>;
}

/** Deep-merge helper for config overrides in tests. */
type Overrides = Record<string, unknown>;

export const TEST_SECRET = 'test-secret-that-is-long-enough-for-hs256-signing!';

/** The test services' built-in models: started at their first call, their pool kept a moment after the last service lets go. */
const TEST_LOCAL_MODELS = { loadAtStart: false, keepIdleMs: 500 };
let groupModelsLease: ClosableEmbedder | null = null;

/**
 * In a grouped run, a lease on the services' model pool held until the group ends, so the pool
 * one file's pipeline started serves the next file's too: kept only `keepIdleMs` after a
 * service closed, it ended between two files that call the models whenever a file between them
 * (or their own setup) took longer, and loading the models again cost seconds of CPU. The lease
 * itself calls nothing, so a group whose services never call a model starts no pool.
 */
function holdLocalModelsForGroup(): void {
  if (!isGroupedRun() || groupModelsLease !== null) return;
  const lease = createWorkerEmbedder(TEST_LOCAL_MODELS);
  groupModelsLease = lease;
  atGroupEnd(() => lease.close());
}

/**
 * A whole service on a throwaway PGlite under a temp dir, with fast retries for tests.
 * Pass `dataDir` to reopen the same data (restart tests); the service that wrote it says
 * `persistent: true`, so that its database is in that directory when it closes with `keepData`.
 *
 * In a grouped run (test/group.ts) a service that is not persistent runs on a database kept from
 * an earlier service or fixture of the process and emptied (test/helpers/migratedDatabase.ts): in
 * memory, in PGlite's worker thread as the service runs it, without opening PGlite again. Every
 * other service opens PGlite on its own directory, as `factlog serve` does.
 */
export async function startTestService(
  options: {
    overrides?: Overrides;
    dataDir?: string;
    persistent?: boolean;
    env?: NodeJS.ProcessEnv;
    workers?: boolean;
    clientDocumentFetch?: ContextOptions['clientDocumentFetch'];
  } = {},
): Promise<TestService> {
  const dataDir = options.dataDir ?? (await mkdtemp(path.join(tmpdir(), 'factlog-test-')));
  const config = buildConfig(
    merge(
      {
        storage: { data_dir: dataDir },
        server: { port: 8080 },
        // The cheapest password hashes (1 ms instead of about 70): a unit run makes about 190.
        // Profile production refuses that cost, so a production service keeps the default.
        auth: { jwt_secret: TEST_SECRET, ...(options.overrides?.profile === 'production' ? {} : { password_hash_cost: 10 }) },
        logging: { level: 'silent' },
        bootstrap: { default_repository: false },
        task: { poll_interval: '50ms', retry: { max_attempts: 3, base_delay: '50ms', max_delay: '200ms' } },
        providers: { resolution: { fetch: { timeout: '30s' }, retry: { base_delay: '10ms', max_delay: '50ms' } } },
        // Tests sign in from one address far more often than a person: the limits' own tests turn them on.
        rate_limits: { enabled: false },
      },
      options.overrides ?? {},
    ),
  );
  const database = databaseOptions(config, config.readmodels.database);
  const keptDatabase = isGroupedRun() && !options.dataDir && !options.persistent && database.kind === 'pglite';
  // A persistent service of a grouped run in a new directory gets it from the migrated dump, as
  // the kept databases are (its own migrations find nothing to do: about 0.5 CPU-s less). Any
  // other service on PGlite without a database yet (a new directory, or a `dataDir` a restart
  // test made empty) starts from the initdb template and migrates it itself: PGlite's own initdb,
  // in a child process, costs 2-3 CPU-s more.
  const fromMigratedDump = isGroupedRun() && !options.dataDir && options.persistent === true && database.kind === 'pglite' && needsInitdb(database.dataDir);
  if (!keptDatabase && !fromMigratedDump && database.kind === 'pglite' && needsInitdb(database.dataDir)) await seedPgliteDir(database.dataDir);
  const loadDataDir = fromMigratedDump ? await migratedTemplate() : undefined;
  holdLocalModelsForGroup();
  // The built-in models start at their first call: most services never call one.
  const context = await createAppContext(config, {
    env: options.env ?? {},
    logger: pino({ level: 'silent' }),
    workers: options.workers,
    // The models' pool outlives a service by a moment: the next service of a grouped process reuses it.
    localModels: TEST_LOCAL_MODELS,
    clientDocumentFetch: options.clientDocumentFetch,
    openDatabase: keptDatabase ? openKeptPglite : loadDataDir ? (options) => openTestDatabase(options.kind === 'pglite' ? { ...options, loadDataDir } : options) : openTestDatabase,
  });
  try {
    await context.start();
  } catch (error) {
    // A start that fails (a refused bootstrap admin, say) leaves nothing open behind the test.
    await context.close();
    if (!options.dataDir) await rm(dataDir, { recursive: true, force: true });
    throw error;
  }
  const app = await buildApp(context);
  await app.ready();
  return {
    context,
    app,
    dataDir,
    config,
    async call(method, url, { token, body, headers = {} } = {}) {
      const response = await app.inject({
        method: method as 'GET',
        url,
        headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers },
        ...(body === undefined ? {} : { payload: body as object }),
      });
      let parsed: unknown = response.body;
      try {
        parsed = response.body ? JSON.parse(response.body) : null;
      } catch {
        /* not JSON: keep the text */
      }
      return { status: response.statusCode, body: parsed, headers: response.headers };
    },
    async close({ keepData = false } = {}) {
      if (keepData && keptDatabase) throw new Error('close({ keepData: true }) needs startTestService({ persistent: true }): this database is not on disk');
      await app.close();
      await context.close();
      if (!keepData && !options.dataDir) await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * Nodes of the server tier: services (no workers) on one fresh database of the PostgreSQL server,
 * which holds their event store and read models (its `databases.default`; the log bus, no Kafka),
 * `maxConns` connections each. Closed, and the database dropped, when `t` ends. `scratch` is a
 * pool of its own on that database, for a test's reads.
 */
export async function startServerNodes(
  t: Test,
  database: string,
  options: { nodes?: number; maxConns?: number; overrides?: Overrides } = {},
): Promise<{ nodes: TestService[]; scratch: Database }> {
  const scratch = await openScratchPostgres(undefined, database);
  const url = (scratch.knex.client.config.connection as { connectionString: string }).connectionString;
  const overrides = merge(options.overrides ?? {}, { databases: { default: { url, max_conns: options.maxConns ?? 5 } } });
  const nodes: TestService[] = [];
  t.teardown(async () => {
    // Every node and the scratch pool are closed even when one close throws (else the nodes after
    // it kept their pools, and the test process its handles); the first failure is thrown after.
    const failures: unknown[] = [];
    for (const close of [...nodes.reverse().map((node) => () => node.close()), () => scratch.close()]) {
      await close().catch((error: unknown) => failures.push(error));
    }
    if (failures.length > 0) throw failures[0];
  });
  // One after the other: the first migrates the database.
  for (let n = 0; n < (options.nodes ?? 2); n++) nodes.push(await startTestService({ overrides, workers: false }));
  return { nodes: [...nodes], scratch };
}

/** A configured PGlite database as a kept, emptied one; a server's as configured. */
function openKeptPglite(options: DatabaseOptions): Promise<Database> {
  return options.kind === 'pglite' ? openMigratedDatabase() : openTestDatabase(options);
}

function merge(base: Overrides, extra: Overrides): Overrides {
  const result: Overrides = { ...base };
  for (const [key, value] of Object.entries(extra)) {
    const current = result[key];
    result[key] =
      value && typeof value === 'object' && !Array.isArray(value) && current && typeof current === 'object' && !Array.isArray(current)
        ? merge(current as Overrides, value as Overrides)
        : value;
  }
  return result;
}

/** Registers a user and returns its session. */
export async function registerUser(service: TestService, email: string, password = 'correct horse battery', name?: string) {
  const response = await service.call('POST', '/api/v1/auth/register', { body: { email, password, ...(name ? { name } : {}) } });
  if (response.status !== 201) throw new Error(`register ${email}: ${response.status} ${JSON.stringify(response.body)}`);
  return response.body as { user: { id: string; email: string; name: string }; token: string; refresh_token: string };
}

/** Polls until `check` returns a value, or fails after `timeoutMs`. */
export async function eventually<T>(check: () => Promise<T | undefined | null | false>, timeoutMs = 20_000, intervalMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * Waits until the repository's pipeline is idle: every source processed or failed and the tasks
 * API's `complete` (nothing queued or running, the read models through the log's head), twice
 * in a row.
 */
export async function waitForPipeline(service: TestService, repositoryId: string, token: string, timeoutMs = 90_000): Promise<void> {
  let quietReads = 0;
  await eventually(async () => {
    const tasks = await service.call('GET', `/api/v1/repositories/${repositoryId}/tasks?limit=1`, { token });
    if (tasks.status !== 200) throw new Error(`tasks API answered ${tasks.status}: ${JSON.stringify(tasks.body)}`);
    const sources = await service.call('GET', `/api/v1/repositories/${repositoryId}/sources?limit=500`, { token });
    const settled = (sources.body.items as Array<{ status: string }>).every((source) => ['processed', 'failed'].includes(source.status));
    quietReads = tasks.body.complete && settled ? quietReads + 1 : 0;
    return quietReads >= 2;
  }, timeoutMs, 100);
}
