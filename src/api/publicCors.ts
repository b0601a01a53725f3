import type { FastifyInstance } from 'fastify';

/**
 * CORS for the public, credential-free OAuth endpoints (discovery, registration, token,
 * revocation), so an MCP client running in a browser can reach them: any origin, no cookies
 * (`Access-Control-Allow-Credentials` is never sent), and a preflight answer for each path.
 * The authorization pages get none: they are navigated to, never fetched.
 */
export function allowPublicCors(app: FastifyInstance, paths: readonly string[]): void {
  const publicPaths = new Set(paths);
  app.addHook('onRequest', async (request, reply) => {
    if (publicPaths.has(request.routeOptions.url ?? '')) reply.header('access-control-allow-origin', '*');
  });
  for (const path of paths) {
    app.options(path, { schema: { hide: true } }, async (_request, reply) =>
      reply
        .status(204)
        .header('access-control-allow-methods', 'GET, POST, OPTIONS')
        .header('access-control-allow-headers', 'Content-Type, Authorization, MCP-Protocol-Version')
        .header('access-control-max-age', '86400')
        .send(),
    );
  }
}
