import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Worker threads and short-lived helper processes run an entry file that sits beside the module
 * starting them, and run with that process's node flags. Helper processes (PGlite's initdb, the
 * word table's conversion) take work whose memory would otherwise stay in the service for its
 * life: it goes away with them.
 */

/** The entry `name` beside the module at `moduleUrl`: `name.ts` under tsx and in tests, `name.js` in the build. */
export function siblingEntry(moduleUrl: string, name: string): URL {
  return new URL(`./${name}${extname(fileURLToPath(moduleUrl))}`, moduleUrl);
}

/**
 * Set in a helper process's environment: the measuring hooks that bench/ loads through node
 * flags, which a helper inherits, leave it alone (it is not the service they measure).
 */
export const HELPER_PROCESS_ENV = 'FACTLOG_HELPER_PROCESS';

export function helperProcessEnv(): NodeJS.ProcessEnv {
  return { ...process.env, [HELPER_PROCESS_ENV]: '1' };
}

/**
 * This process's node flags for a helper that runs a file: the TypeScript loader, V8 flags and
 * hooks stay; `-e`/`-p` and their script, and `--input-type` (which node refuses beside a file),
 * go. (`fork` drops `-e` by itself, but not `--input-type`.)
 */
export function helperExecArgv(flags: readonly string[] = process.execArgv): string[] {
  const kept: string[] = [];
  for (let i = 0; i < flags.length; i++) {
    const flag = flags[i] as string;
    if (['-e', '--eval', '-p', '--print', '--input-type'].includes(flag)) {
      i++; // its value
      continue;
    }
    if (/^--(eval|print|input-type)=/.test(flag)) continue;
    kept.push(flag);
  }
  return kept;
}
