import fc from 'fast-check';
import t from 'tap';
import { consentPage, errorPage, escapeHtml, loginPage } from '../../src/api/oauthPages.js';

const unescape = (html: string) => html.replace(/&#(\d+);/g, (_all, code: string) => String.fromCharCode(Number(code)));

t.test('escapeHtml leaves no markup characters and loses nothing', async (t) => {
  fc.assert(
    fc.property(fc.string({ unit: 'grapheme-composite' }), (text) => {
      const escaped = escapeHtml(text);
      return !/[<>"']/.test(escaped) && unescape(escaped) === text;
    }),
  );
  t.pass('property held');
});

t.test('no client-controlled value reaches a page unescaped, and no page has inline script or style', async (t) => {
  const hostile = `"><script>alert(1)</script><style>*{}</style><a href='x'>`;
  const client = { clientName: hostile, clientId: `https://evil.example/${encodeURIComponent(hostile)}`, identifiedBy: 'metadata_document' as const, redirectUri: 'https://evil.example/cb' };
  const pages = [
    loginPage({ client, authorizationRequest: hostile, csrfToken: hostile, error: hostile, email: hostile }),
    consentPage({ client, userEmail: hostile, scope: hostile, resource: hostile, authorizationRequest: hostile, csrfToken: hostile, switchAccountQuery: { state: hostile } }),
    errorPage({ error: hostile, description: hostile }),
  ];
  for (const html of pages) {
    t.notMatch(html, /<script|<style|\sstyle=|\son\w+=|<a /i);
    t.notMatch(html, hostile);
  }
});
