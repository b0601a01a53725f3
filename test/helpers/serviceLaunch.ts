import { readFileSync } from 'node:fs';

/**
 * How bin/factlog.js starts node, from its shebang (`#!/usr/bin/env -S [NAME=value ...] node
 * [flags]`): the environment it sets (glibc reads MALLOC_ARENA_MAX before any code runs) and
 * node's V8 flags (NODE_OPTIONS refuses --liftoff-only). The benches start the service the same
 * way; test/bin/serviceFlags.test.ts checks the other places that start it by hand.
 */
export interface ServiceLaunch {
  env: Record<string, string>;
  flags: string[];
}

export function serviceLaunch(): ServiceLaunch {
  const shebang = readFileSync(new URL('../../bin/factlog.js', import.meta.url), 'utf8').split('\n')[0] ?? '';
  const words = /^#!\/usr\/bin\/env -S (.+)$/.exec(shebang)?.[1]?.split(' ') ?? [];
  const node = words.indexOf('node');
  if (node === -1) throw new Error(`bin/factlog.js's shebang does not start node: ${shebang}`);
  const env: Record<string, string> = {};
  for (const assignment of words.slice(0, node)) {
    const [name, value] = assignment.split('=', 2);
    if (!name || value === undefined) throw new Error(`bin/factlog.js's shebang has '${assignment}' before node, not NAME=value`);
    env[name] = value;
  }
  return { env, flags: words.slice(node + 1) };
}
