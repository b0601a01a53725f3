/** What every bench script needs: settings from the environment, progress lines, statistics, seeded randomness and number formats. */
/** A positive number from the environment, or `fallback` when unset. */
export function envNumber(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} must be a positive number, is ${raw}`);
  return value;
}

/** Progress goes to stderr; stdout is left for results. */
export function log(message: string): void {
  process.stderr.write(`${message}\n`);
}

export function percentile(sorted: readonly number[], fraction: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))] as number;
}

export function summary(values: readonly number[]): { p50: number; p95: number; p99: number; max: number; mean: number; count: number } {
  const sorted = [...values].sort((a, b) => a - b);
  const mean = sorted.reduce((sum, value) => sum + value, 0) / Math.max(1, sorted.length);
  return {
    p50: percentile(sorted, 0.5),
    p95: percentile(sorted, 0.95),
    p99: percentile(sorted, 0.99),
    max: sorted[sorted.length - 1] ?? Number.NaN,
    mean,
    count: sorted.length,
  };
}

/** mulberry32: small, fast, seedable. */
export function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const int = (value: number) => Math.round(value).toLocaleString('en-US');
export const ms = (value: number) => (value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2));
export const secs = (value: number) => `${value.toFixed(1)} s`;
