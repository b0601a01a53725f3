import type { ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { openScratchPostgres } from '../../src/db/database.js';
import { deleteTestTopics, ensureBroker } from '../bus/helpers.js';
import { startFakeEventStoreDb } from '../eventstore/fake-esdb/server.js';
import { deleteIndices, ensureOpenSearch } from '../search/helpers.js';
import { freePort, spawnServe, stopProcess, waitHealthy, type ProcessExit } from './processes.js';
import { TEST_SECRET } from './service.js';

/**
 * The distributed tier for end-to-end tests: EventStoreDB (the gRPC test server), a real Kafka
 * broker, a scratch PostgreSQL database for the read models and a real OpenSearch, with
 * topics and indices under a fresh prefix; `start` adds `factlog serve --role …` processes.
 */

export interface ServiceNode {
  child: ChildProcess;
  baseUrl: string;
  /** The process's own log (pino JSON on stdout, and stderr). */
  logFile: string;
}

export interface DistributedCluster {
  brokers: string[];
  opensearch: string;
  /** Topic and index prefix of this cluster. */
  prefix: string;
  readModels: Awaited<ReturnType<typeof openScratchPostgres>>;
  /** Starts one process of the role and waits until it is healthy. */
  start(role: 'api' | 'worker' | 'all'): Promise<ServiceNode>;
  stop(node: ServiceNode, signal?: NodeJS.Signals): Promise<ProcessExit>;
  /**
   * The error and fatal lines of every node's log (pino levels 50 and 60), prefixed by the
   * node's role: what a failing test prints to say what went wrong inside the service.
   */
  loggedErrors(): Promise<string[]>;
  /** Stops every process and removes topics, indices, the database and the data dir. */
  close(): Promise<void>;
}

/** Any fixed number: the advisory lock that lets one distributed cluster run at a time. */
const ONE_CLUSTER_AT_A_TIME = 0x0f1c1057;

/**
 * Waits until no other test process runs a distributed cluster, and holds that turn until
 * `release`: two clusters side by side (tap runs two files at once) share two cores with
 * Kafka, OpenSearch and PostgreSQL, and their pools together come close to the server's 100
 * connections. A session advisory lock on the local server: a crashed holder's turn ends with
 * its connection.
 */
async function takeClusterTurn(): Promise<{ release(): Promise<void> }> {
  const client = new pg.Client({ connectionString: process.env.FACTLOG_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres' });
  await client.connect();
  await client.query('SELECT pg_advisory_lock($1)', [ONE_CLUSTER_AT_A_TIME]);
  return {
    async release() {
      await client.query('SELECT pg_advisory_unlock($1)', [ONE_CLUSTER_AT_A_TIME]).catch(() => undefined);
      await client.end();
    },
  };
}

export async function startDistributedCluster(options: {
  /** Scratch database name for the read models (one per test file). */
  database: string;
  /** Extra environment for every process. */
  env?: Record<string, string>;
}): Promise<DistributedCluster> {
  const turn = await takeClusterTurn();
  const [brokers, opensearch] = await Promise.all([ensureBroker(), ensureOpenSearch()]);
  const esdb = await startFakeEventStoreDb();
  const readModels = await openScratchPostgres(undefined, options.database);
  const prefix = `fl${Date.now().toString(36)}`;
  const dataDir = await mkdtemp(path.join(tmpdir(), 'factlog-dist-'));
  const nodes: ServiceNode[] = [];
  const env: Record<string, string> = {
    PROFILE: 'distributed',
    // The distributed profile refuses loopback fetches; the tests' web servers listen on 127.0.0.1.
    NETWORK_ALLOW_LOOPBACK: 'always',
    AUTH_JWTSECRET: TEST_SECRET,
    EVENTSTORE_EVENTSTOREDB_CONNECTION_STRING: esdb.connectionString,
    BUS_KAFKA_BROKERS: brokers.join(','),
    BUS_KAFKA_TOPIC_PREFIX: prefix,
    BUS_KAFKA_PARTITIONS: '4',
    // A killed worker's partitions move to the others after this (30s by default).
    BUS_KAFKA_SESSION_TIMEOUT: '6s',
    SEARCH_OPENSEARCH_URL: opensearch,
    SEARCH_OPENSEARCH_INDEX_PREFIX: prefix,
    DATABASES_DEFAULT_URL: (readModels.knex.client.config.connection as { connectionString: string }).connectionString,
    // One server with max_connections 100 serves this cluster and the other suite tap runs
    // beside it: three nodes with the default pool of 200 could exhaust it (the corpus peaked
    // at 44 connections with it).
    DATABASES_DEFAULT_MAX_CONNS: '20',
    STORAGE_DATA_DIR: path.join(dataDir, 'shared'),
    LOGGING_LEVEL: 'warn',
    TASK_POLL_INTERVAL: '100ms',
    // A killed worker's jobs are taken over once its heartbeat is this old (10m in production).
    TASK_HEARTBEAT_INTERVAL: '500ms',
    TASK_HEARTBEAT_TIMEOUT: '4s',
    BOOTSTRAP_DEFAULT_REPOSITORY: 'false',
    ...options.env,
  };
  const stop = (node: ServiceNode, signal: NodeJS.Signals = 'SIGTERM') => stopProcess(node.child, signal);
  return {
    brokers,
    opensearch,
    prefix,
    readModels,
    async start(role) {
      const port = await freePort();
      const logFile = path.join(dataDir, `${role}-${nodes.length + 1}.log`);
      const log = openSync(logFile, 'a');
      const child = spawnServe({ cwd: dataDir, port, env, args: ['--role', role], stdio: ['ignore', log, log] });
      closeSync(log); // the child holds its own copy of the descriptor
      const node = { child, baseUrl: `http://127.0.0.1:${port}`, logFile };
      nodes.push(node);
      try {
        await waitHealthy(node.baseUrl, 300_000); // a node that starts while others ingest may wait minutes for the CPU on a loaded machine
      } catch (error) {
        // What the node logged while it did not answer says why (a group join, a lock, a crash).
        const exit = child.exitCode !== null || child.signalCode !== null ? `exited (${child.exitCode ?? child.signalCode})` : 'still running';
        const log = await readFile(logFile, 'utf8').catch(() => '(no log)');
        throw new Error(`${role} node ${nodes.length} (${node.baseUrl}, ${exit}) did not answer /healthz: ${(error as Error).message}\n--- its log (last 200 lines) ---\n${log.split('\n').slice(-200).join('\n')}`);
      }
      return node;
    },
    stop,
    async loggedErrors() {
      const lines: string[] = [];
      for (const node of nodes) {
        const text = await readFile(node.logFile, 'utf8').catch(() => '');
        const name = path.basename(node.logFile, '.log');
        for (const line of text.split('\n')) if (/"level":(50|60)\b/.test(line)) lines.push(`${name}: ${line}`);
      }
      return lines;
    },
    async close() {
      for (const node of nodes) await stop(node);
      await readModels.close();
      await esdb.close();
      await deleteTestTopics(brokers, prefix).catch(() => undefined);
      await deleteIndices(opensearch, prefix).catch(() => undefined);
      await rm(dataDir, { recursive: true, force: true });
      await turn.release();
    },
  };
}
