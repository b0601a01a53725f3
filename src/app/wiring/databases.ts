import type { Config } from '../../config/types.js';
import { databaseOptions } from '../../config/derived.js';
import { connectionLocation, openDatabase, type Database, type DatabaseOptions } from '../../db/database.js';
import { errorMessage } from '../../util/errorMessage.js';

/** The configured databases, each opened once by name; closes them all in one call. */
export interface Databases {
  open(name: string): Promise<Database>;
  close(): Promise<void>;
}

/**
 * A server database that cannot be opened (refused, unknown host, bad login): the driver's words
 * (`connect ECONNREFUSED 127.0.0.1:5432`) with the database's name, where it is and the setting
 * that says so; the URL's credentials are left out.
 */
function unreachable(name: string, url: string, error: unknown): Error {
  // The configuration admits postgres:// URLs only; an unparsable one is named by its setting alone.
  const where = connectionLocation(url) ?? 'its url';
  const reason = errorMessage(error);
  return new Error(`cannot open the database ${name} at ${where} (databases.${name}.url, DATABASES_${name.toUpperCase()}_URL): ${reason}`, { cause: error });
}

/**
 * On the embedded tier the event store and the read models name the same PGlite database, and
 * one data directory has one connection: opening by name, once, is what keeps them shared.
 */
export function createDatabases(
  config: Config,
  cwd: string,
  open: (options: DatabaseOptions) => Promise<Database> = openDatabase,
  { readOnly = false }: { readOnly?: boolean } = {},
): Databases {
  const opened = new Map<string, Promise<Database>>();
  return {
    open(name) {
      let database = opened.get(name);
      if (!database) {
        const options = databaseOptions(config, name, cwd);
        // A database opened to read only is never written: an embedded one is read from a
        // snapshot (src/db/pgliteSnapshot.ts), a server's in read-only transactions, nothing installed.
        database = open(readOnly ? { ...options, readOnly: true } : options);
        if (options.kind === 'postgres') database = database.catch((error: unknown) => Promise.reject(unreachable(name, options.url, error)));
        opened.set(name, database);
      }
      return database;
    },
    async close() {
      for (const database of opened.values()) await (await database).close();
      opened.clear();
    },
  };
}
