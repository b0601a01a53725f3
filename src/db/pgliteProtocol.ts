import type { PGliteOptions, QueryOptions, Results } from '@electric-sql/pglite';

/** The messages between the main thread's PGlite proxy (pgliteThread.ts) and its worker (pgliteWorker.ts). */

type WasmModule = NonNullable<PGliteOptions['pgliteWasmModule']>;

export interface PgliteWorkerData {
  dataDir: string;
  /** A `dumpDataDir` tarball to start from instead of initdb. */
  loadDataDir?: ArrayBuffer;
  /** Open the directory without ever writing it (src/db/pgliteSnapshot.ts). */
  readOnly?: boolean;
  /** Compiled once per process (pgliteWasm.ts) and shared with every worker: a module clones without copying its code. */
  pgliteWasmModule: WasmModule;
  initdbWasmModule: WasmModule;
  /** Server settings given at start (`-c name=value` after PGlite's own start parameters). */
  settings: Readonly<Record<string, string>>;
}

/** Query options that survive a structured clone: no parsers, serializers or callbacks. */
export type PgliteQueryOptions = Pick<QueryOptions, 'rowMode'>;

/**
 * `begin`: a `BEGIN` the proxy held back (pgliteThread.ts), run just before the statement; its
 * failure is the statement's.
 */
export type PgliteRequest =
  | { id: number; op: 'query'; sql: string; params?: unknown[]; options?: PgliteQueryOptions; begin?: string }
  | { id: number; op: 'exec'; sql: string; options?: PgliteQueryOptions; begin?: string }
  | { id: number; op: 'close' };

/** Id 0 answers the opening. */
export type PgliteReply =
  | { id: number; ok: true; value: Results | Results[] | null }
  | { id: number; ok: false; error: SerializedDatabaseError };

/** An error's name, message and its own fields (PostgreSQL's `code`, `detail`, `constraint` ...). */
export type SerializedDatabaseError = { name: string; message: string } & Record<string, unknown>;

export function serializeDatabaseError(error: unknown): SerializedDatabaseError {
  if (!(error instanceof Error)) return { name: 'Error', message: String(error) };
  const fields: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(error)) {
    // A field that does not clone (a function, the failed query's result object) is left behind.
    if (value === undefined || typeof value === 'function' || (typeof value === 'object' && value !== null)) continue;
    fields[key] = value;
  }
  return { ...fields, name: error.name, message: error.message };
}

/**
 * The error as the caller would have seen it in-thread: an Error with the same name and fields,
 * whose stack is the caller's (the worker's frames are PGlite's internals).
 */
export function deserializeDatabaseError(serialized: SerializedDatabaseError): Error {
  const { name, message, ...fields } = serialized;
  const error = Object.assign(new Error(message), fields);
  error.name = name;
  return error;
}

/** What the initdb child sends when the directory is initialised and closed (src/db/pgliteInitdbChild.ts). */
export const INITDB_DONE = 'pglite initdb done';
