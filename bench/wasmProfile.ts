// Where a thread's time went in a `--cpu-prof` profile, PostgreSQL's WebAssembly functions named.
//
//   node --import=tsx bench/wasmProfile.ts PROFILE.cpuprofile [FROM_US TO_US] [--callers NAME | --callees NAME]
//
// V8 names a WebAssembly function in a profile only from the module's name section, and PGlite's
// build has none: its functions show as `wasm-function[N]`. But PGlite exports about 2,100 of
// them (for extensions to link against), PostgreSQL's executor, index and WAL entry points among
// them, so N is named here by the export of function index N in the installed `pglite.wasm` (the
// install's reordering included; its parser is the install script's, scripts/reorderPgliteWasm.ts).
// Static functions stay `N:?`. FROM_US and TO_US cut the profile
// to a window on its clock (bench/eventstore.ts prints the rebuild's with BENCH_MARKS=1).
// Prints self and inclusive time (inclusive: named frames only), or with --callers the paths
// that lead to NAME, with --callees the named functions under it.
import { readFileSync } from 'node:fs';
import { functionLayout, installedPgliteWasm } from '../scripts/reorderPgliteWasm.js';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

const [file, ...rest] = process.argv.slice(2);
if (!file) {
  console.error('usage: node --import=tsx bench/wasmProfile.ts PROFILE.cpuprofile [FROM_US TO_US] [--callers NAME | --callees NAME]');
  process.exit(2);
}
const modeIndex = rest.findIndex((argument) => argument === '--callers' || argument === '--callees');
const [from, to] = (modeIndex < 0 ? rest : rest.slice(0, modeIndex)).map(Number);
const mode = modeIndex < 0 ? null : { kind: rest[modeIndex], target: rest[modeIndex + 1] ?? '' };

const exported = functionLayout(readFileSync(installedPgliteWasm())).exportedNames;
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;
const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
const parents = new Map<number, number>();
for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node.id);

function label(node: ProfileNode): string {
  const match = /^wasm-function\[(\d+)\]$/.exec(node.callFrame.functionName);
  if (!match) return node.callFrame.functionName || '(anonymous)';
  return `${match[1]}:${exported.get(Number(match[1])) ?? '?'}`;
}
/** Frames that only cross between JavaScript and WebAssembly, or are unnamed: left out of paths. */
const crossing = (frame: string) => frame.endsWith(':?') || frame.startsWith('js-to-wasm') || frame.startsWith('wasm-to-js') || frame.startsWith('invoke_');

const self = new Map<string, number>();
const inclusive = new Map<string, number>();
const paths = new Map<string, number>();
let total = 0;
let time = profile.startTime;
for (let index = 0; index < profile.samples.length; index++) {
  time += profile.timeDeltas[index];
  if (Number.isFinite(from) && (time < from || time > to)) continue;
  const micros = profile.timeDeltas[index + 1] ?? 0;
  const stack: string[] = []; // innermost first
  for (let id: number | undefined = profile.samples[index]; id !== undefined; id = parents.get(id)) stack.push(label(nodes.get(id)!));
  total += micros;
  self.set(stack[0], (self.get(stack[0]) ?? 0) + micros);
  for (const frame of new Set(stack)) inclusive.set(frame, (inclusive.get(frame) ?? 0) + micros);
  if (mode) {
    const at = stack.findIndex((frame) => frame === mode.target || frame.endsWith(`:${mode.target}`));
    if (at < 0) continue;
    const trail = mode.kind === '--callers' ? stack.slice(at + 1) : stack.slice(0, at).reverse();
    const key = trail.filter((frame) => !crossing(frame)).slice(0, 8).join(mode.kind === '--callers' ? ' < ' : ' > ');
    paths.set(key, (paths.get(key) ?? 0) + micros);
  }
}

const rows = (map: Map<string, number>, count: number, keep: (name: string) => boolean = () => true) =>
  [...map]
    .filter(([name]) => keep(name))
    .sort((a, b) => b[1] - a[1])
    .slice(0, count)
    .map(([name, micros]) => `${(micros / 1000).toFixed(0).padStart(7)} ms ${((100 * micros) / total).toFixed(1).padStart(5)}%  ${name}`)
    .join('\n');
console.log(`${(total / 1000).toFixed(0)} ms sampled${Number.isFinite(from) ? ` in ${from}..${to}` : ''} (${file})`);
if (mode) {
  console.log(`--- ${mode.kind === '--callers' ? 'paths to' : 'named functions under'} ${mode.target}`);
  console.log(rows(paths, 30));
} else {
  console.log('--- self');
  console.log(rows(self, 30));
  console.log('--- inclusive, named frames');
  console.log(rows(inclusive, 60, (name) => !crossing(name)));
}
