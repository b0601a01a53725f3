// What a group entry (test/groups/<group>.ts) runs. tap starts each test process with a module
// hook of its own, @tapjs/processinfo's (which files a test loaded, for coverage and --changed),
// on a separate loader thread that sees every import, and puts it in NODE_OPTIONS too, so each
// worker thread and child process a test starts loads it again (its other hook, @tapjs/mock's,
// is left out by package.json's plugin list). A group imports hundreds of modules and starts
// dozens of PGlite threads: tap's hooks cost it about a third more CPU (docs/testing.md, "How test
// files run"), for coverage this suite turns off. So under tap, the entry starts the group in a
// child process without them, which writes its TAP to the same stdout for tap to read; timeouts
// and tap's messages pass through. Run without tap (`node --import=./test/loader.mjs
// test/groups/x.ts`), the entry runs the group itself. This module imports nothing of tap's: a
// root `t` made here would print a TAP stream of its own beside the child's.
import { fork } from 'node:child_process';

const TAP_HOOK = '/@tapjs/';

/**
 * V8 flags for a group's process, whichever command started it (`make test-unit`, `make test`,
 * `npx tap test/groups/x.ts`): a unit test process lives seconds, too short to earn back what
 * the optimising tier spends on PGlite's WebAssembly, and with groups side by side on two cores
 * V8's background threads only add CPU (docs/testing.md, "How test files run"). The end-to-end
 * files keep V8's defaults; they run in processes of their own.
 */
const GROUP_V8_FLAGS = ['--liftoff-only', '--single-threaded'];

/**
 * The state of `process-on-spawn`, which @tapjs/processinfo uses (in the process tap starts) to
 * add its hook to every child process: it rewrites a spawn's environment after the caller made
 * it, putting back the NODE_OPTIONS and _TAPJS_PROCESSINFO_* variables removed above. The package
 * keeps its listeners in this global so that every copy of it shares them.
 */
const SPAWN_HOOKS = Symbol.for('process-on-spawn@*:singletonId');

/** Runs `spawn` (which starts a child process synchronously) with process-on-spawn's listeners set aside. */
function withoutSpawnHooks<T>(spawn: () => T): T {
  const state = (globalThis as Record<symbol, { listeners: unknown[] } | undefined>)[SPAWN_HOOKS];
  if (state === undefined) return spawn();
  const listeners = state.listeners;
  state.listeners = [];
  try {
    return spawn();
  } finally {
    state.listeners = listeners;
  }
}

export async function runGroupEntry(entryFile: string): Promise<void> {
  if (!process.execArgv.some((argument) => argument.includes(TAP_HOOK))) {
    const { runGroup } = await import('./group.js');
    await runGroup(entryFile);
    return;
  }
  const env = { ...process.env };
  delete env.NODE_OPTIONS;
  for (const name of Object.keys(env)) if (name.startsWith('_TAPJS_PROCESSINFO_')) delete env[name];
  const execArgv = process.execArgv.filter((argument) => !argument.includes(TAP_HOOK));
  for (const flag of GROUP_V8_FLAGS) if (!execArgv.includes(flag)) execArgv.push(flag);
  const child = withoutSpawnHooks(() =>
    fork(entryFile, process.argv.slice(2), {
      execArgv,
      env,
      stdio: ['inherit', 'inherit', 'inherit', 'ipc'],
    }),
  );
  // tap's timeout handshake: the child's setTimeout reaches the runner, the runner's abort the child.
  child.on('message', (message) => process.send?.(message));
  const fromRunner = (message: unknown): void => {
    if (child.connected) child.send(message as Parameters<typeof child.send>[0]);
  };
  process.on('message', fromRunner);
  const signals = ['SIGALRM', 'SIGTERM', 'SIGINT', 'SIGHUP'] as const;
  const forward = (signal: NodeJS.Signals): void => void child.kill(signal);
  for (const signal of signals) process.on(signal, forward);
  const [code, signal] = (await new Promise((resolve) => child.once('exit', (...result) => resolve(result)))) as [number | null, NodeJS.Signals | null];
  for (const name of signals) process.off(name, forward);
  process.off('message', fromRunner);
  process.disconnect?.();
  if (signal !== null) process.kill(process.pid, signal);
  process.exitCode = code ?? 1;
}
