import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

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
  return { env: environmentOf(words.slice(0, node), "bin/factlog.js's shebang"), flags: words.slice(node + 1) };
}

/** `NAME=value` words as an environment; `origin` names where they come from in the error. */
function environmentOf(assignments: readonly string[], origin: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const assignment of assignments) {
    const [name, value] = assignment.split('=', 2);
    if (!name || value === undefined) throw new Error(`${origin} has '${assignment}', not NAME=value`);
    env[name] = value;
  }
  return env;
}

/**
 * How a server-tier node starts node: deploy/compose.yaml's entrypoint for its api and worker
 * nodes (`node bin/factlog.js`, no V8 flags; the Dockerfile's environment). Throws when the two
 * nodes' entrypoints differ or are not `node [flags] bin/factlog.js`.
 */
export function serverTierLaunch(): ServiceLaunch {
  const compose = parse(readFileSync(new URL('../../deploy/compose.yaml', import.meta.url), 'utf8')) as { services: Record<string, { entrypoint?: string[] }> };
  const [api, worker] = [compose.services.api?.entrypoint, compose.services.worker?.entrypoint];
  if (!api || JSON.stringify(api) !== JSON.stringify(worker)) throw new Error('deploy/compose.yaml: the api and worker nodes need one entrypoint');
  if (api[0] !== 'node' || api[api.length - 1] !== 'bin/factlog.js') throw new Error(`deploy/compose.yaml: the entrypoint is not node [flags] bin/factlog.js: ${api.join(' ')}`);
  const dockerfile = readFileSync(new URL('../../Dockerfile', import.meta.url), 'utf8');
  const env = environmentOf((/^ENV (MALLOC_.+)$/m.exec(dockerfile)?.[1] ?? '').split(' ').filter(Boolean), "the Dockerfile's ENV");
  return { env, flags: api.slice(1, -1) };
}
