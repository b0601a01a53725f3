/**
 * `node --import=./bench/wasmGrowthHook.ts`: which statements grow PGlite's WebAssembly memory
 * (it never shrinks, so its size is the high-water mark of what PostgreSQL allocated). Every
 * statement's growth is added to its shape (bench/sqlProfile.ts); the table goes to the file
 * named by BENCH_WASM_GROWTH when the thread that ran PGlite exits. For bench/pipeline.ts:
 * BENCH_SERVICE_NODE_ARGS=--import=<abs path of this file> BENCH_WASM_GROWTH=/tmp/growth.txt.
 */
import { writeFileSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { statementShape } from './sqlProfile.js';

const target = process.env.BENCH_WASM_GROWTH;
if (target) {
  const grownBy = new Map<string, { count: number; bytes: number }>();
  let largest = 0;
  // PGlite keeps its Emscripten module as `mod` (not in its types) and gives it the
  // WebAssembly.Memory it created as `wasmMemory`; a heap view (HEAPU8) may be a stale one.
  type WithModule = PGlite & { mod?: { wasmMemory?: { buffer: ArrayBuffer } } };
  const memoryOf = (pglite: WithModule) => pglite.mod?.wasmMemory?.buffer.byteLength ?? 0;
  const prototype = PGlite.prototype as unknown as Record<'query' | 'exec', (this: WithModule, sql: string, ...rest: unknown[]) => Promise<unknown>>;
  for (const method of ['query', 'exec'] as const) {
    const original = prototype[method];
    prototype[method] = async function measured(this: WithModule, sql: string, ...rest: unknown[]) {
      const before = memoryOf(this);
      try {
        return await original.call(this, sql, ...rest);
      } finally {
        const after = memoryOf(this);
        largest = Math.max(largest, after);
        if (after > before) {
          const key = statementShape(sql);
          const entry = grownBy.get(key) ?? { count: 0, bytes: 0 };
          entry.count += 1;
          entry.bytes += after - before;
          grownBy.set(key, entry);
        }
      }
    };
  }
  process.on('exit', () => {
    if (largest === 0) return; // a thread without PGlite
    const rows = [...grownBy].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, 30);
    const lines = [`PGlite memory at the end: ${(largest / 1048576).toFixed(0)} MiB`];
    for (const [shape, { count, bytes }] of rows) lines.push(`${(bytes / 1048576).toFixed(1).padStart(8)} MiB ${String(count).padStart(6)}×  ${shape}`);
    writeFileSync(target, `${lines.join('\n')}\n`);
  });
}
