import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { EMBEDDED_LAUNCH, missingFromEmbeddedLaunch } from '../../src/app/launch.js';
import { serverTierLaunch, serviceLaunch } from '../helpers/serviceLaunch.js';

/**
 * The service's environment and V8 flags (bin/factlog.js's shebang; docs/performance.md, "Memory
 * of an embedded node" and "Twenty-second round") are repeated wherever node is started by hand:
 * they must not drift apart.
 */
const root = path.resolve(import.meta.dirname, '../..');
const read = (file: string) => readFileSync(path.join(root, file), 'utf8');
const { env, flags } = serviceLaunch();

t.test('bin/factlog.js starts node with one malloc arena, large allocations mapped apart, and the memory flags', async (t) => {
  t.same(env, { MALLOC_ARENA_MAX: '1', MALLOC_MMAP_THRESHOLD_: '131072' });
  t.same(flags, ['--wasm-debug-mask-for-testing=15', '--max-semi-space-size=1', '--heap-growing-percent=30']);
  // --optimize-for-size held the memory too, at about a quarter more CPU a document.
  t.notOk(flags.includes('--optimize-for-size'));
});

t.test('the service knows its launch (to warn when started without it), as the shebang has it', async (t) => {
  t.same(EMBEDDED_LAUNCH, { env, flags });
  t.same(missingFromEmbeddedLaunch(flags, env), [], 'started by the shebang: nothing missing');
  t.same(missingFromEmbeddedLaunch(['--enable-source-maps'], { MALLOC_ARENA_MAX: '2' }), [
    'MALLOC_ARENA_MAX=1',
    'MALLOC_MMAP_THRESHOLD_=131072',
    '--wasm-debug-mask-for-testing=15',
    '--max-semi-space-size=1',
    '--heap-growing-percent=30',
  ], 'node bin/factlog.js: everything');
});

t.test('package.json, the Makefile and the Dockerfile start the service with the same environment and flags', async (t) => {
  const assignments = Object.entries(env).map(([name, value]) => `${name}=${value}`).join(' ');
  const command = `${assignments} node ${flags.join(' ')} bin/factlog.js serve`;
  const start = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts.start;
  t.equal(start, command);
  t.match(read('Makefile'), `\t${command}\n`);
  const dockerfile = read('Dockerfile');
  t.match(dockerfile, `\nENV ${assignments}\n`);
  t.match(dockerfile, `ENTRYPOINT ["node", ${flags.map((flag) => `"${flag}"`).join(', ')}, "bin/factlog.js"]`);
});

t.test('the shebang is read as its environment and its flags', async (t) => {
  // The helper's parse, on the line as written: a NAME=value after node would be a flag.
  const shebang = read('bin/factlog.js').split('\n')[0];
  t.equal(shebang, `#!/usr/bin/env -S MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=131072 node ${flags.join(' ')}`);
});

t.test('a server-tier node (deploy/compose.yaml) starts node without the embedded node\'s V8 flags, with its environment', async (t) => {
  // No PGlite there (the debug mask is for its WebAssembly) and no 500 MB target; the collector's
  // flags cost its catch-up about a fifth (docs/performance.md, "Thirty-eighth round").
  t.same(serverTierLaunch(), { env, flags: [] });
});
