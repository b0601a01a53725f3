import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import binaryen from 'binaryen';
import t from 'tap';
import { EMBEDDED_LAUNCH } from '../../src/app/launch.js';
import {
  firstDeclaredNames,
  functionLayout,
  installedPgliteWasm,
  KEPT_ON_LIFTOFF,
  LIFTOFF_MASK_FLAG,
  reordered,
  reorderInstalledPgliteWasm,
} from '../../scripts/reorderPgliteWasm.js';

// The WebAssembly global; the project's TypeScript libs (no DOM) do not declare it.
declare const WebAssembly: { instantiate(bytes: Uint8Array): Promise<{ instance: { exports: Record<string, () => number> } }> };

/**
 * A module shaped like the problem: the kept names exported from the middle and the end, called
 * directly and through a table by functions before and after them, so renumbering shows.
 */
function sampleModule(names: readonly string[] = KEPT_ON_LIFTOFF): Uint8Array {
  const module = new binaryen.Module();
  try {
    const { i32, none } = binaryen;
    module.addFunction('first', none, i32, [], module.i32.const(7));
    module.addFunctionExport('first', 'first');
    names.forEach((name, rank) => {
      // Each calls the one before it (or `first`), the odd ones through the table.
      const callee = rank === 0 ? 'first' : (names[rank - 1] ?? 'first');
      const call = rank % 2 === 1 ? module.call_indirect('table', module.i32.const(rank - 1), [], none, i32) : module.call(callee, [], i32);
      module.addFunction(name, none, i32, [], module.i32.add(call, module.i32.const(100 * (rank + 1))));
      module.addFunctionExport(name, name);
      module.addFunction(`between${String(rank)}`, none, i32, [], module.i32.mul(module.call(name, [], i32), module.i32.const(2)));
      module.addFunctionExport(`between${String(rank)}`, `between${String(rank)}`);
    });
    module.addTable('table', names.length, names.length);
    module.addActiveElementSegment('table', 'elements', ['first', ...names.slice(0, -1)], module.i32.const(0));
    if (!module.validate()) throw new Error('the sample module does not validate');
    return module.emitBinary();
  } finally {
    module.dispose();
  }
}

const results = async (bytes: Uint8Array) => {
  const { instance } = await WebAssembly.instantiate(bytes);
  return Object.fromEntries(Object.entries(instance.exports).map(([name, run]) => [name, run()]));
};

t.test('the kept functions come first, and every export answers as before', async (t) => {
  const before = sampleModule();
  t.notSame(firstDeclaredNames(functionLayout(before), KEPT_ON_LIFTOFF.length), KEPT_ON_LIFTOFF, 'not first to begin with');
  const after = await reordered(before);
  const layout = functionLayout(after);
  t.same(firstDeclaredNames(layout, KEPT_ON_LIFTOFF.length + 1), [...KEPT_ON_LIFTOFF, 'first'], 'kept ones first, in order; the rest keeps its order');
  t.equal(layout.declaredFunctions, functionLayout(before).declaredFunctions);
  const answers = await results(before);
  t.same(await results(after), answers, 'direct and table calls reach the same functions');
  t.equal(answers.between3, 2 * (7 + 200 + 400), 'standard_ProcessUtility reached outNode through the table, and outNode `first`');
});

t.test('a module without one of the functions is refused by name, and a file that is not one is left as it was', async (t) => {
  await t.rejects(reordered(sampleModule(['raw_parser', 'outNode', 'nodeRead'])), /pglite\.wasm exports no function standard_ProcessUtility: PGlite's build changed/);
  const directory = t.testdir({});
  const garbage = path.join(directory, 'garbage.wasm');
  writeFileSync(garbage, 'not a module');
  await t.rejects(reorderInstalledPgliteWasm(garbage), /not a WebAssembly module/);
  t.equal(readFileSync(garbage, 'utf8'), 'not a module');
});

t.test('a file in order already is left untouched', async (t) => {
  const directory = t.testdir({});
  const file = path.join(directory, 'module.wasm');
  writeFileSync(file, await reordered(sampleModule()));
  const bytes = readFileSync(file);
  t.match(await reorderInstalledPgliteWasm(file), /already in order$/);
  t.same(readFileSync(file), bytes);
  writeFileSync(file, sampleModule());
  t.match(await reorderInstalledPgliteWasm(file), /raw_parser, outNode, nodeRead, standard_ProcessUtility moved first/);
  t.same(firstDeclaredNames(functionLayout(readFileSync(file)), KEPT_ON_LIFTOFF.length), KEPT_ON_LIFTOFF);
});

t.test("the install left PGlite's module in that order, and the embedded launch masks exactly those functions", async (t) => {
  t.same(firstDeclaredNames(functionLayout(readFileSync(installedPgliteWasm())), KEPT_ON_LIFTOFF.length), KEPT_ON_LIFTOFF, 'npm ci runs scripts/reorderPgliteWasm.ts');
  t.ok((EMBEDDED_LAUNCH.flags as readonly string[]).includes(LIFTOFF_MASK_FLAG), `${LIFTOFF_MASK_FLAG} in the launch`);
  t.notOk((EMBEDDED_LAUNCH.flags as readonly string[]).includes('--liftoff-only'), 'the rest of PostgreSQL may tier up');
});

t.test("this node's V8 keeps the masked functions on Liftoff and tiers up the one after them", async (t) => {
  const directory = t.testdir({});
  const file = path.join(directory, 'module.wasm');
  const module = new binaryen.Module();
  try {
    // Five identical loops (sum 0..n): hot enough for dynamic tiering within a few thousand calls.
    const { i32 } = binaryen;
    const params = binaryen.createType([i32]);
    for (let index = 0; index < KEPT_ON_LIFTOFF.length + 1; index++) {
      const name = `loop${String(index)}`;
      const n = () => module.local.get(0, i32);
      const sum = () => module.local.get(1, i32);
      module.addFunction(name, params, i32, [i32], module.block(null, [
        module.loop('again', module.if(n(), module.block(null, [
          module.local.set(1, module.i32.add(sum(), n())),
          module.local.set(0, module.i32.sub(n(), module.i32.const(1))),
          module.br('again'),
        ]))),
        sum(),
      ], i32));
      module.addFunctionExport(name, name);
    }
    writeFileSync(file, module.emitBinary());
  } finally {
    module.dispose();
  }
  const script = `
    const { instance } = await WebAssembly.instantiate(require('node:fs').readFileSync(${JSON.stringify(file)}));
    const loops = Object.values(instance.exports);
    const last = loops.at(-1);
    // Compiled lazily: on Liftoff from their first call. Then until the unmasked one has tiered up
    // (a background compile), and as long again for the rest.
    for (const loop of loops) loop(1);
    let rounds = 0;
    for (; rounds < 200000 && %IsLiftoffFunction(last); rounds++) for (const loop of loops) loop(1000);
    for (let more = 0; more < rounds; more++) for (const loop of loops) loop(1000);
    await new Promise((resolve) => setTimeout(resolve, 100));
    for (const loop of loops) loop(1000);
    console.log(JSON.stringify(loops.map((loop) => %IsLiftoffFunction(loop))));
  `;
  const child = spawnSync(process.execPath, [LIFTOFF_MASK_FLAG, '--allow-natives-syntax', '--input-type=commonjs', '-e', `(async () => {${script}})()`], { encoding: 'utf8' });
  t.equal(child.status, 0, child.stderr);
  t.same(JSON.parse(child.stdout) as boolean[], [...KEPT_ON_LIFTOFF.map(() => true), false], 'the first four stay on Liftoff, the fifth is TurboFan code');
});
