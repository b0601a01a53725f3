// Runs several unit test files in one tap process (`make test-unit`, docs/testing.md, "How test
// files run"). A process per file pays for Node, the app's modules and PGlite's WebAssembly again
// each time: most of the unit suite's CPU. A group entry (test/groups/<name>.ts) imports its
// files one after another, each inside a subtest named after the file, so a failure reads
// `test/groups/api.ts > test/api/app.test.ts > <test> > <assertion>`, and the file's root-level
// `t.before`/`t.teardown` run when its own subtest starts and ends (its service is closed before
// the next file starts), not when the whole group ends.
//
// A test file says `import t from 'tap'`; in a group its `t` has to be the file's subtest. A
// module hook (module.registerHooks, in this thread, after test/loader.mjs's) resolves `tap`,
// imported from a grouped test file, to a module made for that file alone, whose default export
// is the subtest running it. Every other import of `tap` (helpers' types, tap's own) is tap.
import { appendFileSync, globSync, readdirSync, readFileSync } from 'node:fs';
import { registerHooks } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import t, { type Test } from 'tap';
import { endGroupedRun, markGroupedRun } from './helpers/groupedRun.js';

const root = path.resolve(import.meta.dirname, '..');

/**
 * The groups and the paths (under test/, a folder ends in '/') whose files they run. A file
 * belongs to the group of the longest path it starts with; a file in no listed path runs in
 * `other`, so a new folder is never left out. tap starts the groups in the order of their names,
 * each when one of its two jobs ends; the larger groups (measured with FACTLOG_TEST_GROUP_TIMES,
 * below) have names that come early, so that the two jobs end together.
 */
export const groups: Readonly<Record<string, readonly string[]>> = {
  api: ['api/'],
  'api-routes-1': ['api/routes/'],
  'api-routes-2': ['api/routes/p', 'api/routes/r', 'api/routes/s', 'api/routes/t', 'api/routes/w'],
  app: ['app/', 'mcp/'],
  // The event store and search, then the database adapters: the two largest groups but one,
  // named to start early (the database files wait on child processes, so they go apart).
  data: ['search/', 'eventstore/'],
  db: ['db/'],
  other: [],
  pipeline: ['pipeline/'],
  read: ['read/', 'projection/', 'projections/'],
};

/** Files under the repository's root matching `pattern`, as `/`-separated paths relative to it, sorted. */
export function repositoryFiles(pattern: string): string[] {
  return globSync(pattern, { cwd: root })
    .map((file) => file.split(path.sep).join('/'))
    .sort((a, b) => a.localeCompare(b, 'en'));
}

/** What `make test-unit` runs: every test file but the end-to-end runs and the server-needing files. */
export function unitTestFiles(): string[] {
  return repositoryFiles('test/**/*.test.ts').filter((file) => !file.startsWith('test/e2e/') && !file.endsWith('.server.test.ts'));
}

export function groupOf(file: string): string {
  let best = 'other';
  let bestLength = -1;
  for (const [group, paths] of Object.entries(groups)) {
    for (const prefix of paths) {
      if (file.startsWith(`test/${prefix}`) && prefix.length > bestLength) {
        best = group;
        bestLength = prefix.length;
      }
    }
  }
  return best;
}

const GROUP_TAP = 'factlog-group-tap:';
/** The subtest of the file being imported; read by that file's `tap` module as it evaluates. */
let current: Test | null = null;
const grouped = new Set<string>();

function hookTapImports(): void {
  registerHooks({
    resolve(specifier, context, nextResolve) {
      if (specifier === 'tap' && context.parentURL !== undefined && grouped.has(context.parentURL)) {
        return { url: `${GROUP_TAP}${context.parentURL}`, format: 'module', shortCircuit: true };
      }
      return nextResolve(specifier, context);
    },
    load(url, context, nextLoad) {
      if (!url.startsWith(GROUP_TAP)) return nextLoad(url, context);
      // One module per test file (the URL names it), evaluated once, while its file's subtest runs.
      const source = `const t = globalThis[Symbol.for('factlog.groupedTest')](); export default t; export { t };`;
      return { format: 'module', source, shortCircuit: true };
    },
  });
  (globalThis as Record<symbol, unknown>)[Symbol.for('factlog.groupedTest')] = () => {
    if (current === null) throw new Error('a grouped test file imported tap outside its subtest');
    return current;
  };
}

/** The per-file timeout of a file run alone (package.json, "tap"), given to each file's subtest. */
function perFileTimeoutMs(): number {
  const config = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { tap?: { timeout?: number } };
  return (config.tap?.timeout ?? 30) * 1000;
}

/** Runs the files of the group whose entry is `entryFile` (test/groups/<group>.ts). */
export async function runGroup(entryFile: string): Promise<void> {
  const group = path.basename(entryFile, path.extname(entryFile));
  if (!(group in groups)) throw new Error(`${entryFile}: no group ${group} in test/group.ts`);
  // Every group has its entry and every entry its group: a group without an entry would not run.
  const entries = readdirSync(path.dirname(entryFile)).map((file) => path.basename(file, path.extname(file)));
  if (entries.sort().join() !== Object.keys(groups).sort().join()) {
    throw new Error(`test/groups/ holds ${entries.join(', ')}; test/group.ts names ${Object.keys(groups).join(', ')}`);
  }
  const files = unitTestFiles().filter((file) => groupOf(file) === group);
  hookTapImports();
  markGroupedRun();
  const timeout = perFileTimeoutMs();
  // tap's root timeout is per process (TAP_TIMEOUT: package.json's 300 s under tap, 30 s for
  // `node test/groups/x.ts`): the group gets its files' sum here, and the tap runner's timer for
  // the process follows it (the entry passes tap's timeout messages both ways).
  t.setTimeout(timeout * Math.max(files.length, 1));
  const fileTests = files.map((file) => {
    const url = pathToFileURL(path.join(root, file)).href;
    grouped.add(url);
    return t.test(file, { timeout }, async (fileTest) => {
      current = fileTest;
      if (timesFile !== undefined) measure(fileTest, file, timesFile);
      await import(url);
    });
  });
  // What the files shared (kept databases) holds the process open until the last file is done.
  void Promise.allSettled(fileTests).then(endGroupedRun);
}

const timesFile = process.env.FACTLOG_TEST_GROUP_TIMES;

/**
 * With FACTLOG_TEST_GROUP_TIMES=<file>, appends `file, wall s, CPU s` of each grouped file to it
 * (worker threads included; what the file left running afterwards counts for the next one): what
 * the groups are balanced by.
 */
function measure(fileTest: Test, file: string, out: string): void {
  const start = performance.now();
  const usage = process.resourceUsage();
  fileTest.teardown(() => {
    const end = process.resourceUsage();
    const cpu = (end.userCPUTime - usage.userCPUTime + end.systemCPUTime - usage.systemCPUTime) / 1e6;
    appendFileSync(out, `${file}\t${((performance.now() - start) / 1000).toFixed(2)}\t${cpu.toFixed(2)}\n`);
  });
}
