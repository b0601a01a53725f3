import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';

import t from 'tap';

import { extractDocument } from '../../../src/providers/fetch/extract.js';
import {
  createHttpFetcher,
  DEFAULT_FETCH_SETTINGS,
  FetchError,
  fetchSettingsFromConfig,
  type FetchSettings,
} from '../../../src/providers/fetch/http.js';
import { refusingPort } from '../../helpers/ports.js';

/** The part of a tap test the server helper needs. */
interface Test {
  teardown(fn: () => unknown): void;
}
type Handler = (request: http.IncomingMessage, response: http.ServerResponse, hitNumber: number) => void;

interface TestServer {
  url(path?: string): string;
  /** Requests received so far, on any path or on one path. */
  hits(path?: string): number;
  /** The last request's headers. */
  lastHeaders(): http.IncomingHttpHeaders | null;
}

/** A real HTTP server on 127.0.0.1 and a random port, closed when the test ends. */
async function startServer(test: Test, handler: Handler): Promise<TestServer> {
  const hitsByPath = new Map<string, number>();
  let total = 0;
  let lastHeaders: http.IncomingHttpHeaders | null = null;
  const server = http.createServer((request, response) => {
    const path = request.url ?? '/';
    hitsByPath.set(path, (hitsByPath.get(path) ?? 0) + 1);
    total += 1;
    lastHeaders = request.headers;
    handler(request, response, hitsByPath.get(path) ?? 0);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  test.teardown(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return {
    url: (path = '/') => `http://127.0.0.1:${port}${path}`,
    hits: (path) => (path === undefined ? total : hitsByPath.get(path) ?? 0),
    lastHeaders: () => lastHeaders,
  };
}

function testSettings(overrides: Partial<FetchSettings> = {}): FetchSettings {
  return {
    timeoutMs: 5_000,
    maxAttempts: 3,
    baseDelayMs: 100,
    maxDelayMs: 250,
    retry403MaxAttempts: 2,
    maxBodyBytes: 1024 * 1024,
    userAgent: 'factlog-test/1.0',
    autoSkip: { enabled: false, minSample: 100, failureThreshold: 0.85, cooldownMs: 86_400_000 },
    ...overrides,
  };
}

/** A sleep that records the delay asked for and returns at once. */
function recordingSleep(): { delays: number[]; sleep: (ms: number) => Promise<void> } {
  const delays: number[] = [];
  return { delays, sleep: async (ms: number) => void delays.push(ms) };
}

async function fetchError(promise: Promise<unknown>): Promise<FetchError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof FetchError) return error;
    throw error;
  }
  throw new Error('expected the fetch to fail');
}

const ARTICLE_HTML = `<!DOCTYPE html>
<html><head><title>Sea Otters</title>
<meta property="article:published_time" content="2023-06-14T09:00:00+02:00"></head>
<body><nav><a href="/">Home</a> <a href="/about">About</a></nav>
<article><h1>Sea Otters</h1>
<p>Sea otters use rocks as tools to open shellfish, a behaviour observed across their whole range along the Pacific coast.</p>
<p>They hold hands while sleeping so that they do not drift apart, and a group of resting otters is called a <a href="/raft">raft</a>.</p>
<img src="/img/otter.jpg" alt="An otter floating">
</article><footer>Copyright</footer></body></html>`;

t.test('fetches a page and extracts its title, text and markdown', async (t) => {
  const server = await startServer(t, (_request, response) => {
    response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    response.end(ARTICLE_HTML);
  });
  const fixedNow = Date.parse('2024-01-02T03:04:05.000Z');
  const fetcher = createHttpFetcher(testSettings(), { now: () => fixedNow });
  const resource = await fetcher.fetch(server.url('/otters'));

  t.equal(resource.url, server.url('/otters'));
  t.equal(resource.finalUrl, server.url('/otters'));
  t.equal(resource.status, 200);
  t.equal(resource.contentType, 'text/html; charset=utf-8');
  t.equal(resource.body.toString('utf8'), ARTICLE_HTML);
  t.equal(resource.sha256, createHash('sha256').update(ARTICLE_HTML).digest('hex'));
  t.equal(resource.fetchedAt, '2024-01-02T03:04:05.000Z');
  t.equal(server.lastHeaders()?.['user-agent'], 'factlog-test/1.0');

  const document = await extractDocument({ body: resource.body, contentType: resource.contentType, url: resource.finalUrl });
  t.equal(document.kind, 'html');
  t.equal(document.title, 'Sea Otters');
  t.equal(document.publishedAt, '2023-06-14');
  t.match(document.text, /Sea otters use rocks as tools/);
  t.match(document.text, /shellfish, a behaviour[^\n]*\.\n\nThey hold hands/, 'paragraphs are separated by a blank line');
  t.notMatch(document.text, /Home|Copyright/, 'navigation and footer are not article text');
  t.match(document.markdown, /\[raft\]\(http:\/\/127\.0\.0\.1:\d+\/raft\)/, 'links are absolute in markdown');
  t.same(document.images, [{ url: server.url('/img/otter.jpg'), altText: 'An otter floating', caption: null }]);
  t.same(fetcher.hostStats(server.url()), {
    host: new URL(server.url()).host,
    successes: 1,
    failures: 0,
    recentOutcomes: 1,
    recentFailures: 0,
    skippedUntil: null,
  });
});

t.test('fetches the PDF fixture and extracts its text', async (t) => {
  const pdf = readFileSync(new URL('../../fixtures/fetch/sample.pdf', import.meta.url));
  const server = await startServer(t, (_request, response) => {
    response.writeHead(200, { 'content-type': 'application/pdf', 'content-length': String(pdf.length) });
    response.end(pdf);
  });
  const fetcher = createHttpFetcher(testSettings());
  const resource = await fetcher.fetch(server.url('/paper.pdf'));
  t.ok(resource.body.equals(pdf));
  const document = await extractDocument({ body: resource.body, contentType: resource.contentType, url: resource.finalUrl });
  t.equal(document.kind, 'pdf');
  t.equal(document.title, 'Atomic Facts in Practice');
  t.equal(
    document.text,
    'Atomic facts are short self-contained statements.\nEach fact names its subject explicitly.\n\n' +
      'Concepts group facts that share a subject (see page one).',
  );
});

t.test('decodes a gzip-encoded body', async (t) => {
  const server = await startServer(t, (request, response) => {
    t.match(request.headers['accept-encoding'], /gzip/);
    response.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': 'gzip' });
    response.end(gzipSync('compressed hello'));
  });
  const resource = await createHttpFetcher(testSettings()).fetch(server.url());
  t.equal(resource.body.toString(), 'compressed hello');
  t.equal(resource.sha256, createHash('sha256').update('compressed hello').digest('hex'), 'the hash is of the decoded body');
});

t.test('retries a 500 with growing backoff, then succeeds', async (t) => {
  const server = await startServer(t, (_request, response, hit) => {
    if (hit <= 2) {
      response.writeHead(500);
      response.end('boom');
      return;
    }
    response.writeHead(200, { 'content-type': 'text/plain' });
    response.end('finally');
  });
  const { delays, sleep } = recordingSleep();
  const fetcher = createHttpFetcher(testSettings({ baseDelayMs: 100, maxDelayMs: 10_000 }), { sleep, random: () => 0.5 });
  const resource = await fetcher.fetch(server.url('/flaky'));
  t.equal(resource.body.toString(), 'finally');
  t.equal(server.hits('/flaky'), 3, 'two failures and the success');
  // Equal jitter: half of the exponential step fixed, half scaled by random().
  t.same(delays, [75, 150]);
});

t.test('gives up after maxAttempts on persistent 5xx, as a transient failure', async (t) => {
  const server = await startServer(t, (_request, response) => {
    response.writeHead(503);
    response.end();
  });
  const { delays, sleep } = recordingSleep();
  const error = await fetchError(createHttpFetcher(testSettings(), { sleep }).fetch(server.url('/down')));
  t.equal(server.hits(), 3);
  t.equal(error.permanent, false);
  t.equal(error.status, 503);
  t.equal(error.attempts, 3);
  t.equal(error.reason, 'http 503');
  t.match(error.message, /\/down.*3 attempts/);
  t.equal(delays.length, 2, 'no wait after the last attempt');
});

t.test('backoff delays grow exponentially and stop at maxDelay', async (t) => {
  const server = await startServer(t, (_request, response) => {
    response.writeHead(502);
    response.end();
  });
  for (const randomValue of [0, 0.999]) {
    const { delays, sleep } = recordingSleep();
    const fetcher = createHttpFetcher(testSettings({ maxAttempts: 7, baseDelayMs: 100, maxDelayMs: 1_000 }), {
      sleep,
      random: () => randomValue,
    });
    await fetchError(fetcher.fetch(server.url()));
    t.equal(delays.length, 6);
    for (let index = 1; index < delays.length; index += 1) {
      t.ok(delays[index]! >= delays[index - 1]!, `delay ${index} does not shrink (random ${randomValue})`);
    }
    t.ok(delays[3]! > delays[0]! * 4, 'delays grow');
    t.ok(delays.every((delay) => delay <= 1_000), `never above maxDelay: ${delays.join(', ')}`);
    t.ok(delays.slice(-2).every((delay) => delay >= 500), 'late delays sit at the cap, jitter at most halving it');
  }
});

t.test('a 404 is permanent after one attempt', async (t) => {
  const server = await startServer(t, (_request, response) => {
    response.writeHead(404);
    response.end('not here');
  });
  const { delays, sleep } = recordingSleep();
  const error = await fetchError(createHttpFetcher(testSettings(), { sleep }).fetch(server.url('/missing')));
  t.equal(server.hits(), 1);
  t.equal(error.permanent, true);
  t.equal(error.status, 404);
  t.equal(error.attempts, 1);
  t.same(delays, []);
});

t.test('a 403 is tried retry403MaxAttempts times in all', async (t) => {
  const server = await startServer(t, (_request, response) => {
    response.writeHead(403);
    response.end();
  });
  const { delays, sleep } = recordingSleep();
  const error = await fetchError(
    createHttpFetcher(testSettings({ maxAttempts: 5, retry403MaxAttempts: 2 }), { sleep }).fetch(server.url('/forbidden')),
  );
  t.equal(server.hits('/forbidden'), 2);
  t.equal(error.attempts, 2);
  t.equal(error.status, 403);
  t.equal(error.permanent, false, 'a retried 403 stays retryable for the job layer');
  t.equal(delays.length, 1);
});

t.test('retry403MaxAttempts 0 makes a 403 permanent at once', async (t) => {
  const server = await startServer(t, (_request, response) => {
    response.writeHead(403);
    response.end();
  });
  const { delays, sleep } = recordingSleep();
  const error = await fetchError(createHttpFetcher(testSettings({ retry403MaxAttempts: 0 }), { sleep }).fetch(server.url('/x')));
  t.equal(server.hits(), 1);
  t.equal(error.permanent, true);
  t.equal(error.status, 403);
  t.same(delays, []);
});

t.test('a 403 that clears on the second attempt succeeds', async (t) => {
  const server = await startServer(t, (_request, response, hit) => {
    response.writeHead(hit === 1 ? 403 : 200);
    response.end(hit === 1 ? '' : 'welcome');
  });
  const { sleep } = recordingSleep();
  const resource = await createHttpFetcher(testSettings(), { sleep }).fetch(server.url());
  t.equal(resource.body.toString(), 'welcome');
  t.equal(server.hits(), 2);
});

t.test('a 429 waits for Retry-After; one that asks for more than maxDelay ends the fetch at once, transient', async (t) => {
  const retryAfterByPath: Record<string, string> = {
    '/seconds': '3',
    '/too-long': '3600',
    '/date': new Date(Date.parse('2024-05-01T00:00:04Z')).toUTCString(),
  };
  const server = await startServer(t, (request, response, hit) => {
    if (hit === 1) {
      response.writeHead(429, { 'retry-after': retryAfterByPath[request.url ?? ''] ?? '1' });
      response.end();
      return;
    }
    response.writeHead(200);
    response.end('ok');
  });
  const { delays, sleep } = recordingSleep();
  const fetcher = createHttpFetcher(testSettings({ baseDelayMs: 100, maxDelayMs: 10_000 }), {
    sleep,
    now: () => Date.parse('2024-05-01T00:00:00Z'),
  });
  await fetcher.fetch(server.url('/seconds'));
  const tooLong = await fetchError(fetcher.fetch(server.url('/too-long')));
  t.equal(tooLong.permanent, false, 'transient: the server will answer later');
  t.equal(tooLong.attempts, 1, 'not asked again sooner than it asked');
  t.equal(tooLong.status, 429);
  t.match(tooLong.message, /the server asks to retry after 3600 s, more than providers\.resolution\.retry\.max_delay/);
  await fetcher.fetch(server.url('/date'));
  t.same(delays, [3_000, 4_000], 'delta seconds and an HTTP date; no wait before giving up');
  t.equal(server.hits(), 5);
});

t.test('a 429 without Retry-After falls back to backoff and counts as transient', async (t) => {
  const server = await startServer(t, (_request, response) => {
    response.writeHead(429);
    response.end();
  });
  const { delays, sleep } = recordingSleep();
  const error = await fetchError(createHttpFetcher(testSettings({ maxAttempts: 2 }), { sleep, random: () => 1 }).fetch(server.url()));
  t.equal(error.permanent, false);
  t.equal(error.status, 429);
  t.same(delays, [100]);
});

t.test('a server that never answers times out each attempt', async (t) => {
  const server = await startServer(t, () => {
    // Never respond.
  });
  const { delays, sleep } = recordingSleep();
  // A fetch the timeout did not end would wait for ever: the file's timeout fails it.
  const error = await fetchError(createHttpFetcher(testSettings({ timeoutMs: 150, maxAttempts: 2 }), { sleep }).fetch(server.url()));
  t.equal(error.reason, 'timeout');
  t.equal(error.permanent, false);
  t.equal(error.attempts, 2);
  t.equal(server.hits(), 2);
  t.equal(delays.length, 1);
});

t.test('a body that stalls half-way times out too', async (t) => {
  const server = await startServer(t, (_request, response) => {
    response.writeHead(200, { 'content-type': 'text/plain', 'content-length': '1000' });
    response.write('only the beginning');
  });
  const error = await fetchError(
    createHttpFetcher(testSettings({ timeoutMs: 200, maxAttempts: 1 }), { sleep: recordingSleep().sleep }).fetch(server.url()),
  );
  t.equal(error.reason, 'timeout');
  t.equal(error.attempts, 1);
});

t.test('a body over maxBodyBytes is refused', async (t) => {
  t.test('by its Content-Length', async (t) => {
    const server = await startServer(t, (_request, response) => {
      response.writeHead(200, { 'content-type': 'text/plain', 'content-length': '2048' });
      response.end('x'.repeat(2048));
    });
    const error = await fetchError(createHttpFetcher(testSettings({ maxBodyBytes: 1024 })).fetch(server.url()));
    t.equal(error.reason, 'body too large');
    t.equal(error.permanent, true);
    t.equal(error.attempts, 1);
    t.equal(server.hits(), 1);
  });

  t.test('by counting a stream without Content-Length, stopping early', async (t) => {
    let bytesWritten = 0;
    const server = await startServer(t, (_request, response) => {
      response.writeHead(200, { 'content-type': 'text/plain' });
      // Endless: only an early abort by the client ends this test.
      const writeMore = (): void => {
        if (response.destroyed || response.writableEnded) return;
        bytesWritten += 16_384;
        response.write(Buffer.alloc(16_384, 0x61), () => setImmediate(writeMore));
      };
      response.on('close', () => undefined);
      writeMore();
    });
    const error = await fetchError(createHttpFetcher(testSettings({ maxBodyBytes: 100_000, timeoutMs: 10_000 })).fetch(server.url()));
    t.equal(error.reason, 'body too large');
    t.equal(error.permanent, true);
    t.ok(bytesWritten < 50_000_000, 'the download was cut off');
  });

  t.test('exactly maxBodyBytes is accepted', async (t) => {
    const server = await startServer(t, (_request, response) => {
      response.writeHead(200);
      response.end('y'.repeat(1024));
    });
    const resource = await createHttpFetcher(testSettings({ maxBodyBytes: 1024 })).fetch(server.url());
    t.equal(resource.body.length, 1024);
  });
});

t.test('a redirect whose body never ends is not read on: its connection closes as the fetch moves on', async (t) => {
  let endlessClosed!: () => void;
  const closed = new Promise<void>((resolve) => (endlessClosed = resolve));
  const server = await startServer(t, (request, response) => {
    if (request.url === '/endless-redirect') {
      response.writeHead(302, { location: '/ok' });
      const chunk = Buffer.alloc(64 * 1024, 'x');
      const pump = () => {
        while (!response.destroyed && response.write(chunk));
      };
      response.on('drain', pump);
      response.on('close', () => endlessClosed());
      pump();
      return;
    }
    response.writeHead(200, { 'content-type': 'text/plain' });
    response.end('arrived');
  });
  const resource = await createHttpFetcher(testSettings()).fetch(server.url('/endless-redirect'));
  t.equal(resource.body.toString(), 'arrived');
  await closed;
  t.pass('the endless redirect body was cut off, not drained');
});

t.test('redirects', async (t) => {
  const server = await startServer(t, (request, response) => {
    const path = request.url ?? '/';
    const chain = /^\/chain\/(\d+)$/.exec(path);
    if (chain) {
      const left = Number(chain[1]);
      if (left === 0) {
        response.writeHead(200, { 'content-type': 'text/plain' });
        response.end('end of chain');
      } else {
        response.writeHead(302, { location: `/chain/${left - 1}` });
        response.end();
      }
      return;
    }
    switch (path) {
      case '/old':
        response.writeHead(301, { location: 'new' }); // relative to /old
        response.end();
        return;
      case '/new':
        response.writeHead(308, { location: '/final?x=1' });
        response.end();
        return;
      case '/final?x=1':
        response.writeHead(200, { 'content-type': 'text/plain' });
        response.end('arrived');
        return;
      case '/to-ftp':
        response.writeHead(302, { location: 'ftp://example.com/file' });
        response.end();
        return;
      case '/no-location':
        response.writeHead(302);
        response.end();
        return;
      default:
        response.writeHead(404);
        response.end();
    }
  });
  const fetcher = createHttpFetcher(testSettings());

  const followed = await fetcher.fetch(server.url('/old'));
  t.equal(followed.url, server.url('/old'));
  t.equal(followed.finalUrl, server.url('/final?x=1'));
  t.equal(followed.body.toString(), 'arrived');

  const tenRedirects = await fetcher.fetch(server.url('/chain/10'));
  t.equal(tenRedirects.finalUrl, server.url('/chain/0'), 'ten redirects are followed');

  const tooMany = await fetchError(fetcher.fetch(server.url('/chain/11')));
  t.equal(tooMany.reason, 'too many redirects');
  t.equal(tooMany.permanent, true);
  t.equal(tooMany.attempts, 1);

  const toFtp = await fetchError(fetcher.fetch(server.url('/to-ftp')));
  t.equal(toFtp.reason, 'unsupported scheme');
  t.equal(toFtp.permanent, true);

  const noLocation = await fetchError(fetcher.fetch(server.url('/no-location')));
  t.equal(noLocation.permanent, true);
  t.equal(noLocation.status, 302);
});

t.test('only http and https URLs are fetched', async (t) => {
  const fetcher = createHttpFetcher(testSettings());
  for (const url of ['ftp://example.com/file.txt', 'file:///etc/passwd', 'data:text/plain,hello', 'javascript:alert(1)']) {
    const error = await fetchError(fetcher.fetch(url));
    t.equal(error.permanent, true, url);
    t.equal(error.reason, 'unsupported scheme', url);
    t.equal(error.attempts, 0, url);
  }
  for (const url of ['', 'not a url', '/relative/path', 'http://']) {
    const error = await fetchError(fetcher.fetch(url));
    t.equal(error.permanent, true, JSON.stringify(url));
    t.equal(error.reason, 'invalid url', JSON.stringify(url));
  }
});

t.test('network errors are transient and retried', async (t) => {
  t.test('connection refused', async (t) => {
    const port = await refusingPort(t);
    const { delays, sleep } = recordingSleep();
    const error = await fetchError(createHttpFetcher(testSettings(), { sleep }).fetch(`http://127.0.0.1:${port}/`));
    t.equal(error.permanent, false);
    t.equal(error.reason, 'network error');
    t.equal(error.code, 'ECONNREFUSED');
    t.equal(error.attempts, 3);
    t.equal(delays.length, 2);
  });

  t.test('connection reset mid-response, then success', async (t) => {
    const server = await startServer(t, (request, response, hit) => {
      if (hit === 1) {
        request.socket.destroy();
        return;
      }
      response.writeHead(200);
      response.end('second time lucky');
    });
    const resource = await createHttpFetcher(testSettings(), { sleep: recordingSleep().sleep }).fetch(server.url());
    t.equal(resource.body.toString(), 'second time lucky');
    t.equal(server.hits(), 2);
  });
});

t.test('per-host auto-skip opens after minSample failures and closes after the cooldown', async (t) => {
  let failing = true;
  const server = await startServer(t, (_request, response) => {
    response.writeHead(failing ? 503 : 200);
    response.end(failing ? '' : 'back');
  });
  let now = Date.parse('2024-01-01T00:00:00Z');
  const fetcher = createHttpFetcher(
    // One attempt a fetch: each failed fetch is one failure of the host.
    testSettings({ maxAttempts: 1, autoSkip: { enabled: true, minSample: 5, failureThreshold: 0.8, cooldownMs: 60_000 } }),
    { now: () => now, sleep: recordingSleep().sleep },
  );
  const host = new URL(server.url()).host;

  for (let index = 0; index < 4; index += 1) await fetchError(fetcher.fetch(server.url(`/page/${index}`)));
  t.equal(fetcher.hostStats(host).skippedUntil, null, 'four outcomes are below minSample');
  await fetchError(fetcher.fetch(server.url('/page/4')));
  t.equal(server.hits(), 5);
  t.equal(fetcher.hostStats(host).skippedUntil, now + 60_000);

  const skipped = await fetchError(fetcher.fetch(server.url('/page/5')));
  t.equal(skipped.reason, 'host auto-skipped');
  t.equal(skipped.permanent, false);
  t.equal(skipped.attempts, 0);
  t.equal(server.hits(), 5, 'a skipped host is not contacted');
  t.match(skipped.message, /skipped until 2024-01-01T00:01:00\.000Z/);

  now += 59_999;
  await fetchError(fetcher.fetch(server.url('/page/6')));
  t.equal(server.hits(), 5, 'still skipped just before the cooldown ends');

  now += 1;
  failing = false;
  const resource = await fetcher.fetch(server.url('/page/7'));
  t.equal(resource.body.toString(), 'back', 'the cooldown is over');
  t.equal(server.hits(), 6);
  t.equal(fetcher.hostStats(host).skippedUntil, null, 'a success does not reopen the skip');
  t.same(
    { ...fetcher.hostStats(server.url('/anything')), skippedUntil: null },
    { host, successes: 1, failures: 5, recentOutcomes: 5, recentFailures: 4, skippedUntil: null },
    'skipped fetches are not outcomes; the window keeps the latest minSample',
  );

  failing = true;
  await fetchError(fetcher.fetch(server.url('/page/8')));
  t.equal(fetcher.hostStats(host).skippedUntil, now + 60_000, 'one more failure at a high ratio skips again');

  const otherHost = await startServer(t, (_request, response) => {
    response.writeHead(200);
    response.end('fine');
  });
  t.equal((await fetcher.fetch(otherHost.url())).body.toString(), 'fine', 'other hosts are unaffected');
});

t.test('auto-skip stays closed below the threshold or when disabled', async (t) => {
  const server = await startServer(t, (_request, response, hit) => {
    // Every fourth request succeeds: a 75% failure ratio.
    response.writeHead(hit % 4 === 0 ? 200 : 500);
    response.end();
  });
  const fetcher = createHttpFetcher(
    testSettings({ maxAttempts: 1, autoSkip: { enabled: true, minSample: 8, failureThreshold: 0.8, cooldownMs: 60_000 } }),
  );
  for (let index = 0; index < 16; index += 1) await fetcher.fetch(server.url('/same')).catch(() => undefined);
  t.equal(server.hits(), 16);
  t.equal(fetcher.hostStats(server.url()).skippedUntil, null);

  const alwaysFailing = await startServer(t, (_request, response) => {
    response.writeHead(500);
    response.end();
  });
  const disabled = createHttpFetcher(
    testSettings({ maxAttempts: 1, autoSkip: { enabled: false, minSample: 2, failureThreshold: 0.5, cooldownMs: 60_000 } }),
  );
  for (let index = 0; index < 5; index += 1) await disabled.fetch(alwaysFailing.url()).catch(() => undefined);
  t.equal(alwaysFailing.hits(), 5);
  t.equal(disabled.hostStats(alwaysFailing.url()).failures, 5);

  // A missing page is the page's failure, not the host's: the host answered.
  const missingPages = await startServer(t, (_request, response) => {
    response.writeHead(404);
    response.end();
  });
  const skipping = createHttpFetcher(testSettings({ autoSkip: { enabled: true, minSample: 2, failureThreshold: 0.5, cooldownMs: 60_000 } }));
  for (let index = 0; index < 5; index += 1) await skipping.fetch(missingPages.url(`/gone-${index}`)).catch(() => undefined);
  t.match(skipping.hostStats(missingPages.url()), { successes: 5, failures: 0, skippedUntil: null });
});

t.test('an abort signal stops the fetch at once', async (t) => {
  t.test('already aborted: nothing is sent', async (t) => {
    const server = await startServer(t, (_request, response) => response.end('x'));
    const controller = new AbortController();
    controller.abort();
    const error = await fetchError(createHttpFetcher(testSettings()).fetch(server.url(), controller.signal));
    t.equal(error.reason, 'aborted');
    t.equal(error.attempts, 0);
    t.equal(server.hits(), 0);
  });

  t.test('during a request that never answers', async (t) => {
    const server = await startServer(t, () => {
      // Never respond.
    });
    const controller = new AbortController();
    const fetcher = createHttpFetcher(testSettings({ timeoutMs: 30_000 }));
    setTimeout(() => controller.abort(), 50);
    const error = await fetchError(fetcher.fetch(server.url(), controller.signal));
    t.equal(error.reason, 'aborted', 'ended by the abort, not by the 30 s timeout');
    t.equal(error.permanent, false);
    t.equal(error.attempts, 1, 'no retry');
    t.equal(fetcher.hostStats(server.url()).failures, 0, 'an abort says nothing about the host');
  });

  t.test('during the backoff between attempts (real sleep)', async (t) => {
    const server = await startServer(t, (_request, response) => {
      response.writeHead(500);
      response.end();
    });
    const controller = new AbortController();
    // A 45 min backoff, far past the test's timeout: the fetch returning at all is the proof
    // that the real sleep was cut short (no bound on elapsed time, which a loaded machine breaks).
    // The jitter is drawn just before the sleep begins; the abort comes once it has begun.
    const fetcher = createHttpFetcher(testSettings({ baseDelayMs: 3_600_000, maxDelayMs: 3_600_000 }), {
      random: () => {
        setImmediate(() => controller.abort());
        return 0.5;
      },
    });
    const error = await fetchError(fetcher.fetch(server.url(), controller.signal));
    t.equal(error.reason, 'aborted');
    t.equal(error.attempts, 1, 'no second attempt after the backoff');
    t.equal(server.hits(), 1);
  });
});

t.test('settings from the configuration section', async (t) => {
  const settings = fetchSettingsFromConfig({
    doi_resolver: 'https://doi.org/',
    fetch: { timeout: '60s', max_body_bytes: 52428800, user_agent: 'factlog/0.1 (+https://factlog.invalid)' },
    extraction_timeout: '2m',
    retry: { max_attempts: 3, base_delay: '2s', max_delay: '15s', retry_403_max_attempts: 2 },
    auto_skip: { enabled: true, min_sample: 100, failure_threshold: 0.85, cooldown: '24h' },
  });
  t.same(settings, DEFAULT_FETCH_SETTINGS, 'the defaults match the spec constants');
});
