/**
 * A repository of many facts for the benches that search it (bench/reports.ts, bench/mcp.ts):
 * distinct synthetic facts ("Anna Berg built a copper telescope in Bergen in 1841."), embedded
 * with the service's embedder and loaded straight into the `facts` read model and `fact_vectors`,
 * then the HNSW index is built once. The benches time searching, not ingestion.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { contentHash } from '../src/interchange/hashing.js';
import { facts as factCollection } from '../src/search/collections/index.js';
import type { TestService } from '../test/helpers/service.js';
import { log, secs } from './common.js';

const FIRST = ['Anna', 'Boris', 'Clara', 'David', 'Elena', 'Felix', 'Greta', 'Hugo', 'Ingrid', 'Jonas', 'Karin', 'Lukas', 'Marta', 'Nils', 'Olga', 'Paul', 'Rosa', 'Stefan', 'Tanja', 'Viktor'];
const LAST = ['Berg', 'Costa', 'Dahl', 'Engel', 'Fischer', 'Gruber', 'Hansen', 'Ivanov', 'Jensen', 'Keller', 'Lindqvist', 'Moreau', 'Novak', 'Olsen', 'Petrov', 'Quist', 'Rossi', 'Schmidt', 'Tanaka', 'Weber'];
const VERBS = ['built', 'studied', 'measured', 'described', 'tested', 'designed', 'repaired', 'photographed', 'catalogued', 'analysed', 'sold', 'bought', 'restored', 'painted', 'mapped'];
const OBJECTS = ['a copper telescope', 'the northern glacier', 'a steam engine', 'the old lighthouse', 'a rare orchid', 'the harbour crane', 'a silver compass', 'the river delta', 'a wooden bridge', 'the salt mine'];
const PLACES = ['Bergen', 'Lisbon', 'Krakow', 'Lyon', 'Turin', 'Ghent', 'Tartu', 'Porto', 'Basel', 'Malmo', 'Riga', 'Leiden', 'Graz', 'Aarhus', 'Bilbao'];

/** What a synthetic fact says; benches restate it in other words to query for it. */
export interface FactParts {
  first: string;
  last: string;
  verb: string;
  object: string;
  place: string;
  year: number;
}

export interface SeededBenchFact {
  id: string;
  content: string;
  hash: string;
  parts: FactParts;
}

export function factParts(random: () => number): FactParts {
  const pick = <T>(list: readonly T[]) => list[Math.floor(random() * list.length)] as T;
  return { first: pick(FIRST), last: pick(LAST), verb: pick(VERBS), object: pick(OBJECTS), place: pick(PLACES), year: 1700 + Math.floor(random() * 320) };
}

export const factText = (p: FactParts) => `${p.first} ${p.last} ${p.verb} ${p.object} in ${p.place} in ${p.year}.`;

/** `count` distinct facts from the seeded generator. */
export function syntheticFacts(random: () => number, count: number): SeededBenchFact[] {
  const all = new Map<string, FactParts>();
  while (all.size < count) {
    const p = factParts(random);
    all.set(factText(p), p);
  }
  return [...all].map(([content, parts]) => ({ id: randomUUID(), content, hash: contentHash(content), parts }));
}

/** Embeds the facts and loads them into the repository's read models and vector index. */
export async function loadFacts(service: TestService, repositoryId: string, facts: readonly SeededBenchFact[]): Promise<void> {
  const { context } = service;
  const knex = context.db.knex;
  const embedder = context.embedder;
  if (!embedder) throw new Error('the bench needs the local embedder');
  const t0 = performance.now();
  const vectors: number[][] = [];
  for (let start = 0; start < facts.length; start += 1000) vectors.push(...(await embedder.embed(facts.slice(start, start + 1000).map((fact) => fact.content))));
  log(`facts embedded in ${secs((performance.now() - t0) / 1000)}`);
  // One document through the port creates the vector table; the rest are loaded in bulk.
  const [first] = facts;
  if (!first) return;
  await context.search.index(factCollection, [
    { id: first.id, repository_id: repositoryId, content: first.content, content_hash: first.hash, fact_kind: 'text', status: 'stable', created_at: new Date().toISOString(), vector: vectors[0] },
  ]);
  await knex.raw('DROP INDEX IF EXISTS fact_vectors_embedding');
  const createdAt = new Date();
  const t1 = performance.now();
  for (let start = 1; start < facts.length; start += 500) {
    const slice = facts.slice(start, start + 500);
    await knex('facts').insert(
      slice.map((fact) => ({ id: fact.id, repository_id: repositoryId, content: fact.content, content_hash: fact.hash, fact_kind: 'text', status: 'stable', model_id: 'bench', embedding_model: embedder.modelId, created_at: createdAt })),
    );
    await knex('fact_vectors').insert(slice.map((fact, offset) => ({ fact_id: fact.id, repository_id: repositoryId, embedding: `[${(vectors[start + offset] as number[]).join(',')}]` })));
  }
  await knex.raw(`SET maintenance_work_mem = '512MB'`);
  await knex.raw('CREATE INDEX fact_vectors_embedding ON fact_vectors USING hnsw (embedding vector_cosine_ops)');
  await knex.raw('RESET maintenance_work_mem');
  await knex.raw('ANALYZE facts');
  await knex.raw('ANALYZE fact_vectors');
  log(`facts loaded and indexed in ${secs((performance.now() - t1) / 1000)}`);
}
