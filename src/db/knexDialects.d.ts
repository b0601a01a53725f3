// knex ships no declarations for its dialect modules; PreparingPgClient (./serverPrepared.ts) extends the PostgreSQL one.
declare module 'knex/lib/dialects/postgres/index.js' {
  import type { Knex } from 'knex';

  /** knex's PostgreSQL client; `_query` sends one compiled statement on a node-postgres connection. */
  export default class PgDialect extends Knex.Client {
    _query(connection: unknown, obj: unknown): Promise<unknown>;
  }
}
