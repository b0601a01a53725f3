import type { FastifyInstance } from 'fastify';

/**
 * The policy of every HTML page that does not set its own: scripts only from this origin (no
 * inline script), no framing (clickjacking), no plugins, forms post only here. Inline styles stay
 * allowed: Swagger UI at /docs sets style attributes, and styles cannot run code.
 */
export const DEFAULT_HTML_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const HTML_DEFAULTS: Readonly<Record<string, string>> = {
  'content-security-policy': DEFAULT_HTML_CSP,
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
};

/**
 * Security headers, as defaults: every reply says `nosniff`; HTML replies (the OAuth pages,
 * /docs) also get the CSP above, `X-Frame-Options: DENY` and `Referrer-Policy: no-referrer`,
 * each only where the route did not set its own, so a page with a stricter or different policy
 * (a nonce for its own script) keeps it.
 */
export function registerSecurityHeaders(app: FastifyInstance): void {
  app.addHook('onSend', async (_request, reply, payload) => {
    if (!reply.hasHeader('x-content-type-options')) reply.header('x-content-type-options', 'nosniff');
    const contentType = String(reply.getHeader('content-type') ?? '');
    if (/^text\/html\b/i.test(contentType)) {
      for (const [name, value] of Object.entries(HTML_DEFAULTS)) if (!reply.hasHeader(name)) reply.header(name, value);
    }
    return payload;
  });
}
