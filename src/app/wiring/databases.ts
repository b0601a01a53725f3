import type { Config } from '../../config/types.js';
import { databaseOptions } from '../../config/derived.js';
import { openDatabase, type Database, type DatabaseOptions } from '../../db/database.js';

/** The configured databases, each opened once by name; closes them all in one call. */
export interface Databases {
  open(name: string): Promise<Database>;
  close(): Promise<void>;
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
