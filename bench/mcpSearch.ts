/**
 * searchFacts through the MCP endpoint beside the same query through REST (issue 10: MCP ≥ 0.8×
 * REST), at BENCH_FACTS (100,000) facts on the embedded tier with the built-in embedder. Both
 * transports call the same application function (`facts.search`, hybrid, limit 10); the rounds
 * alternate REST, MCP, REST, MCP so both see the same machine load. Each round keeps
 * BENCH_CONCURRENCY (4) calls in flight for BENCH_CALLS (400) calls over real HTTP.
 *
 *   node --import=tsx --no-wasm-code-gc bench/mcpSearch.ts      # Markdown section on stdout
 */
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { registerUser, startTestService } from '../test/helpers/service.js';
import { accessToken, listen } from '../test/mcp/helpers.js';
import { envNumber, int, log, ms, prng, summary } from './common.js';
import { loadFacts, syntheticFacts } from './seedFacts.js';

const sizes = { facts: envNumber('BENCH_FACTS', 100_000), calls: envNumber('BENCH_CALLS', 400), concurrency: envNumber('BENCH_CONCURRENCY', 4), seed: envNumber('BENCH_SEED', 11) };

const loadStart = os.loadavg();
const service = await startTestService({ workers: false });
try {
  const user = await registerUser(service, 'bench@example.org');
  const repository = (await service.call('POST', '/api/v1/repositories', { token: user.token, body: { name: 'Search at scale' } })).body as { id: string; slug: string };
  const random = prng(sizes.seed);
  const facts = syntheticFacts(random, sizes.facts);
  await loadFacts(service, repository.id, facts);

  const { issuer, endpoint } = await listen(service);
  const token = await accessToken(service, issuer, user.user.id);
  // Queries a reader would type: a name and a thing, or a place and a year.
  const queries = Array.from({ length: 200 }, (_, index) => {
    const { parts } = facts[Math.floor(random() * facts.length)] as (typeof facts)[number];
    return index % 2 === 0 ? `${parts.first} ${parts.last} ${parts.object.split(' ').at(-1)}` : `${parts.place} ${parts.year}`;
  });

  const rest = async (query: string) => {
    const url = new URL(`/api/v1/repositories/${repository.id}/facts`, issuer);
    url.searchParams.set('query', query);
    url.searchParams.set('limit', '10');
    const response = await fetch(url, { headers: { authorization: `Bearer ${user.token}` } });
    const body = (await response.json()) as { items?: unknown[] };
    if (response.status !== 200 || !Array.isArray(body.items)) throw new Error(`REST ${response.status}`);
    return body.items.length;
  };
  const mcp = async (query: string) => {
    const response = await fetch(endpoint, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'searchFacts', arguments: { repository: repository.id, query, limit: 10 } } }),
    });
    const body = (await response.json()) as { result?: { isError?: boolean; structuredContent?: { items?: unknown[] } } };
    if (response.status !== 200 || body.result?.isError || !Array.isArray(body.result?.structuredContent?.items)) throw new Error(`MCP ${response.status} ${JSON.stringify(body).slice(0, 200)}`);
    return body.result.structuredContent.items.length;
  };

  // Same answers first: both transports must find the same number of facts for a query.
  for (const query of queries.slice(0, 5)) {
    const [a, b] = [await rest(query), await mcp(query)];
    if (a !== b) throw new Error(`REST found ${a}, MCP ${b} for "${query}"`);
  }

  const round = async (label: string, call: (query: string) => Promise<number>) => {
    let next = 0;
    const latencies: number[] = [];
    const started = performance.now();
    await Promise.all(
      Array.from({ length: sizes.concurrency }, async () => {
        while (next < sizes.calls) {
          const query = queries[next++ % queries.length] as string;
          const t0 = performance.now();
          await call(query);
          latencies.push(performance.now() - t0);
        }
      }),
    );
    const perSecond = sizes.calls / ((performance.now() - started) / 1000);
    log(`${label}: ${perSecond.toFixed(1)} calls/s`);
    return { label, perSecond, ...summary(latencies) };
  };
  for (const query of queries.slice(0, 20)) await Promise.all([rest(query), mcp(query)]); // warm-up
  const rounds = [await round('REST', rest), await round('MCP', mcp), await round('REST', rest), await round('MCP', mcp)];
  const rate = (label: string) => {
    const mine = rounds.filter((row) => row.label === label);
    return mine.reduce((sum, row) => sum + row.perSecond, 0) / mine.length;
  };

  console.log(`## searchFacts: MCP beside REST at ${int(sizes.facts)} facts\n`);
  console.log(
    `Machine: ${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? 'unknown'}), load ${loadStart.map((value) => value.toFixed(2)).join(' ')} at start, ` +
      `${os.loadavg().map((value) => value.toFixed(2)).join(' ')} at end; Node ${process.version}; ${int(sizes.calls)} calls per round, ${sizes.concurrency} in flight.\n`,
  );
  console.log('| round | calls/s | p50 ms | p95 ms | p99 ms |\n|---|---:|---:|---:|---:|');
  for (const row of rounds) console.log(`| ${row.label} | ${row.perSecond.toFixed(1)} | ${ms(row.p50)} | ${ms(row.p95)} | ${ms(row.p99)} |`);
  console.log(`\nMCP / REST: **${(rate('MCP') / rate('REST')).toFixed(2)}×** (target ≥ 0.8×).`);
} finally {
  await service.close();
}
