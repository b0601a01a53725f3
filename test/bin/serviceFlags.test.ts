import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';

/**
 * The service's V8 flags (bin/factlog.js's shebang; docs/performance.md, "Memory of an embedded
 * node") are repeated wherever node is started by hand: they must not drift apart.
 */
const root = path.resolve(import.meta.dirname, '../..');
const read = (file: string) => readFileSync(path.join(root, file), 'utf8');

const shebang = read('bin/factlog.js').split('\n')[0];
const flags = /^#!\/usr\/bin\/env -S node (.+)$/.exec(shebang)?.[1].split(' ') ?? [];

t.test('bin/factlog.js starts node with the memory flags', async (t) => {
  t.same(flags, ['--liftoff-only', '--max-semi-space-size=8', '--optimize-for-size']);
});

t.test('package.json, the Makefile and the Dockerfile start the service with the same flags', async (t) => {
  const start = (JSON.parse(read('package.json')) as { scripts: Record<string, string> }).scripts.start;
  t.equal(start, `node ${flags.join(' ')} bin/factlog.js serve`);
  t.match(read('Makefile'), `\tnode ${flags.join(' ')} bin/factlog.js serve\n`);
  t.match(read('Dockerfile'), `ENTRYPOINT ["node", ${flags.map((flag) => `"${flag}"`).join(', ')}, "bin/factlog.js"]`);
});
