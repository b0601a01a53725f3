/**
 * How an embedded node is meant to start: bin/factlog.js's shebang, which `npm start`, `make run`
 * and the Docker image repeat (docs/operations.md, "How node is started";
 * test/bin/serviceFlags.test.ts keeps them and this equal). Without them an embedded node's peak
 * memory is well above its 500 MB target: V8 recompiles PostgreSQL's parser in PGlite's WebAssembly
 * with its optimising compiler (a 604 MB transient; the flag keeps it and three others on the
 * baseline compiler, scripts/reorderPgliteWasm.ts), and each thread's heap grows freely.
 */
export const EMBEDDED_LAUNCH = {
  env: { MALLOC_ARENA_MAX: '1', MALLOC_MMAP_THRESHOLD_: '131072' },
  flags: ['--wasm-debug-mask-for-testing=15', '--max-semi-space-size=1', '--heap-growing-percent=30'],
} as const;

/** What of EMBEDDED_LAUNCH a process was started without: its flags not in `execArgv`, its variables not set so in `env`. */
export function missingFromEmbeddedLaunch(execArgv: readonly string[], env: NodeJS.ProcessEnv): string[] {
  const flags = EMBEDDED_LAUNCH.flags.filter((flag) => !execArgv.includes(flag));
  const variables = Object.entries(EMBEDDED_LAUNCH.env)
    .filter(([name, value]) => env[name] !== value)
    .map(([name, value]) => `${name}=${value}`);
  return [...variables, ...flags];
}
