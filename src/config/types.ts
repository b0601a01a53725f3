/**
 * The merged configuration, mirroring `configs/config.default.yaml` key for key (snake_case,
 * as written in YAML and validated by `schemas/config.schema.json`). Durations stay strings
 * such as `15s` or `1h30m`; turn them into milliseconds with `parseDuration`.
 */

/** A duration string: one or more `<number><unit>` with unit ms, s, m, h or d (`0s` = zero). */
export type DurationString = string;

export type Profile = 'embedded' | 'dev' | 'distributed' | 'production';
export type SslMode = 'disable' | 'require' | 'verify-ca' | 'verify-full';
export type RegistryAuthMode = 'none' | 'bearer' | 'hmac';
export type ThinkingLevel = 'low' | 'medium' | 'high';
export type RepositoryPreset = 'general' | 'scientific' | 'enterprise';
export type LlmProvider = 'local' | 'openai';
export type EmbeddingsProvider = 'local' | 'openai' | 'none';
/**
 * How the service may authenticate to Kafka (`bus.kafka.sasl.mechanism`), in kafkajs's names; `none`
 * sends no SASL. The one list of them: the types, the Kafka adapter's check (src/bus/kafka.ts) and
 * every message naming the choices are made from it. It lives here, not in src/bus/kafka.ts, because
 * the configuration must not load kafkajs (docs/architecture.md: a tier's client is imported only
 * when chosen); this file imports nothing. schemas/config.schema.json's enum must equal it
 * (test/config/kafka.test.ts).
 */
export const KAFKA_SASL_MECHANISMS = ['none', 'plain', 'scram-sha-256', 'scram-sha-512'] as const;
export type KafkaSaslMechanism = (typeof KAFKA_SASL_MECHANISMS)[number];
/** The mechanisms that log in: all of KAFKA_SASL_MECHANISMS but `none`. */
export type KafkaSaslLoginMechanism = Exclude<KafkaSaslMechanism, 'none'>;
export const KAFKA_SASL_LOGIN_MECHANISMS: readonly KafkaSaslLoginMechanism[] = KAFKA_SASL_MECHANISMS.filter(
  (mechanism): mechanism is KafkaSaslLoginMechanism => mechanism !== 'none',
);
/** The login mechanisms for a message: `plain, scram-sha-256 or scram-sha-512`. */
export const KAFKA_SASL_LOGIN_CHOICES = `${KAFKA_SASL_LOGIN_MECHANISMS.slice(0, -1).join(', ')} or ${KAFKA_SASL_LOGIN_MECHANISMS.at(-1) ?? ''}`;
export interface KafkaSaslConfig {
  mechanism: KafkaSaslMechanism;
  username: string;
  /** A secret (env BUS_KAFKA_SASL_PASSWORD): never logged, never in a message. */
  password: string;
}
export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';

/** The job kinds that have a worker count in `task.queues` (the spec's list). */
export const QUEUED_JOB_KINDS = [
  'retrieve_source',
  'source_decomposition',
  'embed_facts',
  'deduplicate_facts',
  'extract_concepts',
  'refine_concepts',
  'embed_concepts',
  'cleanup_facts',
  'summarize_concepts',
  'synthesize_concept',
  'refresh_concept_relations',
  'annotate_report',
  'migrate_context',
  'contribute_source',
  'pull_all_from_registry',
] as const;
export type QueuedJobKind = (typeof QUEUED_JOB_KINDS)[number];

/**
 * The spec's job kinds this release never makes: the registry exchange is not built (docs/api.md,
 * "Not built in this release"). Their queue counts are still read, so a configuration stays valid.
 */
export const UNBUILT_JOB_KINDS = ['contribute_source', 'pull_all_from_registry'] as const satisfies readonly QueuedJobKind[];

/**
 * The kinds of task this release makes: what the tasks filters (REST's `kind`, the MCP task
 * tools') take. A kind it never makes is refused as a mistake or a client of another release,
 * rather than answered with an empty list that would look like "none yet".
 */
export const TASK_KINDS = QUEUED_JOB_KINDS.filter(
  (kind): kind is Exclude<QueuedJobKind, (typeof UNBUILT_JOB_KINDS)[number]> => !(UNBUILT_JOB_KINDS as readonly string[]).includes(kind),
);

/** The default `auth.jwt_secret`: fine for a laptop, refused by `checkSecrets` in production. */
export const JWT_SECRET_PLACEHOLDER = 'CHANGE-ME-placeholder-jwt-secret-not-for-production';

export interface DatabaseConfig {
  /** PostgreSQL URL; empty = the embedded PGlite database under `<data_dir>/pglite`. */
  url: string;
  max_conns: number;
  ssl_mode: SslMode;
}

export interface RegistryEntryConfig {
  id: string;
  url: string;
  auth_mode: RegistryAuthMode;
  api_key: string;
  /** Falls back to `api_key` when empty. */
  read_api_key: string;
  /** `*` allows every model. */
  allowed_models: string[];
}

export interface RetryConfig {
  max_attempts: number;
  base_delay: DurationString;
  max_delay: DurationString;
}

export interface Config {
  profile: Profile;
  server: {
    host: string;
    port: number;
    /** Empty = `http://localhost:<port>`; see `publicBaseUrl`. */
    public_url: string;
    read_timeout: DurationString;
    write_timeout: DurationString;
    body_limit: number;
  };
  storage: {
    /** Relative paths resolve against the working directory; see `dataPaths`. */
    data_dir: string;
  };
  /** Named databases; `default` always exists. */
  databases: { default: DatabaseConfig; [name: string]: DatabaseConfig };
  eventstore: {
    backend: 'postgres' | 'eventstoredb';
    /** Entry of `databases` holding the event tables when backend is postgres. */
    database: string;
    eventstoredb: { connection_string: string };
  };
  bus: {
    backend: 'log' | 'kafka';
    kafka: {
      brokers: string[];
      client_id: string;
      topic_prefix: string;
      partitions: number;
      replication_factor: number;
      relay: boolean;
      session_timeout: string;
      /** Connect over TLS, trusting Node's CAs and those of `tls.ca_file`. */
      tls: boolean;
      /** SASL authentication: none by default. Needs `tls`. */
      sasl: KafkaSaslConfig;
    };
  };
  readmodels: { database: string };
  auth: {
    jwt_secret: string;
    token_ttl: DurationString;
    refresh_token_ttl: DurationString;
    password_min_length: number;
    /** log2 of scrypt's N for new password hashes (10–20; production refuses below 15). */
    password_hash_cost: number;
  };
  oauth: {
    /** Empty = the public base URL; must be set in production. */
    issuer: string;
    access_token_ttl: DurationString;
    refresh_token_ttl: DurationString;
    auth_code_ttl: DurationString;
  };
  mcp: {
    /** Origins a browser-based MCP client may call from, beside the issuer's own origin (docs/mcp.md). */
    allowed_origins: string[];
  };
  api_keys: {
    /** 0 = the built-in 20. */
    max_per_user: number;
    /** Days; 0 = no expiry. */
    default_ttl: number;
    /** `0s` disables the cap. */
    max_ttl: DurationString;
  };
  search: {
    backend: 'postgres' | 'opensearch';
    /** Vector length comes from `providers.embeddings.dimensions`. */
    opensearch: { url: string; index_prefix: string };
    hybrid: {
      enabled: boolean;
      rrf_k: number;
      /** 0.0 accepts every fused result. */
      min_score: number;
      over_fetch_multiplier: number;
    };
  };
  concepts: {
    min_shared_fact_count: number;
    stable_shared_fact_count: number;
    min_concept_fact_count: number;
  };
  task: {
    /** `0s` = unlimited. */
    job_timeout: DurationString;
    heartbeat_interval: DurationString;
    heartbeat_timeout: DurationString;
    rescue_on_startup: boolean;
    refresh_concept_relations_interval: DurationString;
    poll_interval: DurationString;
    retry: RetryConfig;
    /** Worker count per job kind; 0 = this process does not run the kind. */
    queues: Record<QueuedJobKind, number>;
  };
  providers: {
    resolution: {
      doi_resolver: string;
      fetch: { timeout: DurationString; max_body_bytes: number; user_agent: string };
      /** One document's extraction in the worker (text, or a PDF's images); past it a permanent "too complex". */
      extraction_timeout: DurationString;
      retry: RetryConfig & {
        /** 0 makes a 403 permanent. */
        retry_403_max_attempts: number;
      };
      auto_skip: { enabled: boolean; min_sample: number; failure_threshold: number; cooldown: DurationString };
    };
    decomposition: {
      chunking: { chunk_size: number; chunk_overlap: number };
      image_extraction: { max_image_bytes: number; max_images_per_source: number };
      concurrency: { fact: number; image: number; concept: number };
      concept: { fact_batch_size: number };
    };
    dedup: { threshold: number; catchup_max_age: DurationString; catchup_interval: DurationString };
    reports: { similarity_threshold: number; max_facts_per_sentence: number; min_sentence_runes: number };
    llm_retry: RetryConfig & { per_call_timeout: DurationString };
    ai: { embed_batch_size: number; embed_max_chars: number; rate_limit_wait_timeout: DurationString };
    llm: {
      /** local = the built-in rule-based model; openai = an OpenAI-compatible HTTP API. */
      provider: LlmProvider;
      model: string;
      /** Base URL of the OpenAI-compatible API, e.g. `http://localhost:11434/v1`; required for openai. */
      base_url: string;
      /** A secret (env LLM_API_KEY); empty sends no Authorization header. Never logged. */
      api_key: string;
      /** Whether the model accepts images (image facts from pixels, not only surrounding text). */
      vision: boolean;
    };
    embeddings: {
      /** none = no vectors: deduplication by content_hash only, lexical search only. */
      provider: EmbeddingsProvider;
      model: string;
      base_url: string;
      /** A secret (env EMBEDDINGS_API_KEY). Never logged. */
      api_key: string;
      /** Vector length; also the length of the search index's vector field. */
      dimensions: number;
    };
    summarization: { enabled: boolean; batch_size: number; max_concepts_per_run: number; max_tokens: number };
    refinement: {
      enabled: boolean;
      max_candidates_per_run: number;
      prune_threshold: number;
      max_tokens: number;
      max_concurrency: number;
    };
    synthesis: {
      enabled: boolean;
      max_tokens: number;
      thinking_level: ThinkingLevel;
      max_images: number;
      max_image_candidates: number;
      max_related_concepts: number;
      max_related_syntheses: number;
    };
    registry: {
      /** Empty disables the registry. */
      url: string;
      auth_mode: RegistryAuthMode;
      api_key: string;
      read_api_key: string;
      allowed_models: string[];
      /** When empty, the block above is the single registry with id `default`. */
      registries: RegistryEntryConfig[];
      per_page: number;
      timeout: DurationString;
    };
  };
  audit: { retention_days: number };
  /** Outbound fetches (src/providers/fetch/addressPolicy.ts): private, loopback and metadata addresses are refused unless allowed here. */
  network: {
    /** `auto`: allowed in the embedded and dev profiles only; `always`; `never`. */
    allow_loopback: 'auto' | 'always' | 'never';
    /** Host names reachable whatever they resolve to; `*.example.org` matches subdomains. */
    allow_hosts: string[];
    /** Address ranges reachable although private (`10.1.0.0/16`, `fd00::/8`, one address). */
    allow_cidrs: string[];
  };
  /** Trust for every TLS connection the service makes (src/config/tls.ts). */
  tls: {
    /** A PEM file of CA certificates trusted beside Node's own; '' for none. Relative to the working directory. */
    ca_file: string;
  };
  /** Limits on the credential routes (src/api/rateLimits.ts); per API node. */
  rate_limits: {
    enabled: boolean;
    /** Requests from one client address to the credential routes. */
    per_address: { max: number; window: DurationString };
    /** Failed sign-ins to one account, from any address; successes are not counted. */
    per_account_failures: { max: number; window: DurationString };
  };
  isolation: {
    default_database: string;
    /** Empty = closed: only `default_database`. */
    allowed_databases: string[];
  };
  bootstrap: {
    auto_promote_first_user: boolean;
    default_admin: boolean;
    default_repository: boolean;
  };
  default_repository_preset: RepositoryPreset;
  logging: { level: LogLevel };
  metrics: { enabled: boolean };
}

/** Raised for any configuration problem; `problems` holds one line per bad key. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  readonly problems: readonly string[];

  constructor(problems: string | readonly string[]) {
    const list = typeof problems === 'string' ? [problems] : problems;
    super(
      list.length === 1
        ? `invalid configuration: ${list[0]}`
        : `invalid configuration:\n${list.map((problem) => `  - ${problem}`).join('\n')}`,
    );
    this.problems = list;
  }
}
