import { ConfigError } from './types.js';
import { type ConfigTree, formatPath, getAt, leafPaths } from './tree.js';
import { isPlainObject } from '../util/objects.js';

/**
 * Environment variable names the spec fixes, mapped to the dotted key they set. They take
 * precedence over the generic name of the same key (AUTH_JWTSECRET over AUTH_JWT_SECRET).
 */
export const SPEC_ENVIRONMENT_NAMES: Readonly<Record<string, string>> = {
  AUTH_JWTSECRET: 'auth.jwt_secret',
  SVC_OAUTH_ISSUER: 'oauth.issuer',
  SVC_BOOTSTRAP_AUTO_PROMOTE: 'bootstrap.auto_promote_first_user',
  SVC_AUDIT_RETENTION_DAYS: 'audit.retention_days',
  REGISTRY_URL: 'providers.registry.url',
  REGISTRY_AUTH_MODE: 'providers.registry.auth_mode',
  REGISTRY_API_KEY: 'providers.registry.api_key',
  REGISTRY_READ_API_KEY: 'providers.registry.read_api_key',
  STORAGE_DATA_DIR: 'storage.data_dir',
  // Model-provider credentials: secrets, best kept out of files.
  LLM_API_KEY: 'providers.llm.api_key',
  EMBEDDINGS_API_KEY: 'providers.embeddings.api_key',
};

/**
 * Map-valued groups whose entries are named by the operator. An entry that is not in the
 * defaults can still be set from the environment: `DATABASES_<NAME>_<FIELD>`, where the fields
 * and their types are those of the template entry. NAME is lower-cased.
 */
const MAP_GROUPS: ReadonlyArray<{ group: string; templateEntry: string }> = [
  { group: 'databases', templateEntry: 'default' },
];

/**
 * `string` is free text (a secret, a path, a model name), taken as it is; `token` is a string
 * whose schema fixes its shape (a duration, a URL, an enum, a name), which no blank can be part
 * of, so blanks around it are dropped like YAML drops them around an unquoted value.
 */
type LeafKind = 'string' | 'token' | 'number' | 'boolean' | 'array';

/** One value taken from the environment, already coerced to the key's type. */
export interface EnvironmentOverride {
  path: string[];
  value: unknown;
  variable: string;
}

/** The generic environment name of a dotted key: `search.hybrid.enabled` -> SEARCH_HYBRID_ENABLED. */
export function environmentNameOf(path: readonly string[]): string {
  return path.join('_').toUpperCase();
}

function kindOf(value: unknown, schema: object, path: readonly string[]): LeafKind {
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return 'number';
  if (typeof value === 'boolean') return 'boolean';
  const keySchema = schemaAt(schema, path);
  return keySchema !== undefined && (Array.isArray(keySchema.enum) || typeof keySchema.pattern === 'string') ? 'token' : 'string';
}

type SchemaNode = { [keyword: string]: unknown };

/**
 * The sub-schema of a key of the configuration schema: through `properties`, else
 * `additionalProperties` (a `databases` entry), following the schema's `#/definitions/` refs.
 */
function schemaAt(schema: object, path: readonly string[]): SchemaNode | undefined {
  const root = schema as SchemaNode;
  const definitions = isPlainObject(root.definitions) ? root.definitions : {};
  const resolve = (node: unknown): SchemaNode | undefined => {
    let current = node;
    for (let depth = 0; isPlainObject(current) && typeof current.$ref === 'string' && depth < 10; depth++) {
      current = definitions[current.$ref.replace('#/definitions/', '')];
    }
    return isPlainObject(current) ? current : undefined;
  };
  let node = resolve(root);
  for (const segment of path) {
    if (node === undefined) return undefined;
    const properties = isPlainObject(node.properties) ? node.properties : {};
    node = resolve(Object.hasOwn(properties, segment) ? properties[segment] : node.additionalProperties);
  }
  return node;
}

/** true, false, 1 or 0, any case (the spec's rule for SVC_BOOTSTRAP_AUTO_PROMOTE, used for every boolean). */
export function parseBooleanText(text: string): boolean | undefined {
  const normalized = text.trim().toLowerCase();
  if (normalized === 'true' || normalized === '1') return true;
  if (normalized === 'false' || normalized === '0') return false;
  return undefined;
}

const NUMBER_TEXT = /^[+-]?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?$/i;

function coerce(raw: string, kind: LeafKind, path: readonly string[], variable: string): unknown {
  const where = `${formatPath(path)}: environment variable ${variable}`;
  switch (kind) {
    case 'string':
      return raw;
    case 'token':
      return raw.trim();
    case 'number': {
      const trimmed = raw.trim();
      if (!NUMBER_TEXT.test(trimmed)) throw new ConfigError(`${where}=${JSON.stringify(raw)} is not a number`);
      return Number(trimmed);
    }
    case 'boolean': {
      const parsed = parseBooleanText(raw);
      if (parsed === undefined) {
        throw new ConfigError(`${where}=${JSON.stringify(raw)} is not a boolean (use true, false, 1 or 0)`);
      }
      return parsed;
    }
    case 'array': {
      const trimmed = raw.trim();
      if (trimmed === '') return [];
      if (!trimmed.startsWith('[')) return trimmed.split(',').map((item) => item.trim()).filter((item) => item !== '');
      let parsed: unknown;
      try {
        parsed = JSON.parse(trimmed);
      } catch (error) {
        throw new ConfigError(`${where} is not a valid JSON array: ${(error as Error).message}`);
      }
      if (!Array.isArray(parsed)) throw new ConfigError(`${where} is not a JSON array`);
      return parsed;
    }
  }
}

/**
 * Reads the configuration keys set in `env`. Key paths come from the embedded defaults, so an
 * underscore inside a key name (`task.queues.retrieve_source`) is never mistaken for a level
 * separator: TASK_QUEUES_RETRIEVE_SOURCE is looked up, not split. Values are coerced to the type
 * of the default value (a string to `token` when `schema` fixes its shape, see LeafKind); a value
 * that cannot be coerced is a problem naming key and variable.
 * Returns the overrides in application order (generic names, then the spec's names), the
 * names of variables that look like settings but match no key (worth a warning: likely typos),
 * and the values that could not be coerced: reported by the caller with the problems validation
 * finds, so that one start names every bad key.
 */
export function environmentOverrides(
  defaults: ConfigTree,
  env: NodeJS.ProcessEnv,
  schema: object,
): { overrides: EnvironmentOverride[]; unmatched: string[]; problems: string[] } {
  const bindings = new Map<string, { path: string[]; kind: LeafKind }>();
  for (const path of leafPaths(defaults)) {
    const name = environmentNameOf(path);
    const existing = bindings.get(name);
    if (existing) {
      // Two keys flattening to one name would make the environment ambiguous: a defaults bug.
      throw new ConfigError(`keys ${formatPath(existing.path)} and ${formatPath(path)} share the variable ${name}`);
    }
    bindings.set(name, { path, kind: kindOf(getAt(defaults, path), schema, path) });
  }

  const overrides: EnvironmentOverride[] = [];
  const problems: string[] = [];
  const unmatched: string[] = [];
  const groupPrefixes = Object.keys(defaults).map((key) => `${key.toUpperCase()}_`);

  const take = (variable: string, path: string[], kind: LeafKind, raw: string): void => {
    try {
      overrides.push({ path, value: coerce(raw, kind, path, variable), variable });
    } catch (error) {
      if (error instanceof ConfigError) problems.push(...error.problems);
      else throw error;
    }
  };

  const aliasOverrides: Array<() => void> = [];
  for (const [variable, raw] of Object.entries(env)) {
    if (raw === undefined) continue;
    const alias = SPEC_ENVIRONMENT_NAMES[variable];
    if (alias !== undefined && bindings.get(variable)?.path.join('.') !== alias) {
      const path = alias.split('.');
      aliasOverrides.push(() => take(variable, path, kindOf(getAt(defaults, path), schema, path), raw));
      continue;
    }
    const binding = bindings.get(variable) ?? mapEntryBinding(defaults, schema, variable);
    if (binding) take(variable, binding.path, binding.kind, raw);
    else if (groupPrefixes.some((prefix) => variable.startsWith(prefix))) unmatched.push(variable);
  }
  for (const apply of aliasOverrides) apply();

  return { overrides, unmatched: unmatched.sort(), problems };
}

function mapEntryBinding(defaults: ConfigTree, schema: object, variable: string): { path: string[]; kind: LeafKind } | undefined {
  for (const { group, templateEntry } of MAP_GROUPS) {
    const template = getAt(defaults, [group, templateEntry]);
    if (!isPlainObject(template)) continue;
    const prefix = `${group.toUpperCase()}_`;
    if (!variable.startsWith(prefix)) continue;
    const rest = variable.slice(prefix.length);
    for (const field of Object.keys(template)) {
      const suffix = `_${field.toUpperCase()}`;
      if (rest.length > suffix.length && rest.endsWith(suffix)) {
        const entryName = rest.slice(0, -suffix.length).toLowerCase();
        const path = [group, entryName, field];
        return { path, kind: kindOf(template[field], schema, path) };
      }
    }
  }
  return undefined;
}

/** The explicit first administrator of `bootstrap.default_admin`, from the spec's variables. */
export interface BootstrapAdmin {
  email: string;
  password: string;
  displayName: string;
}

/** The spec's variables of the explicit first administrator, by the field each gives. */
export const BOOTSTRAP_ADMIN_VARIABLES = {
  email: 'SVC_BOOTSTRAP_DEFAULT_ADMIN_EMAIL',
  password: 'SVC_BOOTSTRAP_DEFAULT_ADMIN_PASSWORD',
  displayName: 'SVC_BOOTSTRAP_DEFAULT_ADMIN_DISPLAY_NAME',
} as const;

/** The variables of BOOTSTRAP_ADMIN_VARIABLES that are unset or blank, for a message that names them. */
export function missingBootstrapAdminVariables(env: NodeJS.ProcessEnv = process.env): string[] {
  return Object.values(BOOTSTRAP_ADMIN_VARIABLES).filter((name) => (env[name] ?? '').trim() === '');
}

/**
 * SVC_BOOTSTRAP_DEFAULT_ADMIN_EMAIL / _PASSWORD / _DISPLAY_NAME. These are secrets, so they
 * are read from the environment only and never become configuration keys (which may be logged
 * or written out). Returns null unless all three are set and non-blank.
 */
export function bootstrapAdminFromEnv(env: NodeJS.ProcessEnv = process.env): BootstrapAdmin | null {
  if (missingBootstrapAdminVariables(env).length > 0) return null;
  return {
    email: (env[BOOTSTRAP_ADMIN_VARIABLES.email] ?? '').trim(),
    password: env[BOOTSTRAP_ADMIN_VARIABLES.password] ?? '',
    displayName: (env[BOOTSTRAP_ADMIN_VARIABLES.displayName] ?? '').trim(),
  };
}
