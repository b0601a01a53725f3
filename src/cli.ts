import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { Command, InvalidArgumentError, Option } from 'commander';
import pino from 'pino';
import { loadConfig, packageVersion } from './config/load.js';
import { ConfigError, type Config } from './config/types.js';
import { trustConfiguredCertificates } from './config/tls.js';
import { postgresDatabaseProblem } from './config/validate.js';
import type { AppContext } from './app/appContext.js';
import { createAppContext, openEventLogReader, type EventLogReader } from './app/context.js';
import { buildApp } from './api/app.js';
import { presentEvent } from './read/present.js';
import { projectionStatus } from './read/projections.js';
import { rebuildUntilInterrupted } from './projection/runner.js';
import { copyEvents } from './eventstore/copy.js';
import { createPostgresEventStore, migrateEventStore } from './eventstore/postgres.js';
import { EventSchemaRegistry } from './eventstore/schemas.js';
import { connectionLocation, openDatabase } from './db/database.js';
import { needsInitdb } from './db/pgliteThread.js';
import { databaseOptions, dataPaths } from './config/derived.js';
import { announceDataDirUrl, DataDirLockedError, nameRunningCommand, verifyInstanceProof } from './db/dataDirLock.js';
import type { EventStore } from './eventstore/port.js';
import { missingFromEmbeddedLaunch } from './app/launch.js';
import type { SchemaMigrations } from './db/migrations.js';
import { errorMessage } from './util/errorMessage.js';

/**
 * How long `serve` may take to stop after SIGTERM/SIGINT: the stage runtime waits up to 30 s for
 * running jobs, and the rest (projections, consumers, databases) normally takes a second.
 */
const SHUTDOWN_TIMEOUT_MS = 60_000;

/**
 * The kind of event store `factlog events copy --to` names, or an error saying what is wrong with
 * it; nothing of the target is repeated but its scheme, since the rest may hold a password.
 */
export function checkCopyTarget(target: string): 'eventstoredb' | 'postgres' {
  if (/^(esdb|kurrentdb)(\+discover)?:\/\//.test(target)) return 'eventstoredb';
  if (!/^postgres(ql)?:\/\//.test(target)) {
    const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(target)?.[1];
    throw new InvalidArgumentError(`--to must be an esdb://, kurrentdb:// or postgres:// connection string, not ${scheme ? `a ${scheme}:// one` : 'one without a scheme'}`);
  }
  // As for databases.<name>.url: without a path the copy went into a database named after the user.
  const url = URL.parse(target);
  const problem = url === null ? undefined : postgresDatabaseProblem(url);
  if (problem !== undefined) throw new InvalidArgumentError(`--to ${problem}`);
  return 'postgres';
}

/**
 * The destination of `factlog events copy --to`, opened and reached before anything is copied. A
 * target it cannot open or reach (refused, unknown host, bad login) is named, its password left
 * out, with the driver's words (`connect ECONNREFUSED …` alone named nothing).
 */
async function openCopyTarget(target: string): Promise<{ store: EventStore; close(): Promise<void> }> {
  const isEventStoreDb = checkCopyTarget(target) === 'eventstoredb';
  const schemas = await EventSchemaRegistry.load();
  let opened: { store: EventStore; close(): Promise<void> } | undefined;
  try {
    if (isEventStoreDb) {
      // EventStoreDB's client is loaded only for a copy to it, not by every command of the CLI.
      const { createEventStoreDbStore } = await import('./eventstore/eventstoredb.js');
      const store = createEventStoreDbStore({ connectionString: target, schemas });
      opened = { store, close: () => store.close() };
      // Its client connects on first use: reach it now, so that a target that cannot be reached is said as such.
      await store.headPosition();
      return opened;
    }
    const db = await openDatabase({ kind: 'postgres', url: target, maxConns: 4 });
    const store = createPostgresEventStore(db, { schemas });
    opened = { store, close: async () => { await store.close(); await db.close(); } };
    await migrateEventStore(db.knex);
    return opened;
  } catch (error) {
    await opened?.close().catch(() => undefined);
    const what = isEventStoreDb ? 'the EventStoreDB event store' : 'the PostgreSQL event store';
    const reason = errorMessage(error);
    throw new Error(`events copy: cannot open ${what} at ${connectionLocation(target) ?? 'the --to connection string'} (--to, its password left out): ${reason}; nothing was copied`, { cause: error });
  }
}

/** The log of a command other than `serve`: warnings and errors, on stderr, since stdout is the command's output (`events tail | jq`). */
const commandLogger = () => pino({ level: 'warn' }, pino.destination(2));

/** The databases the event store is kept in: none on EventStoreDB. */
function eventLogDatabases(config: Config): string[] {
  return config.eventstore.backend === 'postgres' ? [config.eventstore.database] : [];
}

/**
 * Refuses an embedded database of `names` that does not exist yet: a command that only reads (or
 * changes a stored thing) would otherwise create an empty one in a misspelt data directory and
 * report success on it. `serve` and `migrate` create it.
 */
function refuseMissingDatabase(config: Config, names: Iterable<string>): void {
  for (const name of new Set(names)) {
    const options = databaseOptions(config, name);
    if (options.kind === 'pglite' && needsInitdb(options.dataDir)) {
      throw new Error(
        `the data directory ${dataPaths(config).dataDir} (storage.data_dir, STORAGE_DATA_DIR) holds no database (${options.dataDir} is missing or empty): check the setting; \`factlog migrate\` or \`factlog serve\` creates one`,
      );
    }
  }
}

/**
 * Refuses `events tail --follow` on an embedded event log: the CLI holds the PGlite directory's
 * lock while it runs, so nothing else can append to it (a running service makes the CLI refuse,
 * and `serve` cannot start meanwhile), and a follow would wait forever for nothing. There is no
 * all-repositories events route to follow a running service through, so the way is said instead.
 */
export function refuseEmbeddedFollow(config: Config): void {
  for (const name of eventLogDatabases(config)) {
    const eventStore = databaseOptions(config, name);
    if (eventStore.kind !== 'pglite') continue;
    throw new Error(
      `events tail --follow cannot follow an embedded event log (PGlite at ${eventStore.dataDir}): this command holds the data directory while it runs, so nothing else can append to it and \`factlog serve\` cannot start. ` +
        'While the service runs, poll GET /api/v1/repositories/{id}/events, passing each reply\'s next_from as from; or follow a server-tier log (eventstore.backend eventstoredb, or eventstore.database on a PostgreSQL server). ' +
        'Without --follow, events tail prints the log as it is now',
    );
  }
}

/** `--from`'s value: decimal digits only, as the REST `from` (Number() would take '' as 0, 0x10 as 16 and 1e3 as 1000). */
export function parsePosition(value: string): number {
  const position = /^[0-9]+$/.test(value) ? Number(value) : NaN;
  // The REST `from`'s bound: a longer number is no position (PostgreSQL's bigint refused it in its own words).
  if (!(position <= Number.MAX_SAFE_INTEGER)) throw new InvalidArgumentError(`--from must be an integer in decimal digits from 0 to ${Number.MAX_SAFE_INTEGER}`);
  return position;
}

/** What `factlog migrate` prints: each schema's migrations it applied, or that there were none. */
function migrationReport(applied: readonly SchemaMigrations[]): string {
  const schemas = applied.filter((schema) => schema.ids.length > 0);
  const count = schemas.reduce((sum, schema) => sum + schema.ids.length, 0);
  if (count === 0) return 'the database is up to date: no migrations to apply';
  return [`applied ${count} migration${count === 1 ? '' : 's'}:`, ...schemas.map((schema) => `  ${schema.schema}: ${schema.ids.join(', ')}`)].join('\n');
}

/**
 * How long the remote form of `projections list` and `projections rebuild` waits for the running
 * service's whole answer (`--service-timeout`). Both routes answer at once (a rebuild runs in the
 * background), but a service holds requests until it has started, and a stuck one would otherwise
 * hold the CLI forever.
 */
const DEFAULT_SERVICE_TIMEOUT_SECONDS = 30;

/**
 * `--service-timeout`'s value, in seconds (a fraction allowed), as whole milliseconds, at least
 * one: the timer takes nothing finer, and refused `0.0001` or `1.005` (1004.999… ms) on every request.
 */
export function parseServiceTimeout(value: string): number {
  const seconds = /^[0-9]+(\.[0-9]+)?$/.test(value) ? Number(value) : NaN;
  if (!(seconds > 0 && seconds <= 86_400)) throw new InvalidArgumentError('--service-timeout must be a number of seconds above 0 and at most 86400');
  return Math.max(1, Math.round(seconds * 1000));
}

/** An answer of the running service, read whole within the wait the CLI allows. */
interface ServiceAnswer {
  status: number;
  body: string;
}

/** The running service that owns the embedded data directory, asked over its admin API. */
interface RunningService {
  url: string;
  request(method: 'GET' | 'POST', route: string): Promise<ServiceAnswer>;
}

/**
 * Has the service at the address a lock records prove it is the lock's owner (the run that wrote
 * the lock's instance key) before a token goes to it: a lock from an older factlog has no key, and
 * an address can be another process's once its owner is gone (a stale lock whose pid was reused).
 * Throws, saying why and what to do, when it cannot be vouched for or does not answer within
 * `timeoutMs` (--service-timeout; it was 10 s whatever the option said); no credential is sent.
 */
async function verifyLockOwner(error: DataDirLockedError, url: string, timeoutMs: number): Promise<void> {
  const clear = `if no factlog runs on ${error.dataDir} (pid ${error.owner.pid} may be another process now), delete ${error.lockPath}`;
  if (error.owner.instanceKey === undefined) {
    throw new Error(
      `${error.message}; its lock was written by an older factlog and records no instance key, so nothing shows that the service at ${url} is the one holding it: no token was sent. Stop that factlog and start this release, or, ${clear}`,
    );
  }
  const challenge = randomBytes(32).toString('hex');
  const signal = AbortSignal.timeout(timeoutMs);
  let proof: unknown;
  try {
    const response = await fetch(new URL(`/healthz/instance?challenge=${challenge}`, url), { signal });
    proof = response.ok ? ((await response.json()) as { proof?: unknown }).proof : undefined;
  } catch {
    proof = undefined;
  }
  // A service that takes the request and does not answer is a stuck one (a stranger answers or
  // refuses): said as such, within the CLI's wait, not as a stranger whose lock may be deleted.
  if (proof === undefined && signal.aborted) {
    throw new Error(
      `the service at ${url} did not answer GET /healthz/instance within ${timeoutMs / 1000} s (--service-timeout): it may be stuck; see its log, then retry, with a longer --service-timeout if it is only slow. No token was sent`,
    );
  }
  if (typeof proof !== 'string' || !verifyInstanceProof(error.owner, challenge, proof)) {
    throw new Error(
      `the lock ${error.lockPath} names ${error.owner.command} (pid ${error.owner.pid}) at ${url}, but what answers there is not it (no proof of the lock's instance key): no token was sent. ${clear[0].toUpperCase()}${clear.slice(1)}`,
    );
  }
}

/** What `projections list` prints of a projection: GET /api/v1/projections' item, from the service or read here alike. */
interface ProjectionLine {
  name: string;
  position: number;
  lag: number;
  state: string;
  /** Why the projection failed (it retries); null while it runs. Optional: a service of an older release may not send it. */
  last_error?: string | null;
}

/**
 * `projections list`'s table: a row a projection, and under a failed one its error, indented on
 * lines of its own so that the columns stay aligned however long the error is. A projection that
 * has not failed may have something to say too (a rebuild left half-way, a stale rebuild mark):
 * it is a note, not an error.
 */
export function projectionTable(projections: readonly ProjectionLine[]): string[] {
  return projections.flatMap((projection) => {
    const row = `${projection.name.padEnd(20)} position ${String(projection.position).padStart(8)}  lag ${String(projection.lag).padStart(8)}  ${projection.state}`;
    if (!projection.last_error) return [row];
    const [first, ...rest] = projection.last_error.split(/\s*\n\s*/);
    const label = projection.state === 'failed' ? 'error:' : 'note: ';
    return [row, `    ${label} ${first}`, ...rest.map((line) => `           ${line}`)];
  });
}

/** The service's message in an answer's body (the API's `{error, message}`), else undefined. */
function serviceMessage(body: string): string | undefined {
  try {
    const parsed: unknown = JSON.parse(body);
    if (typeof parsed === 'object' && parsed !== null && 'message' in parsed && typeof parsed.message === 'string') return parsed.message;
  } catch {
    // Not JSON (a proxy's page, say).
  }
  return undefined;
}

/** An answer the CLI has no words of its own for: the status and the service's message, else its body as it came. */
function unexpectedAnswer(service: RunningService, answer: ServiceAnswer): Error {
  return new Error(`the service at ${service.url} answered ${answer.status}: ${serviceMessage(answer.body) ?? answer.body}`);
}

/** The running service's projections (GET /api/v1/projections). */
async function remoteProjections(service: RunningService): Promise<ProjectionLine[]> {
  const answer = await service.request('GET', '/api/v1/projections');
  if (answer.status !== 200) throw unexpectedAnswer(service, answer);
  return (JSON.parse(answer.body) as { projections: ProjectionLine[] }).projections;
}

/** The service at `url`, asked with `token`; each request and its body within `timeoutMs`, else an error saying what to do. */
function runningService(url: string, token: string, timeoutMs: number): RunningService {
  return {
    url,
    request: async (method, route) => {
      const signal = AbortSignal.timeout(timeoutMs);
      let answer: ServiceAnswer;
      try {
        // The signal bounds the body's read too: a service that sends its headers and stalls is bounded as well.
        const response = await fetch(new URL(route, url), { method, headers: { authorization: `Bearer ${token}` }, signal });
        answer = { status: response.status, body: await response.text() };
      } catch (error) {
        if (!signal.aborted) throw error;
        throw new Error(
          `the service at ${url} did not answer ${method} ${route} within ${timeoutMs / 1000} s (--service-timeout): it may still be starting (it holds requests until it has started) or be stuck; see its log and ${new URL('/healthz', url).href}, then retry, with a longer --service-timeout if it is only slow${method === 'POST' ? '. The request may have taken effect all the same: `factlog projections list` shows a rebuild under way' : ''}`,
        );
      }
      // With the service's reason: an expired or ended token (401) is no missing role (403).
      if (answer.status === 401 || answer.status === 403) {
        const reason = serviceMessage(answer.body);
        const remedy = answer.status === 401 ? "pass a current sysadmin's token (log in again for a new one)" : "a sysadmin's token is needed";
        throw new Error(`the service at ${url} refused the token (${answer.status}${reason === undefined ? '' : `: ${reason}`}): ${remedy}`);
      }
      return answer;
    },
  };
}

/** Why a listen failed, in an operator's words, by the system's error code. */
const LISTEN_FAILURES: Record<string, string> = {
  EADDRINUSE: 'another process listens on that port',
  EACCES: 'this process may not listen there (ports below 1024 need privileges)',
  EADDRNOTAVAIL: 'no interface of this machine has that address',
  ENOTFOUND: 'the host name does not resolve',
};

/**
 * Listens where the configuration says; a failure names the address and the settings that chose
 * it (Node's own message, `listen EADDRINUSE: address already in use …`, names neither).
 */
async function listenOn(app: { listen(options: { host: string; port: number }): Promise<string> }, server: { host: string; port: number }): Promise<string> {
  try {
    return await app.listen({ host: server.host, port: server.port });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const reason = (code !== undefined && LISTEN_FAILURES[code]) || errorMessage(error);
    throw new Error(`cannot listen on ${server.host}:${server.port} (server.host, server.port; SERVER_HOST, SERVER_PORT): ${reason}`);
  }
}

/** `factlog` — serve the API, migrate, manage projections, and tail the event log. */
export function buildCli(): Command {
  const program = new Command('factlog')
    .description('Event-sourced knowledge-graph service')
    .version(packageVersion(), '-V, --version', 'print the version and exit')
    .option('-c, --config <path>', 'a YAML config file, or a directory holding config.yaml / config.local.yaml')
    .option('--token <token>', "a sysadmin's access token: while a service owns the data directory, projections list and projections rebuild ask it over HTTP with it (default: $FACTLOG_TOKEN)")
    .addOption(
      new Option('--service-timeout <seconds>', 'how long projections list and projections rebuild wait for the running service to answer')
        .argParser(parseServiceTimeout)
        .default(DEFAULT_SERVICE_TIMEOUT_SECONDS * 1000, String(DEFAULT_SERVICE_TIMEOUT_SECONDS)),
    )
    // `factlog serve --help` lists --config too: the global options work after a command's name as well.
    .configureHelp({ showGlobalOptions: true });
  // A data directory's lock names its owner by command: `factlog projections rebuild`, never an option's value.
  program.hook('preAction', (_program, action) => {
    const names: string[] = [];
    for (let command: Command | null = action; command !== null; command = command.parent) names.unshift(command.name());
    nameRunningCommand(names.join(' '));
  });

  const config = (): Config => {
    const loaded = loadConfig({ configPath: program.opts<{ config?: string }>().config, warn: (message) => console.warn(message) });
    // Before any connection: a remote command's call to the running service is one too.
    trustConfiguredCertificates(loaded, process.cwd());
    return loaded;
  };

  /**
   * Opens the context without workers, runs `work`, and closes it. While a service owns the
   * embedded data directory, a command with a `remote` form asks that service instead (given a
   * token); every other command refuses with the owner's name, since two processes on one PGlite
   * directory would corrupt it.
   *
   * `migrations` (createAppContext's): only `migrate` migrates. A command that reads opens the
   * database `read-only` (never written: an embedded one is read from a snapshot, a server's in
   * read-only transactions, so a role that may only read can run it); one that changes data (`refuse`, the
   * default) writes only to a database of this release. Both refuse a database with pending
   * migrations, naming them: upgrading is one deliberate step, after a backup
   * (docs/operations.md, "Upgrading").
   */
  async function withContext(
    work: (context: AppContext) => Promise<void>,
    options: {
      projections?: boolean;
      remote?: (service: RunningService) => Promise<void>;
      createsDatabase?: boolean;
      migrations?: 'migrate' | 'refuse' | 'read-only';
    } = {},
  ) {
    const settings = config();
    if (!options.createsDatabase) refuseMissingDatabase(settings, [settings.readmodels.database, ...eventLogDatabases(settings)]);
    let context: AppContext;
    try {
      context = await createAppContext(settings, {
        workers: false,
        logger: commandLogger(),
        migrations: options.migrations ?? 'refuse',
      });
    } catch (error) {
      if (!(error instanceof DataDirLockedError) || !options.remote) throw error;
      // Spaces and line ends around it are dropped, as a header's value drops them (a token read from a file).
      const token = (program.opts<{ token?: string }>().token ?? process.env.FACTLOG_TOKEN ?? '').trim();
      // A serve records its address once it listens: before, it opens the database and migrates
      // (minutes for an upgrade), and "stop it first" alone sent an operator to stop a healthy start.
      // One on another host keeps the plain refusal, which says to delete the lock if that host is gone.
      if (!error.owner.url && error.owner.command === 'factlog serve' && error.owner.hostname === hostname()) {
        throw new Error(
          `data directory ${error.dataDir} is in use by ${error.holder}, which is still starting (opening the database, migrating) and does not listen yet: retry once it serves to ask it over HTTP, or stop it first${token ? '' : "; pass --token (or FACTLOG_TOKEN) with a sysadmin's token then"}`,
        );
      }
      if (!error.owner.url) throw error;
      // Inside, a character no token has failed in fetch's words, the whole token quoted on stderr.
      if (/[^\x21-\x7e]/.test(token)) {
        throw new Error('--token (or FACTLOG_TOKEN) holds a character no token has (a space, a line break, a character outside ASCII): no token was sent; pass the token alone');
      }
      if (!token) throw new Error(`${error.message}, or pass --token (or FACTLOG_TOKEN) with a sysadmin's token to ask it over HTTP`);
      const timeoutMs = program.opts<{ serviceTimeout: number }>().serviceTimeout;
      await verifyLockOwner(error, error.owner.url, timeoutMs);
      await options.remote(runningService(error.owner.url, token, timeoutMs));
      return;
    }
    try {
      if (options.projections) await context.projections.start();
      await work(context);
    } finally {
      await context.close();
    }
  }

  /**
   * Opens the event log alone, to read (openEventLogReader: never migrated nor written, pending
   * migrations refused), runs `work`, and closes it. A log on a server or EventStoreDB leaves the
   * embedded read models' data directory unopened and unlocked; an embedded log's directory is
   * locked as by withContext, and a running service that owns it makes the command refuse.
   */
  async function withEventLog(
    work: (log: EventLogReader) => Promise<void>,
    options: {
      /** Refuses, by throwing, what the command cannot do with these settings, before anything is opened. */
      refuse?: (settings: Config) => void;
    } = {},
  ) {
    const settings = config();
    options.refuse?.(settings);
    refuseMissingDatabase(settings, eventLogDatabases(settings));
    const eventLog = await openEventLogReader(settings, { logger: commandLogger() });
    try {
      await work(eventLog);
    } finally {
      await eventLog.close();
    }
  }

  program
    .command('serve')
    .description('start the HTTP API, projections and pipeline workers')
    .option('--role <role>', 'api, worker or all', (value) => {
      if (!['api', 'worker', 'all'].includes(value)) throw new InvalidArgumentError('role must be api, worker or all');
      return value;
    }, 'all')
    .action(async (options: { role: 'api' | 'worker' | 'all' }) => {
      const settings = config();
      const context = await createAppContext(settings, { role: options.role });
      // A configuration error the start would meet is said before the port opens, not after.
      try {
        await context.checkBootstrap();
      } catch (error) {
        await context.close();
        throw error;
      }
      const notLaunched = context.db.kind === 'pglite' ? missingFromEmbeddedLaunch(process.execArgv, process.env) : [];
      if (notLaunched.length > 0) {
        context.log.warn({ missing: notLaunched }, 'node was started without the embedded launch (start `bin/factlog.js serve` or `npm start`, not `node bin/factlog.js`): its peak memory may be about twice the 500 MB it keeps to (docs/operations.md, "How node is started")');
      }
      const app = await buildApp(context);
      // Listen before starting: /healthz answers at once, and every other request waits until
      // start() is done (projections and workers running, bootstrap applied). Starting can take
      // minutes on the distributed tier: each Kafka consumer-group join waits for the group's
      // rebalance, which after a member died waits for that member's session to time out.
      const started = context.start();
      started.catch(() => undefined); // awaited below: a failed start ends the process
      app.addHook('onRequest', async (request) => {
        if (request.routeOptions.url !== '/healthz' && request.routeOptions.url !== '/healthz/instance') await started;
      });
      // Signals are handled from the moment the service listens (/healthz answers during start):
      // a SIGTERM during start() waits for it to settle, so closing never races starting, then
      // closes everything and releases the data directory's lock.
      // A shutdown that does not finish within SHUTDOWN_TIMEOUT_MS names the part it waits for and
      // exits non-zero: a supervisor's stop never hangs, and the log says where to look.
      let stopping = false;
      const shutdown = async (signal: string) => {
        if (stopping) return;
        stopping = true;
        let waitingFor = 'start';
        setTimeout(() => {
          context.log.error({ signal, waitingFor, timeoutMs: SHUTDOWN_TIMEOUT_MS }, 'shutdown did not finish in time; exiting');
          process.exit(1);
        }, SHUTDOWN_TIMEOUT_MS);
        context.log.info({ signal }, 'shutting down: finishing in-flight requests and jobs');
        await started.catch(() => undefined);
        waitingFor = 'HTTP server';
        await app.close();
        await context.close((step) => {
          waitingFor = step;
          context.log.debug({ step }, 'shutting down');
        });
        process.exit(0);
      };
      process.on('SIGINT', () => void shutdown('SIGINT'));
      process.on('SIGTERM', () => void shutdown('SIGTERM'));
      announceDataDirUrl(await listenOn(app, settings.server));
      await started;
      // A signal during start: the node is shutting down, not serving (shutdown() exits when closed).
      if (stopping) return;
      console.log(`factlog serving at ${context.publicUrl} (API docs at ${context.publicUrl}/docs)`);
    });

  program
    .command('migrate')
    .description('create or upgrade the event store and read-model schemas')
    .action(() => withContext(async (context) => console.log(migrationReport(context.migrationsApplied)), { createsDatabase: true, migrations: 'migrate' }));

  const projections = program.command('projections').description('read-model projections');
  projections
    .command('list')
    .description('show each projection, its position, lag and state, and why a failed one failed')
    .action(() => {
      const print = (statuses: ProjectionLine[]) => {
        for (const line of projectionTable(statuses)) console.log(line);
      };
      return withContext(async (context) => print(await projectionStatus(context)), {
        migrations: 'read-only',
        remote: async (service) => print(await remoteProjections(service)),
      });
    });
  projections
    .command('rebuild <name>')
    .description('drop a projection and rebuild it from position 0')
    .action((name: string) =>
      withContext(
        async (context) => {
          const end = await rebuildUntilInterrupted(context.projections, name);
          if (end.interruptedBy === null) {
            console.log(`projection ${name} rebuilt`);
            return;
          }
          // The context closes (the lock is released) before the process ends with the signal's status.
          process.exitCode = end.interruptedBy === 'SIGINT' ? 130 : 143;
          console.error(
            `factlog: the rebuild of projection ${name} was interrupted at position ${end.position} of ${end.total}; the next \`factlog serve\` or \`factlog projections rebuild ${name}\` completes it`,
          );
        },
        {
          remote: async (service) => {
            const answer = await service.request('POST', `/api/v1/projections/${encodeURIComponent(name)}/rebuild`);
            // The offline rebuild's words (the runner's), so the names to choose from show either way.
            if (answer.status === 404) throw new Error(`unknown projection ${name}; known: ${(await remoteProjections(service)).map((projection) => projection.name).join(', ')}`);
            if (answer.status === 409) throw new Error(`projection ${name} is already rebuilding in the service at ${service.url}; follow it with \`factlog projections list\``);
            if (answer.status !== 202) throw unexpectedAnswer(service, answer);
            console.log(`projection ${name} is rebuilding in the service at ${service.url}; follow it with \`factlog projections list\``);
          },
        },
      ),
    );

  program
    .command('users')
    .description('operator commands on users (embedded and dev profiles)')
    .command('promote <email>')
    .description('make a registered user sysadmin on the system domain (idempotent): the way back in when no administrator is left')
    .action((email: string) => {
      // The spec's dev-profile operator command: a deployment's administrators are managed through the API.
      // Checked before anything is opened: a refused profile's database is not this command's to migrate.
      if (email.trim() === '') throw new Error('users promote: the email is empty');
      const { profile } = config();
      if (profile !== 'dev' && profile !== 'embedded') {
        throw new Error(`users promote runs on the embedded and dev profiles only (this is ${profile}); grant roles with PUT /api/v1/admin/users/roles`);
      }
      return withContext(async (context) => {
        const { user, promoted } = await context.identity.promoteToSysadmin(email, 'system:cli');
        console.log(promoted ? `${user.email} is now sysadmin` : `${user.email} already is sysadmin`);
      });
    });

  const events = program.command('events').description('the event log');
  events
    .command('copy')
    .description('copy the whole log into another event store, stream versions, ids and metadata preserved (re-runnable)')
    .requiredOption('--to <target>', 'esdb://… (EventStoreDB/KurrentDB) or postgres://… (a PostgreSQL event store)')
    .action((options: { to: string }) =>
      withEventLog(async (eventLog) => {
        const target = await openCopyTarget(options.to);
        try {
          const progress = await copyEvents(eventLog.store, target.store, {
            onProgress: (done) => process.stderr.write(`\rcopied ${done.copied}, skipped ${done.skipped}, at ${done.position}`),
          });
          process.stderr.write('\n');
          console.log(`copied ${progress.copied} events, skipped ${progress.skipped} already present`);
        } finally {
          await target.close();
        }
      }),
    );
  events
    .command('tail')
    .description('print events as JSON lines from a global position')
    .option('--from <position>', 'print events after this global position', parsePosition, 0)
    .option('--follow', 'keep printing new events until interrupted (a PostgreSQL-server or EventStoreDB log; an embedded one is refused: nothing else can append to it while the tail runs)')
    .action(async (options: { from: number; follow?: boolean }) => {
      // Ctrl-C (SIGINT) or SIGTERM ends the tail: the loop stops and the event log closes, releasing
      // an embedded one's lock, instead of the signal ending the process with the lock held.
      // Listened for before the database opens (seconds on an embedded one): a signal then lets
      // the open finish, prints nothing and closes, exit 0 as for a follow interrupted later.
      let interrupted = false;
      let wake = () => undefined as void;
      const interrupt = () => {
        interrupted = true;
        wake();
      };
      process.once('SIGINT', interrupt);
      process.once('SIGTERM', interrupt);
      try {
        await withEventLog(async (eventLog) => {
          let after = options.from;
          while (!interrupted) {
            const batch = await eventLog.store.readAll({ after, limit: 500 });
            for (const event of batch) console.log(JSON.stringify(presentEvent(event)));
            if (batch.length > 0) after = batch[batch.length - 1].globalPosition;
            else if (!options.follow) return;
            else {
              await new Promise<void>((resolve) => {
                wake = resolve;
                setTimeout(resolve, 500);
              });
            }
          }
        }, { refuse: options.follow ? refuseEmbeddedFollow : undefined });
      } finally {
        process.off('SIGINT', interrupt);
        process.off('SIGTERM', interrupt);
      }
    });
  helpNamingUnknownCommands(program);
  return program;
}

/**
 * `help [command...]` in place of commander's own on `parent` and each command with subcommands:
 * a name that is no command is said as `factlog nosuch` says it, exit 1. Commander's printed the
 * general help, exit 1, without naming the unknown command.
 */
function helpNamingUnknownCommands(parent: Command): void {
  for (const command of parent.commands) if (command.commands.length > 0) helpNamingUnknownCommands(command);
  parent.helpCommand(false);
  parent
    .command('help [command...]')
    .description('display help for command')
    .action((names: string[]) => {
      let target = parent;
      for (const name of names) {
        const found = target.commands.find((command) => command.name() === name || command.aliases().includes(name));
        if (found === undefined) return target.error(`error: unknown command '${name}'`, { code: 'commander.unknownCommand' });
        target = found;
      }
      target.help();
    });
}

export async function main(argv: string[]): Promise<void> {
  // `factlog events tail | head`: the reader is done when it closes the pipe, which is no error.
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
    process.exit(0);
  });
  try {
    await buildCli().parseAsync(argv);
  } catch (error) {
    if (error instanceof ConfigError) {
      // The message starts 'invalid configuration:': a prefix here would say it twice.
      console.error(`factlog: ${error.message}`);
      process.exit(2);
    }
    console.error(`factlog: ${errorMessage(error)}`);
    process.exit(1);
  }
}
