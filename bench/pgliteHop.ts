/**
 * What running PGlite in a worker thread (src/db/pgliteThread.ts) costs per statement: the same
 * statements on an in-thread PGlite and through the worker proxy, one at a time, as knex sends them.
 * The difference is the hop (a message each way, the rows cloned into the API thread).
 *
 *   node --import=tsx --no-wasm-code-gc bench/pgliteHop.ts      (BENCH_ROUNDS, default 2000)
 */
import os from 'node:os';
import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import { DumpBlob } from '../src/db/pgliteDump.js';
import { pgliteWasmModules } from '../src/db/pgliteWasm.js';
import { PgliteThread } from '../src/db/pgliteThread.js';
import { pgliteTemplate } from '../test/helpers/pglite.js';
import { envNumber, ms } from './common.js';

interface Queryable {
  query(sql: string, params?: unknown[]): Promise<{ rows: unknown[] }>;
  exec(sql: string): Promise<unknown>;
}

const rounds = envNumber('BENCH_ROUNDS', 2000);
const statements: Array<{ label: string; sql: string; params?: unknown[]; times: number }> = [
  { label: '`SELECT 1`', sql: 'SELECT 1 AS one', times: rounds },
  { label: 'one-row insert', sql: 'INSERT INTO hop (body) VALUES ($1)', params: [{ kind: 'x', n: 1 }], times: rounds },
  { label: '100 rows with jsonb', sql: 'SELECT id, body, created FROM hop ORDER BY id LIMIT 100', times: rounds / 10 },
  { label: '1,000 rows with jsonb', sql: 'SELECT id, body, created FROM hop ORDER BY id LIMIT 1000', times: rounds / 100 },
];

async function measure(db: Queryable): Promise<number[]> {
  await db.exec('CREATE TABLE hop (id serial PRIMARY KEY, body jsonb NOT NULL, created timestamptz NOT NULL DEFAULT now())');
  await db.exec(`INSERT INTO hop (body) SELECT jsonb_build_object('kind', 'seed', 'n', n, 'text', repeat('word ', 20)) FROM generate_series(1, 1000) AS n`);
  const perStatement: number[] = [];
  for (const statement of statements) {
    for (let warm = 0; warm < 20; warm++) await db.query(statement.sql, statement.params);
    const started = performance.now();
    for (let round = 0; round < statement.times; round++) await db.query(statement.sql, statement.params);
    perStatement.push((performance.now() - started) / statement.times);
  }
  return perStatement;
}

const template = await pgliteTemplate();
const inThread = await PGlite.create('memory://', { extensions: { vector }, loadDataDir: new DumpBlob(template), ...(await pgliteWasmModules()) });
const local = await measure(inThread);
await inThread.close();
const thread = await PgliteThread.open({ dataDir: 'memory://', loadDataDir: template });
const hopped = await measure(thread);
await thread.close();

process.stdout.write(`| statement (load ${os.loadavg()[0].toFixed(1)}) | in-thread ms | worker thread ms | hop ms |\n|---|---:|---:|---:|\n`);
statements.forEach((statement, index) => {
  const a = local[index] as number;
  const b = hopped[index] as number;
  process.stdout.write(`| ${statement.label} | ${ms(a)} | ${ms(b)} | ${ms(b - a)} |\n`);
});
