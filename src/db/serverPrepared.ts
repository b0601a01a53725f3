import { createHash } from 'node:crypto';
// knex's PostgreSQL dialect, to extend (src/db/knexDialects.d.ts declares the part used here).
import PgDialect from 'knex/lib/dialects/postgres/index.js';
import { isChangedResultType } from './preparedStatementErrors.js';
import { backgroundLevel } from './priority.js';

/**
 * Statements of a PostgreSQL connection's session kept prepared, per name (node-postgres' own
 * bookkeeping: a name it has parsed on the connection is bound and executed without a Parse).
 */
interface PgConnection {
  connection: { parsedStatements: Record<string, string> };
}

interface QueryObject {
  sql: string;
  bindings?: readonly unknown[];
  options?: Record<string, unknown>;
}

/** At most this many named statements a connection: beyond them a statement goes unnamed, parsed and planned each time. */
export const PREPARED_PER_CONNECTION = 128;

/** A statement's name on the server: its text's digest (the same text, the same name, on every connection). */
export function preparedStatementName(sql: string): string {
  return `factlog_${createHash('sha1').update(sql).digest('hex').slice(0, 32)}`;
}

/** Names refused on a connection (a table's row type changed under a prepared statement): sent unnamed from then on. */
const refused = new WeakMap<object, Set<string>>();

/**
 * knex's PostgreSQL client, with the projection runner's statements as named prepared
 * statements of their connection.
 *
 * Every statement knex sends is unnamed: the server parses, analyses and plans it each time.
 * The read models' statements are long (CTEs over `jsonb_to_recordset`), and a profile of the
 * server during a catch-up (`perf`, docs/performance.md, "Thirty-fourth round") had a fifth of
 * the backends' time in parsing and planning them. Named, a connection parses a statement once,
 * and in a projection's transaction (`lockProjectionKeys`) PostgreSQL keeps one generic plan
 * for it. Only statements that run at the projections level (`inProjections`) and have
 * parameters are named: the projections' texts, run again and again; requests and the pipeline
 * go unnamed, as before, with custom plans for their parameters. The query builder's multi-row
 * statements (a text for each count of rows) are named too: leaving out those of more than 16
 * parameters took most of the gain away (docs/performance.md, "Thirty-fourth round").
 *
 * A connection keeps at most PREPARED_PER_CONNECTION of them: the server holds each one's plan
 * in the backend's memory until the pool closes the connection (after 30 s idle). A prepared statement whose
 * result's row type changed (a migration altered its table meanwhile) fails once with
 * `cached plan must not change result type`; its text then goes unnamed on that connection.
 */
export class PreparingPgClient extends PgDialect {
  override _query(connection: PgConnection, obj: QueryObject): Promise<unknown> {
    const name = this.nameFor(connection, obj);
    if (name === null) return super._query(connection, obj);
    obj.options = { ...obj.options, name };
    return super._query(connection, obj).catch((error: unknown) => {
      if (isChangedResultType(error)) {
        let names = refused.get(connection);
        if (!names) refused.set(connection, (names = new Set()));
        names.add(name);
      }
      throw error;
    });
  }

  private nameFor(connection: PgConnection, obj: QueryObject): string | null {
    if (!obj.bindings || obj.bindings.length === 0 || obj.options?.name !== undefined) return null;
    if (backgroundLevel() !== 'projections') return null;
    const name = preparedStatementName(obj.sql);
    if (refused.get(connection)?.has(name)) return null;
    const parsed = connection.connection.parsedStatements;
    if (parsed[name] === undefined && Object.keys(parsed).length >= PREPARED_PER_CONNECTION) return null;
    return name;
  }
}
