import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';

/**
 * The Node the code needs is said in package.json's engines, the Makefile's check of the
 * machine's node (scripts/node-satisfies-engines.cjs), the node the Makefile fetches and the
 * Dockerfile's image: they must agree, and admit no node without Worker#cpuUsage (the extraction
 * deadline's clock, src/util/workerPool.ts), which came with 24.6.
 */
const root = path.resolve(import.meta.dirname, '../..');
const read = (file: string) => readFileSync(path.join(root, file), 'utf8');
const satisfies = (version?: string) =>
  execFileSync(process.execPath, [path.join(root, 'scripts/node-satisfies-engines.cjs'), ...(version ? [version] : [])], { encoding: 'utf8' }).trim();
const makefileNode = /^NODE_VERSION := (\S+)$/m.exec(read('Makefile'))?.[1];

t.test('engines admits Node 24 from 24.6, the first with Worker#cpuUsage, and no other major', async (t) => {
  t.equal((JSON.parse(read('package.json')) as { engines: { node: string } }).engines.node, '>=24.6.0 <25');
  t.equal(satisfies('24.5.1'), 'no', 'before Worker#cpuUsage');
  t.equal(satisfies('24.6.0'), 'yes');
  t.equal(satisfies('24.21.0'), 'yes');
  t.equal(satisfies('25.0.0'), 'no', 'the next major, which engines leaves out');
  t.equal(satisfies('20.19.0'), 'no');
  t.equal(satisfies(), 'yes', 'the node running the tests');
});

t.test('the Makefile checks the machine\'s node with that script, and fetches a node it accepts', async (t) => {
  t.match(read('Makefile'), /^ifeq \(\$\(shell node \$\(CURDIR\)\/scripts\/node-satisfies-engines\.cjs 2>\/dev\/null\),yes\)$/m);
  t.ok(makefileNode, 'the Makefile names the node it fetches');
  t.equal(satisfies(makefileNode), 'yes');
});

t.test('the Dockerfile builds and runs on the node the Makefile fetches', async (t) => {
  const dockerfile = read('Dockerfile');
  t.match(dockerfile, new RegExp(`^ARG NODE_VERSION=${makefileNode?.replaceAll('.', '\\.')}$`, 'm'));
  const images = [...dockerfile.matchAll(/^FROM (\S+)/gm)].map((match) => match[1]);
  t.same(images, ['node:${NODE_VERSION}-bookworm-slim', 'node:${NODE_VERSION}-bookworm-slim'], 'both stages');
});
