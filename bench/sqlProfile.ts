/**
 * Statement counts and time per statement shape on PGlite, for profiling the pipeline
 * (docs/performance.md, "Ingest"). PGlite runs in this process on one connection, so the time
 * from `query` to its answer is the statement's own execution (parse, plan, run, decode), not
 * queueing: knex hands the one connection to one caller at a time.
 *
 * Enabled by `BENCH_SQL_PROFILE=1` in bench/pipeline.ts; install before the service opens its
 * database.
 */
import { PGlite } from '@electric-sql/pglite';
import { PreparedStatements } from '../src/db/pglitePrepared.js';

interface Shape {
  count: number;
  ms: number;
}

/** Statement text with literals and parameter lists collapsed, so one statement shape is one row. */
export function statementShape(sql: string): string {
  const shape = sql
    .replace(/\s+/g, ' ')
    .replace(/\$\d+(\s*,\s*\$\d+)*/g, '$n')
    .replace(/\(\s*\?(\s*,\s*\?)*\s*\)/g, '(?)')
    .replace(/'[^']*'/g, "'…'")
    .replace(/\(\$n\)(\s*,\s*\(\$n\))+/g, '($n)…')
    .trim();
  // Long statements that start alike (the event reads' column list) differ at their end.
  return shape.length <= 200 ? shape : `${shape.slice(0, 130)} … ${shape.slice(-65)}`;
}

export interface SqlProfile {
  /** Statement shapes by total time, longest first. */
  top(limit: number): Array<{ shape: string; count: number; ms: number }>;
  /** Every statement's end (ms since the epoch), duration and shape, when installed with `trace`. */
  trace(): Array<[endedAt: number, ms: number, shape: string]>;
  totals(): { count: number; ms: number };
  reset(): void;
}

type StatementMethod = (this: unknown, sql: string, ...rest: unknown[]) => Promise<unknown>;

/**
 * Wraps PGlite's `query` and `exec` (every instance of this process) and the embedded node's
 * prepared statements (src/db/pglitePrepared.ts, which run without PGlite's `query`) to count and
 * time statements.
 */
export function installSqlProfile(options: { trace?: boolean } = {}): SqlProfile {
  const shapes = new Map<string, Shape>();
  const traced: Array<[number, number, string]> = [];
  // Both classes' methods take the statement first; the casts only let one wrapper replace them.
  const methods: Array<[Record<string, StatementMethod>, string]> = [
    [PGlite.prototype as unknown as Record<string, StatementMethod>, 'query'],
    [PGlite.prototype as unknown as Record<string, StatementMethod>, 'exec'],
    [PreparedStatements.prototype as unknown as Record<string, StatementMethod>, 'query'],
  ];
  for (const [prototype, method] of methods) {
    const original = prototype[method];
    prototype[method] = async function profiled(this: unknown, sql: string, ...rest: unknown[]) {
      const started = performance.now();
      try {
        return await original.call(this, sql, ...rest);
      } finally {
        const key = statementShape(sql);
        const shape = shapes.get(key) ?? { count: 0, ms: 0 };
        shape.count += 1;
        const ms = performance.now() - started;
        shape.ms += ms;
        shapes.set(key, shape);
        if (options.trace) traced.push([Date.now(), ms, key]);
      }
    };
  }
  return {
    top(limit) {
      return [...shapes].map(([shape, { count, ms }]) => ({ shape, count, ms })).sort((a, b) => b.ms - a.ms).slice(0, limit);
    },
    trace() {
      return traced;
    },
    totals() {
      let count = 0;
      let ms = 0;
      for (const shape of shapes.values()) {
        count += shape.count;
        ms += shape.ms;
      }
      return { count, ms };
    },
    reset() {
      shapes.clear();
      traced.length = 0;
    },
  };
}
