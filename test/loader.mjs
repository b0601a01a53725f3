// Runs the TypeScript of src/, projections/ and test/ in tests: `node --import=./test/loader.mjs x.test.ts`
// (package.json's "tap" section passes it to every test file). It replaces tsx there because tsx
// costs about 0.3 s of CPU per process before the first test line runs: its hooks run on a
// separate loader thread and see every module, tap's and fastify's included. These hooks are
// synchronous and in-thread (module.registerHooks), touch only .ts files, and keep the output
// of esbuild (tsx's own transpiler, already installed) in a cache in the temp directory keyed by
// the source text, so a test file's second run transpiles nothing. Types are not checked here:
// that is `make typecheck`. Inline source maps keep stack traces on the .ts lines (tap runs
// Node with --enable-source-maps). Worker threads inherit the --import, so they load the same way.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire, enableCompileCache, registerHooks } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// V8's code cache for every module on disk (Node's own cache directory in the temp directory):
// each test process compiles fastify, PGlite, knex, ajv and the app again otherwise.
enableCompileCache();

const require = createRequire(import.meta.url);
const esbuildVersion = JSON.parse(readFileSync(require.resolve('esbuild/package.json'), 'utf8')).version;
const cacheDir = path.join(tmpdir(), `factlog-ts-cache-${esbuildVersion}`);
// What TypeScript emits for tsconfig.json's target (ES2022): class fields with define semantics;
// imports used only as types are dropped (no verbatimModuleSyntax).
const options = {
  loader: 'ts',
  format: 'esm',
  target: 'node24',
  sourcemap: 'inline',
  tsconfigRaw: { compilerOptions: { useDefineForClassFields: true, verbatimModuleSyntax: false } },
};
const optionsKey = JSON.stringify(options);
let esbuild = null;

function transpile(file, source) {
  const key = createHash('sha256').update(optionsKey).update('\0').update(file).update('\0').update(source).digest('hex');
  const cached = path.join(cacheDir, `${key}.js`);
  try {
    return readFileSync(cached, 'utf8');
  } catch {
    // not transpiled yet
  }
  esbuild ??= require('esbuild');
  const { code } = esbuild.transformSync(source, { ...options, sourcefile: file });
  mkdirSync(cacheDir, { recursive: true });
  const temporary = `${cached}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  writeFileSync(temporary, code);
  renameSync(temporary, cached); // concurrent writers write the same text; readers never see half of it
  return code;
}

registerHooks({
  resolve(specifier, context, nextResolve) {
    // TypeScript's NodeNext imports name the emitted file: `./x.js` from a .ts file means `./x.ts`.
    if (context.parentURL?.endsWith('.ts') && specifier.endsWith('.js') && (specifier.startsWith('./') || specifier.startsWith('../'))) {
      const url = new URL(`${specifier.slice(0, -3)}.ts`, context.parentURL);
      if (existsSync(fileURLToPath(url))) return { url: url.href, format: 'module', shortCircuit: true };
    }
    return nextResolve(specifier, context);
  },
  load(url, context, nextLoad) {
    if (!url.startsWith('file:') || !url.endsWith('.ts')) return nextLoad(url, context);
    const file = fileURLToPath(url);
    return { format: 'module', source: transpile(file, readFileSync(file, 'utf8')), shortCircuit: true };
  },
});
