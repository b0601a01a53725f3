import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Page {
  status?: number;
  contentType?: string;
  body: string | Buffer;
  /** Hold the response until this promise resolves (to catch the pipeline mid-fetch). */
  holdUntil?: Promise<void>;
}

/** A real HTTP server on 127.0.0.1 serving fixed pages, counting requests per path. */
export async function startWebServer(pages: Record<string, Page>) {
  const hits = new Map<string, number>();
  const server = createServer(async (request: IncomingMessage, response: ServerResponse) => {
    const url = new URL(request.url ?? '/', 'http://localhost');
    hits.set(url.pathname, (hits.get(url.pathname) ?? 0) + 1);
    // One connection per request: a kept-alive socket that this server closes for idleness just
    // as the client reuses it resets the request, and the fetcher's retry counts as a second
    // fetch (seen on a loaded machine), which tests that count fetches must not see.
    response.shouldKeepAlive = false;
    const page = pages[url.pathname];
    if (!page) {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    if (page.holdUntil) await page.holdUntil;
    response.writeHead(page.status ?? 200, { 'content-type': page.contentType ?? 'text/html; charset=utf-8' }).end(page.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    hits,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** An article whose facts the tests look for. */
export const CURIE_ARTICLE = `<!doctype html>
<html><head><title>Marie Curie</title><meta property="article:published_time" content="2024-03-01T10:00:00Z"></head>
<body>
<nav><a href="/">Home</a> <a href="/about">About</a></nav>
<article>
<h1>Marie Curie</h1>
<p>Marie Curie was a Polish and naturalised-French physicist and chemist who conducted pioneering research on radioactivity.
She was the first woman to win a Nobel Prize. She remains the only person to win Nobel Prizes in two scientific fields.</p>
<p>Curie discovered the elements polonium and radium together with her husband Pierre Curie in 1898.
They named polonium after Poland, her native country.</p>
<p>The Curie Institute in Paris was founded by Marie Curie in 1920. It is a leading centre for cancer research today.</p>
</article>
<footer>Click here to subscribe to our newsletter.</footer>
</body></html>`;
