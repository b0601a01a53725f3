/**
 * The server-rendered pages of the OAuth authorization endpoint: login, consent and error.
 * Plain HTML forms that work without JavaScript; no inline script or style (the stylesheet is
 * served by its own route, so the pages' CSP can be `default-src 'none'; style-src 'self'`).
 * Every value that comes from a request or a client is escaped.
 */

export const OAUTH_STYLESHEET_PATH = '/api/v1/oauth/assets/authorize.css';

export const OAUTH_STYLESHEET = `*{box-sizing:border-box}
body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:#f4f5f7;color:#1d2330}
main{max-width:28rem;margin:4rem auto;padding:2rem;background:#fff;border:1px solid #d8dce3;border-radius:8px}
h1{font-size:1.35rem;margin:0 0 1rem}
p,ul{margin:0 0 1rem}
label{display:block;font-weight:600;margin:0 0 .25rem}
input[type=email],input[type=password]{width:100%;padding:.55rem;margin:0 0 1rem;border:1px solid #9aa3b2;border-radius:4px;font:inherit}
button{font:inherit;padding:.55rem 1.1rem;border-radius:4px;border:1px solid #1f4fbf;background:#1f4fbf;color:#fff;cursor:pointer}
button.secondary{background:#fff;color:#1f4fbf}
button.link{padding:0;border:0;background:none;color:#1f4fbf;text-decoration:underline}
button:focus,input:focus{outline:3px solid #f0b400;outline-offset:1px}
.actions{display:flex;gap:.75rem;flex-wrap:wrap}
.error{padding:.75rem;border-radius:4px;background:#fdecec;border:1px solid #d33;color:#7a1010}
.note{color:#4a5263;font-size:.9rem}
code{font-size:.85rem;word-break:break-all}
`;

export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (character) => `&#${character.charCodeAt(0)};`);
}

function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${escapeHtml(title)} · Factlog</title>
<link rel="stylesheet" href="${OAUTH_STYLESHEET_PATH}">
</head>
<body>
<main>
${body}
</main>
</body>
</html>
`;
}

/** What the pages say about the client asking: its name, how it is identified, where it returns to. */
export interface ClientPresentation {
  clientName: string;
  clientId: string;
  identifiedBy: 'registered' | 'metadata_document';
  redirectUri: string;
}

function clientLine(client: ClientPresentation): string {
  const name = client.clientName === '' ? 'An unnamed application' : escapeHtml(client.clientName);
  return `<strong>${name}</strong>`;
}

function clientNotes(client: ClientPresentation): string {
  const identity =
    client.identifiedBy === 'metadata_document'
      ? `Its identity is the address <code>${escapeHtml(client.clientId)}</code>.`
      : 'It registered itself with this server: its name is what it says, not verified.';
  return `<p class="note">${identity} After you decide you return to <code>${escapeHtml(new URL(client.redirectUri).origin)}</code>.</p>`;
}

function hiddenFields(fields: { authorizationRequest: string; csrfToken: string }): string {
  return `<input type="hidden" name="authorization_request" value="${escapeHtml(fields.authorizationRequest)}">
<input type="hidden" name="csrf" value="${escapeHtml(fields.csrfToken)}">`;
}

export function loginPage(input: { client: ClientPresentation; authorizationRequest: string; csrfToken: string; error?: string; email?: string }): string {
  const error = input.error ? `<p class="error" role="alert">${escapeHtml(input.error)}</p>` : '';
  return page(
    'Sign in',
    `<h1>Sign in to Factlog</h1>
<p>${clientLine(input.client)} asks to use Factlog on your behalf. Sign in first.</p>
${error}<form method="post" action="/api/v1/oauth/authorize/login">
${hiddenFields(input)}
<label for="email">Email</label>
<input id="email" name="email" type="email" autocomplete="username" required value="${escapeHtml(input.email ?? '')}">
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<div class="actions"><button type="submit">Sign in</button></div>
</form>
${clientNotes(input.client)}`,
  );
}

export function consentPage(input: {
  client: ClientPresentation;
  userEmail: string;
  scope: string;
  resource: string;
  authorizationRequest: string;
  csrfToken: string;
  /** The authorization request again, with `prompt=login`: the "use another account" form. */
  switchAccountQuery: Record<string, string>;
}): string {
  const switchFields = Object.entries(input.switchAccountQuery)
    .map(([name, value]) => `<input type="hidden" name="${escapeHtml(name)}" value="${escapeHtml(value)}">`)
    .join('\n');
  return page(
    'Authorize access',
    `<h1>Authorize ${clientLine(input.client)}</h1>
<form method="get" action="/api/v1/oauth/authorize" class="switch">
<p>Signed in as <strong>${escapeHtml(input.userEmail)}</strong>. <button type="submit" class="link">Use another account</button></p>
${switchFields}
</form>
<p>${clientLine(input.client)} asks for:</p>
<ul>
<li>scope <code>${escapeHtml(input.scope)}</code>: use Factlog's tools (MCP) as you, with your roles on your repositories: read and search what you can read, and change what you can change;</li>
<li>only at <code>${escapeHtml(input.resource)}</code>.</li>
</ul>
<form method="post" action="/api/v1/oauth/authorize">
${hiddenFields(input)}
<div class="actions">
<button type="submit" name="decision" value="approve">Allow</button>
<button type="submit" name="decision" value="deny" class="secondary">Deny</button>
</div>
</form>
${clientNotes(input.client)}`,
  );
}

export function errorPage(input: { error: string; description: string }): string {
  return page(
    'Authorization failed',
    `<h1>This authorization request cannot continue</h1>
<p class="error" role="alert"><strong>${escapeHtml(input.error)}</strong>: ${escapeHtml(input.description)}</p>
<p>Nothing was shared. Return to the application and start again.</p>`,
  );
}
