import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { parse as parseYaml } from 'yaml';
import {
  bootstrapAdminFromEnv,
  buildConfig,
  checkSecrets,
  ConfigError,
  databaseOptions,
  dataPaths,
  defaultConfig,
  JWT_SECRET_PLACEHOLDER,
  loadConfig,
  missingBootstrapAdminVariables,
  oauthIssuer,
  packagedDefaultsPath,
  publicBaseUrl,
  QUEUED_JOB_KINDS,
  registryEndpoints,
} from '../../src/config/index.js';
import { configErrorOf, load } from './helpers.js';


function valueAt(config: unknown, dotted: string): unknown {
  return dotted.split('.').reduce<unknown>((node, key) => (node as Record<string, unknown>)[key], config);
}


const STRONG_SECRET = 'x'.repeat(48);

t.test('defaults hold every constant of the spec with its value', async (t) => {
  const config = load({ cwd: t.testdir({}) });
  const spec: Array<[string, unknown]> = [
    ['server.port', 8080],
    ['server.read_timeout', '15s'],
    ['server.write_timeout', '15s'],
    ['databases.default.max_conns', 200],
    ['databases.default.ssl_mode', 'disable'],
    ['auth.token_ttl', '24h'],
    ['auth.jwt_secret', JWT_SECRET_PLACEHOLDER],
    ['oauth.issuer', ''],
    ['oauth.access_token_ttl', '15m'],
    ['oauth.refresh_token_ttl', '720h'],
    ['oauth.auth_code_ttl', '10m'],
    ['api_keys.max_per_user', 20],
    ['api_keys.default_ttl', 0],
    ['api_keys.max_ttl', '2160h'],
    ['search.hybrid.enabled', true],
    ['search.hybrid.rrf_k', 60],
    ['search.hybrid.min_score', 0],
    ['search.hybrid.over_fetch_multiplier', 3],
    ['concepts.min_shared_fact_count', 3],
    ['concepts.stable_shared_fact_count', 6],
    ['concepts.min_concept_fact_count', 5],
    ['task.job_timeout', '4h'],
    ['task.heartbeat_interval', '1m'],
    ['task.heartbeat_timeout', '10m'],
    ['task.rescue_on_startup', true],
    ['task.refresh_concept_relations_interval', '10m'],
    ['task.queues.retrieve_source', 20],
    ['task.queues.source_decomposition', 100],
    ['task.queues.embed_facts', 50],
    ['task.queues.deduplicate_facts', 50],
    ['task.queues.extract_concepts', 100],
    ['task.queues.refine_concepts', 100],
    ['task.queues.embed_concepts', 50],
    ['task.queues.cleanup_facts', 50],
    ['task.queues.summarize_concepts', 100],
    ['task.queues.synthesize_concept', 100],
    ['task.queues.refresh_concept_relations', 50],
    ['task.queues.annotate_report', 50],
    ['task.queues.migrate_context', 50],
    ['task.queues.contribute_source', 50],
    ['task.queues.pull_all_from_registry', 50],
    ['providers.resolution.fetch.timeout', '60s'],
    ['providers.resolution.retry.max_attempts', 3],
    ['providers.resolution.retry.base_delay', '2s'],
    ['providers.resolution.retry.max_delay', '15s'],
    ['providers.resolution.retry.retry_403_max_attempts', 2],
    ['providers.resolution.auto_skip.enabled', true],
    ['providers.resolution.auto_skip.min_sample', 100],
    ['providers.resolution.auto_skip.failure_threshold', 0.85],
    ['providers.resolution.auto_skip.cooldown', '24h'],
    ['providers.decomposition.chunking.chunk_size', 2000],
    ['providers.decomposition.chunking.chunk_overlap', 200],
    ['providers.decomposition.image_extraction.max_image_bytes', 5242880],
    ['providers.decomposition.image_extraction.max_images_per_source', 20],
    ['providers.decomposition.concurrency.fact', 4],
    ['providers.decomposition.concurrency.image', 4],
    ['providers.decomposition.concurrency.concept', 4],
    ['providers.decomposition.concept.fact_batch_size', 10],
    ['providers.dedup.threshold', 0.94],
    ['providers.dedup.catchup_max_age', '168h'],
    ['providers.reports.similarity_threshold', 0.7],
    ['providers.reports.max_facts_per_sentence', 5],
    ['providers.reports.min_sentence_runes', 40],
    ['providers.llm_retry.max_attempts', 4],
    ['providers.llm_retry.base_delay', '2s'],
    ['providers.llm_retry.max_delay', '30s'],
    ['providers.llm_retry.per_call_timeout', '5m'],
    ['providers.ai.embed_batch_size', 32],
    ['providers.ai.embed_max_chars', 2048],
    ['providers.ai.rate_limit_wait_timeout', '1h'],
    ['providers.summarization.enabled', true],
    ['providers.summarization.batch_size', 20],
    ['providers.summarization.max_concepts_per_run', 40],
    ['providers.summarization.max_tokens', 600],
    ['providers.refinement.enabled', false],
    ['providers.refinement.max_candidates_per_run', 40],
    ['providers.refinement.prune_threshold', 5],
    ['providers.refinement.max_tokens', 400],
    ['providers.refinement.max_concurrency', 5],
    ['providers.synthesis.enabled', true],
    ['providers.synthesis.max_tokens', 10000],
    ['providers.synthesis.thinking_level', 'low'],
    ['providers.synthesis.max_images', 10],
    ['providers.synthesis.max_image_candidates', 50],
    ['providers.synthesis.max_related_concepts', 10],
    ['providers.synthesis.max_related_syntheses', 3],
    ['providers.registry.url', ''],
    ['providers.registry.auth_mode', 'none'],
    ['providers.registry.allowed_models', ['*']],
    ['providers.registry.registries', []],
    ['providers.registry.per_page', 20],
    ['providers.registry.timeout', '15s'],
    ['audit.retention_days', 30],
    ['isolation.default_database', 'default'],
    ['isolation.allowed_databases', []],
    ['bootstrap.auto_promote_first_user', true],
    ['bootstrap.default_admin', false],
    ['default_repository_preset', 'general'],
  ];
  for (const [key, expected] of spec) t.same(valueAt(config, key), expected, key);

  const service: Array<[string, unknown]> = [
    ['profile', 'embedded'],
    ['server.host', '0.0.0.0'],
    ['server.public_url', ''],
    ['server.body_limit', 10485760],
    ['storage.data_dir', './data'],
    ['databases.default.url', ''],
    ['eventstore.backend', 'postgres'],
    ['eventstore.database', 'default'],
    ['eventstore.eventstoredb.connection_string', ''],
    ['readmodels.database', 'default'],
    ['auth.refresh_token_ttl', '720h'],
    ['auth.password_min_length', 8],
    ['auth.password_hash_cost', 15],
    ['task.retry.max_attempts', 5],
    ['task.retry.base_delay', '2s'],
    ['task.retry.max_delay', '5m'],
    ['task.poll_interval', '250ms'],
    ['providers.resolution.fetch.max_body_bytes', 52428800],
    ['providers.resolution.fetch.user_agent', 'factlog/0.1 (+https://factlog.invalid)'],
    ['providers.resolution.extraction_timeout', '2m'],
    ['providers.resolution.doi_resolver', 'https://doi.org/'],
    ['providers.llm.provider', 'local'],
    ['providers.llm.model', 'local/rule-based-v1'],
    ['providers.llm.base_url', ''],
    ['providers.llm.api_key', ''],
    ['providers.llm.vision', false],
    ['providers.embeddings.provider', 'local'],
    ['providers.embeddings.model', 'local/wink-sg-100d-v1'],
    ['providers.embeddings.base_url', ''],
    ['providers.embeddings.api_key', ''],
    ['providers.embeddings.dimensions', 100],
    ['providers.dedup.catchup_interval', '10m'],
    ['logging.level', 'info'],
    ['metrics.enabled', true],
  ];
  for (const [key, expected] of service) t.same(valueAt(config, key), expected, key);

  t.same(Object.keys(config.task.queues).sort(), [...QUEUED_JOB_KINDS].sort(), 'task.queues has exactly the job kinds of QUEUED_JOB_KINDS');
  t.same(defaultConfig(), config, 'defaultConfig() equals a load with no files and no environment');
});

t.test('the packaged defaults file is the one beside the sources', async (t) => {
  t.equal(packagedDefaultsPath(), path.resolve(import.meta.dirname, '../../configs/config.default.yaml'));
});

t.test('layers: config.local.yaml over defaults, environment over both', async (t) => {
  const cwd = t.testdir({
    configs: {
      'config.local.yaml': 'server:\n  port: 9000\n  host: 127.0.0.1\nsearch:\n  hybrid:\n    rrf_k: 10\n',
    },
  });
  const fromFile = load({ cwd });
  t.equal(fromFile.server.port, 9000, 'file beats defaults');
  t.equal(fromFile.server.host, '127.0.0.1');
  t.equal(fromFile.server.read_timeout, '15s', 'deep merge keeps sibling defaults');
  t.equal(fromFile.search.hybrid.enabled, true, 'deep merge keeps nested sibling defaults');
  t.equal(fromFile.search.hybrid.rrf_k, 10);

  const fromEnv = load({ cwd, env: { SERVER_PORT: '9100' } });
  t.equal(fromEnv.server.port, 9100, 'environment beats the file');
  t.equal(fromEnv.server.host, '127.0.0.1', 'keys the environment does not set keep the file value');
});

t.test('lists replace rather than concatenate; empty YAML entries keep the lower layer', async (t) => {
  const cwd = t.testdir({
    configs: {
      'config.local.yaml': 'providers:\n  registry:\n    allowed_models: [org/a, org/b]\nserver:\noauth: ~\n',
    },
  });
  const config = load({ cwd });
  t.same(config.providers.registry.allowed_models, ['org/a', 'org/b']);
  t.equal(config.server.port, 8080);
  t.equal(config.oauth.access_token_ttl, '15m');
});

t.test('--config file replaces configs/config.local.yaml', async (t) => {
  const cwd = t.testdir({
    configs: { 'config.local.yaml': 'server:\n  port: 9000\n' },
    'custom.yaml': 'server:\n  host: 10.0.0.1\n',
  });
  const config = load({ cwd, configPath: 'custom.yaml' });
  t.equal(config.server.host, '10.0.0.1', 'a relative --config resolves against cwd');
  t.equal(config.server.port, 8080, 'config.local.yaml is not read when --config is given');
  t.equal(load({ cwd, configPath: path.join(cwd, 'custom.yaml') }).server.host, '10.0.0.1', 'absolute path');
  t.equal(load({ cwd, configPath: 'custom.yaml', env: { SERVER_HOST: 'h' } }).server.host, 'h', 'env still wins');
});

t.test('--config directory: config.yaml, then config.local.yaml over it', async (t) => {
  const cwd = t.testdir({
    both: { 'config.yaml': 'server:\n  port: 9001\n  host: a\n', 'config.local.yaml': 'server:\n  port: 9002\n' },
    'only-base': { 'config.yaml': 'server:\n  port: 9003\n' },
    'only-local': { 'config.local.yaml': 'server:\n  port: 9004\n' },
    empty: {},
  });
  const both = load({ cwd, configPath: 'both' });
  t.equal(both.server.port, 9002);
  t.equal(both.server.host, 'a');
  t.equal(load({ cwd, configPath: 'only-base' }).server.port, 9003);
  t.equal(load({ cwd, configPath: 'only-local' }).server.port, 9004);
  t.match(configErrorOf(() => load({ cwd, configPath: 'empty' })), /neither config\.yaml nor config\.local\.yaml/);
  t.match(configErrorOf(() => load({ cwd, configPath: 'missing.yaml' })), /missing\.yaml: no such file or directory/);
  // `--config "$UNSET"` ran on the defaults and configs/config.local.yaml, as if no --config had been given.
  t.equal(configErrorOf(() => load({ cwd, configPath: '' })), 'invalid configuration: --config is empty: give a YAML file or a directory holding config.yaml / config.local.yaml');
});

t.test('environment names: dotted path upper-cased, underscores inside key names resolved by the known keys', async (t) => {
  const config = load({
    env: {
      SERVER_PORT: '8181',
      SEARCH_HYBRID_ENABLED: 'false',
      PROVIDERS_RESOLUTION_FETCH_TIMEOUT: '90s',
      TASK_QUEUES_RETRIEVE_SOURCE: '7',
      DATABASES_DEFAULT_URL: 'postgres://db.example/factlog',
      DATABASES_DEFAULT_MAX_CONNS: '12',
      DATABASES_DEFAULT_SSL_MODE: 'verify-full',
      PROVIDERS_RESOLUTION_RETRY_RETRY_403_MAX_ATTEMPTS: '0',
      PROVIDERS_DEDUP_THRESHOLD: '0.9',
      API_KEYS_MAX_PER_USER: '5',
      DEFAULT_REPOSITORY_PRESET: 'scientific',
      PROFILE: 'dev',
      ISOLATION_ALLOWED_DATABASES: 'default',
      PROVIDERS_REGISTRY_ALLOWED_MODELS: 'org/a, org/b',
      UNRELATED_VARIABLE: 'ignored',
    },
  });
  t.equal(config.server.port, 8181);
  t.equal(config.search.hybrid.enabled, false);
  t.equal(config.providers.resolution.fetch.timeout, '90s');
  t.equal(config.task.queues.retrieve_source, 7);
  t.same(config.databases.default, { url: 'postgres://db.example/factlog', max_conns: 12, ssl_mode: 'verify-full' });
  t.equal(config.providers.resolution.retry.retry_403_max_attempts, 0);
  t.equal(config.providers.dedup.threshold, 0.9);
  t.equal(config.api_keys.max_per_user, 5);
  t.equal(config.default_repository_preset, 'scientific');
  t.equal(config.profile, 'dev');
  t.same(config.isolation.allowed_databases, ['default']);
  t.same(config.providers.registry.allowed_models, ['org/a', 'org/b'], 'comma list');
  t.same(load({ env: { PROVIDERS_REGISTRY_ALLOWED_MODELS: '["x/y"]' } }).providers.registry.allowed_models, ['x/y'], 'JSON list');
  t.same(load({ env: { PROVIDERS_REGISTRY_ALLOWED_MODELS: '' } }).providers.registry.allowed_models, [], 'empty list');
  t.match(
    configErrorOf(() => load({ env: { PROVIDERS_LLM_MODEL: '' } })),
    /providers\.llm\.model: must not be empty \(set by environment variable PROVIDERS_LLM_MODEL\)/,
    'an empty string is a value, and the schema still applies to it',
  );
});

t.test('environment can add map entries: DATABASES_<NAME>_<FIELD>', async (t) => {
  const config = load({
    env: { DATABASES_ANALYTICS_URL: 'postgres://h/a', DATABASES_READ_REPLICA_MAX_CONNS: '3', DATABASES_READ_REPLICA_URL: 'postgres://h/r' },
  });
  t.same(config.databases.analytics, { url: 'postgres://h/a', max_conns: 200, ssl_mode: 'disable' }, 'unset fields take the entry defaults');
  t.same(config.databases.read_replica, { url: 'postgres://h/r', max_conns: 3, ssl_mode: 'disable' }, 'underscore in the entry name');

  const cwd = t.testdir({ configs: { 'config.local.yaml': 'databases:\n  events:\n    url: postgres://h/e\neventstore:\n  database: events\n' } });
  const fromFile = load({ cwd, env: { DATABASES_EVENTS_SSL_MODE: 'require' } });
  t.same(fromFile.databases.events, { url: 'postgres://h/e', max_conns: 200, ssl_mode: 'require' });
  t.equal(fromFile.databases.default.url, '', 'the default entry stays');
  t.equal(fromFile.eventstore.database, 'events');
});

t.test("the spec's environment names", async (t) => {
  const config = load({
    env: {
      AUTH_JWTSECRET: STRONG_SECRET,
      SVC_OAUTH_ISSUER: 'https://kg.example.com',
      SVC_BOOTSTRAP_AUTO_PROMOTE: 'false',
      SVC_AUDIT_RETENTION_DAYS: '90',
      REGISTRY_URL: 'https://registry.example.com',
      REGISTRY_AUTH_MODE: 'bearer',
      REGISTRY_API_KEY: 'write-key',
      REGISTRY_READ_API_KEY: 'read-key',
      STORAGE_DATA_DIR: '/var/lib/factlog',
    },
  });
  t.equal(config.auth.jwt_secret, STRONG_SECRET);
  t.equal(config.oauth.issuer, 'https://kg.example.com');
  t.equal(config.bootstrap.auto_promote_first_user, false);
  t.equal(config.audit.retention_days, 90);
  t.equal(config.providers.registry.url, 'https://registry.example.com');
  t.equal(config.providers.registry.auth_mode, 'bearer');
  t.equal(config.providers.registry.api_key, 'write-key');
  t.equal(config.providers.registry.read_api_key, 'read-key');
  t.equal(config.storage.data_dir, '/var/lib/factlog');

  const both = load({ env: { AUTH_JWT_SECRET: 'generic-name-'.repeat(3), AUTH_JWTSECRET: STRONG_SECRET } });
  t.equal(both.auth.jwt_secret, STRONG_SECRET, "the spec's name wins over the generic name");
  t.equal(load({ env: { AUTH_JWT_SECRET: STRONG_SECRET } }).auth.jwt_secret, STRONG_SECRET, 'the generic name works too');
});

t.test('SVC_BOOTSTRAP_AUTO_PROMOTE accepts true, false, 1, 0 in any case', async (t) => {
  const cases: Array<[string, boolean]> = [
    ['true', true], ['TRUE', true], ['True', true], ['1', true],
    ['false', false], ['FALSE', false], ['False', false], ['0', false], [' false ', false],
  ];
  for (const [raw, expected] of cases) {
    t.equal(load({ env: { SVC_BOOTSTRAP_AUTO_PROMOTE: raw } }).bootstrap.auto_promote_first_user, expected, JSON.stringify(raw));
  }
  for (const raw of ['yes', 'no', '', '2', 'on']) {
    t.match(
      configErrorOf(() => load({ env: { SVC_BOOTSTRAP_AUTO_PROMOTE: raw } })),
      /bootstrap\.auto_promote_first_user: environment variable SVC_BOOTSTRAP_AUTO_PROMOTE=.* is not a boolean/,
      `rejects ${JSON.stringify(raw)}`,
    );
  }
});

t.test('bad environment values name the key and the variable', async (t) => {
  t.match(configErrorOf(() => load({ env: { SERVER_PORT: 'eighty' } })), /server\.port: environment variable SERVER_PORT="eighty" is not a number/);
  t.match(configErrorOf(() => load({ env: { SERVER_PORT: '' } })), /server\.port: environment variable SERVER_PORT="" is not a number/);
  t.match(configErrorOf(() => load({ env: { SEARCH_HYBRID_ENABLED: 'yes' } })), /search\.hybrid\.enabled: environment variable SEARCH_HYBRID_ENABLED/);
  t.match(
    configErrorOf(() => load({ env: { ISOLATION_ALLOWED_DATABASES: '[not json' } })),
    /isolation\.allowed_databases: environment variable ISOLATION_ALLOWED_DATABASES is not a valid JSON array/,
  );
  t.match(configErrorOf(() => load({ env: { SERVER_PORT: '70000' } })), /server\.port: must be at most 65535 \(set by environment variable SERVER_PORT\)/);
  t.match(configErrorOf(() => load({ env: { SERVER_PORT: '80.5' } })), /server\.port: must be an integer, got a fractional number/);
  t.match(configErrorOf(() => load({ env: { SERVER_READ_TIMEOUT: '15' } })), /server\.read_timeout: must be a duration .*SERVER_READ_TIMEOUT/);
  t.match(
    configErrorOf(() => load({ env: { DATABASES_DEFAULT_SSL_MODE: 'prefer' } })),
    /databases\.default\.ssl_mode: must be one of disable, require, verify-ca, verify-full \(set by environment variable DATABASES_DEFAULT_SSL_MODE\)/,
  );
  t.match(configErrorOf(() => load({ env: { REGISTRY_AUTH_MODE: 'basic' } })), /providers\.registry\.auth_mode: must be one of none, bearer, hmac \(set by environment variable REGISTRY_AUTH_MODE\)/);

  const message = configErrorOf(() => load({ env: { SERVER_PORT: 'x', TASK_QUEUES_EMBED_FACTS: 'y' } }));
  t.match(message, /SERVER_PORT/);
  t.match(message, /TASK_QUEUES_EMBED_FACTS/, 'every bad variable is reported at once');

  // A variable that is no number hid the problems validation finds, in files and variables alike, until it was fixed.
  const cwd = t.testdir({ 'config.yaml': 'server:\n  port: 0\n' });
  const all = configErrorOf(() => load({ cwd, configPath: 'config.yaml', env: { AUTH_PASSWORD_MIN_LENGTH: 'x', SVC_AUDIT_RETENTION_DAYS: '0' } }));
  t.match(all, /^invalid configuration:\n  - auth\.password_min_length: environment variable AUTH_PASSWORD_MIN_LENGTH="x" is not a number\n/, 'the variable that is no number first');
  t.match(all, /server\.port: must be at least 1 \(set by .*config\.yaml\)/, "the file's problem with it");
  t.match(all, /audit\.retention_days: must be at least 1 \(set by environment variable SVC_AUDIT_RETENTION_DAYS\)/, "another variable's");
  t.notMatch(all, /password_min_length: must/, 'the key of the variable left out keeps the lower value, which is no problem');
});

t.test('blanks around an environment value are dropped where no value can hold them, kept in free text', async (t) => {
  // `" 5m"` from a hand-written env file, a trailing newline from a mounted secret file or a
  // Compose `KEY=value ` line: unquoted YAML drops them, so the variable must too.
  const padded = load({
    env: {
      TASK_POLL_INTERVAL: ' 5m',
      PROVIDERS_RESOLUTION_FETCH_TIMEOUT: '90s\n',
      SERVER_PORT: ' 8181\n',
      SEARCH_HYBRID_ENABLED: '\tfalse ',
      DATABASES_DEFAULT_SSL_MODE: 'verify-full\n',
      DATABASES_DEFAULT_URL: ' postgres://db.example/factlog\n',
      DATABASES_SIDE_URL: 'postgres://db.example/side\r\n',
      LOGGING_LEVEL: 'debug ',
      PROFILE: ' dev',
      READMODELS_DATABASE: 'default\n',
      SVC_OAUTH_ISSUER: 'https://kg.example.com\n',
      PROVIDERS_REGISTRY_ALLOWED_MODELS: ' org/a , org/b\n',
      // Free text: a secret or a path may end in a blank on purpose, so it is taken as it is.
      AUTH_JWTSECRET: `${STRONG_SECRET} \n`,
      LLM_API_KEY: ' key-with-blanks ',
      STORAGE_DATA_DIR: '/var/lib/factlog ',
    },
  });
  t.equal(padded.task.poll_interval, '5m', 'a duration');
  t.equal(padded.providers.resolution.fetch.timeout, '90s', 'a duration with a trailing newline');
  t.equal(padded.server.port, 8181, 'a number');
  t.equal(padded.search.hybrid.enabled, false, 'a boolean');
  t.equal(padded.databases.default.ssl_mode, 'verify-full', 'an enum');
  t.equal(padded.databases.default.url, 'postgres://db.example/factlog', 'a URL');
  t.equal(padded.databases.side.url, 'postgres://db.example/side', "a new map entry's URL");
  t.equal(padded.logging.level, 'debug');
  t.equal(padded.profile, 'dev');
  t.equal(padded.readmodels.database, 'default', 'a database name');
  t.equal(padded.oauth.issuer, 'https://kg.example.com', "a spec's name");
  t.same(padded.providers.registry.allowed_models, ['org/a', 'org/b'], 'a comma list');
  t.equal(padded.auth.jwt_secret, `${STRONG_SECRET} \n`, 'a secret is kept whole');
  t.equal(padded.providers.llm.api_key, ' key-with-blanks ', 'an API key is kept whole');
  t.equal(padded.storage.data_dir, '/var/lib/factlog ', 'a path is kept whole');

  t.match(
    configErrorOf(() => load({ env: { TASK_POLL_INTERVAL: '5 m' } })),
    /task\.poll_interval: must be a duration .*TASK_POLL_INTERVAL/,
    'a blank inside a value is still refused',
  );
  t.match(
    configErrorOf(() => load({ env: { TASK_POLL_INTERVAL: ' ' } })),
    /task\.poll_interval: must be a duration .*TASK_POLL_INTERVAL/,
    'a blank value is refused as an empty one',
  );
});

t.test('variables that look like settings but match no key are warned about', async (t) => {
  const warnings: string[] = [];
  load({ env: { SERVER_PROT: '1', TASK_QUEUES_NOPE: '2', HOME: '/root' }, warn: (message) => warnings.push(message) });
  t.equal(warnings.length, 2);
  t.match(warnings[0], /SERVER_PROT looks like a factlog setting/);
  t.match(warnings[1], /TASK_QUEUES_NOPE/);
});

t.test('bad YAML values name the key, the problem and the file', async (t) => {
  const cwd = t.testdir({
    configs: {
      'config.local.yaml': [
        'profile: staging',
        'server:',
        '  port: 0',
        '  prot: 8080',
        'search:',
        '  hybrid:',
        '    min_score: 1.5',
        'providers:',
        '  synthesis:',
        '    thinking_level: extreme',
        '  registry:',
        '    url: ftp://nope',
        'auth:',
        '  password_hash_cost: 9',
        'unknown_group:',
        '  a: 1',
        'databases:',
        '  Bad-Name:',
        '    url: ""',
        '',
      ].join('\n'),
    },
  });
  const message = configErrorOf(() => load({ cwd }));
  const file = path.join(cwd, 'configs', 'config.local.yaml');
  t.match(message, `profile: must be one of embedded, dev, distributed, production (set by ${file})`);
  t.match(message, 'server.port: must be at least 1');
  t.match(message, `server.prot: unknown key (set by ${file})`);
  t.match(message, 'search.hybrid.min_score: must be at most 1');
  t.match(message, 'providers.synthesis.thinking_level: must be one of low, medium, high');
  t.match(message, 'providers.registry.url: must be empty or an http(s) URL');
  t.match(message, 'unknown_group: unknown key');
  t.match(message, 'auth.password_hash_cost: must be at least 10');
  t.match(message, 'databases.Bad-Name: is not a valid name');
});

t.test('a value of the wrong type is one problem for its key: its type, not also its enum', async (t) => {
  const cwd = t.testdir({
    configs: {
      'config.local.yaml': [
        'profile: 3',
        'logging:',
        '  level: true',
        'eventstore:',
        '  backend: [postgres]',
        'bus:',
        '  kafka:',
        '    sasl:',
        '      mechanism: 5',
        'databases:',
        '  default:',
        '    ssl_mode: 1',
        'providers:',
        '  synthesis:',
        '    thinking_level: deep',
        'server:',
        '  port: 0',
        '',
      ].join('\n'),
    },
  });
  const message = configErrorOf(() => load({ cwd }));
  const file = path.join(cwd, 'configs', 'config.local.yaml');
  const lines = message.split('\n').slice(1);
  const linesOf = (key: string) => lines.filter((line) => line.startsWith(`  - ${key}: `));
  t.same(linesOf('profile'), [`  - profile: must be a string, got a number (set by ${file})`]);
  t.same(linesOf('logging.level'), [`  - logging.level: must be a string, got a boolean (set by ${file})`]);
  t.same(linesOf('eventstore.backend'), [`  - eventstore.backend: must be a string, got a list (set by ${file})`]);
  t.same(linesOf('bus.kafka.sasl.mechanism'), [`  - bus.kafka.sasl.mechanism: must be a string, got a number (set by ${file})`]);
  t.same(linesOf('databases.default.ssl_mode'), [`  - databases.default.ssl_mode: must be a string, got a number (set by ${file})`]);
  t.same(linesOf('providers.synthesis.thinking_level'), [`  - providers.synthesis.thinking_level: must be one of low, medium, high (set by ${file})`], 'a string, of its type: its enum says what is wrong');
  t.same(linesOf('server.port'), [`  - server.port: must be at least 1 (set by ${file})`], "another key's problem stays");
  t.equal(lines.length, 7, 'one line per key');
});

t.test('a duration given as a bare number is told the unit it lacks', async (t) => {
  // The spec writes '0 disables the cap' and '0s = unlimited'; `max_ttl: 0` was 'must be a string, got a number'.
  const cwd = t.testdir({ configs: { 'config.local.yaml': 'api_keys:\n  max_ttl: 0\ntask:\n  job_timeout: 30\n' } });
  const message = configErrorOf(() => load({ cwd }));
  t.match(message, 'api_keys.max_ttl: must be a duration such as 250ms, 15s, 10m, 24h or 1h30m, got a number; a number needs a unit: write 0s (set by ');
  t.match(message, 'task.job_timeout: must be a duration such as 250ms, 15s, 10m, 24h or 1h30m, got a number; a number needs a unit: write 30s or 30m');
  t.match(
    configErrorOf(() => load({ env: { TASK_JOB_TIMEOUT: '0' } })),
    'task.job_timeout: must be a duration such as 250ms, 15s, 10m, 24h or 1h30m; a number needs a unit: write 0s (set by environment variable TASK_JOB_TIMEOUT)',
  );
  t.notMatch(configErrorOf(() => buildConfig({ task: { job_timeout: 'soon' } })), /a number needs a unit/, 'no hint for what is no number');
});

t.test('YAML anchors, aliases and merge keys (<<) are understood; an unknown key reached through one is still named', async (t) => {
  const cwd = t.testdir({
    'config.yaml': [
      'databases:',
      '  default: &db',
      '    url: postgres://factlog:pw@db.example:5432/factlog',
      '    max_conns: 20',
      '    ssl_mode: verify-full',
      '  analytics:',
      '    <<: *db',
      '    url: postgres://factlog:pw@db.example:5432/analytics',
      'task:',
      '  retry: &retry',
      '    max_attempts: 7',
      '    base_delay: 2s',
      '    max_delay: 1m',
      'providers:',
      '  resolution:',
      '    retry:',
      '      <<: [*retry]',
      '      max_attempts: 4',
      'server:',
      '  read_timeout: &timeout 40s',
      '  write_timeout: *timeout',
      'isolation:',
      '  allowed_databases: &both [default, analytics]',
      '',
    ].join('\n'),
    'unknown.yaml': 'task:\n  retry: &retry\n    max_attempts: 7\n    max_delya: 1m\nproviders:\n  llm_retry:\n    <<: *retry\n',
    'beside.yaml': 'task:\n  retry: &retry\n    max_attempts: 7\nproviders:\n  llm_retry:\n    <<: *retry\n    per_call_timout: 1m\n',
    'no-anchor.yaml': 'providers:\n  llm_retry:\n    <<: *nowhere\n',
    'scalar-merge.yaml': 'server:\n  port: &p 8081\n  <<: *p\n',
    'no-anchor-value.yaml': 'server:\n  read_timeout: *nowhere\n',
  });
  const config = load({ cwd, configPath: 'config.yaml' });
  t.same(config.databases.analytics, { url: 'postgres://factlog:pw@db.example:5432/analytics', max_conns: 20, ssl_mode: 'verify-full' }, 'merged, with its own url over the anchor\'s');
  t.equal(config.databases.default.max_conns, 20, 'the anchored mapping itself');
  t.same(config.providers.resolution.retry, { ...config.providers.resolution.retry, max_attempts: 4, base_delay: '2s', max_delay: '1m' }, 'a merge list, the own key first');
  t.equal(config.server.write_timeout, '40s', 'an alias of a scalar');
  t.same(config.isolation.allowed_databases, ['default', 'analytics']);

  const beside = configErrorOf(() => load({ cwd, configPath: 'beside.yaml' }));
  t.match(beside, `providers.llm_retry.per_call_timout: unknown key (set by ${path.join(cwd, 'beside.yaml')})`, 'a typo beside a merge key is named');
  t.notMatch(beside, /<</, 'the merge key itself is no unknown key');
  const unknown = configErrorOf(() => load({ cwd, configPath: 'unknown.yaml' }));
  const file = path.join(cwd, 'unknown.yaml');
  t.match(unknown, `task.retry.max_delya: unknown key (set by ${file})`, 'a typo in the anchored mapping');
  t.match(unknown, `providers.llm_retry.max_delya: unknown key (set by ${file})`, 'and where it is merged');

  // The parser's own errors here had no place, and for `<<: *typo` said "Merge sources must be maps".
  t.match(
    configErrorOf(() => load({ cwd, configPath: 'no-anchor.yaml' })),
    'no-anchor.yaml: not valid YAML at line 3, column 9: alias *nowhere names no anchor set before it',
    'a merge of an alias of no anchor names the file and place',
  );
  t.match(
    configErrorOf(() => load({ cwd, configPath: 'no-anchor-value.yaml' })),
    'no-anchor-value.yaml: not valid YAML at line 2, column 17: alias *nowhere names no anchor set before it',
    'so does any alias of no anchor',
  );
  t.match(
    configErrorOf(() => load({ cwd, configPath: 'scalar-merge.yaml' })),
    'scalar-merge.yaml: not valid YAML at line 3, column 7: a merge key (<<) takes a mapping, an alias of one, or a list of them',
    'merging a scalar names the file and place',
  );
});

t.test('malformed files are errors naming the file', async (t) => {
  const cwd = t.testdir({
    'broken.yaml': 'server: [unclosed\n',
    'list.yaml': '- a\n- b\n',
    'dupe.yaml': 'server:\n  port: 1\n  port: 2\n',
    'empty.yaml': '# nothing but a comment\n',
    'wrong-type.yaml': 'server: 8080\n',
    'proto.yaml': '__proto__:\n  polluted: true\n',
    'secret-line.yaml': 'auth:\n  jwt_secret: s3cr3t: value\n',
    'tabbed.yaml': 'auth:\n  jwt_secret: s3cr3t-value\n\tport: 1\n',
  });
  t.match(configErrorOf(() => load({ cwd, configPath: 'broken.yaml' })), /broken\.yaml: not valid YAML at line 2, column 1: Flow sequence/);
  // The parser's own messages quoted the lines around the error, secrets and all.
  const secretLine = configErrorOf(() => load({ cwd, configPath: 'secret-line.yaml' }));
  t.match(secretLine, /secret-line\.yaml: not valid YAML at line 2, column 15: Nested mappings are not allowed/);
  t.notMatch(secretLine, /s3cr3t/, 'the line is not quoted');
  const tabbed = configErrorOf(() => load({ cwd, configPath: 'tabbed.yaml' }));
  t.match(tabbed, /tabbed\.yaml: not valid YAML at line 3, column 1: Tabs are not allowed as indentation/);
  t.notMatch(tabbed, /s3cr3t/, 'nor the line before it');
  t.match(configErrorOf(() => load({ cwd, configPath: 'wrong-type.yaml' })), `server: must be a mapping, got a number (set by ${path.join(cwd, 'wrong-type.yaml')})`, 'a wrong type names key and file');
  t.match(configErrorOf(() => load({ cwd, configPath: 'list.yaml' })), /list\.yaml: the top level must be a mapping/);
  t.match(configErrorOf(() => load({ cwd, configPath: 'dupe.yaml' })), /dupe\.yaml: not valid YAML/);
  t.equal(load({ cwd, configPath: 'empty.yaml' }).server.port, 8080, 'an empty file changes nothing');
  t.match(configErrorOf(() => load({ cwd, configPath: 'wrong-type.yaml' })), /server: must be a mapping, got a number/);
  const withVariable = configErrorOf(() => load({ cwd, configPath: 'wrong-type.yaml', env: { SERVER_PORT: '18083' } }));
  t.match(withVariable, /server: must be a mapping, got a number/, 'a variable setting a key inside does not hide it');
  t.notMatch(withVariable, /is required/);
  t.match(configErrorOf(() => load({ cwd, configPath: 'proto.yaml' })), /__proto__: unknown key/);
  t.equal(({} as Record<string, unknown>).polluted, undefined, 'no prototype pollution');
});

t.test('rules between keys', async (t) => {
  t.match(
    configErrorOf(() => buildConfig({ providers: { decomposition: { chunking: { chunk_size: 200, chunk_overlap: 200 } } } })),
    /providers\.decomposition\.chunking\.chunk_overlap: must be smaller than chunk_size \(200 >= 200\)/,
  );
  t.ok(buildConfig({ providers: { decomposition: { chunking: { chunk_size: 201, chunk_overlap: 200 } } } }));
  t.match(
    configErrorOf(() => load({ env: { TASK_JOB_TIMEOUT: '20m' } })),
    /task\.job_timeout: must exceed providers\.llm_retry max_attempts x per_call_timeout plus backoffs .*TASK_JOB_TIMEOUT/,
    'llm_retry (4 x 5m + 3 x 30s) does not fit a 20m job',
  );
  t.match(configErrorOf(() => load({ env: { TASK_JOB_TIMEOUT: '21m' } })), /task\.job_timeout: must exceed/, 'nor a 21m one: a 429 may ask for max_delay at each wait');
  t.equal(load({ env: { TASK_JOB_TIMEOUT: '22m' } }).task.job_timeout, '22m', '21m30s fits in 22m');
  t.equal(load({ env: { TASK_JOB_TIMEOUT: '0s' } }).task.job_timeout, '0s', '0s is unlimited');
  const extraction = (extraction_timeout: string) => buildConfig({ providers: { resolution: { extraction_timeout } } });
  t.match(configErrorOf(() => extraction('0s')), /providers\.resolution\.extraction_timeout: must be longer than 0s/);
  t.match(configErrorOf(() => extraction('-2m')), /providers\.resolution\.extraction_timeout: must be a duration such as/);
  t.match(configErrorOf(() => extraction('120')), /providers\.resolution\.extraction_timeout: must be a duration such as/, 'a bare number: seconds or minutes?');
  t.match(configErrorOf(() => extraction('30d')), /providers\.resolution\.extraction_timeout: must be at most 1h \(got 30d\)/);
  t.match(
    configErrorOf(() => load({ env: { PROVIDERS_RESOLUTION_EXTRACTION_TIMEOUT: '0s' } })),
    /providers\.resolution\.extraction_timeout: must be longer than 0s \(set by environment variable PROVIDERS_RESOLUTION_EXTRACTION_TIMEOUT\)/,
  );
  t.equal(extraction('1h').providers.resolution.extraction_timeout, '1h');
  t.match(configErrorOf(() => buildConfig({ task: { heartbeat_timeout: '30s' } })), /task\.heartbeat_timeout: must be longer than heartbeat_interval/);
  t.match(configErrorOf(() => buildConfig({ task: { retry: { base_delay: '10m' } } })), /task\.retry\.base_delay: must not exceed max_delay/);
  t.match(configErrorOf(() => buildConfig({ concepts: { min_shared_fact_count: 7 } })), /concepts\.min_shared_fact_count: must not exceed stable_shared_fact_count/);
  t.match(configErrorOf(() => buildConfig({ readmodels: { database: 'nowhere' } })), /readmodels\.database: names no entry of databases \(known: default\)/);
  t.match(configErrorOf(() => buildConfig({ isolation: { allowed_databases: ['default', 'other'] } })), /isolation\.allowed_databases\[1\]: "other" names no entry/);
  t.match(configErrorOf(() => buildConfig({ eventstore: { backend: 'eventstoredb' } })), /eventstore\.eventstoredb\.connection_string: is required/);
  t.match(configErrorOf(() => buildConfig({ auth: { token_ttl: '0s' } })), /auth\.token_ttl: must be at least 1s \(got 0s\)/);
  t.match(configErrorOf(() => buildConfig({ api_keys: { default_ttl: 100 } })), /api_keys\.default_ttl: 100 days exceeds max_ttl 2160h/);
  t.ok(buildConfig({ api_keys: { default_ttl: 100, max_ttl: '0s' } }), 'max_ttl 0s disables the cap');
  const registries = [
    { id: 'a', url: 'https://a.example' },
    { id: 'a', url: 'https://b.example' },
  ];
  t.match(configErrorOf(() => buildConfig({ providers: { registry: { registries } } })), /registries\[1\]\.id: duplicate registry id "a"/);
});

t.test('values a service would refuse after start-up are refused with the configuration, naming the key', async (t) => {
  // Each passed validation, then stopped serve after migrating, exit 1, in the service's own words
  // ("sessionTtlMs must be at least 1000 ms", "threshold must be in (0, 1]"), or failed every fetch.
  t.match(
    configErrorOf(() => load({ env: { AUTH_TOKEN_TTL: '500ms' } })),
    'auth.token_ttl: must be at least 1s (got 500ms) (set by environment variable AUTH_TOKEN_TTL)',
  );
  const ttlKeys: Array<[string, object]> = [
    ['auth.refresh_token_ttl', { auth: { refresh_token_ttl: '999ms' } }],
    ['oauth.access_token_ttl', { oauth: { access_token_ttl: '999ms' } }],
    ['oauth.refresh_token_ttl', { oauth: { refresh_token_ttl: '999ms' } }],
    ['oauth.auth_code_ttl', { oauth: { auth_code_ttl: '999ms' } }],
  ];
  for (const [key, overrides] of ttlKeys) t.match(configErrorOf(() => buildConfig(overrides)), `${key}: must be at least 1s (got 999ms)`, key);
  const shortest = buildConfig({ auth: { token_ttl: '1s', refresh_token_ttl: '1s' }, oauth: { access_token_ttl: '1s', refresh_token_ttl: '1s', auth_code_ttl: '1s' } });
  t.equal(shortest.auth.token_ttl, '1s', 'the bound itself (MIN_TOKEN_TTL_MS, the token service\'s too)');

  t.match(
    configErrorOf(() => load({ env: { PROVIDERS_DEDUP_THRESHOLD: '0' } })),
    'providers.dedup.threshold: must be more than 0 (set by environment variable PROVIDERS_DEDUP_THRESHOLD)',
    'a cosine threshold of 0 would merge every pair of facts',
  );
  t.match(configErrorOf(() => buildConfig({ providers: { dedup: { threshold: 1.01 } } })), 'providers.dedup.threshold: must be at most 1');
  t.equal(buildConfig({ providers: { dedup: { threshold: 1 } } }).providers.dedup.threshold, 1, '1 merges only identical vectors');

  t.match(
    configErrorOf(() => load({ env: { PROVIDERS_RESOLUTION_FETCH_TIMEOUT: '0s' } })),
    'providers.resolution.fetch.timeout: must be longer than 0s (set by environment variable PROVIDERS_RESOLUTION_FETCH_TIMEOUT)',
    'a zero deadline aborts every fetch as it starts',
  );
  t.equal(buildConfig({ providers: { resolution: { fetch: { timeout: '1ms' } } } }).providers.resolution.fetch.timeout, '1ms');
});

t.test('durations waited out with a timer are at most 24d; the TTLs, compared with clocks, are not', async (t) => {
  // Node fires a timer of more than 2^31-1 ms after 1 ms: a 30d job_timeout timed out every job at once.
  t.match(
    configErrorOf(() => load({ env: { TASK_JOB_TIMEOUT: '720h' } })),
    /task\.job_timeout: must be at most 24d \(got 720h\): a longer timer would fire at once; 0s is unlimited \(set by environment variable TASK_JOB_TIMEOUT\)/,
  );
  t.equal(load({ env: { TASK_JOB_TIMEOUT: '24d' } }).task.job_timeout, '24d', 'the bound itself');
  const timerKeys: Array<[string, object]> = [
    ['task.heartbeat_interval', { task: { heartbeat_interval: '25d', heartbeat_timeout: '26d' } }],
    ['task.heartbeat_timeout', { task: { heartbeat_timeout: '25d' } }],
    ['task.poll_interval', { task: { poll_interval: '25d' } }],
    ['providers.resolution.fetch.timeout', { providers: { resolution: { fetch: { timeout: '25d' } } } }],
    ['providers.resolution.retry.max_delay', { providers: { resolution: { retry: { max_delay: '25d' } } } }],
    ['providers.llm_retry.per_call_timeout', { task: { job_timeout: '0s' }, providers: { llm_retry: { per_call_timeout: '25d' } } }],
    ['providers.llm_retry.max_delay', { providers: { llm_retry: { max_delay: '25d' } } }],
  ];
  for (const [key, overrides] of timerKeys) {
    t.match(configErrorOf(() => buildConfig(overrides)), `${key}: must be at most 24d (got `, key);
  }
  const longTtls = buildConfig({ auth: { refresh_token_ttl: '2160h' }, oauth: { refresh_token_ttl: '2160h' }, api_keys: { max_ttl: '8760h' } });
  t.equal(longTtls.api_keys.max_ttl, '8760h', 'a TTL may be longer: it is compared with a clock, not waited out');
});

t.test('periodic jobs\' intervals are at least 1s, the scheduler\'s floor, named with their source', async (t) => {
  // The scheduler refused a shorter interval only once serve was listening, in its own words.
  t.match(
    configErrorOf(() => load({ env: { TASK_REFRESH_CONCEPT_RELATIONS_INTERVAL: '500ms' } })),
    /task\.refresh_concept_relations_interval: must be at least 1s \(got 500ms\) \(set by environment variable TASK_REFRESH_CONCEPT_RELATIONS_INTERVAL\)/,
  );
  t.match(configErrorOf(() => buildConfig({ providers: { dedup: { catchup_interval: '999ms' } } })), /providers\.dedup\.catchup_interval: must be at least 1s \(got 999ms\)/);
  const config = buildConfig({ task: { refresh_concept_relations_interval: '1s' }, providers: { dedup: { catchup_interval: '1s' } } });
  t.equal(config.task.refresh_concept_relations_interval, '1s', 'the floor itself (MIN_PERIODIC_INTERVAL_MS, the scheduler\'s too)');
});

t.test('attempt counts are at most 1000, named with their source', async (t) => {
  // The stage runtime refused more only once serve was listening ('retry.maxAttempts must be an
  // integer in [1, 1000]', exit 1), and a huge llm_retry.max_attempts made the start-up check of
  // its worst case loop for minutes.
  t.equal(load({ env: { TASK_RETRY_MAX_ATTEMPTS: '1000' } }).task.retry.max_attempts, 1000, 'the bound itself');
  t.match(
    configErrorOf(() => load({ env: { TASK_RETRY_MAX_ATTEMPTS: '1001' } })),
    /task\.retry\.max_attempts: must be at most 1000 \(set by environment variable TASK_RETRY_MAX_ATTEMPTS\)/,
  );
  t.match(
    configErrorOf(() => load({ env: { PROVIDERS_LLM_RETRY_MAX_ATTEMPTS: '1e12', PROVIDERS_LLM_RETRY_PER_CALL_TIMEOUT: '1ms' } })),
    /providers\.llm_retry\.max_attempts: must be at most 1000 \(set by environment variable PROVIDERS_LLM_RETRY_MAX_ATTEMPTS\)/,
  );
  t.match(configErrorOf(() => buildConfig({ providers: { resolution: { retry: { max_attempts: 5000 } } } })), /providers\.resolution\.retry\.max_attempts: must be at most 1000/);
  t.match(
    configErrorOf(() => buildConfig({ providers: { resolution: { retry: { retry_403_max_attempts: 5000 } } } })),
    /providers\.resolution\.retry\.retry_403_max_attempts: must be at most 1000/,
  );
  t.equal(buildConfig({ providers: { resolution: { retry: { retry_403_max_attempts: 0 } } } }).providers.resolution.retry.retry_403_max_attempts, 0, '0 makes a 403 permanent');
});

t.test('registry entries get their defaults; the single block is registry "default"', async (t) => {
  const listed = buildConfig({ providers: { registry: { registries: [{ id: 'main', url: 'https://r.example/', api_key: 'k' }] } } });
  t.same(registryEndpoints(listed), [
    { id: 'main', url: 'https://r.example', auth_mode: 'none', api_key: 'k', read_api_key: 'k', allowed_models: ['*'] },
  ]);
  t.same(registryEndpoints(defaultConfig()), [], 'empty url disables the registry');
  const single = load({ env: { REGISTRY_URL: 'https://reg.example', REGISTRY_AUTH_MODE: 'hmac', REGISTRY_API_KEY: 'w' } });
  t.same(registryEndpoints(single), [
    { id: 'default', url: 'https://reg.example', auth_mode: 'hmac', api_key: 'w', read_api_key: 'w', allowed_models: ['*'] },
  ]);
  t.match(
    configErrorOf(() => buildConfig({ providers: { registry: { registries: [{ id: 'x' }] } } })),
    /providers\.registry\.registries\[0\]\.url: is required/,
  );
});

t.test('derived values', async (t) => {
  const config = defaultConfig();
  t.equal(publicBaseUrl(config), 'http://localhost:8080');
  t.equal(oauthIssuer(config), 'http://localhost:8080');
  const configured = buildConfig({ server: { public_url: 'https://kg.example/' }, oauth: { issuer: 'https://id.example' } });
  t.equal(publicBaseUrl(configured), 'https://kg.example');
  t.equal(oauthIssuer(configured), 'https://id.example');
  t.same(dataPaths(config, '/srv/app'), { dataDir: '/srv/app/data', assetsDir: '/srv/app/data/assets', pgliteDir: '/srv/app/data/pglite' });
  t.same(databaseOptions(config, 'default', '/srv/app'), { kind: 'pglite', dataDir: '/srv/app/data/pglite' });
  const twoDatabases = buildConfig({ databases: { default: { url: 'postgres://h/d', ssl_mode: 'require' }, side: { url: '' } } });
  t.same(databaseOptions(twoDatabases, 'default'), { kind: 'postgres', url: 'postgres://h/d', maxConns: 200, sslMode: 'require' });
  t.same(databaseOptions(twoDatabases, 'side', '/srv/app'), { kind: 'pglite', dataDir: '/srv/app/data/pglite-side' });
  t.throws(() => databaseOptions(config, 'nope'), ConfigError);
});

t.test('defaults are written to <cwd>/configs/config.default.yaml when absent, never overwritten', async (t) => {
  const cwd = t.testdir({});
  const target = path.join(cwd, 'configs', 'config.default.yaml');
  load({ cwd });
  t.notOk(existsSync(target), 'writeDefaults false writes nothing');

  loadConfig({ env: {}, cwd });
  t.ok(existsSync(target), 'written on first run (writeDefaults defaults to true)');
  const written = readFileSync(target, 'utf8');
  t.match(written, /does NOT read this file/);
  t.same(parseYaml(written), parseYaml(readFileSync(packagedDefaultsPath(), 'utf8')), 'same keys and values as the embedded defaults');

  writeFileSync(target, '# operator edits\nserver:\n  port: 1\n');
  const config = loadConfig({ env: {}, cwd });
  t.equal(readFileSync(target, 'utf8'), '# operator edits\nserver:\n  port: 1\n', 'an existing file is left alone');
  t.equal(config.server.port, 8080, 'the written copy is a reference, not a layer');

  const warnings: string[] = [];
  const readOnlyParent = t.testdir({ configs: 'a file where a directory should be' });
  loadConfig({ env: {}, cwd: readOnlyParent, warn: (message) => warnings.push(message) });
  t.match(warnings.join('\n'), /could not write the reference defaults/, 'an unwritable location only warns');
});

t.test('checkSecrets: a short secret refused on every profile, the placeholder in production', async (t) => {
  const warnings: string[] = [];
  const log = { warn: (message: string) => warnings.push(message) };

  checkSecrets(defaultConfig(), log);
  t.same(warnings, [], 'the placeholder outside production: the service makes a secret of its own (withSigningSecret)');

  // Too short to sign with (RFC 7518 §3.2) on any profile: a configuration error naming the setting.
  t.match(configErrorOf(() => checkSecrets(buildConfig({ auth: { jwt_secret: 'short' } }), log)), /auth\.jwt_secret: is 5 bytes; use at least 32 \(AUTH_JWTSECRET\)/);

  warnings.length = 0;
  checkSecrets(buildConfig({ auth: { jwt_secret: STRONG_SECRET } }), log);
  t.same(warnings, [], 'a strong secret outside production is quiet');

  const productionPlaceholder = load({ env: { PROFILE: 'production', SVC_OAUTH_ISSUER: 'https://kg.example' } });
  t.match(configErrorOf(() => checkSecrets(productionPlaceholder, log)), /auth\.jwt_secret: is the built-in placeholder/);

  const productionShort = load({ env: { PROFILE: 'production', AUTH_JWTSECRET: 'x'.repeat(31), SVC_OAUTH_ISSUER: 'https://kg.example' } });
  t.match(configErrorOf(() => checkSecrets(productionShort, log)), /auth\.jwt_secret: is 31 bytes; use at least 32/);

  const productionNoIssuer = load({ env: { PROFILE: 'production', AUTH_JWTSECRET: STRONG_SECRET } });
  t.match(configErrorOf(() => checkSecrets(productionNoIssuer, log)), /oauth\.issuer: must be set in production/);

  const productionCheapHashes = load({ env: { PROFILE: 'production', AUTH_JWTSECRET: STRONG_SECRET, SVC_OAUTH_ISSUER: 'https://kg.example', AUTH_PASSWORD_HASH_COST: '14' } });
  t.match(configErrorOf(() => checkSecrets(productionCheapHashes, log)), /auth\.password_hash_cost: is 14; production needs at least 15/);
  warnings.length = 0;
  checkSecrets(load({ env: { AUTH_JWTSECRET: STRONG_SECRET, AUTH_PASSWORD_HASH_COST: '10' } }), log);
  t.same(warnings, [], 'a low cost is allowed outside production');

  warnings.length = 0;
  const productionReady = load({
    env: { PROFILE: 'production', AUTH_JWTSECRET: 'x'.repeat(32), SVC_OAUTH_ISSUER: 'https://kg.example', SVC_BOOTSTRAP_AUTO_PROMOTE: '0' },
  });
  t.doesNotThrow(() => checkSecrets(productionReady, log));
  t.same(warnings, []);

  checkSecrets(load({ env: { PROFILE: 'production', AUTH_JWTSECRET: STRONG_SECRET, SVC_OAUTH_ISSUER: 'https://kg.example' } }), log);
  t.match(warnings[0], /auto_promote_first_user is true in production/);
});

t.test('bootstrapAdminFromEnv reads the three secrets, or gives null', async (t) => {
  const all = {
    SVC_BOOTSTRAP_DEFAULT_ADMIN_EMAIL: ' admin@example.com ',
    SVC_BOOTSTRAP_DEFAULT_ADMIN_PASSWORD: 's3cret pass',
    SVC_BOOTSTRAP_DEFAULT_ADMIN_DISPLAY_NAME: 'Admin',
  };
  t.same(bootstrapAdminFromEnv(all), { email: 'admin@example.com', password: 's3cret pass', displayName: 'Admin' });
  t.equal(bootstrapAdminFromEnv({}), null);
  for (const missing of Object.keys(all)) {
    t.equal(bootstrapAdminFromEnv({ ...all, [missing]: undefined }), null, `null without ${missing}`);
    t.equal(bootstrapAdminFromEnv({ ...all, [missing]: '  ' }), null, `null with blank ${missing}`);
  }
  const config = load({ env: all });
  t.notMatch(JSON.stringify(config), /s3cret/, 'the admin password never enters the configuration');
  // The warning of a default_admin without its admin names what is missing (it said 'EMAIL/PASSWORD are not both set' when only the display name was).
  t.same(missingBootstrapAdminVariables(all), []);
  t.same(missingBootstrapAdminVariables({ ...all, SVC_BOOTSTRAP_DEFAULT_ADMIN_DISPLAY_NAME: undefined }), ['SVC_BOOTSTRAP_DEFAULT_ADMIN_DISPLAY_NAME']);
  t.same(missingBootstrapAdminVariables({ SVC_BOOTSTRAP_DEFAULT_ADMIN_PASSWORD: ' ' }), ['SVC_BOOTSTRAP_DEFAULT_ADMIN_EMAIL', 'SVC_BOOTSTRAP_DEFAULT_ADMIN_PASSWORD', 'SVC_BOOTSTRAP_DEFAULT_ADMIN_DISPLAY_NAME']);
});

t.test('network.allow_cidrs entries are validated with the rest, without echoing them', async (t) => {
  const message = configErrorOf(() => load({ env: { NETWORK_ALLOW_CIDRS: '10.20.0.0/16, 999.1.1.1/99, 10.0.0.0/40, 10.0.0.0/, fd00::/8, 10.0.0.0/0x8', SERVER_PORT: '70000' } }));
  t.match(message, /server\.port: must be at most 65535/, 'listed with the other problems');
  t.match(message, /network\.allow_cidrs\[1\]: must be an IP address or a CIDR range such as 10\.20\.0\.0\/16 or fd00::\/8 \(set by environment variable NETWORK_ALLOW_CIDRS\)/);
  t.match(message, /network\.allow_cidrs\[2\]: must have a prefix length from 0 to 32 \(set by environment variable NETWORK_ALLOW_CIDRS\)/);
  t.match(message, /network\.allow_cidrs\[3\]: must have a prefix length from 0 to 32/, 'an empty prefix is no /0');
  t.match(message, /network\.allow_cidrs\[5\]: must have a prefix length from 0 to 32/);
  t.notMatch(message, /allow_cidrs\[(0|4)\]/, 'the good entries pass');
  t.notMatch(message, /999\.1\.1\.1|10\.0\.0\.0\/40/, 'no value echoed');
});

// The patterns took them; the start then failed later with a bare "Invalid URL" (a database's URL,
// exit 1), or announced and linked the public URL as it was.
t.test('a PostgreSQL URL that names no database is refused, naming the key and where the name goes', async (t) => {
  // Without a path the driver connected to a database named after the user (libpq's default), or
  // PGDATABASE: `postgres://factlog:pw@db:5432` wrote the events into a database nobody meant.
  for (const url of ['postgres://factlog:pw@db.example:5432', 'postgres://factlog:pw@db.example:5432/', 'postgresql://db.example/?sslmode=disable']) {
    const message = configErrorOf(() => load({ env: { DATABASES_DEFAULT_URL: url, DATABASES_SIDE_URL: 'postgres://h/side' } }));
    t.match(
      message,
      'databases.default.url: names no database: put its name in the path, postgres://user:password@host:5432/<database> (set by environment variable DATABASES_DEFAULT_URL)',
      url,
    );
    t.notMatch(message, /databases\.side|:pw@/, 'only that URL, not echoed');
  }
  const cwd = t.testdir({ 'config.yaml': 'databases:\n  events:\n    url: postgres://u:pw@h:5432\n' });
  t.match(configErrorOf(() => load({ cwd, configPath: 'config.yaml' })), `databases.events.url: names no database: put its name in the path, postgres://user:password@host:5432/<database> (set by ${path.join(cwd, 'config.yaml')})`);
  t.equal(load({ env: { DATABASES_DEFAULT_URL: 'postgres://u:pw@h:5432/factlog?sslmode=disable' } }).databases.default.url, 'postgres://u:pw@h:5432/factlog?sslmode=disable', 'a named database passes');
  t.equal(load({ env: { DATABASES_DEFAULT_URL: 'postgres:///factlog?host=/var/run/postgresql' } }).databases.default.url, 'postgres:///factlog?host=/var/run/postgresql', 'so does a Unix socket');
  t.equal(load({ env: { DATABASES_DEFAULT_URL: '' } }).databases.default.url, '', 'empty is the embedded database');
});

t.test('a URL that does not parse is refused with the rest, naming its key and not its value', async (t) => {
  const message = configErrorOf(() =>
    load({
      env: {
        SERVER_PUBLIC_URL: 'http://[::1',
        SVC_OAUTH_ISSUER: 'https://issuer.example.org:99999',
        DATABASES_DEFAULT_URL: 'postgres://factlog:pass#word@db:5432/factlog',
        MCP_ALLOWED_ORIGINS: 'https://good.example.org, https://bad.example.org:70000',
        PROVIDERS_REGISTRY_REGISTRIES: '[{"id":"a","url":"https://a.example.org"},{"id":"b","url":"http://%zz"}]',
        SERVER_PORT: '70000',
      },
    }),
  );
  t.match(message, /server\.port: must be at most 65535/, 'listed with the other problems');
  const unparsable = /is not a URL that can be parsed/;
  for (const key of ['server.public_url', 'oauth.issuer', 'databases.default.url', 'mcp.allowed_origins[1]', 'providers.registry.registries[1].url']) {
    t.match(message, new RegExp(`${key.replace(/[.[\]]/g, '\\$&')}: ${unparsable.source}.*\\(set by environment variable`), key);
  }
  t.notMatch(message, /allowed_origins\[0\]|registries\[0\]/, 'the good entries pass');
  t.notMatch(message, /pass#word|99999|70000\)|%zz|\[::1/, 'no value echoed');
  // Only the unparsable are refused: an http(s) URL with a port, a path and an IPv6 host passes.
  const config = load({ env: { SERVER_PUBLIC_URL: 'http://[::1]:8080/factlog', DATABASES_DEFAULT_URL: 'postgresql://u:p%23w@db/factlog?application_name=x' } });
  t.equal(config.server.public_url, 'http://[::1]:8080/factlog');

  // The service appends its routes to these: it announced `https://pub.example.org?x=1/docs`.
  const bases = configErrorOf(() => load({ env: { SERVER_PUBLIC_URL: 'https://pub.example.org?x=1', SVC_OAUTH_ISSUER: 'https://user:pw@issuer.example.org#a' } }));
  t.match(bases, /server\.public_url: must be a base URL without a query \(\?\), a fragment \(#\) or a user name and password: the service appends its routes to it \(set by environment variable SERVER_PUBLIC_URL\)/);
  t.match(bases, /oauth\.issuer: must be a base URL without/);
  t.notMatch(bases, /x=1|user:pw/, 'no value echoed');
});
