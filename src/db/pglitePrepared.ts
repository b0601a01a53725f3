import { parse, protocol, type PGlite, type Results } from '@electric-sql/pglite';
import type { PgliteQueryOptions } from './pgliteProtocol.js';
import { isChangedResultType, sqlState } from './preparedStatementErrors.js';

/**
 * PGlite's `query` (src/db/pgliteWorker.ts's statements) as named prepared statements.
 *
 * `PGlite.query` sends Parse, Describe, Bind, Describe, Execute and Sync as six calls into
 * PostgreSQL, and parses and plans the statement every time. Here a statement's text is parsed
 * once per session under a name (Parse + Describe: its parameter types), and each execution is
 * one call (Bind + Describe + Execute + Sync), whose plan PostgreSQL's plan cache keeps once a
 * generic plan is as good as the custom ones (after five executions). The job claim took 15 ms
 * through `query` and 0.9 ms prepared, a point lookup 1.4 and 0.6 ms (docs/performance.md,
 * "Sixteenth round").
 *
 * What a caller sees is what `PGlite.query` gives: the same parameter serializers (by the types
 * PostgreSQL inferred), the same result parsers, the same errors (with `query` set). PostgreSQL
 * re-plans a prepared statement by itself when a table it uses changes or is analysed; the one
 * change it refuses is a different result row type (a `SELECT *` of an altered table): the
 * statement is then forgotten and, outside a transaction, run once more freshly prepared.
 *
 * At most `capacity` statements are kept, the least recently used closed first (a plan lives
 * in PGlite's WebAssembly heap, which never shrinks).
 *
 * A pgvector `vector` parameter given in its text form (`[0.1,0.2,…]`) is sent in pgvector's
 * binary form, its numbers parsed here: PostgreSQL's WebAssembly parsed each number with strtof at
 * about 2 µs, 0.2 ms a 100-dimension vector, more than half of a statement writing vectors
 * (docs/performance.md, "Seventeenth round"). A text that is not a plain list of decimal numbers
 * each within float4's range goes as text, so PostgreSQL reports on it as before.
 */
export class PreparedStatements {
  /** By text, in order of last use (a Map keeps insertion order). */
  private readonly statements = new Map<string, PreparedStatement>();
  /** Statements evicted and not yet closed in the session: closed with the next execution. */
  private closing: string[] = [];
  private nextId = 1;
  /** Type names of the user-defined parameter types met (an extension's types have no fixed OID). */
  private readonly typeNames = new Map<number, string>();
  /** Parameters sent in a binary form so far (for tests and measurements). */
  binaryParameters = 0;

  constructor(
    private readonly pglite: PGlite,
    readonly capacity = DEFAULT_PREPARED_CAPACITY,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError('capacity must be a positive integer');
  }

  /** How many statements are prepared now (for tests and measurements). */
  get size(): number {
    return this.statements.size;
  }

  query<T = Record<string, unknown>>(sql: string, params: readonly unknown[] = [], options?: PgliteQueryOptions): Promise<Results<T>> {
    return this.pglite.runExclusive(async () => {
      try {
        return await this.run<T>(sql, params, options);
      } catch (error) {
        if (!isStalePreparedStatement(error)) throw withQuery(error, sql);
        if (isMissingStatement(error)) this.forgetAll();
        else this.forget(sql);
        if (this.pglite.isInTransaction()) throw withQuery(error, sql);
        try {
          return await this.run<T>(sql, params, options);
        } catch (retryError) {
          throw withQuery(retryError, sql);
        }
      }
    });
  }

  private async run<T>(sql: string, params: readonly unknown[], options: PgliteQueryOptions | undefined): Promise<Results<T>> {
    const statement = await this.prepared(sql);
    const values = params.map((param, i): string | Uint8Array | null => {
      if (param === null || param === undefined) return null;
      const binary = statement.binaryEncoders[i]?.(param);
      if (binary) {
        this.binaryParameters++;
        return binary;
      }
      // As PGlite.query does: the serializer of the type PostgreSQL inferred, else the text of the value.
      const serialize = this.pglite.serializers[statement.paramTypes[i]];
      return serialize ? serialize(param) : String(param);
    });
    const { messages } = await this.pglite.execProtocol(
      Buffer.concat([
        ...this.closeEvicted(),
        protocol.serialize.bind({ statement: statement.name, values }),
        protocol.serialize.describe({ type: 'P' }),
        protocol.serialize.execute({}),
        protocol.serialize.sync(),
      ]),
    );
    return parse.parseResults(messages, this.pglite.parsers, options)[0] as Results<T>;
  }

  private async prepared(sql: string): Promise<PreparedStatement> {
    const known = this.statements.get(sql);
    if (known !== undefined) {
      // Most recently used last.
      this.statements.delete(sql);
      this.statements.set(sql, known);
      return known;
    }
    const name = `factlog_${this.nextId++}`;
    const { messages } = await this.pglite.execProtocol(
      Buffer.concat([
        ...this.closeEvicted(),
        protocol.serialize.parse({ name, text: sql }),
        protocol.serialize.describe({ type: 'S', name }),
        protocol.serialize.sync(),
      ]),
    );
    const paramTypes = parse.parseDescribeStatementResults(messages);
    const statement = { name, paramTypes, binaryEncoders: await this.binaryEncoders(paramTypes) };
    this.statements.set(sql, statement);
    // The least recently used is first; the map is not empty here.
    if (this.statements.size > this.capacity) this.forget(this.statements.keys().next().value as string);
    return statement;
  }

  /** Per parameter, the binary encoder of its type, if it has one (see BINARY_ENCODERS). */
  private async binaryEncoders(paramTypes: readonly number[]): Promise<(BinaryEncoder | undefined)[]> {
    for (const oid of paramTypes) {
      if (oid < FIRST_USER_OID || this.typeNames.has(oid)) continue;
      const { rows } = await this.run<{ typname: string }>('SELECT typname FROM pg_type WHERE oid = $1', [oid], undefined);
      this.typeNames.set(oid, rows[0]?.typname ?? '');
    }
    return paramTypes.map((oid) => BINARY_ENCODERS.get(this.typeNames.get(oid) ?? ''));
  }

  /** Close messages for the evicted statements, sent ahead of the next call's own messages. */
  private closeEvicted(): Uint8Array[] {
    const names = this.closing;
    this.closing = [];
    return names.map((name) => protocol.serialize.close({ type: 'S', name }));
  }

  private forget(sql: string): void {
    const statement = this.statements.get(sql);
    if (statement === undefined) return;
    this.statements.delete(sql);
    this.closing.push(statement.name);
  }

  /** The session has none of them (prepared statements deallocated by a statement): nothing to close. */
  private forgetAll(): void {
    this.statements.clear();
    this.closing = [];
  }
}

/**
 * Room for every statement the service runs again and again: a 300-page ingest ran 334 texts, most of them
 * multi-row inserts and `IN` lists of different lengths, each a text of its own.
 */
const DEFAULT_PREPARED_CAPACITY = 400;

interface PreparedStatement {
  name: string;
  /** The parameter types PostgreSQL inferred at Parse (type OIDs), which choose the serializers. */
  paramTypes: number[];
  /** Per parameter, how to send a value in binary form (null: as text after all). */
  binaryEncoders: (BinaryEncoder | undefined)[];
}

type BinaryEncoder = (value: unknown) => Uint8Array | null;

/** PostgreSQL's first OID for objects created after initdb: below it, built-in types with serializers of their own. */
const FIRST_USER_OID = 16384;

/** A decimal number as strtof reads it (no hex, no infinities, no NaN). */
const DECIMAL = /^\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*$/;

/** pgvector's limit on dimensions (VECTOR_MAX_DIM). */
const VECTOR_MAX_DIMENSIONS = 16000;

/**
 * pgvector's binary form of a `vector` (vector_recv: dimensions and an unused word as int16,
 * then each element as a big-endian float4) from its text form. Null for anything else, which
 * then goes as text: a number beyond float4 (PostgreSQL's "out of range"), NaN, an empty list.
 */
export function vectorBinary(value: unknown): Uint8Array | null {
  if (typeof value !== 'string' || value.length < 3 || value[0] !== '[' || value[value.length - 1] !== ']') return null;
  const parts = value.slice(1, -1).split(',');
  if (parts.length > VECTOR_MAX_DIMENSIONS) return null;
  const view = new DataView(new ArrayBuffer(4 + 4 * parts.length));
  view.setInt16(0, parts.length);
  view.setInt16(2, 0);
  for (let i = 0; i < parts.length; i++) {
    if (!DECIMAL.test(parts[i])) return null;
    const element = Math.fround(Number(parts[i]));
    if (!Number.isFinite(element)) return null;
    view.setFloat32(4 + 4 * i, element);
  }
  return new Uint8Array(view.buffer);
}

/** By type name; a Map, so a type named like an Object member (`toString`) finds nothing. */
const BINARY_ENCODERS: ReadonlyMap<string, BinaryEncoder> = new Map([['vector', vectorBinary]]);

/** SQLSTATE 26000: the name is not prepared in the session (a DEALLOCATE ALL or DISCARD ALL ran). */
function isMissingStatement(error: unknown): boolean {
  return sqlState(error) === '26000';
}

/** PostgreSQL refuses to run a prepared statement whose result type changed (SQLSTATE 0A000), or one it no longer has. */
function isStalePreparedStatement(error: unknown): boolean {
  return isMissingStatement(error) || isChangedResultType(error);
}

/** As PGlite.query's errors: the statement's text rides along. */
function withQuery(error: unknown, sql: string): unknown {
  if (typeof error === 'object' && error !== null) Object.assign(error, { query: sql });
  return error;
}
