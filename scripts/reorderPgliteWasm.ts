/**
 * Moves four of PGlite's PostgreSQL functions to the front of its WebAssembly module, so that an
 * embedded node's launch (`--wasm-debug-mask-for-testing=15`, bin/factlog.js) can keep exactly
 * them on V8's baseline compiler while the rest of PostgreSQL tiers up to TurboFan.
 *
 * Why: TurboFan's compile of `raw_parser` (PostgreSQL's SQL parser, its Bison grammar inlined)
 * takes 604 MB at once, the next three 33–86 MB, which is why the embedded node ran everything on
 * Liftoff (`--liftoff-only`, the 500 MB target) at the cost of a quarter of a rebuild's speed.
 * These four run at starts, migrations and DDL, not per event. V8 has no flag that keeps one
 * function off TurboFan by index; its debug mask keeps the module's first 32 declared functions
 * on Liftoff, so the four are made the first four (docs/performance.md, "Fifty-fourth round").
 *
 * Run by `npm ci`'s postinstall after patch-package; rewrites node_modules/@electric-sql/pglite/
 * dist/pglite.wasm in place (atomically) and does nothing when it is already in this order.
 * Binaryen reads the module, renumbers every call, reference and table entry, and writes it back;
 * nothing else is changed. Exits non-zero with a message when PGlite's module lacks one of them.
 */
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** PGlite's export names of the functions kept on Liftoff, in their new order (declared 0, 1, …). */
export const KEPT_ON_LIFTOFF = ['raw_parser', 'outNode', 'nodeRead', 'standard_ProcessUtility'] as const;

/** The launch's V8 flag that keeps them there: one bit a declared function, from the first. */
export const LIFTOFF_MASK_FLAG = `--wasm-debug-mask-for-testing=${(1 << KEPT_ON_LIFTOFF.length) - 1}`;

export interface FunctionLayout {
  /** Imported functions, which come first in the function index space. */
  importedFunctions: number;
  /** Declared (non-imported) functions. */
  declaredFunctions: number;
  /** Export name of each exported function, by function index. */
  exportedNames: Map<number, string>;
}

/** Reads a module's import, export and code sections: enough to say which functions come first. */
export function functionLayout(bytes: Uint8Array): FunctionLayout {
  if (bytes.length < 8 || bytes[0] !== 0 || bytes[1] !== 0x61 || bytes[2] !== 0x73 || bytes[3] !== 0x6d) throw new Error('not a WebAssembly module');
  let at = 8;
  const u32 = (): number => {
    let value = 0;
    let shift = 0;
    let byte: number;
    do {
      byte = bytes[at++] ?? 0;
      value |= (byte & 0x7f) << shift;
      shift += 7;
    } while (byte & 0x80);
    return value >>> 0;
  };
  const name = (): string => {
    const length = u32();
    const text = new TextDecoder().decode(bytes.subarray(at, at + length));
    at += length;
    return text;
  };
  const limits = (): void => {
    const flags = bytes[at++] ?? 0;
    u32();
    if (flags & 1) u32();
  };
  const layout: FunctionLayout = { importedFunctions: 0, declaredFunctions: 0, exportedNames: new Map() };
  while (at < bytes.length) {
    const id = bytes[at++];
    const size = u32();
    const end = at + size;
    if (id === 2) {
      for (let count = u32(); count > 0; count--) {
        name();
        name();
        const kind = bytes[at++];
        if (kind === 0) {
          u32();
          layout.importedFunctions++;
        } else if (kind === 1) {
          at++; // the table's element type
          limits();
        } else if (kind === 2) limits();
        else if (kind === 3) at += 2; // a global's value type and mutability
        else if (kind === 4) {
          at++;
          u32(); // a tag's attribute and type
        } else throw new Error(`an import of unknown kind ${String(kind)}`);
      }
    } else if (id === 7) {
      for (let count = u32(); count > 0; count--) {
        const exportName = name();
        const kind = bytes[at++];
        const index = u32();
        if (kind === 0) layout.exportedNames.set(index, exportName);
      }
    } else if (id === 10) layout.declaredFunctions = u32();
    at = end;
  }
  return layout;
}

/** The export names of the first `count` declared functions (undefined where one is not exported). */
export function firstDeclaredNames(layout: FunctionLayout, count: number): (string | undefined)[] {
  return Array.from({ length: count }, (_, offset) => layout.exportedNames.get(layout.importedFunctions + offset));
}

const isInOrder = (layout: FunctionLayout): boolean => firstDeclaredNames(layout, KEPT_ON_LIFTOFF.length).every((name, offset) => name === KEPT_ON_LIFTOFF[offset]);

const leb128 = (value: number): number[] => {
  const out: number[] = [];
  let rest = value;
  do {
    const low = rest & 0x7f;
    rest >>>= 7;
    out.push(rest ? low | 0x80 : low);
  } while (rest);
  return out;
};
const encodedName = (text: string): number[] => {
  const utf8 = new TextEncoder().encode(text);
  return [...leb128(utf8.length), ...utf8];
};

/**
 * A name section naming the kept functions `a` and their rank, every other declared function `f`
 * and its index, both zero-padded: sorting functions by name then puts the kept ones first, in
 * their order, and leaves the rest in the order they had.
 */
function sortingNameSection(layout: FunctionLayout, keptIndices: readonly number[]): Uint8Array {
  const width = String(layout.importedFunctions + layout.declaredFunctions).length;
  const entries: number[] = [];
  for (let offset = 0; offset < layout.declaredFunctions; offset++) {
    const index = layout.importedFunctions + offset;
    const rank = keptIndices.indexOf(index);
    entries.push(...leb128(index), ...encodedName(rank >= 0 ? `a${String(rank).padStart(width, '0')}` : `f${String(index).padStart(width, '0')}`));
  }
  const functionNames = [...leb128(layout.declaredFunctions), ...entries];
  const payload = [...encodedName('name'), 1, ...leb128(functionNames.length), ...functionNames];
  return new Uint8Array([0, ...leb128(payload.length), ...payload]);
}

/** `module` with the kept functions first; throws when one is not exported by it. */
export async function reordered(module: Uint8Array): Promise<Uint8Array> {
  const layout = functionLayout(module);
  const indexOfName = new Map([...layout.exportedNames].map(([index, exportName]) => [exportName, index]));
  const keptIndices = KEPT_ON_LIFTOFF.map((exportName) => {
    const index = indexOfName.get(exportName);
    if (index === undefined) throw new Error(`pglite.wasm exports no function ${exportName}: PGlite's build changed; update KEPT_ON_LIFTOFF in scripts/reorderPgliteWasm.ts`);
    return index;
  });
  const nameSection = sortingNameSection(layout, keptIndices);
  const withNames = new Uint8Array(module.length + nameSection.length);
  withNames.set(module);
  withNames.set(nameSection, module.length);
  // Loaded only here: an install whose module is in order already reads its sections and stops.
  const { default: binaryen } = await import('binaryen');
  const parsed = binaryen.readBinary(withNames);
  try {
    // The features PostgreSQL's build uses, and no newer encodings (compact imports, overlong
    // call_indirect) that the writer would otherwise choose.
    const { MutableGlobals, NontrappingFPToInt, BulkMemory, BulkMemoryOpt, SignExt } = binaryen.Features;
    parsed.setFeatures(MutableGlobals | NontrappingFPToInt | BulkMemory | BulkMemoryOpt | SignExt);
    if (!parsed.validate()) throw new Error('binaryen does not validate pglite.wasm with the features it is expected to use');
    parsed.runPasses(['reorder-functions-by-name']);
    binaryen.setDebugInfo(false); // the name section above is not written back
    const output = parsed.emitBinary();
    const after = functionLayout(output);
    const exportsBefore = [...layout.exportedNames.values()].sort().join();
    const exportsAfter = [...after.exportedNames.values()].sort().join();
    if (!isInOrder(after) || after.declaredFunctions !== layout.declaredFunctions || exportsAfter !== exportsBefore) {
      throw new Error('the reordered pglite.wasm does not have the same functions and exports with the kept ones first');
    }
    return output;
  } finally {
    parsed.dispose();
  }
}

/** Reorders the installed pglite.wasm unless it is in order already; says what it did. */
export async function reorderInstalledPgliteWasm(file: string): Promise<string> {
  const module = readFileSync(file);
  if (isInOrder(functionLayout(module))) return `${file}: already in order`;
  const output = await reordered(module);
  const temporary = `${file}.${String(process.pid)}.tmp`;
  writeFileSync(temporary, output);
  renameSync(temporary, file);
  return `${file}: ${KEPT_ON_LIFTOFF.join(', ')} moved first (kept on Liftoff by ${LIFTOFF_MASK_FLAG})`;
}

/** Where the installed package's module is. */
export function installedPgliteWasm(): string {
  return path.join(path.dirname(fileURLToPath(import.meta.resolve('@electric-sql/pglite'))), 'pglite.wasm');
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    console.log(`reorderPgliteWasm: ${await reorderInstalledPgliteWasm(process.argv[2] ?? installedPgliteWasm())}`);
  } catch (error) {
    console.error(`reorderPgliteWasm: ${error instanceof Error ? error.message : String(error)}`);
    process.exit(1);
  }
}
