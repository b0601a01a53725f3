import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Alias, isAlias, isMap, isScalar, isSeq, type Node as YamlNode, parse as parseYaml, parseDocument, visit, YAMLError } from 'yaml';
import { environmentOverrides } from './env.js';
import { type Config, ConfigError } from './types.js';
import { type ConfigTree, deepClone, formatPath, setAt } from './tree.js';
import { isPlainObject } from '../util/objects.js';
import { configSchema, validateConfig } from './validate.js';

export { bootstrapAdminFromEnv, BOOTSTRAP_ADMIN_VARIABLES, missingBootstrapAdminVariables, type BootstrapAdmin } from './env.js';
export { checkSecrets, type ConfigWarningLog } from './secrets.js';

export interface LoadConfigOptions {
  /** The CLI's --config: a YAML file, or a directory holding config.yaml and/or config.local.yaml. */
  configPath?: string;
  /** Defaults to process.env. */
  env?: NodeJS.ProcessEnv;
  /** Base for configs/, a relative configPath, and the written defaults. Defaults to process.cwd(). */
  cwd?: string;
  /** Write `<cwd>/configs/config.default.yaml` when absent (the CLI's first run). Default true. */
  writeDefaults?: boolean;
  /** Non-fatal notices (defaults not writable, a variable that looks like a setting but is not). */
  warn?: (message: string) => void;
}

const DEFAULTS_RELATIVE_PATH = path.join('configs', 'config.default.yaml');
const SCHEMA_RELATIVE_PATH = path.join('schemas', 'config.schema.json');
const LOCAL_RELATIVE_PATH = path.join('configs', 'config.local.yaml');
/** Inside a --config directory, in order of increasing precedence. */
const DIRECTORY_FILE_NAMES = ['config.yaml', 'config.local.yaml'] as const;

const MODULE_DIRECTORY = path.dirname(fileURLToPath(import.meta.url));
// This file runs as src/config/load.ts (tsx) or dist/src/config/load.js (tsc output, which
// copies neither YAML nor JSON): the package root is two or three levels up.
const PACKAGE_ROOT_CANDIDATES = [path.resolve(MODULE_DIRECTORY, '../..'), path.resolve(MODULE_DIRECTORY, '../../..')];

function packagedFile(relativePath: string): string {
  for (const root of PACKAGE_ROOT_CANDIDATES) {
    const candidate = path.join(root, relativePath);
    if (existsSync(candidate)) return candidate;
  }
  throw new ConfigError(`packaged file ${relativePath} not found under ${PACKAGE_ROOT_CANDIDATES.join(' or ')}`);
}

/** The embedded defaults file shipped with the package. */
/** The service's version, from its package.json (`factlog --version`). */
export function packageVersion(): string {
  return (JSON.parse(readFileSync(packagedFile('package.json'), 'utf8')) as { version: string }).version;
}

export function packagedDefaultsPath(): string {
  return packagedFile(DEFAULTS_RELATIVE_PATH);
}

/** The JSON Schema the merged configuration is validated against. */
export function configSchemaPath(): string {
  return packagedFile(SCHEMA_RELATIVE_PATH);
}

/** ` at line L, column C` of an offset in `text`. */
function linePosition(text: string, offset: number): string {
  const before = text.slice(0, offset);
  return ` at line ${before.split('\n').length}, column ${offset - before.lastIndexOf('\n')}`;
}

/**
 * What is wrong with the file and where, for a parse error. An alias of no anchor, or a merge key
 * (`<<`) given no mapping, is found only when the document is turned into values, and that error
 * has no position (and for `<<: *typo` says "Merge sources must be maps"): the node is looked for.
 */
function yamlProblem(text: string, error: unknown): string {
  if (error instanceof YAMLError) return `${linePosition(text, error.pos[0])}: ${error.message}`;
  const document = parseDocument(text, { prettyErrors: false, merge: true });
  let found: { offset: number; problem: string } | undefined;
  const unresolved = (node: unknown): node is Alias => isAlias(node) && node.resolve(document) === undefined;
  visit(document, {
    Pair(_, pair) {
      if (!(isScalar(pair.key) && pair.key.type === 'PLAIN' && pair.key.source === '<<')) return undefined;
      const target = isAlias(pair.value) ? pair.value.resolve(document) : pair.value;
      const sources = isSeq(target) ? target.items : [pair.value];
      for (const source of sources) {
        const node = source as YamlNode | null;
        if (unresolved(node)) {
          found = { offset: node.range?.[0] ?? 0, problem: `alias *${node.source} names no anchor set before it` };
        } else if (!isMap(isAlias(node) ? node.resolve(document) : node)) {
          found = { offset: node?.range?.[0] ?? pair.key.range?.[0] ?? 0, problem: 'a merge key (<<) takes a mapping, an alias of one, or a list of them' };
        }
        if (found) return visit.BREAK;
      }
      return undefined;
    },
    Alias(_, node) {
      if (!unresolved(node)) return undefined;
      found = { offset: node.range?.[0] ?? 0, problem: `alias *${node.source} names no anchor set before it` };
      return visit.BREAK;
    },
  });
  return found ? `${linePosition(text, found.offset)}: ${found.problem}` : `: ${(error as Error).message}`;
}

function readYamlMapping(file: string, text: string): ConfigTree {
  let parsed: unknown;
  try {
    // Without prettyErrors the message quotes none of the file: the lines around the error
    // may hold a secret (`jwt_secret: abc: def` was printed whole). Merge keys (`<<: *defaults`)
    // are YAML 1.1's, off by default under 1.2: `<<` was then a key of its own, "unknown key".
    parsed = parseYaml(text, { prettyErrors: false, merge: true });
  } catch (error) {
    throw new ConfigError(`${file}: not valid YAML${yamlProblem(text, error)}`);
  }
  if (parsed === null || parsed === undefined) return {}; // an empty or all-comments file
  if (!isPlainObject(parsed)) throw new ConfigError(`${file}: the top level must be a mapping of keys`);
  return parsed;
}

function readYamlFile(file: string): ConfigTree {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new ConfigError(`${file}: cannot be read: ${(error as Error).message}`);
  }
  return readYamlMapping(file, text);
}

/**
 * Deep-merges `overlay` into `target`: mappings merge key by key, lists and scalars replace.
 * A null value (a key left empty in YAML) keeps the lower layer's value. Records where each
 * value came from, for error messages.
 */
function mergeLayer(
  target: ConfigTree,
  overlay: ConfigTree,
  origin: string,
  origins: Map<string, string>,
  prefix: string[] = [],
): void {
  for (const [key, value] of Object.entries(overlay)) {
    const keyPath = [...prefix, key];
    if (key === '__proto__' || key === 'constructor' || key === 'prototype') {
      throw new ConfigError(`${formatPath(keyPath)}: unknown key (set by ${origin})`);
    }
    if (value === null || value === undefined) continue;
    origins.set(keyPath.join('.'), origin);
    const current = target[key];
    if (isPlainObject(value) && isPlainObject(current)) mergeLayer(current, value, origin, origins, keyPath);
    else target[key] = deepClone(value);
  }
}

/** The file layers: --config (file, or directory files), else configs/config.local.yaml when present. */
function configFiles(configPath: string | undefined, cwd: string): string[] {
  if (configPath === undefined) {
    const local = path.join(cwd, LOCAL_RELATIVE_PATH);
    return existsSync(local) ? [local] : [];
  }
  // `--config "$FACTLOG_CONFIG"` with the variable unset: it ran on the defaults (and any
  // configs/config.local.yaml) as if no --config had been given, saying nothing.
  if (configPath.trim() === '') throw new ConfigError('--config is empty: give a YAML file or a directory holding config.yaml / config.local.yaml');
  const resolved = path.resolve(cwd, configPath);
  let isDirectory: boolean;
  try {
    isDirectory = statSync(resolved).isDirectory();
  } catch {
    throw new ConfigError(`--config ${resolved}: no such file or directory`);
  }
  if (!isDirectory) return [resolved];
  const files = DIRECTORY_FILE_NAMES.map((name) => path.join(resolved, name)).filter((file) => existsSync(file));
  if (files.length === 0) {
    throw new ConfigError(`--config ${resolved}: the directory holds neither ${DIRECTORY_FILE_NAMES.join(' nor ')}`);
  }
  return files;
}

const WRITTEN_DEFAULTS_HEADER = `# Written by factlog on first run as a reference copy of its built-in defaults.
# factlog does NOT read this file: editing it changes nothing, and it is not refreshed on
# upgrade. Put the keys you change in configs/config.local.yaml (or a file given with
# --config), or set environment variables. See docs/configuration.md.

`;

/**
 * "Defaults are written next to the binary on first run": for a Node service the binary is the
 * deployment directory it runs in (the working directory that also holds configs/ and data/),
 * so the copy goes to <cwd>/configs/config.default.yaml. Never overwrites; failure only warns.
 */
function writeDefaultsCopy(cwd: string, defaultsText: string, warn: (message: string) => void): void {
  const target = path.join(cwd, DEFAULTS_RELATIVE_PATH);
  if (existsSync(target)) return;
  try {
    mkdirSync(path.dirname(target), { recursive: true });
  } catch (error) {
    warn(`could not write the reference defaults to ${target}: ${(error as Error).message}`);
    return;
  }
  try {
    // 'wx' fails if another process created the file meanwhile: theirs stays.
    writeFileSync(target, WRITTEN_DEFAULTS_HEADER + defaultsText, { flag: 'wx' });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') {
      warn(`could not write the reference defaults to ${target}: ${(error as Error).message}`);
    }
  }
}

let cachedDefaults: { file: string; text: string; tree: ConfigTree } | undefined;

function embeddedDefaults(): { file: string; text: string; tree: ConfigTree } {
  if (!cachedDefaults) {
    const file = packagedDefaultsPath();
    const text = readFileSync(file, 'utf8');
    cachedDefaults = { file, text, tree: readYamlMapping(file, text) };
  }
  return { ...cachedDefaults, tree: deepClone(cachedDefaults.tree) };
}

/**
 * Loads the layered configuration: embedded defaults < config file(s) < environment.
 * Throws ConfigError naming every bad key (by dotted path, with the file or variable that set it).
 */
export function loadConfig(options: LoadConfigOptions = {}): Config {
  const cwd = path.resolve(options.cwd ?? process.cwd());
  const env = options.env ?? process.env;
  const warn = options.warn ?? ((message: string) => process.emitWarning(message, 'FactlogConfigWarning'));
  const defaults = embeddedDefaults();

  if (options.writeDefaults ?? true) writeDefaultsCopy(cwd, defaults.text, warn);

  const files = configFiles(options.configPath, cwd).map((file) => ({ file, tree: readYamlFile(file) }));
  const { overrides, unmatched, problems: coercionProblems } = environmentOverrides(defaults.tree, env, configSchema(configSchemaPath()));
  for (const variable of unmatched) {
    warn(`environment variable ${variable} looks like a factlog setting but matches no configuration key; ignored`);
  }
  // Two passes: the first finds the profile; the second puts that profile's layer right above
  // the defaults, so files and environment still override what the profile chose.
  const mergeLayers = (profileLayer: { file: string; tree: ConfigTree } | null) => {
    const origins = new Map<string, string>();
    const merged = deepClone(defaults.tree);
    if (profileLayer) mergeLayer(merged, profileLayer.tree, profileLayer.file, origins);
    for (const { file, tree } of files) mergeLayer(merged, deepClone(tree), file, origins);
    for (const { path: keyPath, value, variable } of overrides) {
      setAt(merged, keyPath, value);
      origins.set(keyPath.join('.'), `environment variable ${variable}`);
    }
    return { merged, origins };
  };
  const first = mergeLayers(null);
  const profileFile = profileLayerPath(first.merged.profile);
  const { merged, origins } = profileFile ? mergeLayers({ file: profileFile, tree: readYamlFile(profileFile) }) : first;

  // A variable that could not be coerced is left out (its key keeps the lower layer's value) and
  // listed before what validation finds: thrown alone, it hid every other problem until fixed.
  if (coercionProblems.length === 0) return validateConfig(merged, configSchemaPath(), origins, cwd);
  let validationProblems: readonly string[] = [];
  try {
    validateConfig(merged, configSchemaPath(), origins, cwd);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    validationProblems = error.problems;
  }
  throw new ConfigError([...coercionProblems, ...validationProblems]);
}

/**
 * The packaged layer of a profile (`configs/profiles/<profile>.yaml`), or null when the profile
 * has none. `distributed` selects EventStoreDB, Kafka and OpenSearch this way.
 */
function profileLayerPath(profile: unknown): string | null {
  if (typeof profile !== 'string' || !/^[a-z]+$/.test(profile)) return null;
  try {
    return packagedFile(path.join('configs', 'profiles', `${profile}.yaml`));
  } catch {
    return null;
  }
}

/** The validated embedded defaults alone (no files, no environment). */
export function defaultConfig(): Config {
  return validateConfig(embeddedDefaults().tree, configSchemaPath());
}

/**
 * The embedded defaults with `overrides` deep-merged over them, validated. For tests and tools
 * that need a Config without files or environment: `buildConfig({ server: { port: 0 } })`.
 */
export function buildConfig(overrides: object = {}): Config {
  const origins = new Map<string, string>();
  const merged = embeddedDefaults().tree;
  mergeLayer(merged, overrides as ConfigTree, 'buildConfig overrides', origins);
  return validateConfig(merged, configSchemaPath(), origins);
}
