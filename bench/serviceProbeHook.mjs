/**
 * `node --import=./bench/serviceProbeHook.mjs`: the event-loop delay and memory of the service
 * bench/pipeline.ts runs, measured inside it (plain JavaScript, so it loads into the compiled
 * build as into tsx). Every 500 ms it rewrites BENCH_SERVICE_PROBE with the main thread's
 * event-loop delay since the last reset (monitorEventLoopDelay, 10 ms resolution) and the
 * process's memory at its highest RSS so far; SIGUSR2 resets both (the bench sends it when the
 * ingest starts). Worker threads inherit `--import`; only the main thread measures.
 */
import { writeFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { isMainThread } from 'node:worker_threads';

const target = process.env.BENCH_SERVICE_PROBE;
if (target && isMainThread && !process.env.FACTLOG_HELPER_PROCESS) {
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  let peak = process.memoryUsage();
  const ms = (nanoseconds) => Math.round(nanoseconds / 1e4) / 100;
  const mib = (bytes) => Math.round(bytes / 1048576);
  const write = () => {
    const now = process.memoryUsage();
    if (now.rss > peak.rss) peak = now;
    const report = {
      loopDelayMs: { p50: ms(delay.percentile(50)), p99: ms(delay.percentile(99)), max: ms(delay.max), samples: delay.count },
      atPeakRssMiB: Object.fromEntries(Object.entries(peak).map(([key, value]) => [key, mib(value)])),
    };
    writeFileSync(target, JSON.stringify(report));
  };
  setInterval(write, 500).unref();
  process.on('SIGUSR2', () => {
    delay.reset();
    peak = process.memoryUsage();
  });
}
