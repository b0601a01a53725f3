import type { Knex } from 'knex';
import { execStatements } from '../../src/db/database.js';
import { applyMigrations, relationsExist, type Migrator } from '../../src/db/migrations.js';
import { conceptName, conceptNameKey } from '../../src/domain/concept/decider.js';
import { withoutCitationsSql } from '../../src/domain/concept/summaries.js';
import { REPORT_SEARCH_VECTOR } from '../../src/read/reports.js';
import { referenceKeyOfRegistered } from '../../src/domain/source/reference.js';
import { updateRows } from '../batchWrites.js';
import { refreshAliasText } from '../concepts.js';

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
  {
    // The knowledge pipeline (docs/pipeline.md, "Read models"). Facts now start `new` and become
    // `stable` or `merged` through deduplication; rows from before stay as they were.
    id: '003_pipeline',
    async up(knex) {
      await execStatements(knex, `
        ALTER TABLE facts ALTER COLUMN status SET DEFAULT 'new';
        ALTER TABLE facts ADD COLUMN merged_into text;
        ALTER TABLE facts ADD COLUMN promptset_hash text NOT NULL DEFAULT '';
        ALTER TABLE facts ADD COLUMN image_id text;
        ALTER TABLE facts ADD COLUMN embedding_model text;
        -- When deduplication kept the fact: the catch-up pass looks only at facts stable since its last run.
        ALTER TABLE facts ADD COLUMN stable_since timestamptz;
        CREATE INDEX facts_status ON facts (repository_id, status);
        CREATE INDEX facts_stable_since ON facts (repository_id, stable_since);
        CREATE INDEX facts_merged_into ON facts (merged_into);
        ALTER TABLE fact_sources ADD COLUMN sentence_index int NOT NULL DEFAULT -1;
        -- Every merge of a fact (loser -> survivor), kept after cleanup removes the loser's row:
        -- a source that extracts a merged or removed fact again links to the survivor.
        CREATE TABLE fact_redirects (
          fact_id text PRIMARY KEY,
          survivor_id text NOT NULL,
          repository_id text NOT NULL
        );
        CREATE TABLE concepts (
          id text PRIMARY KEY,
          repository_id text NOT NULL,
          canonical_name text NOT NULL,
          context text NOT NULL,
          ontology_class text,
          status text NOT NULL DEFAULT 'active',
          merged_into text,
          source_id text,
          fact_count int NOT NULL DEFAULT 0,
          embedding_model text,
          -- Space-joined aliases, so lexical concept search also finds a concept by an alias.
          alias_text text NOT NULL DEFAULT '',
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL,
          search tsvector GENERATED ALWAYS AS (to_tsvector('simple', canonical_name || ' ' || alias_text)) STORED
        );
        CREATE UNIQUE INDEX concepts_identity ON concepts (repository_id, lower(canonical_name), lower(context));
        CREATE INDEX concepts_search ON concepts USING gin (search);
        CREATE INDEX concepts_repository ON concepts (repository_id, status, fact_count);
        CREATE TABLE concept_aliases (
          concept_id text NOT NULL,
          repository_id text NOT NULL,
          alias text NOT NULL,
          alias_lower text NOT NULL,
          context_lower text NOT NULL,
          PRIMARY KEY (concept_id, alias_lower)
        );
        CREATE INDEX concept_aliases_lookup ON concept_aliases (repository_id, context_lower, alias_lower);
        CREATE TABLE fact_concepts (
          fact_id text NOT NULL,
          concept_id text NOT NULL,
          repository_id text NOT NULL,
          source_id text,
          PRIMARY KEY (fact_id, concept_id)
        );
        CREATE INDEX fact_concepts_concept ON fact_concepts (concept_id);
        -- The concepts projection's own copy of fact merges: projections keep separate
        -- checkpoints, so it never reads a table that another projection writes.
        CREATE TABLE fact_concept_redirects (
          fact_id text PRIMARY KEY,
          survivor_id text NOT NULL
        );
        CREATE TABLE concept_relations (
          repository_id text NOT NULL,
          concept_a text NOT NULL,
          concept_b text NOT NULL,
          shared_fact_count int NOT NULL,
          updated_at timestamptz NOT NULL,
          PRIMARY KEY (repository_id, concept_a, concept_b)
        );
        CREATE INDEX concept_relations_b ON concept_relations (repository_id, concept_b);
        CREATE TABLE host_health (
          host text PRIMARY KEY,
          attempts int NOT NULL DEFAULT 0,
          failures int NOT NULL DEFAULT 0,
          last_failure_at timestamptz,
          last_error text,
          updated_at timestamptz NOT NULL
        );
        ALTER TABLE repositories ADD COLUMN prompt_overrides jsonb NOT NULL DEFAULT '{}';
        ALTER TABLE repositories ADD COLUMN custom_contexts jsonb NOT NULL DEFAULT '[]';
      `);
    },
  },
  {
    // host-health kept reading `sources` for the host of a source; it now keeps its own mapping,
    // filled from SourceRegistered. A database migrated before has host_health rows but no
    // mapping, so the embedded runner replays the projection from position 0 (one row per host).
    // The bus runner's consumers keep their offsets: there, run `factlog projections rebuild host-health`.
    id: '004_host_health_sources',
    async up(knex) {
      await knex.raw(`CREATE TABLE host_health_sources (source_id text PRIMARY KEY, host text NOT NULL)`);
      await knex.raw(`TRUNCATE host_health`);
      await knex.raw(`DO $$ BEGIN
        IF to_regclass('projection_checkpoints') IS NOT NULL THEN
          UPDATE projection_checkpoints SET position = 0, updated_at = now() WHERE name = 'host-health';
        END IF;
      END $$`);
    },
  },
  {
    // Investigations (projections/investigations.ts): sources gathered around a question.
    id: '005_investigations',
    async up(knex) {
      await execStatements(knex, `
        CREATE TABLE investigations (
          id text PRIMARY KEY,
          repository_id text NOT NULL,
          title text NOT NULL,
          topic text NOT NULL DEFAULT '',
          created_by text NOT NULL,
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL,
          deleted_at timestamptz,
          search tsvector GENERATED ALWAYS AS (to_tsvector('english', title || ' ' || topic)) STORED
        );
        CREATE INDEX investigations_repository ON investigations (repository_id, created_at);
        CREATE INDEX investigations_search ON investigations USING gin (search);
        CREATE TABLE investigation_sources (
          investigation_id text NOT NULL,
          source_id text NOT NULL,
          repository_id text NOT NULL,
          added_at timestamptz NOT NULL,
          -- the global position of the event that added it: the order sources were gathered in
          position bigint NOT NULL,
          PRIMARY KEY (investigation_id, source_id)
        );
        CREATE INDEX investigation_sources_source ON investigation_sources (source_id);
      `);
    },
  },
  {
    // Reports and their per-sentence annotations (projections/reports.ts). `report_sentences`
    // lists the annotated sentences (those of at least providers.reports.min_sentence_runes
    // runes), `report_annotations` their facts, best first (`rank`).
    id: '006_reports',
    async up(knex) {
      await execStatements(knex, `
        CREATE TABLE reports (
          id text PRIMARY KEY,
          repository_id text NOT NULL,
          title text NOT NULL,
          text text NOT NULL,
          topic text,
          parent_id text,
          origin text NOT NULL,
          filename text,
          status text NOT NULL,
          revision integer NOT NULL,
          failure text,
          sentence_count integer NOT NULL DEFAULT 0,
          fact_count integer NOT NULL DEFAULT 0,
          model_id text,
          created_by text NOT NULL,
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL,
          annotated_at timestamptz
        );
        CREATE INDEX reports_repository ON reports (repository_id, created_at DESC);
        CREATE INDEX reports_parent ON reports (repository_id, parent_id) WHERE parent_id IS NOT NULL;
        CREATE INDEX reports_search ON reports USING gin (to_tsvector('english', title || ' ' || text));
        CREATE TABLE report_sentences (
          report_id text NOT NULL,
          sentence_index integer NOT NULL,
          repository_id text NOT NULL,
          text text NOT NULL,
          start_offset integer NOT NULL,
          end_offset integer NOT NULL,
          carried boolean NOT NULL,
          PRIMARY KEY (report_id, sentence_index)
        );
        CREATE TABLE report_annotations (
          report_id text NOT NULL,
          sentence_index integer NOT NULL,
          fact_id text NOT NULL,
          repository_id text NOT NULL,
          rank integer NOT NULL,
          score double precision NOT NULL,
          posture text NOT NULL,
          PRIMARY KEY (report_id, sentence_index, fact_id)
        );
        CREATE INDEX report_annotations_fact ON report_annotations (repository_id, fact_id);
      `);
    },
  },
  {
    // Summary slices and syntheses of concepts (projections/summaries.ts). concept_summaries is
    // also the lexical index of the `summaries` search collection (src/search/collections/summaries.ts).
    id: '007_concept_summaries',
    async up(knex) {
      await execStatements(knex, `
        CREATE TABLE concept_summaries (
          id text PRIMARY KEY,
          repository_id text NOT NULL,
          concept_id text NOT NULL,
          slice_number int NOT NULL,
          is_open boolean NOT NULL,
          status text NOT NULL,
          content text NOT NULL,
          fact_ids jsonb NOT NULL,
          fact_count int NOT NULL,
          model_id text NOT NULL,
          reason text NOT NULL,
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL,
          search tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
          UNIQUE (concept_id, slice_number)
        );
        CREATE INDEX concept_summaries_search ON concept_summaries USING gin (search);
        CREATE INDEX concept_summaries_repository ON concept_summaries (repository_id, updated_at);
        -- Which slice covers each fact of a concept: what summarize_concepts compares with fact_concepts.
        CREATE TABLE concept_summary_facts (
          concept_id text NOT NULL,
          fact_id text NOT NULL,
          repository_id text NOT NULL,
          slice_number int NOT NULL,
          PRIMARY KEY (concept_id, fact_id)
        );
        CREATE INDEX concept_summary_facts_repository ON concept_summary_facts (repository_id, concept_id);
        CREATE TABLE concept_syntheses (
          concept_id text PRIMARY KEY,
          id text NOT NULL,
          repository_id text NOT NULL,
          content text NOT NULL,
          fact_ids jsonb NOT NULL,
          slice_ids jsonb NOT NULL,
          related_concept_ids jsonb NOT NULL,
          related_synthesis_ids jsonb NOT NULL,
          image_fact_ids jsonb NOT NULL,
          model_id text NOT NULL,
          inputs_hash text NOT NULL,
          reason text NOT NULL,
          created_at timestamptz NOT NULL,
          updated_at timestamptz NOT NULL
        );
        CREATE INDEX concept_syntheses_repository ON concept_syntheses (repository_id);
      `);
    },
  },
  {
    // Hashes of rotated session refresh tokens: presenting one again is reuse (a stolen token),
    // and revokes its whole session (src/auth/identity.ts, refresh). Service state, not a projection.
    id: '008_retired_refresh_tokens',
    async up(knex) {
      await execStatements(knex, `
        CREATE TABLE retired_refresh_tokens (
          token_hash text PRIMARY KEY,
          session_id text NOT NULL,
          retired_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX retired_refresh_tokens_session ON retired_refresh_tokens (session_id);
      `);
    },
  },
  {
    // OAuth 2.1 server (src/app/oauth.ts). oauth_clients is a projection (projections/oauthClients.ts);
    // grants, codes and refresh tokens are service state: codes and tokens only as SHA-256 hashes, never in the log.
    id: '009_oauth',
    async up(knex) {
      await execStatements(knex, `
        CREATE TABLE oauth_clients (
          client_id text PRIMARY KEY,
          client_name text NOT NULL,
          redirect_uris jsonb NOT NULL,
          grant_types jsonb NOT NULL,
          application_type text NOT NULL,
          client_uri text,
          software_id text,
          software_version text,
          registered_at timestamptz NOT NULL
        );
        -- One row per user approval: every code, refresh token and access token (claim sid) descends from one grant.
        CREATE TABLE oauth_grants (
          id text PRIMARY KEY,
          client_id text NOT NULL,
          user_id text NOT NULL,
          scope text NOT NULL,
          resource text NOT NULL,
          redirect_uri text NOT NULL,
          created_at timestamptz NOT NULL DEFAULT now(),
          revoked_at timestamptz,
          revoked_reason text
        );
        CREATE INDEX oauth_grants_user ON oauth_grants (user_id);
        CREATE TABLE oauth_codes (
          code_hash text PRIMARY KEY,
          grant_id text NOT NULL,
          code_challenge text NOT NULL,
          expires_at timestamptz NOT NULL,
          used_at timestamptz,
          created_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE oauth_refresh_tokens (
          token_hash text PRIMARY KEY,
          grant_id text NOT NULL,
          expires_at timestamptz NOT NULL,
          rotated_at timestamptz,
          created_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX oauth_refresh_tokens_grant ON oauth_refresh_tokens (grant_id);
      `);
    },
  },
  {
    // Personal API keys (src/app/apiKeys.ts). api_keys is a projection (projections/apiKeys.ts);
    // api_key_secrets is service state: the key's SHA-256 hash, the hint shown in lists and the
    // last use, none of which belong in the log.
    id: '010_api_keys',
    async up(knex) {
      await execStatements(knex, `
        CREATE TABLE api_keys (
          id text PRIMARY KEY,
          user_id text NOT NULL,
          name text NOT NULL,
          scopes jsonb NOT NULL,
          repository_id text,
          created_at timestamptz NOT NULL,
          expires_at timestamptz,
          revoked_at timestamptz
        );
        CREATE INDEX api_keys_user ON api_keys (user_id);
        CREATE TABLE api_key_secrets (
          key_id text PRIMARY KEY,
          user_id text NOT NULL,
          token_hash text NOT NULL UNIQUE,
          token_hint text NOT NULL,
          created_at timestamptz NOT NULL DEFAULT now(),
          last_used_at timestamptz
        );
        CREATE INDEX api_key_secrets_user ON api_key_secrets (user_id);
      `);
    },
  },
  {
    // The permission audit (src/app/audit.ts): service state written by the API, not derived from
    // the log; rows older than audit.retention_days are deleted daily.
    id: '011_permission_audit',
    async up(knex) {
      await execStatements(knex, `
        CREATE TABLE permission_audit (
          id bigserial PRIMARY KEY,
          occurred_at timestamptz NOT NULL,
          user_id text NOT NULL,
          credential_kind text NOT NULL,
          credential_id text NOT NULL,
          permission text NOT NULL,
          domain text NOT NULL,
          repository_id text,
          allowed boolean NOT NULL,
          transport text NOT NULL,
          operation text NOT NULL,
          client_address text,
          request_id text
        );
        CREATE INDEX permission_audit_time ON permission_audit (occurred_at);
        CREATE INDEX permission_audit_repository ON permission_audit (repository_id, occurred_at) WHERE repository_id IS NOT NULL;
        CREATE INDEX permission_audit_user ON permission_audit (user_id, occurred_at);
      `);
    },
  },
  {
    // A slice's rows by its number: rewriting a large concept's open slice found them among all
    // the concept's rows (the primary key's concept_id prefix), 12 ms a statement at 1,000 pages.
    id: '012_concept_summary_facts_slice',
    async up(knex) {
      await execStatements(knex, `CREATE INDEX concept_summary_facts_slice ON concept_summary_facts (concept_id, slice_number);`);
    },
  },
  {
    // Adding a source looks for the same URL or DOI in the repository first; without these the
    // lookup read every source of the repository (1.4 ms a POST at 1,000 pages, growing with them).
    // Neither column changes after the insert, so the status updates stay heap-only.
    id: '013_sources_reference',
    async up(knex) {
      await execStatements(knex, `
        CREATE INDEX sources_url ON sources (repository_id, url) WHERE url IS NOT NULL;
        CREATE INDEX sources_doi ON sources (repository_id, doi) WHERE doi IS NOT NULL;
      `);
    },
  },
  {
    // Secrets the service makes for itself where none is configured (the token signing secret:
    // src/app/wiring/identity.ts, withSigningSecret). Service state, never in the log.
    id: '014_installation_secrets',
    async up(knex) {
      await execStatements(knex, `CREATE TABLE installation_secrets (name text PRIMARY KEY, value text NOT NULL, created_at timestamptz NOT NULL DEFAULT now());`);
    },
  },
  {
    // A URL's #fragment is dropped when a source is added (src/app/sources.ts, normalizeReference),
    // but a source added before keeps it in its events and so in its url: adding `page` must find
    // that `page#part`. The lookup is by the document a URL names, its text before the '#' (a '#'
    // elsewhere in a serialized URL is percent-encoded).
    id: '015_sources_document_url',
    async up(knex) {
      await execStatements(knex, `
        CREATE INDEX sources_document_url ON sources (repository_id, split_part(url, '#', 1)) WHERE url IS NOT NULL;
        DROP INDEX sources_url;
      `);
    },
  },
  {
    // A source's facts are listed in the order its decomposition gave them (text facts in document
    // order, then image facts): a fact's place in its FactsExtracted list. Rows projected before
    // this keep -1 and are listed by chunk and sentence until the facts projection is rebuilt (before
    // this, by chunk and then the fact's creation time: an upgraded source's facts may come in a new order).
    id: '016_fact_sources_extraction_order',
    async up(knex) {
      await execStatements(knex, `ALTER TABLE fact_sources ADD COLUMN extraction_order int NOT NULL DEFAULT -1;`);
    },
  },
  {
    // DOIs compare case-insensitively: adding 10.1000/ABC finds a source added as 10.1000/abc.
    id: '017_sources_doi_lower',
    async up(knex) {
      await execStatements(knex, `
        CREATE INDEX sources_doi_lower ON sources (repository_id, lower(doi)) WHERE doi IS NOT NULL;
        DROP INDEX sources_doi;
      `);
    },
  },
  {
    // A concept's name is one concept's per context among the active ones only: a concept that
    // moves back into a context it was migrated out of takes a new id there (conceptIdOfReturn),
    // beside its old, merged row of the same name.
    id: '018_concepts_identity_active',
    async up(knex) {
      await execStatements(knex, `
        DROP INDEX concepts_identity;
        CREATE UNIQUE INDEX concepts_identity ON concepts (repository_id, lower(canonical_name), lower(context)) WHERE status = 'active';
      `);
    },
  },
  {
    // The users projection drops a deleted repository's role assignments since this migration;
    // those of repositories deleted before it go here (a rebuild would drop them the same way).
    id: '019_role_assignments_of_deleted_repositories',
    async up(knex) {
      await execStatements(knex, `
        DELETE FROM role_assignments ra USING repositories r WHERE ra.domain = 'repository:' || r.id AND r.deleted_at IS NOT NULL;
      `);
    },
  },
  {
    // The OAuth consent form's authorization requests are signed values, not rows: the ids of
    // those answered (approved or denied) are kept so that each is answered once. Service state,
    // purged a day after the last form carrying the request expires (src/auth/oauth/grants.ts).
    id: '020_oauth_answered_requests',
    async up(knex) {
      await execStatements(knex, `
        CREATE TABLE oauth_answered_requests (
          request_id text PRIMARY KEY,
          expires_at timestamptz NOT NULL,
          answered_at timestamptz NOT NULL DEFAULT now()
        );
      `);
    },
  },
  {
    // Adding a URL or DOI looks the repository's sources up by one stored key per source
    // (src/domain/source/reference.ts, referenceKey): `url:<the URL in today's spelling, without
    // its fragment>` or `doi:<the DOI in lower case>`, a doi.org URL being its DOI. The lookup
    // compared the url before its '#' (015) or lower(doi) (017) with today's spelling, so a source
    // an older release stored under another (`page?`, `%6b`, a host's trailing dot, a doi.org URL)
    // was never found and was added again. The projection keys each SourceRegistered; the rows from
    // before are keyed here by the same function, from their url and doi (the event's, as written).
    // The two indexes of 015 and 017 served only that lookup. A hash index: a btree entry is
    // limited to 2,704 bytes, and a URL of the 4,096 characters the API takes is longer when its
    // characters do not compress (the projection's insert failed on it).
    id: '021_sources_reference_key',
    async up(knex) {
      await execStatements(knex, `ALTER TABLE sources ADD COLUMN reference_key text;`);
      await keySourcesAgain(knex, (sources) => sources.where((keyed) => keyed.whereNotNull('url').orWhereNotNull('doi')));
      await execStatements(knex, `
        CREATE INDEX sources_reference_key ON sources USING hash (reference_key) WHERE reference_key IS NOT NULL;
        DROP INDEX sources_document_url;
        DROP INDEX sources_doi_lower;
      `);
    },
  },
  {
    // A URL's reference key writes its percent-escapes with upper-case hex digits (RFC 3986,
    // 6.2.2.1: `a%2fb` is `a%2Fb`); 021 and the projection kept the case a URL was added with, so
    // `…%2f…` and `…%2F…` were two keys, and adding the one never found a source stored as the
    // other. The rows keyed before are keyed again here by today's function, as 021 keyed them.
    // Only a url with a `%` can have another key now. Two sources that now share a key (both
    // spellings were added before) stay two rows, as 021 left sources added twice: the key's index
    // is not unique, and the lookup answers the older (created_at, id); a user who wants one
    // deletes the other.
    id: '022_sources_reference_key_escapes',
    async up(knex) {
      await keySourcesAgain(knex, (sources) => sources.where('url', 'like', '%\\%%'));
    },
  },
  {
    // Concept names are composed (NFC) where they enter the domain, and the concepts projection
    // spells and keys alias rows by conceptName and conceptNameKey (lower case composed again);
    // before, a name a model or source spelt decomposed (`cafe\u0301`) was keyed as written, so
    // neither spelling found it. The rows from before are spelt and keyed again here, as a
    // rebuild would: only a name with a non-ASCII character can change. Two rows of one concept
    // that now share a key (the primary key's) become one: a row spelt so already stays.
    // A canonical name stays as its event recorded it: composed, it could take the identity
    // (`concepts_identity`) of a twin that the composed spelling made as a second concept, which
    // stays a concept of its own; each is found by its alias rows. The alias text of the concepts
    // whose rows change is written again by 024 (it writes every concept's).
    id: '023_concept_aliases_nfc',
    async up(knex) {
      await composeConceptAliases(knex);
    },
  },
  {
    // Concept names are compared by one key, conceptNameKey (src/domain/concept/decider.ts), the
    // key of concept ids and alias rows; the `concepts` rows now store their canonical name's key
    // (`name_key`, written by the projection), and every comparison of a name in SQL uses it
    // instead of PostgreSQL's lower(), which follows the database's ctype: in a C-ctype database
    // it lower-cases ASCII only (`ÉMILE` ≠ `émile`), and a decomposed name never equals its
    // composed key. Keyed here from TypeScript, as a rebuild keys them; the alias text (the
    // aliases other than the canonical name) is made again by the key, so a canonical name that
    // lower() did not match stops being listed as its own alias.
    // The unique index on (lower(canonical_name), lower(context)) goes for a plain one on the key:
    // a concept's id is derived from its key and context, so the id (the primary key) is the
    // identity; two ids of one key are twins from before names were composed, which the service
    // merges at start-up (src/app/conceptTwins.ts) and a rebuild must keep apart until their
    // merge event, as the live read model did. Unique by lower() it made the projection drop the
    // second of two concepts whose keys differ where lower() does not (`ΟΔΟΣ` and `οδοσ` in a
    // UTF-8 database): a rebuild of the concepts projection brings such a concept back.
    id: '024_concepts_name_key',
    async up(knex) {
      await execStatements(knex, `ALTER TABLE concepts ADD COLUMN name_key text;`);
      await keyConcepts(knex);
      await execStatements(knex, `
        ALTER TABLE concepts ALTER COLUMN name_key SET NOT NULL;
        DROP INDEX concepts_identity;
        CREATE INDEX concepts_name_key ON concepts (repository_id, name_key);
      `);
    },
  },
  {
    // The revision a report's annotations are of (`ReportAnnotated.revision`): the annotations
    // route answered the report's current revision beside the last annotation's sentences, so
    // after an edit their offsets, which point into the text they annotated, read as offsets into
    // the new text. A report annotated now is annotated at its revision; one changed since its
    // last annotation (pending, processing or failed) has no revision to take here: null until
    // its next annotation, or until the reports projection is rebuilt.
    id: '025_reports_annotated_revision',
    async up(knex) {
      await execStatements(knex, `
        ALTER TABLE reports ADD COLUMN annotated_revision integer;
        UPDATE reports SET annotated_revision = revision WHERE status = 'annotated';
      `);
    },
  },
  {
    // A fact whose every source was deleted (`unsourced`, written by the facts projection at
    // SourceDeleted, cleared when a source links it again) is hidden from every read at once:
    // until cleanup_facts retracted it, it was still found by search and read by id. The partial
    // index keeps the readers' lookup of a repository's unsourced facts to the few there are.
    // Facts an earlier deletion left without a source, their retraction still to come, are
    // marked here.
    id: '026_facts_unsourced',
    async up(knex) {
      await execStatements(knex, `
        ALTER TABLE facts ADD COLUMN unsourced boolean NOT NULL DEFAULT false;
        UPDATE facts SET unsourced = true
         WHERE status <> 'merged' AND NOT EXISTS (SELECT 1 FROM fact_sources s WHERE s.fact_id = facts.id);
        CREATE INDEX facts_unsourced ON facts (repository_id) WHERE unsourced;
      `);
    },
  },
  {
    // Search vectors without fact citations' targets (`<fact:ID>`, bare `(fact:ID)`:
    // withoutCitationsSql, from the one definition of a citation, FACT_CITATION_PATTERN):
    // PostgreSQL's parser skips `<fact:ID>` as a tag but read a bare `(fact:ID)` as words, so
    // `fact` or a piece of a cited id matched every summary slice or report that held one. The
    // OpenSearch index strips the same (searchableSummaryText). The generated column is made
    // again (a rewrite of concept_summaries), and the reports index on the expression the
    // report search queries with (REPORT_SEARCH_VECTOR).
    id: '027_search_without_citations',
    async up(knex) {
      await execStatements(knex, `
        ALTER TABLE concept_summaries DROP COLUMN search;
        ALTER TABLE concept_summaries ADD COLUMN search tsvector GENERATED ALWAYS AS (to_tsvector('english', ${withoutCitationsSql('content')})) STORED;
        CREATE INDEX concept_summaries_search ON concept_summaries USING gin (search);
        DROP INDEX reports_search;
        CREATE INDEX reports_search ON reports USING gin (${REPORT_SEARCH_VECTOR});
      `);
    },
  },
  {
    // Idempotency keys of the creations a client may retry (src/app/idempotency.ts): a retried
    // `POST /repositories` whose answer was lost made a second repository. Service state, not a
    // projection: a rebuild leaves it alone. One row per user and key, with what the first
    // request asked (its fingerprint) and, once answered, the answer it is replayed with;
    // `status` null while the first request runs.
    id: '028_idempotency_keys',
    async up(knex) {
      await execStatements(knex, `
        CREATE TABLE idempotency_keys (
          user_id text NOT NULL,
          key text NOT NULL,
          fingerprint text NOT NULL,
          created_at timestamptz NOT NULL,
          status integer,
          content_type text,
          body text,
          PRIMARY KEY (user_id, key)
        );
        CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);
      `);
    },
  },
  {
    // A URL or DOI registered by an add that answered before the `sources` read model had it
    // (its wait ran out, or the projection was stopped or failed): the next add of that reference
    // waits for the read model to reach the registration's position before it trusts that the
    // repository lacks it, and removes the mark. Service state, not a projection: a rebuild
    // leaves it alone. 031 replaced it with the marks of every lock (lock_pending_positions).
    id: '029_source_references_pending',
    async up(knex) {
      await execStatements(knex, `
        CREATE TABLE source_references_pending (
          repository_id text NOT NULL,
          reference_key text NOT NULL,
          source_id text NOT NULL,
          position bigint NOT NULL,
          created_at timestamptz NOT NULL,
          PRIMARY KEY (repository_id, reference_key)
        );
      `);
    },
  },
  {
    // Concept names are keyed with their compatibility forms folded (NFKC, conceptNameKey):
    // `ＡＩ` and `AI`, `ﬁ` and `fi`, `H₂O` and `H2O` were two keys, so a name a source spelt with
    // full-width letters or a ligature made a concept of its own and was not found by its plain
    // spelling. NFKC changes no ASCII text: only the alias rows and concepts with a non-ASCII
    // character are keyed again, as 023 and 024 keyed them (two alias rows of one concept that
    // now meet on one key become one), and their alias text made again by the new keys. Two
    // concepts that now share a key are twins, merged at start-up (src/app/conceptTwins.ts).
    id: '030_concept_names_nfkc',
    async up(knex) {
      await composeConceptAliases(knex);
      await keyConcepts(
        knex,
        `octet_length(canonical_name) <> char_length(canonical_name)
         OR EXISTS (SELECT 1 FROM concept_aliases a WHERE a.concept_id = concepts.id AND octet_length(a.alias) <> char_length(a.alias))`,
      );
    },
  },
  {
    // Positions a lock's next holder waits for (src/app/lockMarks.ts): a command that answered
    // under a named lock before a read model its holders decide on had its events leaves the
    // lock's name, that projection and the write's position; the next holder of the name waits for
    // the projection to reach it, then removes the row. One table for every lock, in place of the
    // source adds' own (029): their rows move here under their lock's name. Service state, not a
    // projection: a rebuild leaves it alone.
    id: '031_lock_pending_positions',
    async up(knex) {
      await execStatements(knex, `
        CREATE TABLE lock_pending_positions (
          lock_name text NOT NULL,
          projection text NOT NULL,
          position bigint NOT NULL,
          created_at timestamptz NOT NULL,
          PRIMARY KEY (lock_name, projection)
        );
        INSERT INTO lock_pending_positions (lock_name, projection, position, created_at)
          SELECT 'factlog.source-reference.' || repository_id || '.' || reference_key, 'sources', position, created_at FROM source_references_pending;
        DROP TABLE source_references_pending;
      `);
    },
  },
  {
    // A mark names the stream of the write it was left for, and is kept per stream: the bus
    // runner, whose consumers keep no order across streams, asks whether the projection's
    // checkpoint of that stream has the write, not whether its consumer group owes nothing (under
    // the pipeline's appends it nearly always owes something, and the next holder was refused
    // long after the write was applied). A lock's holders marking writes of two streams keep a
    // row each. Rows from before it have the stream '' (unknown): waited for as before.
    id: '032_lock_pending_positions_stream',
    async up(knex) {
      await execStatements(knex, `
        ALTER TABLE lock_pending_positions ADD COLUMN stream_id text NOT NULL DEFAULT '';
        ALTER TABLE lock_pending_positions DROP CONSTRAINT lock_pending_positions_pkey;
        ALTER TABLE lock_pending_positions ADD PRIMARY KEY (lock_name, projection, stream_id);
      `);
    },
  },
  {
    // The end of a rebuild under way (the log's head when it began), kept with the projection's
    // checkpoint of the embedded runner and cleared in the transaction that moves the checkpoint
    // to it: a start that finds it goes on as a rebuild (`rebuilding`, a 503 for an entity not
    // re-applied yet) instead of a catch-up that reads as complete. The runner makes the table
    // with the column on its first start (migrateProjectionCheckpoints); a database it ran on
    // before gets the column here. NULL on every row: no rebuild is under way while it migrates.
    id: '033_projection_checkpoints_rebuild_target',
    async up(knex) {
      await knex.raw('ALTER TABLE IF EXISTS projection_checkpoints ADD COLUMN IF NOT EXISTS rebuild_target bigint');
    },
  },
];

/**
 * Migration 024: every concept's `name_key` (conceptNameKey of its canonical name, as the
 * projection writes it), a thousand concepts at a time in id order, and its alias text made again
 * by that key (refreshAliasText). 030: only the concepts `only` (an SQL condition) selects.
 */
async function keyConcepts(knex: Knex, only?: string): Promise<void> {
  let after = '';
  for (;;) {
    const page = knex('concepts').where('id', '>', after);
    if (only !== undefined) page.whereRaw(`(${only})`);
    const rows: Array<{ id: string; canonical_name: string }> = await page.orderBy('id').limit(1000).select('id', 'canonical_name');
    if (rows.length === 0) return;
    await updateRows(knex, 'concepts', 'id', { name_key: 'text' }, rows.map((row) => ({ id: row.id, name_key: conceptNameKey(row.canonical_name) })));
    await refreshAliasText(knex, rows.map((row) => row.id));
    after = rows[rows.length - 1]!.id;
  }
}

/**
 * Migrations 023 and 030: the alias rows with a non-ASCII character (more bytes than characters), a
 * thousand concepts at a time in id order, spelt by conceptName and keyed by conceptNameKey; a
 * row whose spelling or key changes is replaced, unless its concept has a row of the new key
 * already (that row stays, as the projection keeps an alias's first spelling). The alias text
 * is left to 024: refreshAliasText compares by the `name_key` column that 024 adds.
 */
async function composeConceptAliases(knex: Knex): Promise<void> {
  const nonAscii = 'octet_length(alias) <> char_length(alias)';
  let after = '';
  for (;;) {
    const ids = await knex('concept_aliases').where('concept_id', '>', after).whereRaw(nonAscii).distinct('concept_id').orderBy('concept_id').limit(1000).pluck<string[]>('concept_id');
    if (ids.length === 0) return;
    const rows: Array<{ concept_id: string; repository_id: string; alias: string; alias_lower: string; context_lower: string }> = await knex('concept_aliases')
      .whereIn('concept_id', ids)
      .whereRaw(nonAscii)
      .orderBy(['concept_id', 'alias_lower'])
      .select('concept_id', 'repository_id', 'alias', 'alias_lower', 'context_lower');
    const changed = rows
      .map((row) => ({ row, alias: conceptName(row.alias), aliasLower: conceptNameKey(row.alias) }))
      .filter(({ row, alias, aliasLower }) => alias !== row.alias || aliasLower !== row.alias_lower);
    for (const { row, alias, aliasLower } of changed) {
      await knex('concept_aliases').where({ concept_id: row.concept_id, alias_lower: row.alias_lower }).delete();
      await knex('concept_aliases')
        .insert({ concept_id: row.concept_id, repository_id: row.repository_id, alias, alias_lower: aliasLower, context_lower: row.context_lower })
        .onConflict(['concept_id', 'alias_lower'])
        .ignore();
    }
    after = ids[ids.length - 1]!;
  }
}

/**
 * Keys again, by today's `referenceKeyOfRegistered` (the function the projection and the command
 * side use), the sources `which` selects, a thousand at a time in id order, writing only the keys
 * that change (migrations 021 and 022).
 */
async function keySourcesAgain(knex: Knex, which: (sources: Knex.QueryBuilder) => Knex.QueryBuilder): Promise<void> {
  let after = '';
  for (;;) {
    const rows: Array<{ id: string; url: string | null; doi: string | null; reference_key: string | null }> = await which(knex('sources').where('id', '>', after))
      .orderBy('id')
      .limit(1000)
      .select('id', 'url', 'doi', 'reference_key');
    if (rows.length === 0) return;
    const keyed = rows.map((row) => ({ id: row.id, reference_key: referenceKeyOfRegistered(row) })).filter((row, i) => row.reference_key !== rows[i]!.reference_key);
    if (keyed.length > 0) await updateRows(knex, 'sources', 'id', { reference_key: 'text' }, keyed);
    after = rows[rows.length - 1]!.id;
  }
}

/**
 * A database migrated by a newer factlog: `schema_migrations` names migrations this code does not
 * have. Its schema is one this code was not written for, so nothing may run on it (a later
 * statement would fail on a renamed column, or quietly write what the newer code reads otherwise).
 */
export class NewerSchemaError extends Error {
  constructor(readonly unknownIds: readonly string[]) {
    super(
      `the database was migrated by a newer factlog: it holds migration${unknownIds.length === 1 ? '' : 's'} ${unknownIds.join(', ')}, which this version does not know; ` +
        'run the newer factlog on it (or restore a backup made by this version)',
    );
    this.name = 'NewerSchemaError';
  }
}

/** Throws NewerSchemaError when `schema_migrations` records ids that `readModelMigrations` lacks (the only list that table records). */
export async function refuseNewerSchema(knex: Knex): Promise<void> {
  if (!(await relationsExist(knex, 'schema_migrations'))) return; // a new database
  const known = new Set(readModelMigrations.map((migration) => migration.id));
  const recorded = await knex('schema_migrations').orderBy('id').pluck<string[]>('id');
  const unknownIds = recorded.filter((id) => !known.has(id));
  if (unknownIds.length > 0) throw new NewerSchemaError(unknownIds);
}

/** Whether `schema_migrations` records `id` (a database without the table records none). */
async function recorded(knex: Knex, id: string): Promise<boolean> {
  if (!(await relationsExist(knex, 'schema_migrations'))) return false;
  return (await knex('schema_migrations').where({ id }).first('id')) !== undefined;
}

/** The read-model migrations as steps (src/db/migrations.ts), each recorded in `schema_migrations` once applied. */
export const readModelMigrator: Migrator = {
  schema: 'read models',
  lockName: 'read_models',
  steps: readModelMigrations.map((migration) => ({
    id: migration.id,
    applied: (knex: Knex) => recorded(knex, migration.id),
    up: async (trx: Knex.Transaction) => {
      await trx.raw(`CREATE TABLE IF NOT EXISTS schema_migrations (id text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
      await migration.up(trx);
      await trx('schema_migrations').insert({ id: migration.id });
    },
  })),
};

/** Applies the read-model migrations not yet applied; refuses first a database a newer factlog migrated. Returns the ids applied. */
export async function migrateReadModels(knex: Knex): Promise<string[]> {
  await refuseNewerSchema(knex);
  // One node applies each migration; the others wait for the lock and then find it applied.
  return applyMigrations(knex, readModelMigrator);
}
