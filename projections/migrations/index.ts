import type { Knex } from 'knex';
import { execStatements, migrateUnderLock } from '../../src/db/database.js';

/**
 * Read-model schema, applied in order and recorded in `schema_migrations`. Tables fall in two
 * kinds: projections (rebuildable from the log; listed by their projection's `tables`) and
 * service state that is deliberately kept out of the log (credentials, sessions, reservations).
 */
export interface Migration {
  id: string;
  up(knex: Knex): Promise<void>;
}

export const readModelMigrations: readonly Migration[] = [
  {
    id: '001_identity_and_repositories',
    async up(knex) {
      await execStatements(knex, `
        CREATE TABLE users (
          id text PRIMARY KEY,
          email text NOT NULL,
          name text NOT NULL DEFAULT '',
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL
        );
        CREATE INDEX users_email ON users (email);
        CREATE TABLE role_assignments (
          user_id text NOT NULL,
          role text NOT NULL,
          domain text NOT NULL,
          granted_at timestamptz NOT NULL,
          PRIMARY KEY (user_id, role, domain)
        );
        CREATE INDEX role_assignments_domain ON role_assignments (domain);
        CREATE TABLE repositories (
          id text PRIMARY KEY,
          name text NOT NULL,
          slug text NOT NULL,
          description text NOT NULL DEFAULT '',
          preset text NOT NULL,
          tier text NOT NULL,
          accepted_promptset_hashes jsonb NOT NULL DEFAULT '[]',
          registry_id text,
          created_by text NOT NULL,
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL,
          deleted_at timestamptz
        );
        CREATE INDEX repositories_slug ON repositories (slug);
        -- Service state, not projections: secrets stay out of the event log.
        CREATE TABLE credentials (
          user_id text PRIMARY KEY,
          email text NOT NULL UNIQUE,
          password_hash text NOT NULL,
          created_at timestamptz NOT NULL DEFAULT now(),
          updated_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE sessions (
          id text PRIMARY KEY,
          user_id text NOT NULL,
          refresh_token_hash text NOT NULL UNIQUE,
          created_at timestamptz NOT NULL DEFAULT now(),
          refresh_expires_at timestamptz NOT NULL,
          rotated_at timestamptz,
          revoked_at timestamptz
        );
        CREATE INDEX sessions_user ON sessions (user_id);
        CREATE TABLE slug_reservations (
          slug text PRIMARY KEY,
          repository_id text NOT NULL
        );
      `);
    },
  },
  {
    id: '002_sources_and_facts',
    async up(knex) {
      await execStatements(knex, `
        CREATE TABLE sources (
          id text PRIMARY KEY,
          repository_id text NOT NULL,
          origin text NOT NULL,
          url text,
          doi text,
          filename text,
          status text NOT NULL,
          failure text,
          title text,
          published_at text,
          document_kind text,
          content_type text,
          final_url text,
          body_sha256 text,
          body_bytes bigint,
          text_sha256 text,
          markdown_sha256 text,
          text_chars bigint,
          model_id text,
          fact_count int NOT NULL DEFAULT 0,
          created_by text NOT NULL,
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL
        );
        CREATE INDEX sources_repository ON sources (repository_id, created_at);
        CREATE TABLE facts (
          id text PRIMARY KEY,
          repository_id text NOT NULL,
          content text NOT NULL,
          content_hash text NOT NULL,
          fact_kind text NOT NULL DEFAULT 'text',
          status text NOT NULL DEFAULT 'stable',
          model_id text,
          created_at timestamptz NOT NULL,
          search tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
          UNIQUE (repository_id, content_hash)
        );
        CREATE INDEX facts_search ON facts USING gin (search);
        CREATE INDEX facts_repository ON facts (repository_id, created_at);
        CREATE TABLE fact_sources (
          fact_id text NOT NULL,
          source_id text NOT NULL,
          repository_id text NOT NULL,
          chunk_index int NOT NULL,
          source_text text NOT NULL DEFAULT '',
          PRIMARY KEY (fact_id, source_id)
        );
        CREATE INDEX fact_sources_source ON fact_sources (source_id);
      `);
    },
  },
];

export async function migrateReadModels(knex: Knex): Promise<string[]> {
  const ran: string[] = [];
  for (const migration of readModelMigrations) {
    // One node applies each migration; the others wait for the lock and then find it applied.
    await migrateUnderLock(knex, 'read_models', async (trx) => {
      await trx.raw(`CREATE TABLE IF NOT EXISTS schema_migrations (id text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
      if (await trx('schema_migrations').where({ id: migration.id }).first('id')) return;
      await migration.up(trx);
      await trx('schema_migrations').insert({ id: migration.id });
      ran.push(migration.id);
    });
  }
  return ran;
}
