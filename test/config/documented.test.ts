import { readFileSync } from 'node:fs';
import t from 'tap';
import { parse as parseYaml } from 'yaml';
import { packagedDefaultsPath } from '../../src/config/index.js';
import { SPEC_ENVIRONMENT_NAMES } from '../../src/config/env.js';
import { type ConfigTree, getAt, leafPaths } from '../../src/config/tree.js';

/**
 * docs/configuration.md documents every key of the embedded defaults with its default, and no
 * key the defaults do not have: each row of "Key groups" names a group (a dotted path, or a key
 * itself), and every key under it is written `name` followed by its default, as the defaults
 * file has it (an empty string as '', a list as [] or ['*']). A key added to
 * configs/config.default.yaml without a line in the docs, or a default changed in one place and
 * not the other, fails here.
 */
const docs = readFileSync('docs/configuration.md', 'utf8');
const defaults = parseYaml(readFileSync(packagedDefaultsPath(), 'utf8')) as ConfigTree;

function section(title: string): string {
  const start = docs.indexOf(`\n## ${title}\n`);
  if (start < 0) throw new Error(`docs/configuration.md has no section "${title}"`);
  const end = docs.indexOf('\n## ', start + 1);
  return docs.slice(start, end < 0 ? undefined : end);
}

/** "Key groups": the group of each row and the rest of its row (its cells, backticks kept). */
const rows = new Map<string, string>();
for (const match of section('Key groups').matchAll(/^\| `([^`]+)` \| (.*)$/gm)) rows.set(match[1], match[2]);

/** A key path as the docs name it: the operator names the `databases` entries (`default` in the file). */
const documentedPath = (path: readonly string[]) => (path[0] === 'databases' ? ['databases', '<name>', ...path.slice(2)] : [...path]);

/** How a default may be written: as the YAML has it (a number in any notation it parses as). */
function startsWithDefault(text: string, value: unknown): boolean {
  if (typeof value === 'number') {
    const token = /^-?[\d.]+(?:e-?\d+)?/.exec(text)?.[0];
    return token !== undefined && Number(token) === value;
  }
  if (typeof value === 'boolean') return new RegExp(`^${value}\\b`).test(text);
  if (typeof value === 'string') return value === '' ? text.startsWith("''") : text.startsWith(value) || text.startsWith(`'${value}'`);
  if (Array.isArray(value)) return text.startsWith(JSON.stringify(value).replaceAll('"', "'"));
  return false;
}

t.test('every key of the defaults is in docs/configuration.md with its default', async (t) => {
  const leaves = leafPaths(defaults);
  t.ok(leaves.length > 150, `${leaves.length} keys in the defaults`);
  const problems: string[] = [];
  for (const path of leaves) {
    const value = getAt(defaults, path);
    const named = documentedPath(path);
    const dotted = named.join('.');
    let depth = named.length;
    while (depth > 0 && !rows.has(named.slice(0, depth).join('.'))) depth -= 1;
    if (depth === 0) {
      problems.push(`${dotted}: no row of "Key groups" names it or a group holding it`);
      continue;
    }
    const row = rows.get(named.slice(0, depth).join('.')) ?? '';
    const rest = named.slice(depth);
    if (rest.length === 0) {
      // A row for the key itself: its first cell starts with the default (the one-of values after it).
      if (!startsWithDefault(row.replaceAll('`', ''), value)) problems.push(`${dotted}: the row does not start with its default ${JSON.stringify(value)}`);
      continue;
    }
    // Each segment under the group in turn, `name`, the last followed by its default.
    let at = 0;
    for (const segment of rest) {
      const found = row.indexOf(`\`${segment}\``, at);
      if (found < 0) {
        at = -1;
        break;
      }
      at = found + segment.length + 2;
    }
    if (at < 0) problems.push(`${dotted}: not named in the row of ${named.slice(0, depth).join('.')}`);
    else if (!(row[at] === ' ' && startsWithDefault(row.slice(at + 1), value))) problems.push(`${dotted}: not followed by its default ${JSON.stringify(value)}`);
  }
  t.same(problems, [], 'each key named with its default');
});

t.test('every group docs/configuration.md lists is in the defaults', async (t) => {
  const unknown = [...rows.keys()].filter((group) => {
    const path = group.split('.').map((segment, index) => (index === 1 && group.startsWith('databases.') ? 'default' : segment));
    return getAt(defaults, path) === undefined;
  });
  t.ok(rows.size > 30, `${rows.size} rows`);
  t.same(unknown, [], 'no row names a key the defaults do not have');
});

t.test("the spec's environment names in docs/configuration.md are the ones the loader reads", async (t) => {
  const table = new Map<string, string>();
  for (const match of section('Environment variables').matchAll(/^\| (`[A-Z_]+`(?:, `[A-Z_]+`)*) \| `([a-z_.]+)`((?:, `\.[a-z_]+`)*)/gm)) {
    const variables = [...match[1].matchAll(/`([A-Z_]+)`/g)].map((variable) => variable[1]);
    const keys = [match[2], ...[...match[3].matchAll(/`\.([a-z_]+)`/g)].map((key) => `${match[2].slice(0, match[2].lastIndexOf('.'))}.${key[1]}`)];
    t.equal(variables.length, keys.length, `${match[1]}: one key per variable`);
    variables.forEach((variable, index) => table.set(variable, keys[index]));
  }
  t.same(Object.fromEntries([...table].sort()), Object.fromEntries(Object.entries(SPEC_ENVIRONMENT_NAMES).sort()));
});
