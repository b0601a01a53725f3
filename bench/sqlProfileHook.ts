/**
 * `node --import=./bench/sqlProfileHook.ts`: statement counts and time per statement shape of
 * this process's PGlite (bench/sqlProfile.ts; in the thread that runs it), written at exit to the file named by
 * BENCH_SQL_PROFILE (bench/pipeline.ts passes it to the service it profiles). With
 * BENCH_SQL_TRACE=1, every statement's end time, duration and shape go to `<file>.trace.json` too
 * (to split a run's statement time by phase, e.g. by the batches of BENCH_BATCH).
 */
import { writeFileSync } from 'node:fs';
import { installSqlProfile } from './sqlProfile.js';

const target = process.env.BENCH_SQL_PROFILE;
if (target && !process.env.FACTLOG_HELPER_PROCESS) {
  const profile = installSqlProfile({ trace: process.env.BENCH_SQL_TRACE === '1' });
  process.on('exit', () => {
    const totals = profile.totals();
    // Worker threads inherit this hook: PGlite's statements are counted in its worker thread
    // (src/db/pgliteThread.ts), whose exit writes the file; the other threads have none to write.
    if (totals.count === 0) return;
    const lines = [`${totals.count} statements, ${(totals.ms / 1000).toFixed(1)} s in PGlite`];
    for (const row of profile.top(60)) lines.push(`${String(row.count).padStart(8)} ${(row.ms / 1000).toFixed(2).padStart(8)} s  ${row.shape}`);
    writeFileSync(target, `${lines.join('\n')}\n`);
    if (process.env.BENCH_SQL_TRACE === '1') writeFileSync(`${target}.trace.json`, JSON.stringify(profile.trace()));
  });
}
