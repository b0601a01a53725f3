import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { TestService } from './service.js';
import { startWebServer, type Page } from './webServer.js';

/**
 * The pipeline test corpus (test/fixtures/corpus) over a real local HTTP server, and the REST
 * calls the end-to-end tests share: register every document, wait until the pipeline is
 * complete, and take an order-independent snapshot of facts, concepts and relations.
 */

export const CORPUS_DIR = path.resolve(import.meta.dirname, '../fixtures/corpus');

export interface CorpusDocument {
  /** File name without extension, e.g. `r01-becquerel-rays`. */
  slug: string;
  kind: 'html' | 'pdf';
  /** Path on the corpus server, e.g. `/docs/r01-becquerel-rays.html`. */
  path: string;
}

/** The documents of docs/, in file-name order. */
export function corpusDocuments(): CorpusDocument[] {
  return readdirSync(path.join(CORPUS_DIR, 'docs'))
    .filter((file) => file.endsWith('.html') || file.endsWith('.pdf'))
    .sort()
    .map((file) => ({ slug: file.replace(/\.(html|pdf)$/, ''), kind: file.endsWith('.pdf') ? 'pdf' : 'html', path: `/docs/${file}` }));
}

/** Every corpus file (documents and images) as a page of the test web server. */
export function corpusPages(): Record<string, Page> {
  const pages: Record<string, Page> = {};
  for (const document of corpusDocuments()) {
    pages[document.path] = {
      body: readFileSync(path.join(CORPUS_DIR, document.path)),
      contentType: document.kind === 'pdf' ? 'application/pdf' : 'text/html; charset=utf-8',
    };
  }
  for (const file of readdirSync(path.join(CORPUS_DIR, 'img'))) {
    pages[`/img/${file}`] = { body: readFileSync(path.join(CORPUS_DIR, 'img', file)), contentType: 'image/png' };
  }
  return pages;
}

/** A real HTTP server on 127.0.0.1 serving the corpus, and `extraPages` (not in `documents`). */
export async function startCorpusServer(extraPages: Record<string, Page> = {}) {
  const server = await startWebServer({ ...corpusPages(), ...extraPages });
  const documents = corpusDocuments().map((document) => ({ ...document, url: server.baseUrl + document.path }));
  return { ...server, documents };
}

// ---------------------------------------------------------------------------------------------
// The recorded snapshot

/**
 * The snapshot of an uninterrupted embedded run with the local models, committed beside the
 * corpus. test/e2e/pipeline-corpus.test.ts checks that a run equals it (its own assertions check
 * what the snapshot must contain: merged duplicates, concepts, bands); the other corpus tests
 * (crash, OpenAI providers, distributed tier) compare their runs with it instead of running the
 * embedded pipeline again. After a deliberate change to the local models or the corpus:
 * `FACTLOG_UPDATE_SNAPSHOT=1 npx tap test/e2e/pipeline-corpus.test.ts`, and review the diff.
 */
export const RECORDED_SNAPSHOT_FILE = path.join(CORPUS_DIR, 'snapshot.json');

export function recordedSnapshot(): CorpusSnapshot {
  return JSON.parse(readFileSync(RECORDED_SNAPSHOT_FILE, 'utf8')) as CorpusSnapshot;
}

export function recordSnapshot(snapshot: CorpusSnapshot): void {
  writeFileSync(RECORDED_SNAPSHOT_FILE, `${JSON.stringify(snapshot, null, 1)}\n`);
}

/**
 * What differs between two snapshots, one short line per difference (missing or extra fact
 * clusters, concepts, aliases, concept facts and relations): a failing comparison prints these,
 * since a whole-snapshot diff is long and CI logs are cut.
 */
export function snapshotDifferences(expected: CorpusSnapshot, actual: CorpusSnapshot): string[] {
  const lines: string[] = [];
  const setDiff = (what: string, want: readonly string[], got: readonly string[]) => {
    const wanted = new Set(want);
    const gotten = new Set(got);
    for (const item of want) if (!gotten.has(item)) lines.push(`${what}: missing ${item}`);
    for (const item of got) if (!wanted.has(item)) lines.push(`${what}: extra ${item}`);
  };
  const sourceLine = (source: CorpusSnapshot['sources'][number]) => `${source.slug} ${source.status}${source.failure ? ` (${source.failure})` : ''}`;
  setDiff('source', expected.sources.map(sourceLine), actual.sources.map(sourceLine));
  const factLine = (fact: SnapshotFact) => `${clusterKey(fact.members)} [${fact.kind}; ${fact.sources.join(', ')}]`;
  setDiff('fact', expected.facts.map(factLine), actual.facts.map(factLine));
  const byLabel = (snapshot: CorpusSnapshot) => new Map(snapshot.concepts.map((concept) => [conceptLabel(concept.name, concept.context), concept]));
  const wantConcepts = byLabel(expected);
  const gotConcepts = byLabel(actual);
  setDiff('concept', [...wantConcepts.keys()], [...gotConcepts.keys()]);
  for (const [label, want] of wantConcepts) {
    const got = gotConcepts.get(label);
    if (!got) continue;
    setDiff(`alias of ${label}`, want.aliases, got.aliases);
    setDiff(`fact of ${label}`, want.facts, got.facts);
  }
  const relationLine = (relation: SnapshotRelation) => `${relation.a} ~ ${relation.b} (${relation.shared_fact_count})`;
  setDiff('relation', expected.relations.map(relationLine), actual.relations.map(relationLine));
  const summaryLine = (summary: SnapshotSummary) =>
    `${summary.concept}: ${summary.slices} slice(s), ${summary.open_slice_facts} open${summary.slices_valid ? '' : ', INVALID slices'}${summary.synthesized ? ', synthesized' : ''}${summary.synthesis_valid ? '' : ', INVALID synthesis'}`;
  if (expected.summaries !== undefined) setDiff('summary', expected.summaries.map(summaryLine), (actual.summaries ?? []).map(summaryLine));
  const annotationLines = (snapshot: CorpusSnapshot) => (snapshot.annotations ?? []).flatMap((annotation) => annotation.facts.map((fact) => `${annotation.sentence} -> ${fact}`));
  if (expected.annotations !== undefined && actual.annotations !== undefined) setDiff('annotation', annotationLines(expected), annotationLines(actual));
  return lines;
}

/**
 * Asserts that a run's snapshot equals the recorded one, part by part. On a difference it prints
 * the differences and writes the run's snapshot to `.cache/test-output/<name>.json` for a look.
 */
export function assertSameAsRecorded(
  t: { same: (found: unknown, wanted: unknown, message: string) => boolean; comment: (message: string) => void },
  name: string,
  actual: CorpusSnapshot,
  expected: CorpusSnapshot = recordedSnapshot(),
): void {
  const results = [
    t.same(actual.facts, expected.facts, 'the same facts, duplicate clusters and sources'),
    t.same(actual.concepts, expected.concepts, 'the same concepts, aliases and concept facts'),
    t.same(actual.relations, expected.relations, 'the same relations and shared fact counts'),
    // A snapshot recorded before summaries existed has none to compare: re-record it.
    expected.summaries === undefined || t.same(actual.summaries, expected.summaries, 'the same summary slices and syntheses (counts and validity)'),
    // Only the runs that write CORPUS_REPORT (annotationSnapshot) have annotations to compare.
    expected.annotations === undefined || actual.annotations === undefined || t.same(actual.annotations, expected.annotations, 'the same report sentences annotated with the same facts and postures'),
  ];
  if (results.every(Boolean)) return;
  const file = path.resolve(import.meta.dirname, '../../.cache/test-output', `${name}.json`);
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(actual, null, 1)}\n`);
  t.comment(`${name}: this run's snapshot is in ${file}; it differs from the recorded one in:`);
  for (const line of snapshotDifferences(expected, actual).slice(0, 60)) t.comment(`  ${line}`);
}

// ---------------------------------------------------------------------------------------------
// The REST API, in-process or over HTTP

export interface ApiReply {
  status: number;
  // any: replies are read field by field; their shapes are the routes' JSON schemas.
  body: any;
}

/** One authenticated JSON call; `url` starts with `/api/v1`. */
export type Api = (method: string, url: string, body?: unknown) => Promise<ApiReply>;

/** Through fastify's inject (no socket), as the given user. */
export function injectApi(service: TestService, token: string): Api {
  return (method, url, body) => service.call(method, url, { token, body });
}

/** Over HTTP to a running `factlog serve`, as the given user. */
export function httpApi(baseUrl: string, token: string): Api {
  return async (method, url, body) => {
    const response = await fetch(baseUrl + url, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let parsed: unknown = text;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      /* not JSON: keep the text */
    }
    return { status: response.status, body: parsed };
  };
}

async function ok(api: Api, method: string, url: string, body?: unknown, expected: number[] = [200]): Promise<ApiReply['body']> {
  const reply = await api(method, url, body);
  if (!expected.includes(reply.status)) throw new Error(`${method} ${url}: ${reply.status} ${JSON.stringify(reply.body)}`);
  return reply.body;
}

/** Every item of a paged list route (`limit`/`offset`, reply `{items, total}`). */
export async function listAll(api: Api, url: string): Promise<Array<Record<string, unknown>>> {
  const items: Array<Record<string, unknown>> = [];
  const separator = url.includes('?') ? '&' : '?';
  for (let offset = 0; ; ) {
    const page = await ok(api, 'GET', `${url}${separator}limit=500&offset=${offset}`);
    const pageItems = (page.items ?? []) as Array<Record<string, unknown>>;
    items.push(...pageItems);
    offset += pageItems.length;
    if (pageItems.length === 0 || offset >= Number(page.total ?? 0)) return items;
  }
}

/** Every event of the repository of the given types, in log order. */
export async function listEvents(api: Api, repositoryId: string, types: string[]): Promise<Array<{ type: string; stream_id: string; data: Record<string, unknown> }>> {
  const events: Array<{ type: string; stream_id: string; data: Record<string, unknown> }> = [];
  for (let from = 0; ; ) {
    const page = await ok(api, 'GET', `/api/v1/repositories/${repositoryId}/events?types=${types.join(',')}&from=${from}&limit=1000`);
    events.push(...page.events);
    if (page.events.length === 0 || page.next_from === undefined || page.next_from <= from) return events;
    from = page.next_from;
  }
}

export async function createRepository(api: Api, name: string): Promise<string> {
  const repository = await ok(api, 'POST', '/api/v1/repositories', { name }, [201]);
  return repository.id as string;
}

/**
 * Registers each document by URL; returns slug → source id. Adding a URL twice answers with
 * the existing source, so a caller may register again after a restart.
 */
export async function registerCorpus(api: Api, repositoryId: string, documents: Array<CorpusDocument & { url: string }>): Promise<Map<string, string>> {
  const sources = new Map<string, string>();
  for (const document of documents) {
    const source = await ok(api, 'POST', `/api/v1/repositories/${repositoryId}/sources`, { url: document.url }, [200, 201]);
    sources.set(document.slug, source.id);
  }
  return sources;
}

export interface TaskSummary {
  complete: boolean;
  // any: per-kind counts, whose shape the tasks route owns.
  [key: string]: any;
}

export async function taskSummary(api: Api, repositoryId: string): Promise<TaskSummary> {
  return (await ok(api, 'GET', `/api/v1/repositories/${repositoryId}/tasks?limit=1`)) as TaskSummary;
}

/**
 * Asserts that none of the repository's tasks failed or died. A stage after decomposition fails
 * only its task (the source stays processed), so a run can look complete yet miss, say, one
 * source's concepts; this names such tasks with their errors.
 */
export async function assertNoFailedTasks(t: { same: (found: unknown, wanted: unknown, message: string) => boolean }, api: Api, repositoryId: string): Promise<void> {
  const unfinished: string[] = [];
  for (const state of ['failed', 'dead']) {
    for (const task of await listAll(api, `/api/v1/repositories/${repositoryId}/tasks?state=${state}`)) {
      unfinished.push(`${String(task.kind)} ${String(task.state)} after ${String(task.attempts)} attempt(s) (source ${String(task.source_id)}): ${String(task.last_error)}`);
    }
  }
  t.same(unfinished, [], 'no task failed or died');
}

/**
 * Attempts the repository's retrieve_source jobs took, per source id. A job retried after a
 * transient failure (under a heavily loaded machine: a timeout) fetches its page again; work
 * duplicated by a twin job would show as more fetches than attempts.
 */
export async function retrieveAttemptsBySource(api: Api, repositoryId: string): Promise<Map<string, number>> {
  const attempts = new Map<string, number>();
  for (const task of await listAll(api, `/api/v1/repositories/${repositoryId}/tasks?kind=retrieve_source`)) {
    const sourceId = String(task.source_id);
    attempts.set(sourceId, (attempts.get(sourceId) ?? 0) + Number(task.attempts));
  }
  return attempts;
}

/** Sources of the repository that are neither processed nor failed (still in the pipeline). */
export async function pendingSources(api: Api, repositoryId: string): Promise<number> {
  const sources = await listAll(api, `/api/v1/repositories/${repositoryId}/sources`);
  return sources.filter((source) => source.status !== 'processed' && source.status !== 'failed').length;
}

/**
 * Waits until the repository's tasks are complete, no source is still in the pipeline, and the
 * snapshot stays the same across `settleMs` (scheduled stages — dedup catch-up, relation
 * refresh — run on timers, so "no job pending" alone can come a moment before their last run).
 * Returns that snapshot.
 */
export async function waitForPipeline(
  api: Api,
  repositoryId: string,
  options: { timeoutMs?: number; settleMs?: number; intervalMs?: number; onPoll?: (summary: TaskSummary) => void } = {},
): Promise<CorpusSnapshot> {
  // settleMs spans a dedup catch-up interval (3 s), so its run is seen.
  const { timeoutMs = 120_000, settleMs = 3_500, intervalMs = 250 } = options;
  const deadline = Date.now() + timeoutMs;
  let last: TaskSummary | null = null;
  let previous: string | null = null;
  for (;;) {
    if (Date.now() > deadline) {
      const state = last?.complete === true ? 'tasks complete but the snapshot kept changing' : 'tasks not complete';
      throw new Error(`pipeline not settled within ${timeoutMs} ms (${state}); task counts: ${JSON.stringify(last?.counts)}`);
    }
    try {
      last = await taskSummary(api, repositoryId);
      options.onPoll?.(last);
      // Every source processed or failed too: right after a restart the queue can be empty
      // for a moment before the stages enqueue the next jobs of pending sources.
      if (last.complete === true && (await pendingSources(api, repositoryId)) === 0) {
        const snapshot = await takeSnapshot(api, repositoryId);
        const serialized = JSON.stringify(snapshot);
        if (serialized === previous) return snapshot;
        previous = serialized;
        await sleep(settleMs);
        continue;
      }
      // Scheduled jobs (relation refresh, dedup catch-up) come and go every interval: a poll that
      // finds one queued says nothing about whether the result changed, so `previous` stays.
    } catch (error) {
      // A service that is restarting refuses connections: keep polling until the deadline.
      if (!(error instanceof TypeError)) throw error;
    }
    await sleep(intervalMs);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------
// The canonical snapshot

export interface SnapshotFact {
  /**
   * The contents of the duplicate cluster: the visible survivor and every fact merged into it,
   * sorted. Which member survives depends on arrival order (docs/pipeline.md); the set does not.
   */
  members: string[];
  kind: string;
  /** Corpus slugs of the sources the cluster is linked to, sorted. */
  sources: string[];
}

export interface SnapshotConcept {
  name: string;
  context: string;
  aliases: string[];
  /** Cluster keys (`members.join(' | ')`) of the concept's facts, sorted. */
  facts: string[];
}

export interface SnapshotRelation {
  /** Concept labels (`conceptLabel`), a < b. */
  a: string;
  b: string;
  shared_fact_count: number;
}

/** A concept's name and context: the same name in two contexts is two concepts. */
export const conceptLabel = (name: string, context: string) => `${name} @ ${context}`;

/** The relation between the concepts named `a` and `b` (in whatever contexts), if any. */
export function relationBetween(snapshot: Pick<CorpusSnapshot, 'relations'>, a: string, b: string): SnapshotRelation | undefined {
  const nameOf = (label: string) => label.slice(0, label.lastIndexOf(' @ '));
  return snapshot.relations.find((relation) => {
    const names = [nameOf(relation.a), nameOf(relation.b)];
    return names.includes(a) && names.includes(b) && a !== b;
  });
}

/**
 * A concept's summaries and synthesis, in the parts that do not depend on the order facts
 * arrived in: which facts a slice holds, and so which facts a summary or the synthesis cites,
 * follows arrival order (slices are filled in order and frozen at batch_size), the counts do not.
 */
export interface SnapshotSummary {
  /** Concept label (`conceptLabel`). */
  concept: string;
  slices: number;
  /** Facts of the open slice (0 when every slice is frozen). */
  open_slice_facts: number;
  /** Every frozen slice holds exactly batch_size facts, the slices cover exactly the concept's facts, and each cites only its own. */
  slices_valid: boolean;
  synthesized: boolean;
  /** The synthesis cites only facts of the concept (true without a synthesis). */
  synthesis_valid: boolean;
}

/** One annotated sentence of CORPUS_REPORT: the facts linked to it, as `<cluster key> (<posture>)`, sorted. */
export interface SnapshotAnnotation {
  sentence: string;
  facts: string[];
}

export interface CorpusSnapshot {
  facts: SnapshotFact[];
  concepts: SnapshotConcept[];
  relations: SnapshotRelation[];
  /** Per concept with facts, by label; absent in a snapshot recorded before summaries existed. */
  summaries?: SnapshotSummary[];
  /** CORPUS_REPORT annotated (annotationSnapshot); only the runs that write the report have it. */
  annotations?: SnapshotAnnotation[];
  /** Sources by slug with their status (and failure when failed). */
  sources: Array<{ slug: string; status: string; failure: string | null }>;
}

export const clusterKey = (members: string[]) => members.join(' | ');

function slugOf(url: unknown): string {
  const match = typeof url === 'string' ? /\/docs\/([^/?#]+)\.(html|pdf)$/.exec(url) : null;
  return match?.[1] ?? String(url);
}

const byText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * Facts, concepts and relations of the repository through the REST API, in a form that equals
 * for two runs over the same corpus whatever the order documents arrived in: ids never appear
 * (concept names, fact contents and corpus slugs do), duplicates appear as clusters.
 */
export async function takeSnapshot(api: Api, repositoryId: string): Promise<CorpusSnapshot> {
  const { facts, sources, keyOf } = await factSnapshot(api, repositoryId);
  const { concepts, relations } = await conceptSnapshot(api, repositoryId, keyOf);
  const summaries = await summarySnapshot(api, repositoryId);
  return { facts, concepts, relations, summaries, sources };
}

/** The fact ids a Markdown text cites (`[text](<fact:ID>)`). */
const citedIds = (markdown: string) => [...markdown.matchAll(/<fact:([^>]*)>/g)].map((match) => match[1] ?? '');

/**
 * A report written from the corpus: sentences that restate facts of each topic in other words,
 * one that denies a fact, and one about nothing the corpus holds.
 */
export const CORPUS_REPORT = [
  'Radioactivity was discovered by Henri Becquerel in the year 1896.',
  'During the Second World War, Alan Turing worked at Bletchley Park on codes.',
  'Coffee from Java was shipped to Amsterdam by the Dutch East India Company.',
  'Marie Curie did not win the Nobel Prize in Chemistry, the pamphlet claims.',
  'The weather at the seaside was mild and nobody there talked about anything else.',
].join(' ');

/**
 * Writes CORPUS_REPORT into the repository, waits for its annotation and answers its sentences
 * with their facts as cluster keys (so two runs compare whichever duplicate survived) and postures.
 */
export async function annotationSnapshot(api: Api, repositoryId: string, timeoutMs = 120_000): Promise<SnapshotAnnotation[]> {
  const base = `/api/v1/repositories/${repositoryId}/reports`;
  const report = await ok(api, 'POST', base, { title: 'From the corpus', text: CORPUS_REPORT }, [201]);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const current = await ok(api, 'GET', `${base}/${report.id}`);
    if (current.status === 'annotated') break;
    if (current.status === 'failed') throw new Error(`the corpus report failed: ${current.failure}`);
    if (Date.now() > deadline) throw new Error(`the corpus report was not annotated within ${timeoutMs} ms (status ${current.status})`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  const { keyOf } = await factSnapshot(api, repositoryId);
  const annotations = await listAll(api, `${base}/${report.id}/annotations`);
  return annotations.map((sentence) => ({
    sentence: sentence.text as string,
    facts: (sentence.facts as Array<{ fact_id: string; posture: string }>).map((fact) => `${keyOf.get(fact.fact_id) ?? `unknown fact ${fact.fact_id}`} (${fact.posture})`).sort(byText),
  }));
}

/** Summaries and syntheses per concept with facts (SnapshotSummary), by concept label. */
export async function summarySnapshot(api: Api, repositoryId: string, batchSize = 20): Promise<SnapshotSummary[]> {
  const base = `/api/v1/repositories/${repositoryId}`;
  const summaries: SnapshotSummary[] = [];
  for (const row of await listAll(api, `${base}/concepts?show_small=true`)) {
    const factIds = new Set((await listAll(api, `${base}/concepts/${row.id}/facts`)).map((fact) => fact.id as string));
    if (factIds.size === 0) continue;
    const slices = await listAll(api, `${base}/concepts/${row.id}/summaries`);
    const covered = slices.flatMap((slice) => slice.fact_ids as string[]);
    const open = slices.filter((slice) => slice.is_open === true);
    const slicesValid =
      slices.every((slice) => slice.is_open === true || (slice.fact_ids as string[]).length === batchSize) &&
      open.length <= 1 &&
      covered.length === factIds.size &&
      covered.every((id) => factIds.has(id)) &&
      slices.every((slice) => citedIds(slice.content as string).every((id) => (slice.fact_ids as string[]).includes(id)));
    const definition = await ok(api, 'GET', `${base}/concepts/${row.id}/definition`);
    const synthesis = definition.synthesis as { content: string } | null;
    summaries.push({
      concept: conceptLabel(row.canonical_name as string, row.context as string),
      slices: slices.length,
      open_slice_facts: open.reduce((sum, slice) => sum + (slice.fact_ids as string[]).length, 0),
      slices_valid: slicesValid,
      synthesized: synthesis !== null,
      synthesis_valid: synthesis === null || citedIds(synthesis.content).every((id) => factIds.has(id)),
    });
  }
  return summaries.sort((a, b) => byText(a.concept, b.concept));
}

/**
 * The facts part of the snapshot, and each visible fact's cluster key by fact id (for the
 * concepts part).
 */
export async function factSnapshot(
  api: Api,
  repositoryId: string,
): Promise<{ facts: SnapshotFact[]; sources: CorpusSnapshot['sources']; keyOf: Map<string, string> }> {
  const base = `/api/v1/repositories/${repositoryId}`;

  // Facts per source (a merged fact's source links move to its survivor).
  const sources = await listAll(api, `${base}/sources`);
  const visible = new Map<string, { content: string; kind: string; sources: Set<string> }>();
  for (const source of sources) {
    for (const fact of await listAll(api, `${base}/sources/${source.id}/facts`)) {
      if (fact.status === 'merged') continue;
      const entry = visible.get(fact.id as string) ?? { content: fact.content as string, kind: fact.fact_kind as string, sources: new Set<string>() };
      entry.sources.add(slugOf(source.url));
      visible.set(fact.id as string, entry);
    }
  }

  // Merged facts (gone from the read models once cleanup removed them) from the log.
  const contentOf = new Map<string, string>();
  const mergedInto = new Map<string, string>();
  for (const event of await listEvents(api, repositoryId, ['FactsExtracted', 'FactMergedInto'])) {
    if (event.type === 'FactsExtracted') {
      for (const fact of event.data.facts as Array<{ fact_id: string; content: string }>) contentOf.set(fact.fact_id, fact.content);
    } else {
      mergedInto.set(event.stream_id.replace(/^fact-/, ''), event.data.survivor_id as string);
    }
  }
  const finalSurvivor = (id: string) => {
    let current = id;
    for (let hops = 0; mergedInto.has(current) && hops < 1000; hops++) current = mergedInto.get(current) as string;
    return current;
  };
  const members = new Map<string, string[]>();
  for (const [id, entry] of visible) members.set(id, [entry.content]);
  for (const id of mergedInto.keys()) {
    const survivor = finalSurvivor(id);
    const content = contentOf.get(id);
    if (content !== undefined && members.has(survivor) && !visible.has(id)) members.get(survivor)?.push(content);
  }
  const keyOf = new Map<string, string>();
  const facts: SnapshotFact[] = [];
  for (const [id, entry] of visible) {
    const sorted = [...new Set(members.get(id) ?? [])].sort(byText);
    keyOf.set(id, clusterKey(sorted));
    facts.push({ members: sorted, kind: entry.kind, sources: [...entry.sources].sort(byText) });
  }
  facts.sort((a, b) => byText(clusterKey(a.members), clusterKey(b.members)));
  return {
    facts,
    keyOf,
    sources: sources
      .map((source) => ({ slug: slugOf(source.url), status: source.status as string, failure: (source.failure as string | null) ?? null }))
      .sort((a, b) => byText(a.slug, b.slug)),
  };
}

/** Concepts with their aliases and facts (as cluster keys), and relations by concept name. */
export async function conceptSnapshot(
  api: Api,
  repositoryId: string,
  keyOf: ReadonlyMap<string, string>,
): Promise<{ concepts: SnapshotConcept[]; relations: SnapshotRelation[] }> {
  const base = `/api/v1/repositories/${repositoryId}`;
  const conceptRows = await listAll(api, `${base}/concepts?show_small=true`);
  const labelOf = new Map<string, string>();
  for (const row of conceptRows) labelOf.set(row.id as string, conceptLabel(row.canonical_name as string, row.context as string));
  const concepts: SnapshotConcept[] = [];
  const relations = new Map<string, SnapshotRelation>();
  for (const row of conceptRows) {
    const concept = await ok(api, 'GET', `${base}/concepts/${row.id}`);
    const conceptFacts = await listAll(api, `${base}/concepts/${row.id}/facts`);
    concepts.push({
      name: concept.canonical_name,
      context: concept.context,
      aliases: [...new Set((concept.aliases ?? []) as string[])].sort(byText),
      facts: conceptFacts.map((fact) => keyOf.get(fact.id as string) ?? `?${fact.content as string}`).sort(byText),
    });
    // Each relation once per side: keyed by the sorted pair of names.
    for (const relation of await listAll(api, `${base}/concepts/${row.id}/relations?show_insignificant=true`)) {
      const other = relation.concept as { id: string; canonical_name: string; context: string };
      const self = conceptLabel(concept.canonical_name, concept.context);
      const names = [self, labelOf.get(other.id) ?? conceptLabel(other.canonical_name, other.context)].sort(byText) as [string, string];
      relations.set(names.join('\u0000'), { a: names[0], b: names[1], shared_fact_count: Number(relation.shared_fact_count) });
    }
  }
  concepts.sort((a, b) => byText(`${a.name}\u0000${a.context}`, `${b.name}\u0000${b.context}`));

  return {
    concepts,
    relations: [...relations.values()].sort((a, b) => byText(`${a.a}\u0000${a.b}`, `${b.a}\u0000${b.b}`)),
  };
}

/**
 * Config overrides for pipeline tests: the scheduled stages (relation refresh, dedup catch-up)
 * run every second, so they run during a test, not ten minutes after it.
 */
export const PIPELINE_TEST_OVERRIDES = {
  task: { poll_interval: '50ms', refresh_concept_relations_interval: '1s' },
  // Each catch-up pass compares every recent fact with its neighbours: every second would keep
  // an in-process service busy all the time.
  providers: { dedup: { catchup_interval: '3s' } },
} as const;

/** The same overrides as environment variables, for a `factlog serve` child process. */
export const PIPELINE_TEST_ENV: Readonly<Record<string, string>> = {
  TASK_POLL_INTERVAL: '50ms',
  TASK_REFRESH_CONCEPT_RELATIONS_INTERVAL: '1s',
  PROVIDERS_DEDUP_CATCHUP_INTERVAL: '3s',
};
