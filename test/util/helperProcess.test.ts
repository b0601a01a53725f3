import t from 'tap';
import { helperExecArgv, HELPER_PROCESS_ENV, helperProcessEnv, siblingEntry } from '../../src/util/helperProcess.js';

t.test('a helper keeps the loader, V8 flags and hooks, and drops what would run something else', async (t) => {
  t.same(helperExecArgv(['--import=tsx', '--liftoff-only', '--max-semi-space-size=8']), ['--import=tsx', '--liftoff-only', '--max-semi-space-size=8']);
  t.same(helperExecArgv(['--import=tsx', '--input-type=module', '-e', 'console.log(1)', '--no-warnings']), ['--import=tsx', '--no-warnings'], '-e and its script, --input-type');
  t.same(helperExecArgv(['--eval', 'x', '-p', 'y', '--print=z', '--eval=w', '--input-type', 'module', '--cpu-prof']), ['--cpu-prof'], 'every spelling');
  t.same(helperExecArgv([]), []);
});

t.test('the entry beside a module takes that module\'s extension', async (t) => {
  t.equal(siblingEntry('file:///app/dist/src/db/pgliteThread.js', 'pgliteWorker').href, 'file:///app/dist/src/db/pgliteWorker.js');
  t.equal(siblingEntry('file:///app/src/db/pgliteThread.ts', 'pgliteInitdbChild').href, 'file:///app/src/db/pgliteInitdbChild.ts');
});

t.test('a helper\'s environment is this one plus its mark', async (t) => {
  const env = helperProcessEnv();
  t.equal(env[HELPER_PROCESS_ENV], '1');
  t.equal(env.PATH, process.env.PATH);
  t.equal(process.env[HELPER_PROCESS_ENV], undefined, 'this process is not marked');
});
