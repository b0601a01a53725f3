/**
 * How fast this machine is right now, for the work the service does (docs/performance.md,
 * "Machine gauge"). This VM's hours differ by up to 2.5× in the CPU the same bench work takes,
 * and a plain JavaScript loop does not show it: on 2026-11-27 a JS, hashing and JSON loop ran
 * fastest on the evening hour whose 1,000-page run took the most CPU a page. PGlite's
 * WebAssembly (most of an embedded node's CPU) does show it, so the gauge times fixed PGlite work
 * in a child process of its own, under fixed V8 flags (GAUGE_NODE_FLAGS) so that its readings
 * compare across rounds whatever flags the service ships with:
 *
 *   node --import=tsx bench/machineGauge.ts          (prints the gauge)
 *
 * bench/pipeline.ts and bench/eventstore.ts print it beside their load average. Compare a run's
 * rates only with runs whose gauge is close; the CPU milliseconds are the reading (wall time
 * also counts other processes' load).
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { fileURLToPath } from 'node:url';

export interface MachineGauge {
  /** CPU ms of PGlite's initdb in memory (its WebAssembly compiled and run once). */
  initdbCpuMs: number;
  /** CPU ms of the fixed statements: 4,000 inserts of a jsonb row with two indexes, 2,000 lookups, one aggregate. */
  statementsCpuMs: number;
  /** CPU ms of a plain JavaScript loop, hashing and JSON: the reading that does not follow the hour. */
  javascriptCpuMs: number;
}

const STATEMENT_ROWS = 4_000;
const LOOKUPS = 2_000;

function cpuMs(since: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(since);
  return Math.round((used.user + used.system) / 1000);
}

async function measure(): Promise<MachineGauge> {
  const { PGlite } = await import('@electric-sql/pglite');
  let started = process.cpuUsage();
  const pglite = await PGlite.create('memory://');
  const initdbCpuMs = cpuMs(started);

  started = process.cpuUsage();
  await pglite.exec(`CREATE TABLE gauge (id text PRIMARY KEY, stream text NOT NULL, position bigint NOT NULL, data jsonb NOT NULL);
    CREATE INDEX gauge_stream ON gauge (stream, position)`);
  for (let row = 0; row < STATEMENT_ROWS; row++) {
    const data = { type: 'FactsExtracted', facts: Array.from({ length: 4 }, (_, n) => ({ id: `f-${row}-${n}`, content: `Sentence ${n} of row ${row} says something.` })) };
    await pglite.query('INSERT INTO gauge (id, stream, position, data) VALUES ($1, $2, $3, $4)', [`e-${row}`, `s-${row % 50}`, row, JSON.stringify(data)]);
  }
  for (let lookup = 0; lookup < LOOKUPS; lookup++) {
    await pglite.query('SELECT data FROM gauge WHERE stream = $1 AND position > $2 ORDER BY position LIMIT 5', [`s-${lookup % 50}`, lookup]);
  }
  await pglite.query(`SELECT stream, count(*), sum(jsonb_array_length(data->'facts')) FROM gauge GROUP BY stream`);
  const statementsCpuMs = cpuMs(started);
  await pglite.close();

  started = process.cpuUsage();
  let sum = 0;
  for (let i = 0; i < 30_000_000; i++) sum += i % 7;
  const buffer = Buffer.alloc(1 << 20, 1);
  for (let i = 0; i < 100; i++) createHash('sha256').update(buffer).digest();
  JSON.parse(JSON.stringify(Array.from({ length: 200_000 }, (_, i) => ({ i, s: `x${i}` }))));
  const javascriptCpuMs = cpuMs(started);
  // The loop's result is used, so V8 cannot drop the loop.
  if (sum !== 89_999_995) throw new Error(`the gauge's loop summed ${sum}`);
  return { initdbCpuMs, statementsCpuMs, javascriptCpuMs };
}

/**
 * The service's V8 flags from the eighteenth round, when the gauge was made, to the twenty-second
 * (docs/performance.md, "Twenty-second round"): every reading since was taken under them.
 */
const GAUGE_NODE_FLAGS = ['--liftoff-only', '--max-semi-space-size=8', '--optimize-for-size'];

/** Runs the gauge in a child process with GAUGE_NODE_FLAGS (under tsx, as the benches run). */
export async function machineGauge(): Promise<MachineGauge> {
  const child = spawn(process.execPath, ['--import=tsx', ...GAUGE_NODE_FLAGS, fileURLToPath(import.meta.url), '--json'], { stdio: ['ignore', 'pipe', 'inherit'] });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  if (code !== 0) throw new Error(`the machine gauge exited with ${code}`);
  return JSON.parse(output) as MachineGauge;
}

export function describeGauge(gauge: MachineGauge): string {
  return `machine gauge (bench/machineGauge.ts, CPU ms): PGlite statements ${gauge.statementsCpuMs}, PGlite initdb ${gauge.initdbCpuMs}, JavaScript ${gauge.javascriptCpuMs}`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv.includes('--json')) {
    process.stdout.write(JSON.stringify(await measure()));
  } else {
    console.log(describeGauge(await machineGauge()));
  }
}
