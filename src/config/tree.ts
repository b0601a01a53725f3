/** Helpers for the untyped configuration tree while layers are merged, before validation. */
import { isPlainObject } from '../util/objects.js';

export type ConfigTree = { [key: string]: unknown };

/** Dotted path for messages: `providers.registry.registries[0].url`. */
export function formatPath(segments: readonly string[]): string {
  let text = '';
  for (const segment of segments) {
    if (/^\d+$/.test(segment)) text += `[${segment}]`;
    else text += text === '' ? segment : `.${segment}`;
  }
  return text === '' ? '(top level)' : text;
}

/** Leaf paths of a tree: scalars and arrays are leaves, objects are descended into. */
export function leafPaths(tree: ConfigTree, prefix: readonly string[] = []): string[][] {
  const paths: string[][] = [];
  for (const [key, value] of Object.entries(tree)) {
    const path = [...prefix, key];
    if (isPlainObject(value)) paths.push(...leafPaths(value, path));
    else paths.push(path);
  }
  return paths;
}

export function getAt(tree: ConfigTree, path: readonly string[]): unknown {
  let node: unknown = tree;
  for (const segment of path) {
    if (!isPlainObject(node) || !Object.hasOwn(node, segment)) return undefined;
    node = node[segment];
  }
  return node;
}

/**
 * Sets a value, creating missing intermediate objects (a new `databases.<name>` entry, say). An
 * intermediate that a layer set to something else (`server: 5` in a file) is left as it is and
 * the value not set: validation then says that `server` must be a mapping, which replacing it
 * with one would hide behind "required" errors for each of its keys.
 */
export function setAt(tree: ConfigTree, path: readonly string[], value: unknown): void {
  let node = tree;
  for (const segment of path.slice(0, -1)) {
    const next = node[segment];
    if (isPlainObject(next)) node = next;
    else if (next !== undefined) return;
    else {
      const created: ConfigTree = {};
      node[segment] = created;
      node = created;
    }
  }
  node[path[path.length - 1]] = value;
}

export function deepClone<T>(value: T): T {
  return structuredClone(value);
}
