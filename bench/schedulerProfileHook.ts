/**
 * `node --import=./bench/schedulerProfileHook.ts`: how PGlite's thread spends its time
 * (src/db/statementScheduler.ts): running statements, by level, and waiting, by why nothing ran —
 * a transaction's next statement from the API thread (by the transaction's level), a request's
 * next statement (the hold after a request's statement), or nothing sent at all. Written when
 * PGlite's thread exits, to the file named by BENCH_SCHEDULER_PROFILE. SIGUSR2 to the process
 * (bench/pipeline.ts sends it at the start of the ingest) starts the count again. Under tsx only
 * (the hook patches the TypeScript module the worker imports). For bench/pipeline.ts:
 * BENCH_SERVICE_NODE_ARGS=--import=<abs path of this file> BENCH_SCHEDULER_PROFILE=/tmp/sched.txt.
 */
import { writeFileSync } from 'node:fs';
import { BroadcastChannel, isMainThread } from 'node:worker_threads';
import { StatementScheduler, type ScheduledStatement } from '../src/db/statementScheduler.js';

const target = process.env.BENCH_SCHEDULER_PROFILE;
const CHANNEL = 'factlog-scheduler-profile';

if (target && !process.env.FACTLOG_HELPER_PROCESS) {
  if (isMainThread) {
    const channel = new BroadcastChannel(CHANNEL);
    channel.unref();
    process.on('SIGUSR2', () => channel.postMessage('reset'));
  } else {
    installInWorker(target);
  }
}

/** A statement's text with its literals and lists folded, cut to 110 characters. */
function shapeOf(statement: ScheduledStatement): string {
  const sql = 'sql' in statement && typeof statement.sql === 'string' ? statement.sql : '?';
  return sql.replace(/\s+/g, ' ').replace(/'[^']*'/g, "'…'").replace(/\$\d+(, ?\$\d+)*/g, '$n').replace(/\?(, ?\?)+/g, '?…').slice(0, 110);
}

function installInWorker(file: string): void {
  let start = performance.now();
  let used = false;
  const busy = new Map<string, { ms: number; count: number }>();
  const idle = new Map<string, number>();
  let idleSince = start;
  let idleReason: string | null = 'before the first statement';
  let runningSince = 0;
  let ownerLevel = '';
  /** Per level and statement shape: statements run, their time, and the wait after them before the next statement ran. */
  const shapes = new Map<string, { count: number; ms: number; waitAfter: number }>();
  let lastShape: string | null = null;
  const reset = () => {
    start = performance.now();
    busy.clear();
    idle.clear();
    shapes.clear();
    idleSince = start;
  };
  const channel = new BroadcastChannel(CHANNEL);
  channel.unref();
  channel.onmessage = () => reset();

  // The scheduler's private state, read as the bench's view of it (not part of its interface).
  type Internals = { owner: number | null; waiting: Record<string, ScheduledStatement[]>; holdRemainingMs(): number };
  const reasonOf = (scheduler: Internals): string => {
    if (scheduler.owner !== null) return `a transaction's next statement (${ownerLevel})`;
    if (scheduler.holdRemainingMs() > 0) return "a request's next statement (the hold)";
    return 'nothing sent';
  };
  const prototype = StatementScheduler.prototype;
  const next = prototype.next;
  const ran = prototype.ran;
  prototype.next = function profiledNext(this: StatementScheduler<ScheduledStatement>) {
    used = true;
    const now = performance.now();
    if (idleReason !== null) {
      idle.set(idleReason, (idle.get(idleReason) ?? 0) + (now - idleSince));
      if (lastShape !== null && idleReason !== 'nothing sent') shapeEntry(lastShape).waitAfter += now - idleSince;
    }
    idleSince = now;
    const statement = next.call(this);
    if (statement === undefined) idleReason = reasonOf(this as unknown as Internals);
    else {
      idleReason = null;
      runningSince = now;
    }
    return statement;
  };
  prototype.ran = function profiledRan(this: StatementScheduler<ScheduledStatement>, statement: ScheduledStatement, inTransaction: boolean) {
    const now = performance.now();
    const entry = busy.get(statement.level) ?? { ms: 0, count: 0 };
    entry.ms += now - runningSince;
    entry.count++;
    busy.set(statement.level, entry);
    if (inTransaction) ownerLevel = statement.level;
    lastShape = `${statement.level} ${shapeOf(statement)}`;
    const shape = shapeEntry(lastShape);
    shape.count++;
    shape.ms += now - runningSince;
    idleSince = now;
    idleReason = 'between statements';
    ran.call(this, statement, inTransaction);
  };
  function shapeEntry(key: string) {
    let entry = shapes.get(key);
    if (!entry) shapes.set(key, (entry = { count: 0, ms: 0, waitAfter: 0 }));
    return entry;
  }
  process.on('exit', () => {
    if (!used) return;
    const wall = performance.now() - start;
    const lines = [`PGlite's thread over ${(wall / 1000).toFixed(1)} s since the count started`];
    let busyMs = 0;
    for (const [level, { ms, count }] of busy) {
      busyMs += ms;
      lines.push(`running ${level}: ${count} statements, ${(ms / 1000).toFixed(2)} s (${(ms / count).toFixed(2)} ms each)`);
    }
    lines.push(`running in all: ${(busyMs / 1000).toFixed(2)} s`);
    for (const [reason, ms] of [...idle].sort((a, b) => b[1] - a[1])) lines.push(`waiting for ${reason}: ${(ms / 1000).toFixed(2)} s`);
    lines.push('', 'by level and statement shape, the 40 with the most time run plus waited after (count, run s, waited after s):');
    const top = [...shapes].sort((a, b) => b[1].ms + b[1].waitAfter - (a[1].ms + a[1].waitAfter)).slice(0, 40);
    for (const [key, { count, ms, waitAfter }] of top) lines.push(`${String(count).padStart(7)} ${(ms / 1000).toFixed(2).padStart(7)} ${(waitAfter / 1000).toFixed(2).padStart(7)}  ${key}`);
    writeFileSync(file, `${lines.join('\n')}\n`);
  });
}
