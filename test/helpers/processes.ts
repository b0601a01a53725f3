import { execFile, spawn, type ChildProcess, type StdioOptions } from 'node:child_process';
import { createServer } from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { eventually, TEST_SECRET } from './service.js';

/**
 * `factlog serve` as a child process, for the end-to-end tests that kill, restart or scale it:
 * a free port, the spawn, the health wait and the stop, written once.
 */

const root = path.resolve(import.meta.dirname, '../..');

/** A TCP port nothing listens on at the moment (the OS picks it). */
export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export interface ServeOptions {
  /** Working directory of the process (relative data dirs resolve against it). */
  cwd: string;
  port: number;
  /** Added to the parent's environment, after SERVER_PORT and SERVER_HOST. */
  env: Record<string, string>;
  /** Extra arguments after `serve`, e.g. `['--role', 'worker']`. */
  args?: string[];
  /** Default: the service's stderr is shown only with FACTLOG_TEST_VERBOSE. */
  stdio?: StdioOptions;
}

/** The last few KB a served process wrote on stderr (kept unless FACTLOG_TEST_VERBOSE shows it, or `stdio` is given). */
const stderrTails = new WeakMap<ChildProcess, string>();
const STDERR_TAIL_CHARS = 4000;

/** Starts `src/main.ts serve` under tsx (no build needed). */
export function spawnServe(options: ServeOptions): ChildProcess {
  const child = spawn(process.execPath, [`--import=${import.meta.resolve('tsx')}`, path.join(root, 'src/main.ts'), 'serve', ...(options.args ?? [])], {
    cwd: options.cwd,
    env: { ...process.env, SERVER_PORT: String(options.port), SERVER_HOST: '127.0.0.1', ...options.env },
    stdio: options.stdio ?? ['ignore', 'ignore', process.env.FACTLOG_TEST_VERBOSE ? 'inherit' : 'pipe'],
  });
  // A caller that chose its own stdio reads the streams itself.
  if (options.stdio === undefined) child.stderr?.setEncoding('utf8').on('data', (chunk: string) => stderrTails.set(child, ((stderrTails.get(child) ?? '') + chunk).slice(-STDERR_TAIL_CHARS)));
  return child;
}

/**
 * Resolves once `GET /healthz` answers 200 (connection refusals are waited out). Given the
 * served process, a process that exits first fails the wait at once, and either failure says
 * what it wrote on stderr: a service that could not start otherwise read as a timeout.
 */
export async function waitHealthy(baseUrl: string, timeoutMs = 90_000, serve?: ChildProcess): Promise<void> {
  const said = () => (serve && stderrTails.get(serve) ? `; its stderr ended: ${stderrTails.get(serve)}` : '');
  let exited: string | null = null;
  const onExit = (code: number | null, signal: NodeJS.Signals | null) => (exited = `exited (code ${code}, signal ${signal})`);
  if (serve?.exitCode !== null && serve?.exitCode !== undefined) onExit(serve.exitCode, serve.signalCode);
  serve?.once('exit', onExit);
  try {
    await eventually(async () => {
      if (exited !== null) throw new Error(`the service ${exited} before /healthz answered 200${said()}`);
      try {
        return (await fetch(`${baseUrl}/healthz`)).status === 200;
      } catch {
        return false;
      }
    }, timeoutMs, 200);
  } catch (error) {
    if (exited !== null || !serve) throw error;
    throw new Error(`${(error as Error).message}: ${baseUrl}/healthz never answered 200${said()}`);
  } finally {
    serve?.off('exit', onExit);
  }
}

export interface ProcessExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/**
 * Sends `signal` and waits for the exit; a process that already exited is left alone. Resolves
 * with how it ended (`serve` exits 0 after a clean shutdown, 1 when its shutdown deadline passed).
 */
export async function stopProcess(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<ProcessExit> {
  if (child.exitCode !== null || child.signalCode !== null) return { code: child.exitCode, signal: child.signalCode };
  const exited = new Promise<ProcessExit>((resolve) => child.once('exit', (code, exitSignal) => resolve({ code, signal: exitSignal })));
  child.kill(signal);
  return exited;
}

const execFileAsync = promisify(execFile);

/**
 * Runs the CLI from source in `cwd` on the data directory `cwd/data`; resolves with the exit code
 * and output, also when the command fails.
 */
export async function runCli(cwd: string, args: string[], env: Record<string, string> = {}) {
  try {
    const { stdout, stderr } = await execFileAsync(process.execPath, [`--import=${import.meta.resolve('tsx')}`, path.join(root, 'src/main.ts'), ...args], {
      cwd,
      env: { ...process.env, AUTH_JWTSECRET: TEST_SECRET, AUTH_PASSWORD_HASH_COST: '10', STORAGE_DATA_DIR: path.join(cwd, 'data'), LOGGING_LEVEL: 'warn', ...env },
      timeout: 120_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code: number; stdout: string; stderr: string };
    return { code: failed.code, stdout: failed.stdout, stderr: failed.stderr };
  }
}
