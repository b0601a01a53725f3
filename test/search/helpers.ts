import { execFile } from 'node:child_process';
import type { Test } from 'tap';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Database } from '../../src/db/database.js';
import { cosineSimilarity } from '../../src/interchange/vectors.js';
import { conceptNameKey } from '../../src/domain/concept/decider.js';
import { mergeAliases, type DocumentUpdate } from '../../src/search/collection.js';
import { concepts, facts, type ConceptDocument, type FactDocument } from '../../src/search/collections/index.js';
import type { SearchIndex } from '../../src/search/port.js';
import type { SearchHarness } from './contract.js';

const run = promisify(execFile);
const repositoryRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const script = path.join(repositoryRoot, 'scripts/opensearch.sh');

export const DEFAULT_OPENSEARCH_PORT = Number(process.env.OPENSEARCH_PORT ?? 19200);

export async function openSearchHealth(port: number): Promise<string | null> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}/_cluster/health`, { signal: AbortSignal.timeout(3000) });
    const body = (await response.json()) as { status?: string };
    return body.status ?? null;
  } catch {
    return null;
  }
}

/** Runs scripts/opensearch.sh (start, stop, status) for a port; its log goes to the test's stderr on failure. */
export async function openSearchScript(command: 'start' | 'stop' | 'status', port = DEFAULT_OPENSEARCH_PORT): Promise<void> {
  try {
    await run(script, [command], {
      env: { ...process.env, OPENSEARCH_PORT: String(port) },
      timeout: 600_000, // the first start downloads about 60 MB from Maven Central
      maxBuffer: 16 * 1024 * 1024,
    });
  } catch (error) {
    const details = error as { stderr?: string; stdout?: string };
    throw new Error(`scripts/opensearch.sh ${command} failed:\n${details.stderr ?? ''}${details.stdout ?? ''}`);
  }
}

/**
 * The URL of a healthy OpenSearch node on `port`, starting one with scripts/opensearch.sh when
 * none answers (so `npx tap test/search` works alone). A node this starts keeps running for the
 * next run; `scripts/opensearch.sh stop` ends it.
 */
export async function ensureOpenSearch(port = DEFAULT_OPENSEARCH_PORT): Promise<string> {
  const status = await openSearchHealth(port);
  if (status !== 'green' && status !== 'yellow') await openSearchScript('start', port);
  return `http://127.0.0.1:${port}`;
}

/** Deletes every index whose name starts with `prefix` (test prefixes are unique per test). */
export async function deleteIndices(node: string, prefix: string): Promise<void> {
  const response = await fetch(`${node}/${prefix}*?expand_wildcards=all`, { method: 'DELETE' });
  if (!response.ok && response.status !== 404) throw new Error(`deleting ${prefix}* answered ${response.status}: ${await response.text()}`);
}

/** Raw REST reads for assertions on OpenSearch's own answers (mappings, aliases, settings). */
// `any`: these bodies are OpenSearch's, keyed by index names the tests build; tap's matchers check their shape.
export async function getJson(url: string): Promise<{ status: number; body: any }> {
  const response = await fetch(url);
  return { status: response.status, body: await response.json() };
}

export function uniquePrefix(label: string): string {
  return `factlog-test-${label}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

/** What the facts projection writes for a fact (first insert wins, as in projections/facts.ts). */
export async function insertFacts(db: Database, docs: FactDocument[]): Promise<void> {
  if (docs.length === 0) return;
  await db.knex('facts')
    .insert(docs.map(({ vector: _vector, ...doc }) => doc))
    .onConflict(['repository_id', 'content_hash'])
    .ignore();
}

/** What the concepts projection keeps for a concept: its row (with alias_text for search) and alias rows. */
async function writeConceptRows(db: Database, doc: Omit<ConceptDocument, 'vector'>): Promise<void> {
  const now = new Date().toISOString();
  await db.knex('concepts')
    .insert({
      id: doc.id,
      repository_id: doc.repository_id,
      canonical_name: doc.canonical_name,
      name_key: conceptNameKey(doc.canonical_name),
      context: doc.context,
      status: doc.status,
      fact_count: doc.fact_count,
      alias_text: doc.aliases.join(' '),
      created_at: now,
      updated_at: now,
    })
    .onConflict('id')
    .merge(['alias_text', 'status', 'fact_count']);
  await db.knex('concept_aliases').where({ concept_id: doc.id }).delete();
  if (doc.aliases.length > 0) {
    await db.knex('concept_aliases').insert(
      doc.aliases.map((alias) => ({
        concept_id: doc.id,
        repository_id: doc.repository_id,
        alias,
        alias_lower: conceptNameKey(alias),
        context_lower: doc.context.toLowerCase(),
      })),
    );
  }
}

/** The service's way on Postgres: projections write rows, the search index only vectors. */
export function postgresHarnessOver(db: Database, index: SearchIndex): SearchHarness {
  return {
    index,
    async load(docs) {
      await insertFacts(db, docs);
      await index.index(facts, docs);
    },
    async removeFacts(repositoryId, ids) {
      await db.knex('facts').where({ repository_id: repositoryId }).whereIn('id', ids).delete();
      await index.remove(facts, repositoryId, ids);
    },
    async loadConcepts(docs: ConceptDocument[]) {
      for (const { vector: _vector, ...doc } of docs) await writeConceptRows(db, doc);
      await index.index(concepts, docs);
    },
    async updateConcepts(updates: DocumentUpdate<ConceptDocument>[]) {
      for (const update of updates) {
        const row = await db.knex('concepts').where({ id: update.id }).first();
        const aliases = (await db.knex('concept_aliases').where({ concept_id: update.id }).orderBy('alias')).map((alias: { alias: string }) => alias.alias);
        const merged = mergeAliases(aliases, update.addTo?.aliases ?? [], update.removeFrom?.aliases ?? []);
        await writeConceptRows(db, { ...row, aliases: merged });
      }
      await index.update(concepts, updates);
    },
    async removeConcepts(repositoryId, ids) {
      await db.knex('concepts').where({ repository_id: repositoryId }).whereIn('id', ids).delete();
      await index.remove(concepts, repositoryId, ids);
    },
    close: () => db.close(),
  };
}

/** mulberry32: the same vectors on every run, so a failure can be reproduced. */
function randomSource(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let mixed = Math.imul(state ^ (state >>> 15), 1 | state);
    mixed = (mixed + Math.imul(mixed ^ (mixed >>> 7), 61 | mixed)) ^ mixed;
    return ((mixed ^ (mixed >>> 14)) >>> 0) / 4294967296 - 0.5;
  };
}

const unit = (vector: number[]) => {
  const norm = Math.hypot(...vector);
  return vector.map((value) => value / norm);
};

/**
 * A query and `count` vectors at clearly different angles from it (0.1 rad, then 0.04 rad more
 * each): the k nearest are the same by any cosine accurate to a few thousandths, so an index
 * that approximates (HNSW, half precision) finds exactly the neighbours exact arithmetic ranks.
 * Float32 values (as events carry them), in a shuffled order.
 */
export function gradedVectors(dimensions: number, count: number, seed: number): { query: number[]; vectors: number[][] } {
  const random = randomSource(seed);
  const draw = () => unit(Array.from({ length: dimensions }, random));
  const query = draw();
  const vectors = Array.from({ length: count }, (_, rank) => {
    const angle = 0.1 + 0.04 * rank;
    const away = draw();
    return query.map((value, i) => Math.fround(value * Math.cos(angle) + away[i] * Math.sin(angle)));
  });
  for (let i = vectors.length - 1; i > 0; i--) {
    const j = Math.floor((random() + 0.5) * (i + 1));
    [vectors[i], vectors[j]] = [vectors[j], vectors[i]];
  }
  return { query: query.map(Math.fround), vectors };
}

/** The k documents nearest to `query` by exact cosine, with their similarity. */
export function exactNearest(docs: readonly { id: string; vector?: number[] | null }[], query: readonly number[], k: number): { id: string; score: number }[] {
  return docs
    .map((doc) => ({ id: doc.id, score: cosineSimilarity(doc.vector ?? [], query) }))
    .sort((a, b) => b.score - a.score)
    .slice(0, k);
}

/** Asserts a k-NN answer is the exact k nearest, nearest first, each scored with its cosine (within `tolerance`). */
export function assertExactNearest(t: Test, items: readonly { id: string; score: number }[], expected: readonly { id: string; score: number }[], what: string, tolerance = 1e-5): void {
  t.same(items.map((item) => item.id), expected.map((item) => item.id), `${what}: the exact nearest, nearest first`);
  t.ok(
    items.every((item, position) => Math.abs(item.score - expected[position].score) < tolerance),
    `${what}: scored with the exact cosine (${items.map((item) => item.score.toFixed(4)).join(', ')})`,
  );
}
