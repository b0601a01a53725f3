/**
 * `node --import=./bench/readProfileHook.ts`: what the service's whole-stream reads bring back
 * (docs/performance.md, "How to measure"). For each read statement of the event store
 * (`readStreams`: all of a stream's events, or those after a version), by the categories of the
 * streams asked (`source`, `fact+concept`, …) and whether fields were left out (`omitData`): the
 * statements, the streams asked, the rows and the bytes of their `data` as JSON; and the rows and
 * bytes per event type. Written at exit to BENCH_READ_PROFILE by PGlite's thread (worker threads
 * inherit this hook; only the one that ran PGlite's statements has anything to write).
 * bench/pipeline.ts loads it into the service when BENCH_READ_PROFILE is set.
 */
import { writeFileSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';

interface ReadShape {
  statements: number;
  streams: number;
  rows: number;
  bytes: number;
  ms: number;
}

type Query = (this: PGlite, sql: string, params?: unknown[], ...rest: unknown[]) => Promise<{ rows: Array<Record<string, unknown>> }>;

const target = process.env.BENCH_READ_PROFILE;
if (target && !process.env.FACTLOG_HELPER_PROCESS) {
  const byShape = new Map<string, ReadShape>();
  const byType = new Map<string, { rows: number; bytes: number }>();
  // The prototype's `query` is generic over the row type; one signature is enough to wrap it.
  const prototype = PGlite.prototype as unknown as { query: Query };
  const original = prototype.query;
  prototype.query = async function profiledRead(this: PGlite, sql: string, params?: unknown[], ...rest: unknown[]) {
    const started = performance.now();
    const result = await original.call(this, sql, params, ...rest);
    const whole = sql.includes('FROM events WHERE stream_id = ANY');
    const after = sql.includes('read_after');
    if ((whole || after) && params) {
      // The stream ids are the last binding of a whole read, the second to last of a read on from versions.
      const ids = params[params.length - (after ? 2 : 1)];
      const streamIds = Array.isArray(ids) ? ids.map(String) : [];
      const categories = [...new Set(streamIds.map((id) => id.split('-')[0]))].sort().join('+');
      const key = `${after ? 'after a version' : 'whole streams'}\t${sql.includes('CASE "type"') ? 'omitData' : 'all data'}\t${categories}`;
      const shape = byShape.get(key) ?? { statements: 0, streams: 0, rows: 0, bytes: 0, ms: 0 };
      shape.statements += 1;
      shape.streams += streamIds.length;
      shape.rows += result.rows.length;
      shape.ms += performance.now() - started;
      for (const row of result.rows) {
        const bytes = JSON.stringify(row.data ?? null).length;
        shape.bytes += bytes;
        const type = byType.get(String(row.type)) ?? { rows: 0, bytes: 0 };
        type.rows += 1;
        type.bytes += bytes;
        byType.set(String(row.type), type);
      }
      byShape.set(key, shape);
    }
    return result;
  };
  process.on('exit', () => {
    if (byShape.size === 0) return;
    const megabytes = (bytes: number) => (bytes / 1e6).toFixed(1);
    const lines = ['read\tdata\tcategories\tstatements\tstreams\trows\tMB\ts'];
    for (const [key, shape] of [...byShape].sort((a, b) => b[1].bytes - a[1].bytes)) {
      lines.push(`${key}\t${shape.statements}\t${shape.streams}\t${shape.rows}\t${megabytes(shape.bytes)}\t${(shape.ms / 1000).toFixed(2)}`);
    }
    lines.push('', 'event type\trows\tMB');
    for (const [type, read] of [...byType].sort((a, b) => b[1].bytes - a[1].bytes)) lines.push(`${type}\t${read.rows}\t${megabytes(read.bytes)}`);
    writeFileSync(target, `${lines.join('\n')}\n`);
  });
}
