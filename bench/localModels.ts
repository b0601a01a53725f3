/**
 * The built-in local models inside a running embedded node: memory, load time, and how long the
 * event loop is blocked while the pipeline works (docs/performance.md, "Local models").
 *
 *   node --import=tsx bench/localModels.ts                      # both parts
 *   BENCH_PARTS=models node --import=tsx bench/localModels.ts   # or: service
 *
 * Part "models": the model work of `BENCH_PAGES` (60) synthetic 12-sentence pages (facts, then
 * concepts, then the facts' vectors; 4 pages at a time, as the stages call them), once with the
 * models on the event loop's thread (`createLocalChatModel` / `createLocalEmbedder`, what the
 * service ran before) and once through the worker threads (`createWorkerChatModel` /
 * `createWorkerEmbedder`, what it runs now), each in a fresh child process: load time, event-loop
 * delay (how late a 10 ms timer fires) from creating the models to the last page,
 * RSS. `BENCH_SRC` points the in-thread child at another checkout's src/ (a before/after run).
 *
 * Part "service": one process runs the whole embedded service (`startTestService`: PGlite on disk, local chat
 * model and local embedder) and the test corpus server (test/fixtures/corpus: HTML and PDF).
 * As a new user would, it adds the corpus documents one after another and sends a
 * `GET /sources/{id}` right after the first one; meanwhile a prober sends `GET /healthz` and a
 * lexical fact search in turn every `BENCH_PROBE_MS` (25) ms through fastify's inject (same event
 * loop as the service, no socket), and `monitorEventLoopDelay` samples the loop every 10 ms.
 * The corpus is added `BENCH_ROUNDS` (2) times, each time into a new repository, so the
 * second round runs with the models warm. Results go to stdout as Markdown.
 */
import { execFile } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { envNumber, log, ms, secs, summary } from './common.js';

const rounds = envNumber('BENCH_ROUNDS', 2);
const pages = envNumber('BENCH_PAGES', 60);
const parts = new Set((process.env.BENCH_PARTS ?? 'models,service').split(',').map((part) => part.trim()));
const probeEveryMs = envNumber('BENCH_PROBE_MS', 25);

const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(0);
/** Peak resident set size of this process so far (resourceUsage reports KiB). */
const peakRss = () => process.resourceUsage().maxRSS * 1024;

interface Probe {
  healthz: number[];
  search: number[];
  stop(): Promise<void>;
}

/** Sends `/healthz` and a fact search in turn, one at a time, until stopped. */
function startProbe(call: (url: string) => Promise<number>, searchUrl: () => string | null): Probe {
  const healthz: number[] = [];
  const search: number[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      let started = performance.now();
      if ((await call('/healthz')) !== 200) throw new Error('/healthz did not answer 200');
      healthz.push(performance.now() - started);
      const url = searchUrl();
      if (url !== null) {
        started = performance.now();
        const status = await call(url);
        if (status !== 200) throw new Error(`${url} answered ${status}`);
        search.push(performance.now() - started);
      }
      await new Promise((resolve) => setTimeout(resolve, probeEveryMs));
    }
  })();
  return {
    healthz,
    search,
    async stop() {
      running = false;
      await loop;
    },
  };
}

// -------------------------------------------------------------------------------------------
// Part "models": the models alone, in-thread versus in worker threads
// -------------------------------------------------------------------------------------------

type ModelsMode = 'in-thread' | 'workers';

interface ModelsResult {
  mode: ModelsMode;
  /** From creating the models to the first page's facts (the load a first call waits for). */
  firstCallMs: number;
  seconds: number;
  facts: number;
  /** The probe's p99 on an idle loop: what the machine adds by itself. */
  idleP99: number;
  loopP50: number;
  loopP99: number;
  loopMax: number;
  rssBefore: number;
  rssAfter: number;
  maxRss: number;
}

const NAMES = ['Anna Berg', 'Boris Costa', 'Clara Dahl', 'David Engel', 'Elena Fischer', 'Felix Gruber', 'Greta Hansen', 'Hugo Ivanov'];
const DEEDS = ['built a copper telescope', 'studied the northern glacier', 'repaired a steam engine', 'painted the old lighthouse', 'mapped the river delta', 'restored a brass clock'];
const PLACES = ['Bergen', 'Lisbon', 'Krakow', 'Lyon', 'Turin', 'Ghent'];

function syntheticPage(page: number): string {
  const sentences = Array.from({ length: 12 }, (_, i) => {
    const k = page * 12 + i;
    return `${NAMES[k % NAMES.length]} ${DEEDS[(k * 7) % DEEDS.length]} in ${PLACES[(k * 5) % PLACES.length]} in ${1700 + ((k * 37) % 320)}.`;
  });
  return [0, 4, 8].map((at) => sentences.slice(at, at + 4).join(' ')).join('\n\n');
}

/**
 * Event-loop delay as a 10 ms timer sees it: how late each tick fires. Unlike
 * `monitorEventLoopDelay` it also counts a loop that never turns until the end (a stretch of
 * synchronous work yields no histogram sample at all).
 */
function startLoopProbe(): { stop(): number[] } {
  const delays: number[] = [];
  let expected = performance.now() + 10;
  let timer = setTimeout(function tick() {
    const now = performance.now();
    delays.push(Math.max(0, now - expected));
    expected = now + 10;
    timer = setTimeout(tick, 10);
  }, 10);
  return {
    stop() {
      clearTimeout(timer);
      delays.push(Math.max(0, performance.now() - expected));
      return delays;
    },
  };
}

const percentileOf = (values: number[], fraction: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))] ?? Number.NaN;
};

/** In a child process: one mode, timed; prints its result as JSON. */
async function runModelsChild(mode: ModelsMode): Promise<void> {
  const contexts = ['Person', 'Organization', 'Location', 'Concept'].map((name) => ({ name, description: name }));
  const source = process.env.BENCH_SRC ?? path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../src');
  const workers = await import('../src/providers/modelWorkers/models.js');
  const { createLocalChatModel } = (await import(path.join(source, 'providers/llm/local.ts'))) as typeof import('../src/providers/llm/local.js');
  const { createLocalEmbedder } = (await import(path.join(source, 'providers/embeddings/local.ts'))) as typeof import('../src/providers/embeddings/local.js');
  // The machine's own noise: the same probe on an idle loop for a second.
  const idleProbe = startLoopProbe();
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const idle = idleProbe.stop();

  const rssBefore = process.memoryUsage().rss;
  const probe = startLoopProbe();
  const started = performance.now();
  const [chat, embedder] = mode === 'workers' ? [workers.createWorkerChatModel(), workers.createWorkerEmbedder()] : [createLocalChatModel(), createLocalEmbedder()];
  let firstCallMs = Number.NaN;
  let facts = 0;
  // Between model calls the service does I/O (database, HTTP): the loop turns there.
  const turn = () => new Promise((resolve) => setImmediate(resolve));
  const processPage = async (page: number) => {
    const extracted = await chat.extractFacts({ text: syntheticPage(page), chunkIndex: 0 });
    if (Number.isNaN(firstCallMs)) firstCallMs = performance.now() - started;
    await turn();
    const contents = extracted.map((fact) => fact.content);
    await chat.extractConcepts({ facts: contents.map((content, i) => ({ id: `${page}-${i}`, content })), contexts });
    await turn();
    await embedder.embed(contents);
    await turn();
    facts += contents.length;
  };
  for (let page = 0; page < pages; page += 4) {
    await Promise.all(Array.from({ length: Math.min(4, pages - page) }, (_, i) => processPage(page + i)));
  }
  const seconds = (performance.now() - started) / 1000;
  const delays = probe.stop();
  const result: ModelsResult = {
    mode,
    firstCallMs,
    seconds,
    facts,
    idleP99: percentileOf(idle, 0.99),
    loopP50: percentileOf(delays, 0.5),
    loopP99: percentileOf(delays, 0.99),
    loopMax: Math.max(...delays),
    rssBefore,
    rssAfter: process.memoryUsage().rss,
    maxRss: peakRss(),
  };
  await chat.close?.();
  await embedder.close?.();
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

async function runModelsPart(): Promise<string[]> {
  const results: ModelsResult[] = [];
  for (const mode of ['in-thread', 'workers'] as const) {
    const { stdout } = await promisify(execFile)(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url)], {
      env: { ...process.env, BENCH_MODELS_CHILD: mode },
      maxBuffer: 1 << 20,
    });
    const result = JSON.parse(stdout.trim().split('\n').at(-1) as string) as ModelsResult;
    results.push(result);
    log(`models ${mode}: ${secs(result.seconds)}, loop max ${ms(result.loopMax)} ms`);
  }
  return [
    `Part "models": ${pages} synthetic 12-sentence pages (facts → concepts → vectors, 4 pages at a time, the loop turning between calls), each mode in a fresh child process${process.env.BENCH_SRC ? ` (in-thread from ${process.env.BENCH_SRC})` : ''}; event-loop delay is how late a 10 ms timer fires, from creating the models to the last page.`,
    '',
    '| models | first call answered after | event-loop delay p50 / p99 / max (idle p99) | pages/s | RSS before / after / peak |',
    '|---|---:|---:|---:|---:|',
    ...results.map(
      (result) =>
        `| ${result.mode} | ${ms(result.firstCallMs)} ms | ${ms(result.loopP50)} / ${ms(result.loopP99)} / ${ms(result.loopMax)} ms (${ms(result.idleP99)}) | ${(pages / result.seconds).toFixed(1)} | ${mib(result.rssBefore)} / ${mib(result.rssAfter)} / ${mib(result.maxRss)} MiB |`,
    ),
    '',
  ];
}

// -------------------------------------------------------------------------------------------
// Part "service": the embedded service ingesting the corpus, probed
// -------------------------------------------------------------------------------------------

async function runServicePart(): Promise<string[]> {
  // Imported here: the models part's children must not load the service.
  const { registerUser, startTestService } = await import('../test/helpers/service.js');
  const { createRepository, injectApi, PIPELINE_TEST_OVERRIDES, startCorpusServer, taskSummary } = await import('../test/helpers/corpus.js');
  const rssAtStart = process.memoryUsage().rss;

  const bootStarted = performance.now();
  const service = await startTestService({ overrides: PIPELINE_TEST_OVERRIDES });
  const bootMs = performance.now() - bootStarted;
  const rssAfterBoot = process.memoryUsage().rss;
  const { token } = await registerUser(service, 'bench@example.org');
  const api = injectApi(service, token);
  const web = await startCorpusServer();
  const loop = monitorEventLoopDelay({ resolution: 10 });

  const rssSamples: number[] = [];
  const sampler = setInterval(() => rssSamples.push(process.memoryUsage().rss), 200);
  let searchRepository: string | null = null;
  const probe = startProbe(
    async (url) => (await service.call('GET', url, { token })).status,
    () => (searchRepository === null ? null : `/api/v1/repositories/${searchRepository}/facts?query=curie&mode=lexical&limit=20`),
  );
  const roundsDone: Array<{ seconds: number; firstGetMs: number; postMs: ReturnType<typeof summary> }> = [];
  loop.enable();
  try {
    for (let round = 0; round < rounds; round++) {
      const repositoryId = await createRepository(api, `Round ${round + 1}`);
      searchRepository = repositoryId;
      const t0 = performance.now();
      const posts: number[] = [];
      let firstGetMs = Number.NaN;
      for (const [position, document] of web.documents.entries()) {
        const postStarted = performance.now();
        const reply = await api('POST', `/api/v1/repositories/${repositoryId}/sources`, { url: document.url });
        posts.push(performance.now() - postStarted);
        if (reply.status !== 201) throw new Error(`add ${document.url}: ${reply.status} ${JSON.stringify(reply.body)}`);
        if (position === 0) {
          // What a new user does next: look at the source just added.
          const getStarted = performance.now();
          const source = await api('GET', `/api/v1/repositories/${repositoryId}/sources/${reply.body.id}`);
          firstGetMs = performance.now() - getStarted;
          if (source.status !== 200) throw new Error(`GET source: ${source.status}`);
        }
      }
      while (!(await taskSummary(api, repositoryId)).complete) await new Promise((resolve) => setTimeout(resolve, 100));
      const seconds = (performance.now() - t0) / 1000;
      roundsDone.push({ seconds, firstGetMs, postMs: summary(posts) });
      log(`round ${round + 1}: ${web.documents.length} documents in ${secs(seconds)}; first GET ${ms(firstGetMs)} ms`);
    }
  } finally {
    loop.disable();
    await probe.stop();
    clearInterval(sampler);
    await web.close();
    await service.close();
  }

  const p99 = (values: number[]) => {
    const sorted = [...values].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))] ?? Number.NaN;
  };
  const healthz = summary(probe.healthz);
  const search = summary(probe.search);
  const loopMs = (nanoseconds: number) => ms(nanoseconds / 1e6);
  return [
    `Part "service": the embedded service in this process, the test corpus (${web.documents.length} documents) added ${rounds} times (BENCH_ROUNDS), probed every ${probeEveryMs} ms (BENCH_PROBE_MS).`,
    '',
    '| measurement | value |',
    '|---|---:|',
    `| RSS at start / after boot (service started) | ${mib(rssAtStart)} / ${mib(rssAfterBoot)} MiB |`,
    `| boot (createAppContext + start + buildApp) | ${ms(bootMs)} ms |`,
    ...roundsDone.map(
      (round, i) =>
        `| round ${i + 1}: corpus done in / first \`GET /sources/{id}\` / \`POST /sources\` p50, max | ${secs(round.seconds)} / ${ms(round.firstGetMs)} ms / ${ms(round.postMs.p50)}, ${ms(round.postMs.max)} ms |`,
    ),
    `| \`/healthz\` p50 / p99 / max (${healthz.count} probes) | ${ms(healthz.p50)} / ${ms(p99(probe.healthz))} / ${ms(healthz.max)} ms |`,
    `| fact search p50 / p99 / max (${search.count} probes) | ${ms(search.p50)} / ${ms(p99(probe.search))} / ${ms(search.max)} ms |`,
    `| event-loop delay p50 / p99 / max (monitorEventLoopDelay, 10 ms resolution) | ${loopMs(loop.percentile(50))} / ${loopMs(loop.percentile(99))} / ${loopMs(loop.max)} ms |`,
    `| RSS during the rounds, p50 / max of 200 ms samples | ${mib(summary(rssSamples).p50)} / ${mib(summary(rssSamples).max)} MiB |`,
    `| peak RSS (maxRSS) | ${mib(peakRss())} MiB |`,
    '',
  ];
}

async function main(): Promise<void> {
  const started = new Date();
  const loadStart = os.loadavg()[0] ?? 0;
  const lines: string[] = [];
  if (parts.has('models')) lines.push(...(await runModelsPart()));
  if (parts.has('service')) lines.push(...(await runServicePart()));
  lines.unshift(
    `Machine: ${os.cpus().length} CPUs (${os.cpus()[0]?.model.trim() ?? 'unknown'}); Node ${process.version}; load average at start / end ${loadStart.toFixed(2)} / ${(os.loadavg()[0] ?? 0).toFixed(2)}.`,
    `Date: ${started.toISOString()}. Command: \`BENCH_PARTS=${[...parts].join(',')} node --import=tsx bench/localModels.ts\` (took ${((Date.now() - started.getTime()) / 1000).toFixed(0)} s).`,
    '',
  );
  process.stdout.write(`${lines.join('\n')}\n`);
}

const child = process.env.BENCH_MODELS_CHILD;
if (child === 'in-thread' || child === 'workers') await runModelsChild(child);
else await main();
