import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { PGliteOptions } from '@electric-sql/pglite';

type WasmModule = NonNullable<PGliteOptions['pgliteWasmModule']>;
// The WebAssembly global of the runtime; the project's TypeScript libs (no DOM) do not declare it.
declare const WebAssembly: { compile(bytes: Uint8Array): Promise<WasmModule> };

/**
 * PGlite's two WebAssembly modules (the server and initdb), compiled once per process and shared
 * by every PGlite instance it opens. Two reasons: each instance otherwise compiles megabytes of
 * WebAssembly again, and freeing a module's code when an instance is collected is what trips a
 * V8 check on Node 24 (`jit_page_->allocations_.erase(addr) == 1`, a fatal abort seen when a
 * process opens and closes many PGlite instances, as test suites and the CLI do). Kept here for
 * the life of the process, the modules' code is never freed.
 */
export interface PgliteWasmModules {
  pgliteWasmModule: WasmModule;
  initdbWasmModule: WasmModule;
}

let compiled: Promise<PgliteWasmModules> | null = null;

export function pgliteWasmModules(): Promise<PgliteWasmModules> {
  compiled ??= (async () => {
    const distDir = path.dirname(fileURLToPath(import.meta.resolve('@electric-sql/pglite')));
    const compile = async (file: string) => WebAssembly.compile(await readFile(path.join(distDir, file)));
    const [pgliteWasmModule, initdbWasmModule] = await Promise.all([compile('pglite.wasm'), compile('initdb.wasm')]);
    return { pgliteWasmModule, initdbWasmModule };
  })();
  // A failed compile (a broken install) is reported to every caller, and tried again by the next.
  compiled.catch(() => {
    compiled = null;
  });
  return compiled;
}
