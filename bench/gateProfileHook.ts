/**
 * `node --import=./bench/gateProfileHook.ts`: who holds PGlite's one connection and who waits for
 * it (docs/performance.md, "Fifth round"). Wraps the priority gate (src/db/priority.ts): every
 * hold (a transaction, a knex query, a raw statement) is recorded with its holder (the first
 * frames of `src/` outside `src/db` in the caller's async stack), whether it was background,
 * its statements and its duration; every foreground wait with what held the connection
 * meanwhile. The tables go to the file named by BENCH_GATE_PROFILE when the service exits.
 * Under tsx only (the hook imports the TypeScript module the service imports). For
 * bench/pipeline.ts: BENCH_SERVICE_NODE_ARGS=--import=<abs path of this file>
 * BENCH_GATE_PROFILE=/tmp/gate.txt.
 */
import { writeFileSync } from 'node:fs';
import { AsyncLocalStorage } from 'node:async_hooks';
import { Server, type IncomingMessage, type ServerResponse } from 'node:http';
import { isMainThread } from 'node:worker_threads';
import { ProjectionRunner } from '../src/projection/runner.js';
import { ModelWorkerPool } from '../src/providers/modelWorkers/pool.js';
import { isBackground, PriorityGate } from '../src/db/priority.js';
import { PgliteThread } from '../src/db/pgliteThread.js';
import { statementShape } from './sqlProfile.js';

const target = process.env.BENCH_GATE_PROFILE;

interface Hold {
  holder: string;
  /** How long this holder waited for the connection. */
  waited: number;
  /** The first statement after BEGIN (or the only one). */
  first: string;
  background: boolean;
  start: number;
  end: number;
  statements: number;
  longest: { ms: number; shape: string };
}

interface Wait {
  waiter: string;
  background: boolean;
  start: number;
  end: number;
}

/** The caller: the first frames of src/ (outside src/db and the event store's plumbing), as file:function. */
function holderOf(stack: string | undefined): string {
  const frames = (stack ?? '').split('\n').slice(1);
  const ours: string[] = [];
  for (const frame of frames) {
    const match = /at (?:async )?(?:(\S+) \()?.*\/src\/([^:]+):\d+:\d+\)?$/.exec(frame.trim());
    if (!match) continue;
    const [, fn, file] = match;
    if (file.startsWith('db/')) continue;
    ours.push(`${file.replace(/\.ts$/, '')}:${fn ?? '?'}`);
    if (ours.length === 2) break;
  }
  return ours.join(' < ') || 'unknown';
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

if (target && isMainThread && !process.env.FACTLOG_HELPER_PROCESS) {
  Error.stackTraceLimit = 40;
  const holds: Hold[] = [];
  const waits: Wait[] = [];
  let current: Hold | null = null;
  const label = new AsyncLocalStorage<string>();
  // The projection runner's batches, by name (its private methods are ordinary properties at run time).
  const runner = ProjectionRunner.prototype as unknown as Record<'applyShared' | 'applyAlone', (...args: unknown[]) => Promise<unknown>>;
  for (const method of ['applyShared', 'applyAlone'] as const) {
    const original = runner[method];
    runner[method] = function labelled(this: unknown, ...args: unknown[]) {
      return label.run(`projection ${method}`, () => original.apply(this, args));
    };
  }
  // The built-in models' worker threads are another queue a request's query embedding waits in.
  const modelCalls: Array<{ method: string; background: boolean; ms: number; queued: number }> = [];
  const pool = ModelWorkerPool.prototype as unknown as { call: (this: ModelWorkerPool, call: { method: string }, signal?: AbortSignal) => Promise<unknown> };
  const call = pool.call;
  let modelInFlight = 0;
  pool.call = async function profiledCall(this: ModelWorkerPool, request, signal) {
    const started = performance.now();
    const queued = modelInFlight++;
    try {
      return await call.call(this, request, signal);
    } finally {
      modelInFlight -= 1;
      modelCalls.push({ method: request.method, background: isBackground(), ms: performance.now() - started, queued });
    }
  };
  // Each HTTP request: its time in the service, and how much of it was waiting for and holding the connection.
  interface RequestTime { kind: string; start: number; waited: number; held: number; statements: number }
  const requestOf = new AsyncLocalStorage<RequestTime>();
  const requests: Array<RequestTime & { ms: number }> = [];
  // emit's overloads do not take a plain rest array: call it through a looser type.
  const emit = Server.prototype.emit as (this: Server, event: string | symbol, ...args: unknown[]) => boolean;
  Server.prototype.emit = function timedEmit(this: Server, event: string | symbol, ...args: unknown[]) {
    if (event !== 'request') return emit.call(this, event, ...args);
    const [request, response] = args as [IncomingMessage, ServerResponse];
    const kind = (request.url ?? '').startsWith('/healthz') ? 'healthz' : /\/facts\?query=/.test(request.url ?? '') ? 'fact search' : 'other';
    const timing: RequestTime = { kind, start: performance.now(), waited: 0, held: 0, statements: 0 };
    response.once('finish', () => requests.push({ ...timing, ms: performance.now() - timing.start }));
    return requestOf.run(timing, () => emit.call(this, event, ...args));
  } as typeof Server.prototype.emit;
  // SIGUSR2 (the bench's start of the ingest) forgets boot.
  process.on('SIGUSR2', () => {
    holds.length = 0;
    waits.length = 0;
    modelCalls.length = 0;
    requests.length = 0;
  });
  const gate = PriorityGate.prototype;
  const enter = gate.enter;
  const leave = gate.leave;
  gate.enter = function profiledEnter(this: PriorityGate) {
    const holder = holderOf(new Error().stack);
    const background = isBackground();
    const start = performance.now();
    return enter.call(this).then(() => {
      const now = performance.now();
      current = { holder: label.getStore() ?? holder, waited: now - start, first: '', background, start: now, end: now, statements: 0, longest: { ms: 0, shape: '' } };
    });
  };
  gate.leave = function profiledLeave(this: PriorityGate) {
    if (current) {
      current.end = performance.now();
      // Knex's promise chains lose the async stack: name such a holder by what it ran.
      if (current.holder === 'unknown') current.holder = `${current.statements > 1 ? 'trx' : 'knex'}[${current.first.slice(0, 70)}]`;
      holds.push(current);
      const request = requestOf.getStore();
      if (request) {
        request.waited += current.waited;
        request.held += current.end - current.start;
        request.statements += current.statements;
      }
      if (current.waited > 0.05) waits.push({ waiter: current.holder, background: current.background, start: current.start - current.waited, end: current.start });
      current = null;
    }
    leave.call(this);
  };
  const query = PgliteThread.prototype.query;
  PgliteThread.prototype.query = async function profiledQuery(this: PgliteThread, ...args: Parameters<PgliteThread['query']>) {
    const hold = current;
    const started = performance.now();
    try {
      return await query.apply(this, args);
    } finally {
      if (hold) {
        hold.statements += 1;
        const sql = args[0];
        if (hold.first === '' && !/^\s*BEGIN/i.test(sql)) hold.first = statementShape(sql);
        const ms = performance.now() - started;
        if (ms > hold.longest.ms) hold.longest = { ms, shape: statementShape(args[0]).slice(0, 120) };
      }
    }
  } as PgliteThread['query'];

  process.on('exit', () => {
    const lines: string[] = [];
    const byHolder = new Map<string, Hold[]>();
    for (const hold of holds) {
      const key = `${hold.background ? 'bg' : 'fg'} ${hold.holder}`;
      byHolder.set(key, [...(byHolder.get(key) ?? []), hold]);
    }
    lines.push('## Holds of the connection by holder (ms): count, total, p50, p99, max, statements per hold (mean / max)');
    const rows = [...byHolder].map(([key, list]) => {
      const ms = list.map((hold) => hold.end - hold.start).sort((a, b) => a - b);
      const total = ms.reduce((sum, value) => sum + value, 0);
      const statements = list.map((hold) => hold.statements);
      return { key, count: list.length, total, p50: percentile(ms, 50), p99: percentile(ms, 99), max: ms[ms.length - 1] as number, meanStatements: statements.reduce((a, b) => a + b, 0) / list.length, maxStatements: Math.max(...statements) };
    });
    for (const row of rows.sort((a, b) => b.total - a.total).slice(0, 40)) {
      lines.push(`${String(row.count).padStart(7)} ${row.total.toFixed(0).padStart(8)} ${row.p50.toFixed(1).padStart(7)} ${row.p99.toFixed(1).padStart(7)} ${row.max.toFixed(1).padStart(7)}  ${row.meanStatements.toFixed(1).padStart(6)} / ${String(row.maxStatements).padStart(4)}  ${row.key}`);
    }
    // For each foreground wait: which holds overlapped it, and for how long.
    holds.sort((a, b) => a.start - b.start);
    const fgWaits = waits.filter((wait) => !wait.background);
    const byWaiter = new Map<string, Wait[]>();
    for (const wait of fgWaits) byWaiter.set(wait.waiter, [...(byWaiter.get(wait.waiter) ?? []), wait]);
    lines.push('', '## Foreground waits (that waited at all) by waiter (ms): count, total, p50, p99, max');
    for (const [waiter, list] of [...byWaiter].sort((a, b) => b[1].length - a[1].length).slice(0, 20)) {
      const ms = list.map((wait) => wait.end - wait.start).sort((a, b) => a - b);
      lines.push(`${String(list.length).padStart(7)} ${ms.reduce((a, b) => a + b, 0).toFixed(0).padStart(8)} ${percentile(ms, 50).toFixed(1).padStart(7)} ${percentile(ms, 99).toFixed(1).padStart(7)} ${(ms[ms.length - 1] as number).toFixed(1).padStart(7)}  ${waiter}`);
    }
    const blame = new Map<string, { ms: number; count: number }>();
    let longWaitMs = 0;
    const longWaits = fgWaits.filter((wait) => wait.end - wait.start > 50);
    for (const wait of longWaits) {
      longWaitMs += wait.end - wait.start;
      for (const hold of holds) {
        if (hold.start >= wait.end) break;
        if (hold.end <= wait.start) continue;
        const overlap = Math.min(hold.end, wait.end) - Math.max(hold.start, wait.start);
        const key = `${hold.background ? 'bg' : 'fg'} ${hold.holder}`;
        const entry = blame.get(key) ?? { ms: 0, count: 0 };
        entry.ms += overlap;
        entry.count += 1;
        blame.set(key, entry);
      }
    }
    lines.push('', `## What held the connection during the ${longWaits.length} foreground waits over 50 ms (${longWaitMs.toFixed(0)} ms of waiting): ms, holds`);
    for (const [key, entry] of [...blame].sort((a, b) => b[1].ms - a[1].ms).slice(0, 25)) {
      lines.push(`${entry.ms.toFixed(0).padStart(8)} ${String(entry.count).padStart(6)}  ${key}`);
    }
    lines.push('', '## The 25 longest holds: ms, statements, holder, longest statement (ms)');
    for (const hold of [...holds].sort((a, b) => b.end - b.start - (a.end - a.start)).slice(0, 25)) {
      lines.push(`${(hold.end - hold.start).toFixed(0).padStart(7)} ${String(hold.statements).padStart(5)}  ${hold.background ? 'bg' : 'fg'} ${hold.holder}  | ${hold.longest.ms.toFixed(0)} ms ${hold.longest.shape}`);
    }
    lines.push('', '## HTTP requests in the service (ms): count, then p50 / p99 / max of: the whole request, waiting for the connection, holding it; statements (mean)');
    for (const kind of ['healthz', 'fact search']) {
      const list = requests.filter((request) => request.kind === kind);
      if (list.length === 0) continue;
      const cell = (values: number[]) => {
        const sorted = [...values].sort((a, b) => a - b);
        return `${percentile(sorted, 50).toFixed(1)} / ${percentile(sorted, 99).toFixed(1)} / ${(sorted[sorted.length - 1] as number).toFixed(1)}`;
      };
      lines.push(`${String(list.length).padStart(7)}  whole ${cell(list.map((r) => r.ms))}  waiting ${cell(list.map((r) => r.waited))}  holding ${cell(list.map((r) => r.held))}  statements ${(list.reduce((sum, r) => sum + r.statements, 0) / list.length).toFixed(1)}  ${kind}`);
      // The slowest 1%: where their time went.
      const slowest = [...list].sort((a, b) => b.ms - a.ms).slice(0, Math.max(1, Math.ceil(list.length / 100)));
      for (const request of slowest) lines.push(`          slow ${kind}: ${request.ms.toFixed(0)} ms, waiting ${request.waited.toFixed(0)}, holding ${request.held.toFixed(0)}, ${request.statements} statements`);
    }
    lines.push('', '## Model worker calls (ms from call to answer, queue included): count, p50, p99, max, calls in flight before it (mean / max)');
    const byMethod = new Map<string, typeof modelCalls>();
    for (const entry of modelCalls) {
      const key = `${entry.background ? 'bg' : 'fg'} ${entry.method}`;
      byMethod.set(key, [...(byMethod.get(key) ?? []), entry]);
    }
    for (const [key, list] of byMethod) {
      const ms = list.map((entry) => entry.ms).sort((a, b) => a - b);
      const queued = list.map((entry) => entry.queued);
      lines.push(`${String(list.length).padStart(7)} ${percentile(ms, 50).toFixed(1).padStart(7)} ${percentile(ms, 99).toFixed(1).padStart(7)} ${(ms[ms.length - 1] as number).toFixed(1).padStart(7)}  ${(queued.reduce((a, b) => a + b, 0) / list.length).toFixed(1)} / ${Math.max(...queued)}  ${key}`);
    }
    writeFileSync(target, `${lines.join('\n')}\n`);
  });
}
