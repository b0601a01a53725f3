/**
 * HNSW build parameters against insert cost and recall, on PGlite with the built-in embedder's
 * vectors (docs/performance.md, "Sixth round"). A page's fact-vector insert is the longest
 * statement a projection batch holds PGlite's one connection for, and every request that
 * arrives meanwhile waits for it; its cost is set by the index's `m` and `ef_construction`.
 *
 *   node --import=tsx --liftoff-only bench/hnswParams.ts
 *
 * BENCH_FACTS (12000: a 1,000-page repository), BENCH_QUERIES (200), BENCH_PARAMS ("16:64,16:32,8:32,8:64",
 * m:ef_construction pairs; 16:64 is pgvector's default), BENCH_SEED (7). Vectors go in 12 to a
 * statement, as a page's do. Recall@k counts a hit when its distance is within the exact k-th
 * nearest's (synthetic facts that differ only by a year embed alike: ties are not misses);
 * queries run as the service's do: iterative scan `strict_order`, `ef_search` max(40, k).
 */
import { performance } from 'node:perf_hooks';
import { openDatabase } from '../src/db/database.js';
import { createLocalEmbedder } from '../src/providers/embeddings/local.js';
import { envNumber, int, log, ms, prng } from './common.js';
import { syntheticFacts } from './seedFacts.js';

const FACTS = envNumber('BENCH_FACTS', 12_000);
const QUERIES = envNumber('BENCH_QUERIES', 200);
const SEED = envNumber('BENCH_SEED', 7);
const PAGE = 12;
const params = (process.env.BENCH_PARAMS ?? '16:64,16:32,8:32,8:64').split(',').map((pair) => {
  const [m, efConstruction] = pair.split(':').map(Number);
  if (!Number.isInteger(m) || !Number.isInteger(efConstruction)) throw new Error(`BENCH_PARAMS: ${pair} is not m:ef_construction`);
  return { m: m as number, efConstruction: efConstruction as number };
});

const cosineDistance = (a: readonly number[], b: readonly number[]) => {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += (a[i] as number) * (b[i] as number);
    na += (a[i] as number) ** 2;
    nb += (b[i] as number) ** 2;
  }
  return 1 - dot / Math.sqrt(na * nb);
};
const literal = (vector: readonly number[]) => `[${vector.join(',')}]`;

async function main(): Promise<void> {
  const embedder = createLocalEmbedder();
  const texts = syntheticFacts(prng(SEED), FACTS + QUERIES).map((fact) => fact.content);
  const vectors: number[][] = [];
  for (let start = 0; start < texts.length; start += 1000) vectors.push(...(await embedder.embed(texts.slice(start, start + 1000))));
  const stored = vectors.slice(0, FACTS);
  const queries = vectors.slice(FACTS);
  const ks = [10, 60];
  // The exact k-th nearest distance of each query, by brute force.
  const exactKth = new Map(ks.map((k) => [k, queries.map((query) => stored.map((vector) => cosineDistance(query, vector)).sort((a, b) => a - b)[k - 1] as number)]));
  log(`${int(FACTS)} facts, ${QUERIES} queries embedded; exact neighbours computed`);

  const rows: string[] = [];
  for (const { m, efConstruction } of params) {
    const db = await openDatabase({ kind: 'pglite', dataDir: 'memory://' });
    try {
      const knex = db.knex;
      await knex.raw('CREATE EXTENSION IF NOT EXISTS vector');
      await knex.raw(`CREATE TABLE v (id integer PRIMARY KEY, embedding vector(${stored[0]?.length ?? 100}))`);
      await knex.raw(`CREATE INDEX v_embedding ON v USING hnsw (embedding vector_cosine_ops) WITH (m = ${m}, ef_construction = ${efConstruction})`);
      const started = performance.now();
      const pageTimes: number[] = [];
      for (let start = 0; start < stored.length; start += PAGE) {
        const t0 = performance.now();
        await knex('v').insert(stored.slice(start, start + PAGE).map((vector, offset) => ({ id: start + offset, embedding: literal(vector) })));
        pageTimes.push(performance.now() - t0);
      }
      const insertSeconds = (performance.now() - started) / 1000;
      const lastThousandth = pageTimes.slice(-Math.ceil(1000 / PAGE));
      await knex.raw('ANALYZE v');
      await knex.raw('SET hnsw.iterative_scan = strict_order');
      const recalls: string[] = [];
      for (const k of ks) {
        await knex.raw(`SET hnsw.ef_search = ${Math.max(40, k)}`);
        let found = 0;
        const t0 = performance.now();
        for (const [index, query] of queries.entries()) {
          const kth = (exactKth.get(k) as number[])[index] as number;
          const result = await knex.raw<{ rows: Array<{ distance: number }> }>(`SELECT embedding <=> ?::vector AS distance FROM v ORDER BY embedding <=> ?::vector LIMIT ${k}`, [literal(query), literal(query)]);
          found += result.rows.filter((row) => row.distance <= kth + 1e-6).length;
        }
        recalls.push(`${((100 * found) / (k * queries.length)).toFixed(1)}% (${ms((performance.now() - t0) / queries.length)} ms)`);
      }
      const row = `| m = ${m}, ef_construction = ${efConstruction} | ${insertSeconds.toFixed(1)} s (${ms((1000 * insertSeconds) / stored.length)} ms) | ${ms(lastThousandth.reduce((a, b) => a + b, 0) / lastThousandth.length)} ms | ${recalls.join(' | ')} |`;
      log(row);
      rows.push(row);
    } finally {
      await db.close();
    }
  }
  console.log(`\n| HNSW build parameters, ${int(FACTS)} vectors (100-d, built-in embedder), ${QUERIES} queries | insert, 12 per statement: total (per vector) | one page's insert, last 1,000 vectors | recall@10 (ms per query) | recall@60 (ms per query) |`);
  console.log('|---|---:|---:|---:|---:|');
  for (const row of rows) console.log(row);
}

await main();
