import type { FastifyInstance } from 'fastify';

/**
 * The methods each registered path answers, to tell "no such resource" (404) from "not with this
 * method" (405 with `Allow`, RFC 9110 15.5.6) and to answer `OPTIONS` on any path the API has. The
 * paths are fastify's patterns (`:param` one segment, `*` the rest); a lookup happens only for a
 * request no route took, so a list scanned in order is enough.
 */
export interface AllowedMethods {
  /** The methods of the registered paths this URL path matches, sorted; empty when none does. */
  of(path: string): string[];
}

export function recordAllowedMethods(app: FastifyInstance): AllowedMethods {
  const routes: Array<{ pattern: RegExp; methods: string[] }> = [];
  app.addHook('onRoute', (route) => {
    const source = route.url
      .split('/')
      .map((segment) => (segment.startsWith(':') ? '[^/]+' : segment === '*' ? '.*' : segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
      .join('/');
    routes.push({ pattern: new RegExp(`^${source}$`), methods: [route.method].flat() });
  });
  return {
    of(path) {
      const methods = new Set<string>();
      for (const route of routes) if (route.pattern.test(path)) for (const method of route.methods) methods.add(method);
      return [...methods].sort();
    },
  };
}
