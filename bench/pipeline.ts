/**
 * Pipeline benchmark (bench/RESULTS.md, "Pipeline"; how to read it: docs/performance.md, "Ingest").
 * One command measures, side by side:
 *
 * - `ingest`: the embedded default (PGlite on disk, built-in local models, default config) as a
 *   `factlog serve` child process; BENCH_DOCS synthetic 12-sentence HTML pages served over local
 *   HTTP are added one after another through the REST API. Measured: documents/s and facts/s over
 *   the run, the rate of the first and the last 100 documents (from each source's last finished
 *   job), how long each `POST /sources` took, `/healthz` and a fact search (`GET /facts?query=`)
 *   answered by a concurrent prober, and the child's peak RSS (VmHWM).
 * - `openai`: the same pages through the OpenAI-compatible providers against a local test model
 *   server that answers every call after a fixed BENCH_OPENAI_LATENCY_MS (300 ms), with
 *   BENCH_OPENAI_WORKERS workers for each model-calling stage; the throughput is compared with
 *   the bound that those worker counts and that latency allow (computed below, `openAIBound`).
 * - `corpus`: the 33-document test corpus, in-process (`startTestService`).
 * - `search`: search latency at 100k facts through the REST route, in-process.
 *
 *   node --import=tsx bench/pipeline.ts
 *
 * Environment: BENCH_PARTS (ingest,openai,corpus,search), BENCH_DOCS (1000), BENCH_SENTENCES (12),
 * BENCH_OPENAI_DOCS (200), BENCH_OPENAI_WORKERS (8), BENCH_OPENAI_LATENCY_MS (300), BENCH_FACTS
 * (100000), BENCH_QUERIES (200), BENCH_SEED (7), BENCH_BATCH (0; n adds n documents at a time, each batch waited for), BENCH_PROBE (1; 0 runs ingest without the prober), BENCH_JOBS_DUMP (a file for every job's times), BENCH_CALLS_DUMP (a file for every model call's phase and times in the openai part), BENCH_PROBE_DUMP (a file for every search probe's start and time). Profiling the ingest and openai children: BENCH_CPU_PROF=<dir>
 * (node --cpu-prof) and BENCH_SQL_PROFILE=<file> (statement counts and time per statement shape,
 * bench/sqlProfile.ts, written to that file when the service exits), BENCH_READ_PROFILE=<file>
 * (what the event store's stream reads bring back: streams, rows and bytes by stream category and
 * event type, bench/readProfileHook.ts). BENCH_BUILD=1 runs the
 * compiled service (`npm run build` first) instead of src/main.ts under tsx, for the RSS a user
 * sees. The service runs with bin/factlog.js's environment and V8 flags (its shebang; BENCH_SERVICE_FLAGS=0 leaves them
 * out); BENCH_SERVICE_NODE_ARGS adds node/V8 flags to the service. The ingest child also loads bench/serviceProbeHook.mjs (its own event-loop delay and
 * memory). Only a run of every part writes bench/RESULTS.md.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, open, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';
import { randomUUID } from 'node:crypto';
import { contentHash } from '../src/interchange/hashing.js';
import { createLocalEmbedder } from '../src/providers/embeddings/local.js';
import { registerUser, startTestService, TEST_SECRET, type TestService } from '../test/helpers/service.js';
import { startWebServer, type Page } from '../test/helpers/webServer.js';
import { startOpenAIServer, type AnsweredCall } from '../test/helpers/openaiServer.js';
import { freePort, stopProcess, waitHealthy } from '../test/helpers/processes.js';
import {
  createRepository,
  httpApi,
  injectApi,
  listAll,
  PIPELINE_TEST_OVERRIDES,
  startCorpusServer,
  taskSummary,
  type Api,
} from '../test/helpers/corpus.js';
import { serviceLaunch } from '../test/helpers/serviceLaunch.js';
import { envNumber, int, log, ms, prng, secs, summary } from './common.js';
import { describeGauge, machineGauge } from './machineGauge.js';

const sizes = {
  docs: envNumber('BENCH_DOCS', 1000),
  /** BENCH_BATCH=n: the ingest part adds n documents at a time and waits for each batch (0: all at once). */
  batch: envNumber('BENCH_BATCH', 0),
  sentences: envNumber('BENCH_SENTENCES', 12),
  openaiDocs: envNumber('BENCH_OPENAI_DOCS', 200),
  openaiWorkers: envNumber('BENCH_OPENAI_WORKERS', 8),
  openaiLatencyMs: envNumber('BENCH_OPENAI_LATENCY_MS', 300),
  facts: envNumber('BENCH_FACTS', 100_000),
  queries: envNumber('BENCH_QUERIES', 200),
  seed: envNumber('BENCH_SEED', 7),
};
const allParts = ['ingest', 'openai', 'corpus', 'search'] as const;
const parts = new Set((process.env.BENCH_PARTS ?? allParts.join(',')).split(',').map((part) => part.trim()));
const warmUpQueries = 20;
const pageSize = 20;
const root = path.resolve(import.meta.dirname, '..');

const rate = (value: number) => (value >= 100 ? int(value) : value.toFixed(1));
/** Peak resident set size of this process so far, MiB (resourceUsage reports KiB). */
const peakRssMiB = () => process.resourceUsage().maxRSS / 1024;
const sleep = (milliseconds: number) => new Promise((resolve) => setTimeout(resolve, milliseconds));

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
// The service as a child process (`factlog serve`), as a user runs it
// -------------------------------------------------------------------------------------------

interface ServiceProcess {
  baseUrl: string;
  api: Api;
  child: ChildProcess;
  /** Peak RSS of the child so far (VmHWM), MiB. */
  peakRssMiB(): number;
  /** CPU seconds (user + system) the child has used so far, its threads included. */
  cpuSeconds(): number;
  /** Restarts the service's own event-loop-delay and memory measurement (bench/serviceProbeHook.mjs). */
  resetServiceProbe(): void;
  /** The service's event-loop delay since the reset and its memory at the highest RSS since then. */
  serviceProbe(): ServiceProbe | null;
  stop(): Promise<void>;
}

/** What bench/serviceProbeHook.mjs writes. */
interface ServiceProbe {
  loopDelayMs: { p50: number; p99: number; max: number; samples: number };
  /** process.memoryUsage() of the service at its highest RSS, MiB. */
  atPeakRssMiB: Record<string, number>;
}

/**
 * BENCH_BUILD=1 runs the compiled service (`bin/factlog.js serve` after `npm run build`), as a
 * user runs it; otherwise `src/main.ts` under tsx, which adds its compiler and source maps to
 * the service's memory.
 */
const runBuild = process.env.BENCH_BUILD === '1';

/** Starts `src/main.ts serve` on a fresh data dir with the given environment, registers a user. */
async function startServiceProcess(name: string, env: Record<string, string>, profile = false): Promise<ServiceProcess> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), `factlog-bench-${name}-`));
  const port = await freePort();
  const logFile = await open(path.join(dataDir, 'serve.log'), 'a');
  const nodeArgs = runBuild ? [] : [`--import=${import.meta.resolve('tsx')}`];
  // The service's own environment and V8 flags, as `bin/factlog.js` (its shebang) starts it; BENCH_SERVICE_FLAGS=0 leaves them out.
  const launch = process.env.BENCH_SERVICE_FLAGS === '0' ? { env: {}, flags: [] } : serviceLaunch();
  nodeArgs.push(...launch.flags);
  // Extra node/V8 flags for the service, e.g. BENCH_SERVICE_NODE_ARGS=--no-wasm-dynamic-tiering.
  nodeArgs.push(...(process.env.BENCH_SERVICE_NODE_ARGS ?? '').split(' ').filter(Boolean));
  if (profile && process.env.BENCH_SQL_PROFILE) {
    if (runBuild) throw new Error('BENCH_SQL_PROFILE needs tsx (its hook is TypeScript): unset BENCH_BUILD');
    nodeArgs.push(`--import=${path.join(root, 'bench/sqlProfileHook.ts')}`);
  }
  if (profile && process.env.BENCH_READ_PROFILE) {
    if (runBuild) throw new Error('BENCH_READ_PROFILE needs tsx (its hook is TypeScript): unset BENCH_BUILD');
    nodeArgs.push(`--import=${path.join(root, 'bench/readProfileHook.ts')}`);
  }
  if (profile && process.env.BENCH_CPU_PROF) nodeArgs.push('--cpu-prof', `--cpu-prof-dir=${path.resolve(process.env.BENCH_CPU_PROF)}`);
  const probeFile = path.join(dataDir, 'service-probe.json');
  if (profile) nodeArgs.push(`--import=${pathToFileURL(path.join(root, 'bench/serviceProbeHook.mjs')).href}`);
  const entry = runBuild ? path.join(root, 'bin/factlog.js') : path.join(root, 'src/main.ts');
  if (runBuild && !existsSync(path.join(root, 'dist/src/main.js'))) throw new Error('BENCH_BUILD=1 runs the compiled build: npm run build first');
  const child = spawn(process.execPath, [...nodeArgs, entry, 'serve'], {
    cwd: dataDir,
    env: {
      ...launch.env,
      ...process.env,
      SERVER_PORT: String(port),
      SERVER_HOST: '127.0.0.1',
      STORAGE_DATA_DIR: path.join(dataDir, 'data'),
      AUTH_JWTSECRET: TEST_SECRET,
      LOGGING_LEVEL: 'warn',
      BOOTSTRAP_DEFAULT_REPOSITORY: 'false',
      ...(profile ? { BENCH_SERVICE_PROBE: probeFile } : {}),
      ...env,
    },
    stdio: ['ignore', logFile.fd, logFile.fd],
  });
  const baseUrl = `http://127.0.0.1:${port}`;
  await waitHealthy(baseUrl, 180_000);
  const registered = await fetch(`${baseUrl}/api/v1/auth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: `bench-${name}@example.org`, password: 'correct horse battery' }),
  });
  if (registered.status !== 201) throw new Error(`register: ${registered.status} ${await registered.text()}`);
  const { token } = (await registered.json()) as { token: string };
  const pid = child.pid;
  return {
    baseUrl,
    api: httpApi(baseUrl, token),
    child,
    peakRssMiB() {
      if (pid === undefined) return Number.NaN;
      const match = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      return match ? Number(match[1]) / 1024 : Number.NaN;
    },
    cpuSeconds() {
      if (pid === undefined) return Number.NaN;
      // Fields 14 and 15 of /proc/<pid>/stat (after the parenthesised command): utime, stime in clock ticks.
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').split(' ');
      return (Number(fields[11]) + Number(fields[12])) / 100;
    },
    resetServiceProbe() {
      if (profile) child.kill('SIGUSR2');
    },
    serviceProbe() {
      return profile && existsSync(probeFile) ? (JSON.parse(readFileSync(probeFile, 'utf8')) as ServiceProbe) : null;
    },
    async stop() {
      await stopProcess(child, 'SIGTERM');
      await logFile.close();
      if (!process.env.BENCH_KEEP_DATA) await rm(dataDir, { recursive: true, force: true });
      else log(`  ${name}: data and serve.log kept in ${dataDir}`);
    },
  };
}

// -------------------------------------------------------------------------------------------
// Ingest: documents/s, first and last 100, POST latency, prober, peak RSS
// -------------------------------------------------------------------------------------------

interface IngestResult {
  documents: number;
  extractedFacts: number;
  visibleFacts: number;
  concepts: number;
  failed: number;
  seconds: number;
  /** Documents/s of the first and of the last 100 documents to finish. */
  first100: number;
  last100: number;
  /** The same by each document's source stages alone (its summaries left out): how the rate holds as the repository grows. */
  sourceStages: { first100: number; last100: number; seconds: number };
  /**
   * BENCH_BATCH: each batch's time from its first POST to the pipeline idle again, and the
   * service's CPU seconds over that time (which the machine's load changes less than the time).
   */
  batches: { size: number; seconds: number[]; cpuSeconds: number[] } | null;
  /** Each document's finish, seconds after the first POST, in order. */
  finishes: number[];
  post: ReturnType<typeof summary>;
  registrationSeconds: number;
  healthz: ReturnType<typeof summary>;
  search: ReturnType<typeof summary>;
  peakRss: number;
  /** The service's own event-loop delay during the run, and its memory at peak RSS. */
  serviceProbe: ServiceProbe | null;
  /** Load average (1 min) at the start and end of the run. */
  load: [number, number];
  /** CPU seconds the service used from the first POST to the end. */
  cpuSeconds: number;
  jobs: Map<string, number>;
}

/** Probes `/healthz` and a fact search in turn, one request at a time, until stopped. */
function startProber(service: ServiceProcess, repositoryId: () => string | null) {
  const healthz: number[] = [];
  const search: number[] = [];
  /**
   * Every search probe's start (ms since the prober started) and time, for BENCH_PROBE_DUMP, with
   * the prober's start in ms since the epoch (`startedAt`), to line probes up with a statement trace.
   */
  const searchTimes: Array<[at: number, ms: number]> = [];
  const proberStart = performance.now();
  const words = ['telescope', 'glacier', 'Lisbon', 'engine', 'Berg harbour', 'orchid', 'Turin bridge', 'clock'];
  let running = true;
  const loop = (async () => {
    for (let round = 0; running; round++) {
      const repository = repositoryId();
      let started = performance.now();
      const health = await fetch(`${service.baseUrl}/healthz`);
      await health.arrayBuffer();
      healthz.push(performance.now() - started);
      if (repository !== null) {
        started = performance.now();
        const reply = await service.api('GET', `/api/v1/repositories/${repository}/facts?query=${encodeURIComponent(words[round % words.length] as string)}&limit=20`);
        if (reply.status !== 200) throw new Error(`probe search: ${reply.status} ${JSON.stringify(reply.body)}`);
        search.push(performance.now() - started);
        searchTimes.push([started - proberStart, performance.now() - started]);
      }
      await sleep(100);
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      if (process.env.BENCH_PROBE_DUMP) writeFileSync(process.env.BENCH_PROBE_DUMP, JSON.stringify({ startedAt: performance.timeOrigin + proberStart, search: searchTimes }));
      return { healthz: summary(healthz), search: summary(search) };
    },
  };
}

/** Waits until every source is processed or failed and nothing is queued or running, twice in a row. */
async function waitUntilDone(api: Api, repositoryId: string, documents: number, label: string, t0: number): Promise<void> {
  let quiet = 0;
  let lastLog = performance.now();
  while (quiet < 2) {
    await sleep(500);
    const tasks = await taskSummary(api, repositoryId);
    const processed = await api('GET', `/api/v1/repositories/${repositoryId}/sources?status=processed&limit=1`);
    const failed = await api('GET', `/api/v1/repositories/${repositoryId}/sources?status=failed&limit=1`);
    const settled = Number(processed.body.total) + Number(failed.body.total);
    quiet = tasks.complete === true && settled === documents ? quiet + 1 : 0;
    if (performance.now() - lastLog > 10_000) {
      log(`  ${label}: ${secs((performance.now() - t0) / 1000)}, ${settled} of ${documents} sources processed`);
      lastLog = performance.now();
    }
  }
}

/**
 * summarize_concepts jobs carry the source of their trigger, but their work is the repository's:
 * one job carries every stale concept while the others hand over (docs/pipeline.md), so a
 * document's finish "by its source stages" leaves them out.
 */
const REPOSITORY_WIDE_KINDS = new Set(['summarize_concepts']);

/**
 * Each source's finish: its last finished job (every stage of a document records its source),
 * and the last of its source stages' jobs (`bySourceStages`, without REPOSITORY_WIDE_KINDS).
 */
async function documentFinishes(api: Api, repositoryId: string, t0Epoch: number): Promise<{ finishes: number[]; bySourceStages: number[]; jobs: Map<string, number> }> {
  const last = new Map<string, number>();
  const lastOfSourceStages = new Map<string, number>();
  const jobs = new Map<string, number>();
  const listed = await listAll(api, `/api/v1/repositories/${repositoryId}/tasks`);
  // BENCH_JOBS_DUMP=<file>: every job's kind and times, to see where a run waited.
  if (process.env.BENCH_JOBS_DUMP) writeFileSync(process.env.BENCH_JOBS_DUMP, JSON.stringify({ t0Epoch, jobs: listed }));
  for (const job of listed) {
    jobs.set(String(job.kind), (jobs.get(String(job.kind)) ?? 0) + 1);
    if (typeof job.source_id !== 'string' || typeof job.finished_at !== 'string') continue;
    const finished = Date.parse(job.finished_at);
    last.set(job.source_id, Math.max(last.get(job.source_id) ?? 0, finished));
    if (!REPOSITORY_WIDE_KINDS.has(String(job.kind))) lastOfSourceStages.set(job.source_id, Math.max(lastOfSourceStages.get(job.source_id) ?? 0, finished));
  }
  const seconds = (times: Map<string, number>) => [...times.values()].map((at) => (at - t0Epoch) / 1000).sort((a, b) => a - b);
  return { finishes: seconds(last), bySourceStages: seconds(lastOfSourceStages), jobs };
}

/** The report's row for BENCH_BATCH: each batch's rate, and the last's against the first's. */
function batchRows(batches: IngestResult['batches']): string[] {
  if (batches === null || batches.seconds.length === 0) return [];
  const rates = batches.seconds.map((seconds) => batches.size / seconds);
  const kept = ((rates.at(-1) as number) / (rates[0] as number)) * 100;
  const cpuMs = batches.cpuSeconds.map((seconds) => (seconds * 1000) / batches.size);
  const cpuKept = ((cpuMs[0] as number) / (cpuMs.at(-1) as number)) * 100;
  return [
    `| documents/s of each batch of ${int(batches.size)}, added to the growing repository once the one before was done (last ÷ first) | ${rates.map(rate).join(', ')} (${kept.toFixed(0)}%) | last ≥ 80% of first |`,
    `| service CPU per document of each batch, ms (first ÷ last: the rate the CPU alone would allow, load-independent) | ${cpuMs.map((ms) => int(ms)).join(', ')} (${cpuKept.toFixed(0)}%) | |`,
  ];
}

/** Documents per second of the first and the last `window` documents to finish. */
function edgeRates(finishes: readonly number[], window = 100): { first: number; last: number } {
  const n = finishes.length;
  if (n < window + 1) return { first: Number.NaN, last: Number.NaN };
  return { first: window / (finishes[window - 1] as number), last: window / ((finishes[n - 1] as number) - (finishes[n - window - 1] as number)) };
}

async function addAndWait(service: ServiceProcess, name: string, urls: readonly string[], probe: boolean, batch = 0): Promise<Omit<IngestResult, 'peakRss' | 'serviceProbe' | 'load'>> {
  const { api } = service;
  let repositoryId: string | null = null;
  const prober = probe ? startProber(service, () => repositoryId) : null;
  repositoryId = await createRepository(api, name);
  const cpuAtStart = service.cpuSeconds();
  const t0 = performance.now();
  const t0Epoch = Date.now();
  const postTimes: number[] = [];
  let lastLog = t0;
  // BENCH_BATCH: batches added one after another to the growing repository, each waited for.
  const batchSize = batch > 0 ? batch : urls.length;
  const batchSeconds: number[] = [];
  const batchCpuSeconds: number[] = [];
  let registrationSeconds = 0;
  for (let from = 0; from < urls.length; from += batchSize) {
    const batchStart = performance.now();
    const batchCpuStart = service.cpuSeconds();
    for (const [offset, url] of urls.slice(from, from + batchSize).entries()) {
      const started = performance.now();
      const reply = await api('POST', `/api/v1/repositories/${repositoryId}/sources`, { url });
      postTimes.push(performance.now() - started);
      if (reply.status !== 201) throw new Error(`register ${url}: ${reply.status} ${JSON.stringify(reply.body)}`);
      if (performance.now() - lastLog > 10_000) {
        log(`  ${name}: ${from + offset + 1} of ${urls.length} registered after ${secs((performance.now() - t0) / 1000)}`);
        lastLog = performance.now();
      }
    }
    registrationSeconds += (performance.now() - batchStart) / 1000;
    const added = Math.min(urls.length, from + batchSize);
    if (added === urls.length) log(`  ${name}: all ${urls.length} registered after ${secs((performance.now() - t0) / 1000)}`);
    await waitUntilDone(api, repositoryId, added, name, t0);
    batchSeconds.push((performance.now() - batchStart) / 1000);
    batchCpuSeconds.push(service.cpuSeconds() - batchCpuStart);
  }
  const cpuSeconds = service.cpuSeconds() - cpuAtStart;
  const probes = prober ? await prober.stop() : null;
  const { finishes, bySourceStages, jobs } = await documentFinishes(api, repositoryId, t0Epoch);
  const seconds = finishes.at(-1) ?? (performance.now() - t0) / 1000;
  const sources = await listAll(api, `/api/v1/repositories/${repositoryId}/sources`);
  const facts = await api('GET', `/api/v1/repositories/${repositoryId}/facts?mode=lexical&limit=1`);
  const concepts = await api('GET', `/api/v1/repositories/${repositoryId}/concepts?show_small=true&limit=1`);
  const edges = edgeRates(finishes);
  const sourceEdges = edgeRates(bySourceStages);
  return {
    documents: urls.length,
    extractedFacts: sources.reduce((sum, source) => sum + Number(source.fact_count ?? 0), 0),
    visibleFacts: Number(facts.body.total),
    concepts: Number(concepts.body?.total ?? Number.NaN),
    failed: sources.filter((source) => source.status !== 'processed').length,
    seconds,
    first100: edges.first,
    last100: edges.last,
    sourceStages: { first100: sourceEdges.first, last100: sourceEdges.last, seconds: bySourceStages.at(-1) ?? Number.NaN },
    batches: batch > 0 ? { size: batchSize, seconds: batchSeconds, cpuSeconds: batchCpuSeconds } : null,
    finishes,
    post: summary(postTimes),
    registrationSeconds,
    healthz: probes?.healthz ?? summary([]),
    search: probes?.search ?? summary([]),
    cpuSeconds,
    jobs,
  };
}

async function runIngest(): Promise<IngestResult> {
  const web = await startWebServer(syntheticPages(sizes.docs, sizes.sentences, prng(sizes.seed)));
  const service = await startServiceProcess('ingest', {}, true);
  try {
    log(`ingest: ${sizes.docs} documents × ${sizes.sentences} sentences, embedded default`);
    const urls = Array.from({ length: sizes.docs }, (_, doc) => `${web.baseUrl}/synthetic/${doc}.html`);
    const loadBefore = os.loadavg()[0];
    service.resetServiceProbe();
    // BENCH_PROBE=0: no prober, so the CPU per document is the pipeline's alone (the prober's
    // searches cost CPU in proportion to the run's length, which the machine's load sets).
    const result = await addAndWait(service, 'Ingest', urls, process.env.BENCH_PROBE !== '0', sizes.batch);
    await sleep(600); // the probe file is rewritten every 500 ms
    return { ...result, peakRss: service.peakRssMiB(), serviceProbe: service.serviceProbe(), load: [loadBefore, os.loadavg()[0]] };
  } finally {
    await service.stop();
    await web.close();
  }
}

// -------------------------------------------------------------------------------------------
// OpenAI-compatible providers at a fixed latency, against the bound of the worker counts
// -------------------------------------------------------------------------------------------

/** The model-calling stages; each gets BENCH_OPENAI_WORKERS workers in the openai part. */
const MODEL_STAGES = ['source_decomposition', 'embed_facts', 'extract_concepts', 'embed_concepts', 'summarize_concepts', 'synthesize_concept'] as const;

interface OpenAIResult extends Omit<IngestResult, 'peakRss' | 'serviceProbe' | 'load'> {
  calls: { chat: number; embeddings: number };
  /** Model calls each stage made (chat calls by phase; embedding calls split by the fact-embedding jobs). */
  stageCalls: Record<(typeof MODEL_STAGES)[number], number>;
  /** Seconds the run cannot beat: the busiest stage's model time over its calls in flight, plus one document's chain. */
  boundSeconds: number;
  boundStage: string;
  /** Per phase of the model server: calls in flight on average while it was busy (its first call to its last answer), and when that was. */
  inFlight: Record<string, { mean: number; from: number; to: number }>;
}

/**
 * The bound: a stage whose calls of latency L can be at most F in flight makes its C calls in no
 * less than C × L / F; the run takes at least the busiest stage's time, plus one document's chain
 * of calls one after another (each stage once: the last document cannot be done sooner).
 * In flight at most, with W workers per stage: decomposition (a call per job) and fact
 * embedding (a call per job of ≤ embed_batch_size facts) W; concept extraction W × 4 (a job
 * sends its batches four at a time); concept embedding W (a worker embeds its claimed group in
 * one call); summaries W (one run per repository at a time, its page's concepts side by side,
 * at most task.queues.summarize_concepts = W, a concept's slices each a place of their own); syntheses
 * W × 25 (a worker runs a claimed group of up to 25 jobs' calls side by side).
 * C is the calls the run made: summary slices written again as a concept's facts came (27% of
 * them in one run, docs/performance.md, "Thirtieth round") count, and the bound does not know
 * when a stage's inputs exist (the summaries wait for the source stages' first concepts).
 */
function openAIBound(jobs: ReadonlyMap<string, number>, calls: { chat: number; embeddings: number }, phases: Partial<Record<string, number>>) {
  const latency = sizes.openaiLatencyMs / 1000;
  const workers = sizes.openaiWorkers;
  const factEmbeddingCalls = jobs.get('embed_facts') ?? 0;
  const stageCalls: OpenAIResult['stageCalls'] = {
    source_decomposition: phases.fact_extraction ?? 0,
    embed_facts: factEmbeddingCalls,
    extract_concepts: phases.concept_extraction ?? 0,
    embed_concepts: Math.max(0, calls.embeddings - factEmbeddingCalls),
    summarize_concepts: phases.summarization ?? 0,
    synthesize_concept: phases.synthesis ?? 0,
  };
  const inFlight: Record<(typeof MODEL_STAGES)[number], number> = {
    source_decomposition: workers,
    embed_facts: workers,
    extract_concepts: workers * 4,
    embed_concepts: workers,
    summarize_concepts: workers,
    synthesize_concept: workers * 25,
  };
  let boundStage = '';
  let busiest = 0;
  for (const kind of MODEL_STAGES) {
    const seconds = (stageCalls[kind] * latency) / inFlight[kind];
    if (seconds > busiest) {
      busiest = seconds;
      boundStage = kind;
    }
  }
  const chain = MODEL_STAGES.filter((kind) => stageCalls[kind] > 0).length * latency;
  return { stageCalls, boundSeconds: busiest + chain, boundStage };
}

/** Calls of `phase` in flight on average over [from, to) ms since the epoch. */
function callsInFlight(calls: readonly AnsweredCall[], phase: AnsweredCall['phase'], from: number, to: number): number {
  let busy = 0;
  for (const call of calls) if (call.phase === phase) busy += Math.max(0, Math.min(call.answeredAt, to) - Math.max(call.arrivedAt, from));
  return to > from ? busy / (to - from) : 0;
}

function meanInFlight(calls: readonly AnsweredCall[], t0: number): OpenAIResult['inFlight'] {
  const byPhase: OpenAIResult['inFlight'] = {};
  for (const phase of new Set(calls.map((call) => call.phase))) {
    const own = calls.filter((call) => call.phase === phase);
    const from = Math.min(...own.map((call) => call.arrivedAt));
    const to = Math.max(...own.map((call) => call.answeredAt));
    byPhase[String(phase)] = { mean: callsInFlight(own, phase, from, to), from: (from - t0) / 1000, to: (to - t0) / 1000 };
  }
  return byPhase;
}

/** The calls in flight per phase in 5-second steps, in the log: where a stage had fewer than its workers. */
function logInFlight(calls: readonly AnsweredCall[], t0: number): void {
  const phases = [...new Set(calls.map((call) => call.phase))];
  const end = Math.max(t0, ...calls.map((call) => call.answeredAt));
  log(`  calls in flight, mean per 5 s (${phases.join(', ')}):`);
  for (let from = t0; from < end; from += 5000) {
    log(`    ${String(Math.round((from - t0) / 1000)).padStart(4)} s  ${phases.map((phase) => callsInFlight(calls, phase, from, from + 5000).toFixed(1).padStart(5)).join(' ')}`);
  }
}

async function runOpenAI(): Promise<OpenAIResult> {
  const web = await startWebServer(syntheticPages(sizes.openaiDocs, sizes.sentences, prng(sizes.seed + 1)));
  const openai = await startOpenAIServer();
  openai.setStandingFault('chat', { delayMs: sizes.openaiLatencyMs });
  openai.setStandingFault('embeddings', { delayMs: sizes.openaiLatencyMs });
  const workers = String(sizes.openaiWorkers);
  const service = await startServiceProcess('openai', {
    PROVIDERS_LLM_PROVIDER: 'openai',
    PROVIDERS_LLM_MODEL: 'bench-chat-model',
    PROVIDERS_LLM_BASE_URL: openai.baseUrl,
    PROVIDERS_EMBEDDINGS_PROVIDER: 'openai',
    PROVIDERS_EMBEDDINGS_MODEL: 'bench-embedding-model',
    PROVIDERS_EMBEDDINGS_BASE_URL: openai.baseUrl,
    PROVIDERS_EMBEDDINGS_DIMENSIONS: '100',
    ...Object.fromEntries(MODEL_STAGES.map((kind) => [`TASK_QUEUES_${kind.toUpperCase()}`, workers])),
  }, true);
  try {
    log(`openai: ${sizes.openaiDocs} documents, ${sizes.openaiLatencyMs} ms per model call, ${workers} workers per model stage`);
    const urls = Array.from({ length: sizes.openaiDocs }, (_, doc) => `${web.baseUrl}/synthetic/${doc}.html`);
    const before = { ...openai.requests };
    const t0 = Date.now();
    const result = await addAndWait(service, 'OpenAI', urls, false);
    const calls = { chat: openai.requests.chat - before.chat, embeddings: openai.requests.embeddings - before.embeddings };
    // BENCH_CALLS_DUMP=<file>: every model call's phase and times, to see when each stage had its calls in flight.
    if (process.env.BENCH_CALLS_DUMP) writeFileSync(process.env.BENCH_CALLS_DUMP, JSON.stringify({ t0Epoch: t0, calls: openai.answered }));
    logInFlight(openai.answered, t0);
    return { ...result, calls, ...openAIBound(result.jobs, calls, openai.phases), inFlight: meanInFlight(openai.answered, t0) };
  } finally {
    await service.stop();
    await openai.close();
    await web.close();
  }
}

// -------------------------------------------------------------------------------------------
// The test corpus, in-process
// -------------------------------------------------------------------------------------------

interface CorpusResult {
  documents: number;
  extractedFacts: number;
  visibleFacts: number;
  concepts: number;
  seconds: number;
}

async function runCorpus(api: Api): Promise<CorpusResult> {
  const web = await startCorpusServer();
  try {
    const repositoryId = await createRepository(api, 'Corpus');
    const t0 = performance.now();
    for (const document of web.documents) {
      const reply = await api('POST', `/api/v1/repositories/${repositoryId}/sources`, { url: document.url });
      if (reply.status !== 201) throw new Error(`register ${document.url}: ${reply.status}`);
    }
    await waitUntilDone(api, repositoryId, web.documents.length, 'corpus', t0);
    const seconds = (performance.now() - t0) / 1000;
    const sources = await listAll(api, `/api/v1/repositories/${repositoryId}/sources`);
    const facts = await api('GET', `/api/v1/repositories/${repositoryId}/facts?mode=lexical&limit=1`);
    const concepts = await api('GET', `/api/v1/repositories/${repositoryId}/concepts?show_small=true&limit=1`);
    return {
      documents: web.documents.length,
      extractedFacts: sources.reduce((sum, source) => sum + Number(source.fact_count ?? 0), 0),
      visibleFacts: Number(facts.body.total),
      concepts: Number(concepts.body?.total ?? Number.NaN),
      seconds,
    };
  } finally {
    await web.close();
  }
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

const summaryCell = (values: ReturnType<typeof summary>) =>
  values.count === 0 ? '—' : `${ms(values.p50)} / ${ms(values.p99)} / ${ms(values.max)}`;

async function main(): Promise<void> {
  const started = new Date();
  const loadStart = os.loadavg() as [number, number, number];
  // Before the work, so its own load does not count: which hour of this VM the run had.
  const gauge = describeGauge(await machineGauge());
  log(gauge);
  const results: { ingest?: IngestResult; openai?: OpenAIResult; corpus?: CorpusResult; search?: SearchResult; inProcessRss?: number } = {};
  if (parts.has('ingest')) {
    results.ingest = await runIngest();
    log(`  ingest: ${secs(results.ingest.seconds)}, ${rate(results.ingest.documents / results.ingest.seconds)} documents/s`);
  }
  const loadAfterIngest = os.loadavg() as [number, number, number];
  if (parts.has('openai')) {
    results.openai = await runOpenAI();
    log(`  openai: ${secs(results.openai.seconds)}, bound ${secs(results.openai.boundSeconds)}`);
  }
  if (parts.has('corpus') || parts.has('search')) {
    const service = await startTestService({ overrides: PIPELINE_TEST_OVERRIDES });
    try {
      const { token } = await registerUser(service, 'bench@example.org');
      const api = injectApi(service, token);
      if (parts.has('corpus') || parts.has('search')) {
        log('corpus: the test corpus, in-process');
        results.corpus = await runCorpus(api);
      }
      if (parts.has('search')) {
        log(`search: ${int(sizes.facts)} facts`);
        results.search = await runSearch(service, api);
      }
      results.inProcessRss = peakRssMiB();
    } finally {
      await service.close();
    }
  }
  const loadEnd = os.loadavg() as [number, number, number];
  const load = (values: [number, number, number]) => values.map((value) => value.toFixed(2)).join(' / ');

  const lines = [
    '## Pipeline',
    '',
    `Machine: ${os.cpus().length} CPUs (${os.cpus()[0]?.model.trim() ?? 'unknown'}), ${int(os.totalmem() / 2 ** 30)} GiB RAM; Node ${process.version}.`,
    `Load average (1 / 5 / 15 min) at start: ${load(loadStart)}; after the ingest part: ${load(loadAfterIngest)}; at the end: ${load(loadEnd)}.`,
    `At the start, the ${gauge}.`,
    `Date: ${started.toISOString()}. Command: \`node --import=tsx bench/pipeline.ts\` (${runBuild ? 'BENCH_BUILD=1 ' : ''}BENCH_DOCS=${sizes.docs} BENCH_SENTENCES=${sizes.sentences} BENCH_OPENAI_DOCS=${sizes.openaiDocs} BENCH_OPENAI_WORKERS=${sizes.openaiWorkers} BENCH_OPENAI_LATENCY_MS=${sizes.openaiLatencyMs} BENCH_FACTS=${sizes.facts} BENCH_QUERIES=${sizes.queries}; took ${((Date.now() - started.getTime()) / 1000).toFixed(0)} s).`,
    '',
  ];
  const ingest = results.ingest;
  if (ingest) {
    const ratio = ingest.last100 / ingest.first100;
    lines.push(
      `| ingest, embedded default (\`factlog serve\`, PGlite on disk, built-in models), ${int(ingest.documents)} synthetic ${sizes.sentences}-sentence HTML pages over local HTTP | value | target |`,
      '|---|---:|---:|',
      `| documents/s over the run (${int(ingest.documents)} documents, ${secs(ingest.seconds)}; ${ingest.failed} not processed) | **${rate(ingest.documents / ingest.seconds)}** | ≥ 20 |`,
      `| documents/s of the first 100 / of the last 100 (last ÷ first) | **${rate(ingest.first100)} / ${rate(ingest.last100)}** (${(ratio * 100).toFixed(0)}%) | last ≥ 80% of first |`,
      ...batchRows(ingest.batches),
      `| the same by each document's source stages (fetched, decomposed, embedded, deduplicated, linked to concepts; the repository's summaries left out; all done at ${secs(ingest.sourceStages.seconds)}) | ${rate(ingest.sourceStages.first100)} / ${rate(ingest.sourceStages.last100)} (${((ingest.sourceStages.last100 / ingest.sourceStages.first100) * 100).toFixed(0)}%) | |`,
      `| facts/s (${int(ingest.extractedFacts)} extracted, ${int(ingest.visibleFacts)} visible after dedup, ${int(ingest.concepts)} concepts) | **${rate(ingest.extractedFacts / ingest.seconds)}** | |`,
      `| \`POST /sources\` one after another, p50 / p99 / max ms (all ${int(ingest.documents)} added in ${secs(ingest.registrationSeconds)}) | **${summaryCell(ingest.post)}** | prompt |`,
      `| \`GET /healthz\` during the run, p50 / p99 / max ms (${int(ingest.healthz.count)} probes) | **${summaryCell(ingest.healthz)}** | p99 ≤ 100 |`,
      `| fact search \`GET /facts?query=\` (hybrid) during the run, p50 / p99 / max ms (${int(ingest.search.count)} probes) | **${summaryCell(ingest.search)}** | p99 ≤ 100 |`,
      `| event-loop delay of the service during the run (monitorEventLoopDelay, 10 ms resolution), p50 / p99 / max ms | **${ingest.serviceProbe ? `${ms(ingest.serviceProbe.loopDelayMs.p50)} / ${ms(ingest.serviceProbe.loopDelayMs.p99)} / ${ms(ingest.serviceProbe.loopDelayMs.max)}` : '—'}** | |`,
      `| peak RSS of the service process (VmHWM), MiB; ${runBuild ? 'compiled build (`bin/factlog.js`)' : 'under tsx'} | **${int(ingest.peakRss)}** | ≤ 500 |`,
      `| the service's memory at its highest RSS during the run (process.memoryUsage, all threads' RSS; heaps and buffers of the main thread), MiB | ${ingest.serviceProbe ? Object.entries(ingest.serviceProbe.atPeakRssMiB).map(([key, value]) => `${key} ${int(value)}`).join(', ') : '—'} | |`,
      `| load average (1 min) at the start / end of the run | ${ingest.load.map((value) => value.toFixed(1)).join(' / ')} | |`,
      `| CPU time of the service per document (user + system, all threads; load-independent), ms | **${int((ingest.cpuSeconds * 1000) / ingest.documents)}** | |`,
      '',
    );
  }
  const openai = results.openai;
  if (openai) {
    const measured = openai.documents / openai.seconds;
    const bound = openai.documents / openai.boundSeconds;
    lines.push(
      `| ingest through the OpenAI-compatible providers, ${sizes.openaiLatencyMs} ms per call, ${sizes.openaiWorkers} workers per model stage, ${int(openai.documents)} pages | value |`,
      '|---|---:|',
      `| documents/s measured (${secs(openai.seconds)}; ${int(openai.calls.chat)} chat + ${int(openai.calls.embeddings)} embedding calls; model calls by stage ${MODEL_STAGES.map((kind) => `${kind} ${int(openai.stageCalls[kind])}`).join(', ')}) | **${rate(measured)}** |`,
      `| bound from worker counts and latency (${secs(openai.boundSeconds)}; busiest stage ${openai.boundStage}) | **${rate(bound)}** |`,
      `| measured ÷ bound (target ≥ 90%) | **${((measured / bound) * 100).toFixed(0)}%** |`,
      `| CPU time of the service per document, ms | ${int((openai.cpuSeconds * 1000) / openai.documents)} |`,
      `| model calls in flight on average from a phase's first call to its last answer (seconds since the first \`POST\`) | ${Object.entries(openai.inFlight).map(([phase, { mean, from, to }]) => `${phase} ${mean.toFixed(1)} (${from.toFixed(0)}–${to.toFixed(0)} s)`).join('; ')} |`,
      '',
    );
  }
  const corpus = results.corpus;
  if (corpus) {
    lines.push(
      '| test corpus (23 HTML + 10 PDF, test/fixtures/corpus), in-process | documents | facts extracted / visible | concepts | time | documents/s |',
      '|---|---:|---:|---:|---:|---:|',
      `| \`startTestService\`, test overrides (poll 50 ms, relations every 1 s, dedup catch-up every 3 s) | ${corpus.documents} | ${int(corpus.extractedFacts)} / ${int(corpus.visibleFacts)} | ${int(corpus.concepts)} | ${secs(corpus.seconds)} | **${rate(corpus.documents / corpus.seconds)}** |`,
      '',
    );
  }
  const search = results.search;
  if (search) {
    lines.push(
      `| search at ${int(sizes.facts)} facts, \`GET /facts\` top ${pageSize}, ${sizes.queries} queries of 1–3 words | p50 ms | p95 ms | max ms |`,
      '|---|---:|---:|---:|',
      `| lexical (\`mode=lexical\`: tsvector + GIN, ranked, with total; ${int(search.lexicalMeanTotal)} matches per query on average) | **${ms(search.lexical.p50)}** | **${ms(search.lexical.p95)}** | ${ms(search.lexical.max)} |`,
      `| hybrid (\`mode=hybrid\`: query embedding + HNSW k-NN + lexical, fused; reply mode ${search.hybridModes.join('/')}) | **${ms(search.hybrid.p50)}** | **${ms(search.hybrid.p95)}** | ${ms(search.hybrid.max)} |`,
      '',
      `Search: ${int(sizes.facts)} generated sentences embedded by the local embedder (${secs(search.embedSeconds)}), written to the \`facts\` read model and \`fact_vectors\` (${secs(search.loadSeconds)}), HNSW index built afterwards (${secs(search.indexSeconds)}); ${warmUpQueries} warm-up queries per mode, then one query at a time through the REST route (in-process inject). Peak RSS of the bench process at the end (in-process service and the bench's 100k sentences and vectors): ${int(results.inProcessRss ?? Number.NaN)} MiB.`,
      '',
    );
  }
  lines.push(
    'How it is measured: docs/performance.md, "Ingest". Ingest and OpenAI runs are `factlog serve` child processes with the',
    'default configuration (the OpenAI run changes only the providers and the worker counts of the model stages); pages',
    'come from a local HTTP server in the bench process, added one after another by `POST /sources` over HTTP. A document',
    'is finished when its last job (`finished_at`, every stage of a document records its source) is; rates count from',
    'the first `POST`. The prober sends `/healthz` and then a fact search, one at a time with 100 ms between rounds,',
    'over HTTP from the bench process for the whole ingest run.',
  );
  const section = lines.join('\n');
  process.stdout.write(`${section}\n`);
  if (ingest) process.stdout.write(`\ningest finishes (s, every 100th document): ${ingest.finishes.filter((_, index) => (index + 1) % 100 === 0).map((value) => value.toFixed(1)).join(' ')}\n`);

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
