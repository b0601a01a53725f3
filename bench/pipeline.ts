/**
 * Pipeline benchmark on the embedded default (PGlite on disk, local chat model, local embedder):
 *
 * - documents and facts per second through the whole pipeline (fetch over HTTP → decomposition
 *   → embedding → deduplication → concepts → concept embeddings → relations), for the test
 *   corpus (test/fixtures/corpus, 33 HTML and PDF documents) and for a scaled-up synthetic corpus
 *   of generated HTML pages;
 * - search latency p50/p95 through the REST route (`GET /facts?mode=lexical|hybrid`, in-process
 *   inject: routing, auth, query embedding, SQL) at 100k facts, loaded straight into the read
 *   model and the vector table (as a rebuild would) with vectors from the local embedder;
 * - peak resident memory (maxRSS) of the process that runs the service, after each part.
 *
 *   node --import=tsx bench/pipeline.ts
 *
 * Sizes (environment): BENCH_DOCS (300 synthetic documents), BENCH_SENTENCES (12 per document),
 * BENCH_FACTS (100000), BENCH_QUERIES (200), BENCH_SEED (7); BENCH_PARTS (corpus,synthetic,search)
 * runs a subset, and only a full run writes the "Pipeline" section of bench/RESULTS.md.
 */
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { randomUUID } from 'node:crypto';
import { contentHash } from '../src/interchange/hashing.js';
import { createLocalEmbedder } from '../src/providers/embeddings/local.js';
import { registerUser, startTestService, type TestService } from '../test/helpers/service.js';
import { startWebServer, type Page } from '../test/helpers/webServer.js';
import {
  createRepository,
  injectApi,
  listAll,
  PIPELINE_TEST_OVERRIDES,
  startCorpusServer,
  taskSummary,
  type Api,
} from '../test/helpers/corpus.js';
import { envNumber, int, log, ms, prng, secs, summary } from './common.js';

const sizes = {
  docs: envNumber('BENCH_DOCS', 300),
  sentences: envNumber('BENCH_SENTENCES', 12),
  facts: envNumber('BENCH_FACTS', 100_000),
  queries: envNumber('BENCH_QUERIES', 200),
  seed: envNumber('BENCH_SEED', 7),
};
const allParts = ['corpus', 'synthetic', 'search'] as const;
const parts = new Set((process.env.BENCH_PARTS ?? allParts.join(',')).split(',').map((part) => part.trim()));
const warmUpQueries = 20;
const pageSize = 20;

const rate = (value: number) => (value >= 100 ? int(value) : value.toFixed(1));
/** Peak resident set size of this process so far, MiB (resourceUsage reports KiB). */
const peakRssMiB = () => process.resourceUsage().maxRSS / 1024;

// -------------------------------------------------------------------------------------------
// Synthetic sentences: simple declaratives the local extractor keeps whole
// -------------------------------------------------------------------------------------------

const FIRST = ['Anna', 'Boris', 'Clara', 'David', 'Elena', 'Felix', 'Greta', 'Hugo', 'Ingrid', 'Jonas', 'Karin', 'Lukas', 'Marta', 'Nils', 'Olga', 'Paul', 'Rosa', 'Stefan', 'Tanja', 'Viktor'];
const LAST = ['Berg', 'Costa', 'Dahl', 'Engel', 'Fischer', 'Gruber', 'Hansen', 'Ivanov', 'Jensen', 'Keller', 'Lindqvist', 'Moreau', 'Novak', 'Olsen', 'Petrov', 'Quist', 'Rossi', 'Schmidt', 'Tanaka', 'Weber'];
const VERBS = ['built', 'studied', 'measured', 'described', 'tested', 'designed', 'repaired', 'photographed', 'catalogued', 'analysed', 'sold', 'bought', 'restored', 'painted', 'mapped'];
const OBJECTS = [
  'a copper telescope', 'the northern glacier', 'a steam engine', 'the old lighthouse', 'a rare orchid', 'the harbour crane',
  'a silver compass', 'the river delta', 'a wooden bridge', 'the salt mine', 'a glass prism', 'the coral reef', 'a brass clock',
  'the granite quarry', 'a paper mill', 'the tea garden', 'a radio mast', 'the wind farm', 'a sugar refinery', 'the cocoa farm',
];
const PLACES = ['Bergen', 'Lisbon', 'Krakow', 'Lyon', 'Turin', 'Ghent', 'Tartu', 'Porto', 'Basel', 'Malmo', 'Riga', 'Leiden', 'Graz', 'Aarhus', 'Bilbao'];

function sentence(random: () => number): string {
  const pick = <T>(list: readonly T[]) => list[Math.floor(random() * list.length)] as T;
  const year = 1700 + Math.floor(random() * 320);
  return `${pick(FIRST)} ${pick(LAST)} ${pick(VERBS)} ${pick(OBJECTS)} in ${pick(PLACES)} in ${year}.`;
}

function syntheticPages(count: number, sentencesPerDoc: number, random: () => number): Record<string, Page> {
  const pages: Record<string, Page> = {};
  for (let doc = 0; doc < count; doc++) {
    const paragraphs: string[] = [];
    for (let s = 0; s < sentencesPerDoc; s += 4) {
      paragraphs.push(`<p>${Array.from({ length: Math.min(4, sentencesPerDoc - s) }, () => sentence(random)).join(' ')}</p>`);
    }
    pages[`/synthetic/${doc}.html`] = {
      body: `<!doctype html><html><head><title>Field notes ${doc} | Bench Archive</title></head><body>
<header><nav><a href="/">Home</a> <a href="/archive">Archive</a></nav></header>
<main><article><h1>Field notes ${doc}</h1>${paragraphs.join('\n')}</article></main>
<footer><p>Bench Archive keeps field notes.</p></footer></body></html>`,
    };
  }
  return pages;
}

// -------------------------------------------------------------------------------------------
// Whole-pipeline throughput
// -------------------------------------------------------------------------------------------

interface ThroughputResult {
  documents: number;
  extractedFacts: number;
  visibleFacts: number;
  concepts: number;
  seconds: number;
  failed: number;
  peakRss: number;
}

/** Registers the URLs, then times until the repository's tasks are complete. */
async function runDocuments(api: Api, name: string, urls: readonly string[]): Promise<ThroughputResult> {
  const repositoryId = await createRepository(api, name);
  const t0 = performance.now();
  let lastLog = performance.now();
  for (const [position, url] of urls.entries()) {
    const reply = await api('POST', `/api/v1/repositories/${repositoryId}/sources`, { url });
    if (reply.status !== 201) throw new Error(`register ${url}: ${reply.status} ${JSON.stringify(reply.body)}`);
    if (performance.now() - lastLog > 10_000) {
      log(`  ${name}: ${position + 1} of ${urls.length} registered after ${secs((performance.now() - t0) / 1000)} …`);
      lastLog = performance.now();
    }
  }
  log(`  ${name}: all ${urls.length} registered after ${secs((performance.now() - t0) / 1000)}`);
  for (;;) {
    const tasks = await taskSummary(api, repositoryId);
    if (tasks.complete === true) break;
    if (performance.now() - lastLog > 10_000) {
      log(`  ${name}: ${secs((performance.now() - t0) / 1000)} …`);
      lastLog = performance.now();
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const seconds = (performance.now() - t0) / 1000;
  const sources = await listAll(api, `/api/v1/repositories/${repositoryId}/sources`);
  const facts = await api('GET', `/api/v1/repositories/${repositoryId}/facts?mode=lexical&limit=1`);
  const concepts = await api('GET', `/api/v1/repositories/${repositoryId}/concepts?show_small=true&limit=1`);
  return {
    documents: urls.length,
    extractedFacts: sources.reduce((sum, source) => sum + Number(source.fact_count ?? 0), 0),
    visibleFacts: Number(facts.body.total),
    concepts: Number(concepts.body?.total ?? Number.NaN),
    seconds,
    failed: sources.filter((source) => source.status !== 'processed').length,
    peakRss: peakRssMiB(),
  };
}

// -------------------------------------------------------------------------------------------
// Search at 100k facts
// -------------------------------------------------------------------------------------------

interface SearchResult {
  embedSeconds: number;
  loadSeconds: number;
  indexSeconds: number;
  lexical: ReturnType<typeof summary>;
  hybrid: ReturnType<typeof summary>;
  lexicalMeanTotal: number;
  hybridModes: string[];
  peakRss: number;
}

async function runSearch(service: TestService, api: Api): Promise<SearchResult> {
  const knex = service.context.db.knex;
  const repositoryId = await createRepository(api, 'Search at scale');
  const random = prng(sizes.seed * 31);
  const contents = new Set<string>();
  while (contents.size < sizes.facts) contents.add(sentence(random));
  const facts = [...contents].map((content) => ({ id: randomUUID(), content, hash: contentHash(content) }));

  const embedder = createLocalEmbedder();
  const t0 = performance.now();
  const vectors: number[][] = [];
  for (let start = 0; start < facts.length; start += 1000) vectors.push(...(await embedder.embed(facts.slice(start, start + 1000).map((fact) => fact.content))));
  const embedSeconds = (performance.now() - t0) / 1000;
  log(`  search: ${int(facts.length)} facts embedded in ${secs(embedSeconds)}`);

  // The vector table exists once the service indexed a vector; bulk load without the HNSW index,
  // then build it, as a rebuild would (inserting 100k into a live HNSW graph on PGlite is far slower).
  const table = await knex.raw(`SELECT to_regclass('fact_vectors') AS name`);
  if (!(table.rows?.[0]?.name)) throw new Error('fact_vectors does not exist: run the corpus part first (the service creates it)');
  const t1 = performance.now();
  await knex.raw('DROP INDEX IF EXISTS fact_vectors_embedding');
  const createdAt = new Date();
  for (let start = 0; start < facts.length; start += 500) {
    const slice = facts.slice(start, start + 500);
    await knex('facts').insert(
      slice.map((fact) => ({
        id: fact.id,
        repository_id: repositoryId,
        content: fact.content,
        content_hash: fact.hash,
        fact_kind: 'text',
        status: 'stable',
        model_id: 'bench',
        embedding_model: embedder.modelId,
        created_at: createdAt,
      })),
    );
    await knex('fact_vectors').insert(
      slice.map((fact, offset) => ({ fact_id: fact.id, repository_id: repositoryId, embedding: `[${(vectors[start + offset] as number[]).join(',')}]` })),
    );
  }
  const loadSeconds = (performance.now() - t1) / 1000;
  const t2 = performance.now();
  await knex.raw(`SET maintenance_work_mem = '512MB'`);
  await knex.raw('CREATE INDEX fact_vectors_embedding ON fact_vectors USING hnsw (embedding vector_cosine_ops)');
  await knex.raw('RESET maintenance_work_mem');
  await knex.raw('ANALYZE facts');
  await knex.raw('ANALYZE fact_vectors');
  const indexSeconds = (performance.now() - t2) / 1000;
  log(`  search: rows loaded in ${secs(loadSeconds)}, HNSW built in ${secs(indexSeconds)}; querying`);

  // 1–3 words: a name, an object word, a place, in varying combinations.
  const queryRandom = prng(sizes.seed * 97);
  const pick = <T>(list: readonly T[]) => list[Math.floor(queryRandom() * list.length)] as T;
  const words = () => [pick(LAST), (pick(OBJECTS).split(' ').at(-1) as string), pick(PLACES), pick(VERBS), pick(FIRST)];
  const queries = Array.from({ length: sizes.queries + warmUpQueries }, () => {
    const all = words();
    return all.slice(0, 1 + Math.floor(queryRandom() * 3)).join(' ');
  });

  const timeMode = async (mode: 'lexical' | 'hybrid') => {
    const times: number[] = [];
    const totals: number[] = [];
    const modes = new Set<string>();
    for (const [position, query] of queries.entries()) {
      const started = performance.now();
      const reply = await api('GET', `/api/v1/repositories/${repositoryId}/facts?query=${encodeURIComponent(query)}&mode=${mode}&limit=${pageSize}`);
      const elapsed = performance.now() - started;
      if (reply.status !== 200) throw new Error(`${mode} search ${query}: ${reply.status} ${JSON.stringify(reply.body)}`);
      modes.add(String(reply.body.mode));
      if (position < warmUpQueries) continue;
      times.push(elapsed);
      totals.push(Number(reply.body.total));
    }
    return { times, totals, modes };
  };
  const lexical = await timeMode('lexical');
  const hybrid = await timeMode('hybrid');
  return {
    embedSeconds,
    loadSeconds,
    indexSeconds,
    lexical: summary(lexical.times),
    hybrid: summary(hybrid.times),
    lexicalMeanTotal: lexical.totals.reduce((sum, total) => sum + total, 0) / Math.max(1, lexical.totals.length),
    hybridModes: [...hybrid.modes],
    peakRss: peakRssMiB(),
  };
}

// -------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const started = new Date();
  const loadStart = os.loadavg()[0] ?? 0;
  const service = await startTestService({ overrides: PIPELINE_TEST_OVERRIDES });
  const { token } = await registerUser(service, 'bench@example.org');
  const api = injectApi(service, token);
  const results: { corpus?: ThroughputResult; synthetic?: ThroughputResult; search?: SearchResult } = {};
  try {
    if (parts.has('corpus') || parts.has('search')) {
      const web = await startCorpusServer();
      try {
        log(`corpus: ${web.documents.length} documents`);
        results.corpus = await runDocuments(api, 'Corpus', web.documents.map((document) => document.url));
        log(`  corpus: ${secs(results.corpus.seconds)}`);
      } finally {
        await web.close();
      }
    }
    if (parts.has('synthetic')) {
      const web = await startWebServer(syntheticPages(sizes.docs, sizes.sentences, prng(sizes.seed)));
      try {
        log(`synthetic: ${sizes.docs} documents × ${sizes.sentences} sentences`);
        const urls = Array.from({ length: sizes.docs }, (_, doc) => `${web.baseUrl}/synthetic/${doc}.html`);
        results.synthetic = await runDocuments(api, 'Synthetic', urls);
        log(`  synthetic: ${secs(results.synthetic.seconds)}`);
      } finally {
        await web.close();
      }
    }
    if (parts.has('search')) {
      log(`search: ${int(sizes.facts)} facts`);
      results.search = await runSearch(service, api);
    }
  } finally {
    await service.close();
  }

  const throughputRow = (label: string, result: ThroughputResult | undefined) =>
    result
      ? `| ${label} | ${int(result.documents)} | ${int(result.extractedFacts)} / ${int(result.visibleFacts)} | ${Number.isNaN(result.concepts) ? '—' : int(result.concepts)} | ${secs(result.seconds)} | **${rate(result.documents / result.seconds)}** | **${rate(result.extractedFacts / result.seconds)}** | ${int(result.peakRss)} |`
      : `| ${label} | not run | | | | | | |`;
  const search = results.search;
  const lines = [
    '## Pipeline',
    '',
    `Machine: ${os.cpus().length} CPUs (${os.cpus()[0]?.model.trim() ?? 'unknown'}), ${int(os.totalmem() / 2 ** 30)} GiB RAM; Node ${process.version}; embedded tier (PGlite on disk), local chat model and local embedder.`,
    `Load average at start / end: ${loadStart.toFixed(2)} / ${(os.loadavg()[0] ?? 0).toFixed(2)} (the machine is shared: expect ±30% between runs).`,
    `Date: ${started.toISOString()}. Command: \`node --import=tsx bench/pipeline.ts\` (BENCH_DOCS=${sizes.docs} BENCH_SENTENCES=${sizes.sentences} BENCH_FACTS=${sizes.facts} BENCH_QUERIES=${sizes.queries}; took ${((Date.now() - started.getTime()) / 1000).toFixed(0)} s).`,
    '',
    '| whole pipeline, fetch → relations | documents | facts extracted / visible after dedup | concepts | time to complete | documents/s | facts/s | peak RSS so far, MiB |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
    throughputRow('test corpus (23 HTML + 10 PDF, test/fixtures/corpus)', results.corpus),
    throughputRow(`synthetic HTML pages (${sizes.sentences} sentences each)`, results.synthetic),
    '',
  ];
  if (search) {
    lines.push(
      `| search at ${int(sizes.facts)} facts, \`GET /facts\` top ${pageSize}, ${sizes.queries} queries of 1–3 words | p50 ms | p95 ms | max ms |`,
      '|---|---:|---:|---:|',
      `| lexical (\`mode=lexical\`: tsvector + GIN, ranked, with total; ${int(search.lexicalMeanTotal)} matches per query on average) | **${ms(search.lexical.p50)}** | **${ms(search.lexical.p95)}** | ${ms(search.lexical.max)} |`,
      `| hybrid (\`mode=hybrid\`: query embedding + HNSW k-NN + lexical, fused; reply mode ${search.hybridModes.join('/')}) | **${ms(search.hybrid.p50)}** | **${ms(search.hybrid.p95)}** | ${ms(search.hybrid.max)} |`,
      '',
      `Peak RSS at the end: **${int(search.peakRss)} MiB** (the service, and the bench's own 100k sentences and vectors).`,
      '',
    );
  }
  lines.push(
    'Throughput is timed from the first `POST /sources` to the first `GET /tasks` that answers `complete`',
    '(registration included; the pages come from a local HTTP server); "facts extracted" sums the sources\'',
    '`fact_count`, "visible" is what lists and search show after deduplication. The service runs in the',
    'benchmark process (`startTestService`: PGlite on disk under a temp dir, default worker counts, poll',
    'interval 50 ms, relation refresh every second, dedup catch-up every 3 s; these keep running for every',
    'repository while the queries are timed, on the same single PGlite connection), so peak RSS is that of one embedded',
    'node including the word-vector table of the local embedder. Synthetic pages are generated sentences',
    '(name, verb, object, place, year; fixed seed); some reach the deduplication threshold and merge.',
  );
  if (search) {
    lines.push(
      `Search: ${int(sizes.facts)} generated sentences embedded by the local embedder (${secs(search.embedSeconds)}), written to the \`facts\` read model and \`fact_vectors\` (${secs(search.loadSeconds)}), HNSW index built afterwards (${secs(search.indexSeconds)}); ${warmUpQueries} warm-up queries per mode, then one query at a time through the REST route (in-process inject: auth, repository check, query embedding, SQL). The loaded facts are \`stable\` with no \`stable_since\`, like facts stabilized long ago: the dedup catch-up leaves them alone (before commit a079a0e it re-checked every stable fact of the last 168 h on each pass, which kept the single PGlite connection busy and made these queries take seconds).`,
    );
  }
  const section = lines.join('\n');
  process.stdout.write(`${section}\n`);

  if (!allParts.every((part) => parts.has(part))) {
    log('(a partial run: bench/RESULTS.md left as it is)');
    return;
  }
  const resultsPath = path.resolve('bench/RESULTS.md');
  const previous = existsSync(resultsPath) ? await readFile(resultsPath, 'utf8') : '# Benchmark results\n\n';
  const sectionPattern = /^## Pipeline\n[\s\S]*?(?=^## |(?![\s\S]))/m;
  const next = sectionPattern.test(previous) ? previous.replace(sectionPattern, `${section}\n\n`) : `${previous.trimEnd()}\n\n${section}`;
  await writeFile(resultsPath, `${next.trimEnd()}\n`);
  log(`total ${((Date.now() - started.getTime()) / 1000).toFixed(0)} s; bench/RESULTS.md updated`);
}

await main();
