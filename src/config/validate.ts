import { readFileSync } from 'node:fs';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { MAX_TIMER_MS, MIN_PERIODIC_INTERVAL_MS, MIN_TOKEN_TTL_MS, parseDuration } from './duration.js';
import { caFileProblems } from './tls.js';
import { type Config, ConfigError, KAFKA_SASL_LOGIN_CHOICES, KAFKA_SASL_MECHANISMS, type RetryConfig } from './types.js';
import { formatPath } from './tree.js';
import { isPlainObject } from '../util/objects.js';
import { LOCAL_EMBEDDER_DIMENSIONS } from '../providers/embeddings/local.js';
import { parseCidr } from '../providers/fetch/addressPolicy.js';
import { MAX_VECTOR_DIMENSIONS } from '../search/port.js';
import { type LlmRetrySettings, validateLlmRetryConstraint, worstCaseRetryMs } from '../providers/llm/retry.js';

let compiled: { schemaPath: string; validate: ValidateFunction } | undefined;
let parsedSchema: { schemaPath: string; schema: object } | undefined;

/** The configuration's JSON Schema, read once per path (the environment's coercion reads it too). */
export function configSchema(schemaPath: string): object {
  if (parsedSchema?.schemaPath !== schemaPath) parsedSchema = { schemaPath, schema: JSON.parse(readFileSync(schemaPath, 'utf8')) as object };
  return parsedSchema.schema;
}

function validatorFor(schemaPath: string): ValidateFunction {
  if (compiled?.schemaPath !== schemaPath) {
    const schema = configSchema(schemaPath);
    // useDefaults fills the optional fields of operator-added map and list entries
    // (databases.<name>, providers.registry.registries[]); verbose keeps the offending data.
    const ajv = new Ajv({ allErrors: true, useDefaults: true, verbose: true });
    compiled = { schemaPath, validate: ajv.compile(schema) };
  }
  return compiled.validate;
}

/** Where each key's value came from, for messages: dotted path -> "environment variable X". */
export type Origins = ReadonlyMap<string, string>;

function originOf(segments: readonly string[], origins: Origins): string | undefined {
  for (let length = segments.length; length > 0; length--) {
    const origin = origins.get(segments.slice(0, length).join('.'));
    if (origin !== undefined) return origin;
  }
  return undefined;
}

function pointerSegments(pointer: string): string[] {
  if (pointer === '') return [];
  return pointer
    .slice(1)
    .split('/')
    .map((segment) => segment.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function typeName(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a mapping';
  if (typeof value === 'number' && !Number.isInteger(value)) return 'a fractional number';
  return `a ${typeof value}`;
}

function expectedTypeName(schemaType: string): string {
  if (schemaType === 'object') return 'a mapping';
  if (schemaType === 'array') return 'a list';
  if (schemaType === 'integer') return 'an integer';
  return `a ${schemaType}`;
}

const DURATION_DEFINITION = '/definitions/duration/';
const DURATION_MEANING = 'must be a duration such as 250ms, 15s, 10m, 24h or 1h30m';

/**
 * For a duration given as a bare number (`job_timeout: 0`, `"30"`), as the spec writes some
 * defaults: the unit it lacks. A number says nothing else here (it is no secret).
 */
function unitHint(data: unknown): string {
  const bare = typeof data === 'number' || (typeof data === 'string' && /^\s*\d+(\.\d+)?\s*$/.test(data));
  if (!bare) return '';
  const digits = String(data).trim();
  return `; a number needs a unit: write ${digits === '0' ? '0s' : `${digits}s or ${digits}m`}`;
}

const PATTERN_MEANINGS: ReadonlyArray<[definition: string, meaning: string]> = [
  [DURATION_DEFINITION, DURATION_MEANING],
  ['/definitions/httpUrlOrEmpty/', 'must be empty or an http(s) URL'],
  ['/definitions/databaseName/', 'must be a database name: lower-case letters, digits and _, starting with a letter'],
  ['/definitions/database/properties/url/', 'must be empty (embedded PGlite) or a postgres:// URL'],
  ['/definitions/registryEntry/properties/url/', 'must be an http(s) URL'],
  ['/doi_resolver/', 'must be an http(s) URL'],
];

/** One line per problem: `<dotted key>: <what is wrong>` (never echoing string values: they may be secrets). */
function describe(error: ErrorObject, origins: Origins): string | undefined {
  const segments = pointerSegments(error.instancePath);
  let keyPath = segments;
  let problem: string;
  const params = error.params as Record<string, unknown>;
  if (error.propertyName !== undefined) {
    // A failing propertyNames sub-schema: the key itself is bad, not its value.
    return `${formatPath([...segments, error.propertyName])}: is not a valid name: database names use lower-case letters, digits and _, starting with a letter`;
  }
  switch (error.keyword) {
    case 'propertyNames':
      return undefined; // summarised by the sub-schema error above
    case 'additionalProperties':
      keyPath = [...segments, String(params.additionalProperty)];
      problem = 'unknown key';
      break;
    case 'required':
      keyPath = [...segments, String(params.missingProperty)];
      problem = 'is required';
      break;
    case 'type':
      problem = error.schemaPath.includes(DURATION_DEFINITION)
        ? `${DURATION_MEANING}, got ${typeName(error.data)}${unitHint(error.data)}`
        : `must be ${expectedTypeName(String(params.type))}, got ${typeName(error.data)}`;
      break;
    case 'enum':
      problem = `must be one of ${(params.allowedValues as unknown[]).map((value) => String(value)).join(', ')}`;
      break;
    case 'pattern': {
      const meaning = PATTERN_MEANINGS.find(([definition]) => error.schemaPath.includes(definition));
      problem = meaning ? meaning[1] + (meaning[0] === DURATION_DEFINITION ? unitHint(error.data) : '') : `must match ${String(params.pattern)}`;
      break;
    }
    case 'minimum':
      problem = `must be at least ${String(params.limit)}`;
      break;
    case 'maximum':
      problem = `must be at most ${String(params.limit)}`;
      break;
    case 'exclusiveMinimum':
      problem = `must be more than ${String(params.limit)}`;
      break;
    case 'minLength':
      problem = 'must not be empty';
      break;
    case 'uniqueItems':
      problem = 'must not contain duplicates';
      break;
    default:
      problem = error.message ?? `fails ${error.keyword}`;
  }
  const origin = originOf(keyPath, origins);
  return `${formatPath(keyPath)}: ${problem}${origin ? ` (set by ${origin})` : ''}`;
}

/**
 * Ajv's errors with one problem per key where its value has the wrong type: `mechanism: 5` fails
 * the `type` and, ajv going on with every keyword, the `enum` too, and two lines for one key
 * (`must be a string, got a number`, `must be one of none, plain, …`) read as two problems. The
 * type error says it; the same path's other errors (`enum`, `const`, `pattern`, `format`, …),
 * which judge a value that is not even of its type, are left out. Other paths' errors stay.
 */
function oneProblemPerMistypedKey(errors: readonly ErrorObject[]): ErrorObject[] {
  const mistyped = new Set(errors.filter((error) => error.keyword === 'type').map((error) => error.instancePath));
  return errors.filter((error) => error.keyword === 'type' || !mistyped.has(error.instancePath));
}

/**
 * `bus.kafka.sasl.mechanism` written in any case (`SCRAM-SHA-512`, as Kafka's documentation and the
 * managed providers write it) made the spelling of KAFKA_SASL_MECHANISMS, in place. Done on the
 * merged tree, so a file and BUS_KAFKA_SASL_MECHANISM are taken alike and everything after the
 * load sees one spelling. A value that names no mechanism in any case is left as it is, for the
 * schema to refuse with the list of mechanisms.
 */
function normalizeKafkaSaslMechanism(tree: unknown): void {
  const sasl = (tree as { bus?: { kafka?: { sasl?: unknown } } } | null)?.bus?.kafka?.sasl;
  if (!isPlainObject(sasl) || typeof sasl.mechanism !== 'string') return;
  const lowerCase = sasl.mechanism.toLowerCase();
  const mechanism = KAFKA_SASL_MECHANISMS.find((known) => known === lowerCase);
  if (mechanism !== undefined) sasl.mechanism = mechanism;
}

/**
 * Validates the merged tree against the JSON Schema, then the rules a schema cannot state. `cwd`
 * is what a relative `tls.ca_file` is read from. Values taken in any case are lower-cased in
 * `tree` first (normalizeKafkaSaslMechanism), as the schema fills defaults into it.
 * Throws one ConfigError listing every problem; returns the tree typed as Config otherwise.
 */
export function validateConfig(tree: unknown, schemaPath: string, origins: Origins = new Map(), cwd: string = process.cwd()): Config {
  normalizeKafkaSaslMechanism(tree);
  const validate = validatorFor(schemaPath);
  const schemaProblems = validate(tree)
    ? []
    : [...new Set(oneProblemPerMistypedKey(validate.errors ?? []).map((error) => describe(error, origins)).filter((line) => line !== undefined))];
  // Listed with the schema's problems: a pattern cannot judge an address's octets or a prefix for its family.
  const valueProblems = [...cidrProblems(tree), ...urlProblems(tree), ...caFileProblems(tree, cwd)].map((problem) => withOrigin(problem, origins));
  if (schemaProblems.length > 0 || valueProblems.length > 0) throw new ConfigError([...schemaProblems, ...valueProblems]);
  const config = tree as Config;
  const problems = crossFieldProblems(config).map((problem) => withOrigin(problem, origins));
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

/**
 * `<dotted key>: <problem> (set by <origin>)`, the origin found for the key or a mapping above it.
 * A problem that names the key's variable as where to fix it (`… (BUS_KAFKA_SASL_USERNAME)`) names
 * it once when that variable set the key: the hint goes, `(set by environment variable …)` stays.
 */
function withOrigin([keyPath, problem]: [string, string], origins: Origins): string {
  const origin = originOf(keyPath.replace(/\[(\d+)\]/g, '.$1').split('.'), origins);
  if (origin === undefined) return `${keyPath}: ${problem}`;
  const variable = /^environment variable (\S+)$/.exec(origin)?.[1];
  const said = variable === undefined ? problem : problem.replace(` (${variable})`, '');
  return `${keyPath}: ${said} (set by ${origin})`;
}

/** Each `network.allow_cidrs` entry that is no address or range (parseCidr); entries of the wrong type are the schema's. */
function cidrProblems(tree: unknown): Array<[string, string]> {
  const network = (tree as { network?: { allow_cidrs?: unknown } } | null)?.network;
  const entries = network?.allow_cidrs;
  if (!Array.isArray(entries)) return [];
  const problems: Array<[string, string]> = [];
  entries.forEach((entry: unknown, index) => {
    if (typeof entry !== 'string' || entry === '') return;
    const cidr = parseCidr(entry);
    if ('problem' in cidr) problems.push([`network.allow_cidrs[${index}]`, cidr.problem]);
  });
  return problems;
}

/**
 * The keys whose value is a URL, each with the schemes its schema pattern takes (`*` stands for
 * every key of a map, `[]` for every entry of a list).
 */
const URL_KEYS: ReadonlyArray<[path: string, scheme: RegExp]> = [
  ['server.public_url', /^https?:\/\//],
  ['oauth.issuer', /^https?:\/\//],
  ['mcp.allowed_origins[]', /^https?:\/\//],
  ['search.opensearch.url', /^https?:\/\//],
  ['databases.*.url', /^postgres(ql)?:\/\//],
  ['providers.resolution.doi_resolver', /^https?:\/\//],
  ['providers.llm.base_url', /^https?:\/\//],
  ['providers.embeddings.base_url', /^https?:\/\//],
  ['providers.registry.url', /^https?:\/\//],
  ['providers.registry.registries[].url', /^https?:\/\//],
];

/**
 * What is wrong with a postgres:// URL that names no database (`postgres://u:pw@db:5432`, or only
 * `/` as its path): the `pg` driver then connects to a database named after the user (libpq's
 * default) or PGDATABASE, and writes there with no word said. The driver reads the name from the
 * path alone (its `?database=` is overwritten by the path), so that is where it must go.
 */
export function postgresDatabaseProblem(url: URL): string | undefined {
  return url.pathname.replace(/^\//, '') === ''
    ? 'names no database: put its name in the path, postgres://user:password@host:5432/<database>'
    : undefined;
}

/** The URLs the service appends its routes to. */
const BASE_URL_KEYS: ReadonlySet<string> = new Set(['server.public_url', 'oauth.issuer']);

/** The string values at a URL_KEYS path, each with its dotted key (`databases.default.url`, `mcp.allowed_origins[0]`). */
function valuesAt(node: unknown, segments: readonly string[], key: string): Array<[string, string]> {
  if (segments.length === 0) return typeof node === 'string' ? [[key, node]] : [];
  const [segment, ...rest] = segments;
  const list = segment.endsWith('[]');
  const name = list ? segment.slice(0, -2) : segment;
  if (!isPlainObject(node)) return [];
  const names = name === '*' ? Object.keys(node) : [name];
  return names.flatMap((child) => {
    const childKey = key === '' ? child : `${key}.${child}`;
    const value = node[child];
    if (!list) return valuesAt(value, rest, childKey);
    return Array.isArray(value) ? value.flatMap((entry, index) => valuesAt(entry, rest, `${childKey}[${index}]`)) : [];
  });
}

/**
 * Each URL that its key's pattern lets through but that does not parse (`http://[::1`, a port past
 * 65535, a password holding an unencoded `#`), or a base URL with more than a path. Such a value
 * passed, and the start failed later with a bare "Invalid URL" naming no key (a database's), or
 * the service announced and linked it as it was (a public URL). A value of the wrong shape is the
 * schema's to report; no value is echoed.
 */
function urlProblems(tree: unknown): Array<[string, string]> {
  const problems: Array<[string, string]> = [];
  for (const [pattern, scheme] of URL_KEYS) {
    for (const [key, value] of valuesAt(tree, pattern.split('.'), '')) {
      if (!scheme.test(value) || /\s/.test(value)) continue;
      const url = URL.parse(value);
      if (url === null) {
        problems.push([key, 'is not a URL that can be parsed: check the host, the port (1 to 65535), and that a password\'s @ : / ? # % are percent-encoded']);
      } else if (BASE_URL_KEYS.has(key) && (url.search !== '' || url.hash !== '' || url.username !== '' || url.password !== '')) {
        // Routes are appended to these (`<public_url>/api/v1/…`, the OAuth endpoints after the
        // issuer, which RFC 8414 gives no query or fragment): `https://h?x=1/api/v1/…` was announced.
        problems.push([key, 'must be a base URL without a query (?), a fragment (#) or a user name and password: the service appends its routes to it']);
      } else if (pattern === 'databases.*.url') {
        const problem = postgresDatabaseProblem(url);
        if (problem !== undefined) problems.push([key, problem]);
      }
    }
  }
  return problems;
}

/** providers.llm_retry as the retry policy's settings (milliseconds). */
export function llmRetrySettingsOf(retry: RetryConfig & { per_call_timeout: string }): LlmRetrySettings {
  return {
    maxAttempts: retry.max_attempts,
    baseDelayMs: parseDuration(retry.base_delay),
    maxDelayMs: parseDuration(retry.max_delay),
    perCallTimeoutMs: parseDuration(retry.per_call_timeout),
  };
}

/**
 * The longest a language-model call can take with all its retries: every attempt runs to
 * per_call_timeout, with max_delay between attempts (a 429's Retry-After may ask for that much
 * instead of the doubling backoff); see worstCaseRetryMs.
 */
export function worstCaseLlmCallMs(retry: RetryConfig & { per_call_timeout: string }): number {
  return worstCaseRetryMs(llmRetrySettingsOf(retry));
}

/** The longest `providers.resolution.extraction_timeout`: real documents take seconds, and a timer past 2^31 ms would fire at once. */
const MAX_EXTRACTION_TIMEOUT_MS = 3_600_000;

/**
 * `providers.resolution.extraction_timeout`: more than 0s (a zero deadline would refuse every
 * document) and at most MAX_EXTRACTION_TIMEOUT_MS.
 */
function extractionTimeoutProblems(timeout: string): Array<[string, string]> {
  const key = 'providers.resolution.extraction_timeout';
  const timeoutMs = parseDuration(timeout);
  if (timeoutMs <= 0) return [[key, 'must be longer than 0s']];
  if (timeoutMs > MAX_EXTRACTION_TIMEOUT_MS) return [[key, `must be at most 1h (got ${timeout}); real documents take seconds`]];
  return [];
}

/**
 * `bus.kafka.sasl` against itself and `bus.kafka.tls`. SASL without TLS is refused, whatever the
 * mechanism (docs/configuration.md, Decisions): PLAIN would send the password in clear, and SCRAM,
 * which does not, would still send every event and the user name unencrypted.
 */
function kafkaSaslProblems(kafka: Config['bus']['kafka']): Array<[string, string]> {
  const { mechanism, username, password } = kafka.sasl;
  const problems: Array<[string, string]> = [];
  if (mechanism === 'none') {
    // Credentials with no mechanism: most likely BUS_KAFKA_SASL_MECHANISM forgotten, and the service would connect unauthenticated.
    if (username !== '' || password !== '') {
      problems.push(['bus.kafka.sasl.mechanism', `is none, but sasl.username or sasl.password is set: choose ${KAFKA_SASL_LOGIN_CHOICES} (BUS_KAFKA_SASL_MECHANISM)`]);
    }
    return problems;
  }
  if (username.trim() === '') problems.push(['bus.kafka.sasl.username', `is required when bus.kafka.sasl.mechanism is ${mechanism} (BUS_KAFKA_SASL_USERNAME)`]);
  if (password.trim() === '') problems.push(['bus.kafka.sasl.password', `is required when bus.kafka.sasl.mechanism is ${mechanism} (BUS_KAFKA_SASL_PASSWORD)`]);
  if (!kafka.tls) {
    const exposed = mechanism === 'plain' ? 'the password in clear' : 'the user name and every event unencrypted';
    problems.push(['bus.kafka.sasl.mechanism', `${mechanism} needs bus.kafka.tls: true (BUS_KAFKA_TLS): SASL without TLS would send ${exposed}`]);
  }
  return problems;
}

/** Rules between keys. Each entry: [dotted key, what is wrong]. The schema has already passed. */
function crossFieldProblems(config: Config): Array<[string, string]> {
  const problems: Array<[string, string]> = [];
  const ms = parseDuration;

  const { chunk_size, chunk_overlap } = config.providers.decomposition.chunking;
  if (chunk_overlap >= chunk_size) {
    problems.push([
      'providers.decomposition.chunking.chunk_overlap',
      `must be smaller than chunk_size (${chunk_overlap} >= ${chunk_size})`,
    ]);
  }

  const concepts = config.concepts;
  if (concepts.min_shared_fact_count > concepts.stable_shared_fact_count) {
    problems.push([
      'concepts.min_shared_fact_count',
      `must not exceed stable_shared_fact_count (${concepts.min_shared_fact_count} > ${concepts.stable_shared_fact_count})`,
    ]);
  }

  const task = config.task;
  for (const key of ['heartbeat_interval', 'poll_interval'] as const) {
    if (ms(task[key]) <= 0) problems.push([`task.${key}`, 'must be longer than 0s']);
  }
  // A zero deadline aborts every fetch as it starts: every URL source would fail as timed out.
  if (ms(config.providers.resolution.fetch.timeout) <= 0) problems.push(['providers.resolution.fetch.timeout', 'must be longer than 0s']);
  // Periodic jobs' intervals: the scheduler (createScheduler) refuses a shorter one when it starts.
  const periodic: Array<[string, string]> = [
    ['task.refresh_concept_relations_interval', task.refresh_concept_relations_interval],
    ['providers.dedup.catchup_interval', config.providers.dedup.catchup_interval],
  ];
  for (const [key, value] of periodic) {
    if (ms(value) < MIN_PERIODIC_INTERVAL_MS) problems.push([key, `must be at least 1s (got ${value})`]);
  }
  if (ms(task.heartbeat_timeout) <= ms(task.heartbeat_interval)) {
    problems.push([
      'task.heartbeat_timeout',
      `must be longer than heartbeat_interval (${task.heartbeat_timeout} <= ${task.heartbeat_interval}), or every running job looks orphaned`,
    ]);
  }

  const retries: Array<[string, RetryConfig]> = [
    ['task.retry', task.retry],
    ['providers.resolution.retry', config.providers.resolution.retry],
    ['providers.llm_retry', config.providers.llm_retry],
  ];
  for (const [prefix, retry] of retries) {
    if (ms(retry.base_delay) > ms(retry.max_delay)) {
      problems.push([`${prefix}.base_delay`, `must not exceed max_delay (${retry.base_delay} > ${retry.max_delay})`]);
    }
  }

  // The durations the service waits out with a timer (the TTLs are compared with clocks instead).
  const timers: Array<[string, string]> = [
    ['task.job_timeout', task.job_timeout],
    ['task.heartbeat_interval', task.heartbeat_interval],
    ['task.heartbeat_timeout', task.heartbeat_timeout],
    ['task.poll_interval', task.poll_interval],
    ['providers.resolution.fetch.timeout', config.providers.resolution.fetch.timeout],
    ['providers.resolution.retry.max_delay', config.providers.resolution.retry.max_delay],
    ['providers.llm_retry.per_call_timeout', config.providers.llm_retry.per_call_timeout],
    ['providers.llm_retry.max_delay', config.providers.llm_retry.max_delay],
  ];
  for (const [key, value] of timers) {
    if (ms(value) > MAX_TIMER_MS) {
      const unlimited = key === 'task.job_timeout' ? '; 0s is unlimited' : '';
      problems.push([key, `must be at most 24d (got ${value}): a longer timer would fire at once${unlimited}`]);
    }
  }

  // The spec's Constraint line under Constants, with task.job_timeout as the worker
  // language-model timeout (0s = unlimited, nothing to check): see validateLlmRetryConstraint.
  problems.push(...validateLlmRetryConstraint(llmRetrySettingsOf(config.providers.llm_retry), ms(task.job_timeout)));

  const ttls: Array<[string, string]> = [
    ['auth.token_ttl', config.auth.token_ttl],
    ['auth.refresh_token_ttl', config.auth.refresh_token_ttl],
    ['oauth.access_token_ttl', config.oauth.access_token_ttl],
    ['oauth.refresh_token_ttl', config.oauth.refresh_token_ttl],
    ['oauth.auth_code_ttl', config.oauth.auth_code_ttl],
  ];
  // A shorter one passed here and stopped `serve` later, after migrating, as "sessionTtlMs must be at least 1000 ms".
  for (const [key, ttl] of ttls) if (ms(ttl) < MIN_TOKEN_TTL_MS) problems.push([key, `must be at least 1s (got ${ttl})`]);

  const apiKeys = config.api_keys;
  const maxTtl = ms(apiKeys.max_ttl);
  if (maxTtl > 0 && apiKeys.default_ttl * 86_400_000 > maxTtl) {
    problems.push(['api_keys.default_ttl', `${apiKeys.default_ttl} days exceeds max_ttl ${apiKeys.max_ttl}`]);
  }

  const databaseNames = new Set(Object.keys(config.databases));
  const known = `known: ${[...databaseNames].join(', ')}`;
  if (config.eventstore.backend === 'postgres' && !databaseNames.has(config.eventstore.database)) {
    problems.push(['eventstore.database', `names no entry of databases (${known})`]);
  }
  if (config.eventstore.backend === 'eventstoredb' && config.eventstore.eventstoredb.connection_string.trim() === '') {
    problems.push(['eventstore.eventstoredb.connection_string', 'is required when eventstore.backend is eventstoredb']);
  }
  if (config.bus.backend === 'kafka' && config.bus.kafka.brokers.length === 0) {
    problems.push(['bus.kafka.brokers', 'needs at least one host:port when bus.backend is kafka']);
  }
  const sessionTimeoutMs = parseDuration(config.bus.kafka.session_timeout);
  if (sessionTimeoutMs < 6_000 || sessionTimeoutMs > 300_000) {
    problems.push(['bus.kafka.session_timeout', 'must be between 6s and 5m (the broker\'s group session bounds)']);
  }
  problems.push(...kafkaSaslProblems(config.bus.kafka));
  if (config.search.backend === 'opensearch' && config.search.opensearch.url === '') {
    problems.push(['search.opensearch.url', 'is required when search.backend is opensearch']);
  }
  const { llm, embeddings } = config.providers;
  if (llm.provider === 'openai' && llm.base_url === '') {
    problems.push(['providers.llm.base_url', 'is required when providers.llm.provider is openai (e.g. https://api.openai.com/v1)']);
  }
  if (embeddings.provider === 'openai' && embeddings.base_url === '') {
    problems.push(['providers.embeddings.base_url', 'is required when providers.embeddings.provider is openai (e.g. https://api.openai.com/v1)']);
  }
  if (embeddings.provider === 'local' && embeddings.dimensions !== LOCAL_EMBEDDER_DIMENSIONS) {
    problems.push([
      'providers.embeddings.dimensions',
      `must be ${LOCAL_EMBEDDER_DIMENSIONS} when providers.embeddings.provider is local (the built-in word vectors' length), got ${embeddings.dimensions}`,
    ]);
  } else if (embeddings.dimensions > MAX_VECTOR_DIMENSIONS) {
    // The search index is made with this length whatever the provider (none included): past the
    // limit the start failed later with a RangeError (exit 1) that named no key.
    problems.push([
      'providers.embeddings.dimensions',
      `must be at most ${MAX_VECTOR_DIMENSIONS} (the longest vector pgvector's vector type and OpenSearch's lucene k-NN engine store), got ${embeddings.dimensions}`,
    ]);
  }
  problems.push(...extractionTimeoutProblems(config.providers.resolution.extraction_timeout));

  if (!databaseNames.has(config.readmodels.database)) {
    problems.push(['readmodels.database', `names no entry of databases (${known})`]);
  }
  if (!databaseNames.has(config.isolation.default_database)) {
    problems.push(['isolation.default_database', `names no entry of databases (${known})`]);
  }
  config.isolation.allowed_databases.forEach((name, index) => {
    if (!databaseNames.has(name)) {
      problems.push([`isolation.allowed_databases[${index}]`, `"${name}" names no entry of databases (${known})`]);
    }
  });

  const seenRegistryIds = new Set<string>();
  config.providers.registry.registries.forEach((entry, index) => {
    if (seenRegistryIds.has(entry.id)) {
      problems.push([`providers.registry.registries[${index}].id`, `duplicate registry id "${entry.id}"`]);
    }
    seenRegistryIds.add(entry.id);
  });

  return problems;
}
