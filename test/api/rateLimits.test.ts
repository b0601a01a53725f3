import t from 'tap';

import { AccountFailureLimiter, CREDENTIAL_PATHS } from '../../src/api/rateLimits.js';
import { formOf, newPkce, type PageResponse } from '../helpers/oauthClient.js';
import { registerUser, startTestService, type TestService } from '../helpers/service.js';

let service: TestService;
t.before(async () => {
  service = await startTestService({
    workers: false,
    overrides: { rate_limits: { enabled: true, per_address: { max: 5, window: '10m' }, per_account_failures: { max: 3, window: '10m' } } },
  });
});
t.teardown(() => service.close());

const login = (address: string, email: string, password: string) =>
  service.app.inject({ method: 'POST', url: '/api/v1/auth/login', remoteAddress: address, payload: { email, password } });

t.test('a login flood from one address is answered 429 with Retry-After; the real user signs in from another address', async (t) => {
  await registerUser(service, 'ada@example.org');
  const statuses: number[] = [];
  // An attacker sprays guesses at many accounts from one address.
  for (let attempt = 0; attempt < 8; attempt += 1) statuses.push((await login('203.0.113.7', `victim${attempt}@example.org`, 'guess')).statusCode);
  t.same(statuses, [401, 401, 401, 401, 401, 429, 429, 429]);
  const limited = await login('203.0.113.7', 'ada@example.org', 'correct horse battery');
  t.equal(limited.statusCode, 429, 'the blocked address is blocked for the right password too');
  t.equal(limited.json().error, 'rate_limited');
  t.type(limited.json().message, 'string');
  t.ok(Number(limited.headers['retry-after']) > 0, `Retry-After: ${limited.headers['retry-after']}`);
  // Register and refresh share the address's budget: they are credential routes too.
  const register = await service.app.inject({ method: 'POST', url: '/api/v1/auth/register', remoteAddress: '203.0.113.7', payload: { email: 'new@example.org', password: 'long enough password' } });
  t.equal(register.statusCode, 429);
  const elsewhere = await login('198.51.100.20', 'ada@example.org', 'correct horse battery');
  t.equal(elsewhere.statusCode, 200, 'the real user is not locked out by the attacking address');
  const token = await service.app.inject({
    method: 'POST',
    url: '/api/v1/oauth/token',
    remoteAddress: '203.0.113.7',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: 'grant_type=refresh_token&refresh_token=flr_x&client_id=c',
  });
  t.equal(token.statusCode, 429, 'the token endpoint shares it');
  t.equal(token.headers['cache-control'], 'no-store', 'no answer of the token endpoint is cached, a 429 neither');
  const otherRoute = await service.app.inject({ method: 'GET', url: '/healthz', remoteAddress: '203.0.113.7' });
  t.equal(otherRoute.statusCode, 200, 'routes off the credential list are not limited');
});

t.test('failed sign-ins to one account from many addresses hold that account only, and only failures count', async (t) => {
  await registerUser(service, 'grace@example.org');
  await registerUser(service, 'linus@example.org');
  // Successes do not count: three good logins leave the budget whole.
  for (const address of ['192.0.2.1', '192.0.2.2', '192.0.2.3']) t.equal((await login(address, 'grace@example.org', 'correct horse battery')).statusCode, 200);
  for (const address of ['192.0.2.11', '192.0.2.12', '192.0.2.13']) t.equal((await login(address, 'grace@example.org', 'wrong')).statusCode, 401);
  const held = await login('192.0.2.14', 'GRACE@example.org', 'correct horse battery');
  t.equal(held.statusCode, 429, 'the account is held after 3 failures, however its address is spelt');
  t.equal(held.json().error, 'rate_limited');
  t.ok(Number(held.headers['retry-after']) > 0 && Number(held.headers['retry-after']) <= 600, 'for at most the window');
  t.equal((await login('192.0.2.15', 'linus@example.org', 'correct horse battery')).statusCode, 200, 'other accounts are unaffected');
});

t.test('a credential route is limited however its path is spelt: the route reached counts, not the raw URL', async (t) => {
  const spellings = ['/api/v1/auth/%6cogin', '/api/v1/auth/log%69n', '/api/v1/%61uth/%6C%6Fgin'];
  const statuses: number[] = [];
  for (let attempt = 0; attempt < 7; attempt += 1) {
    const url = spellings[attempt % spellings.length] as string;
    statuses.push((await service.app.inject({ method: 'POST', url, remoteAddress: '203.0.113.50', payload: { email: `nobody${attempt}@example.org`, password: 'guess' } })).statusCode);
  }
  t.same(statuses, [401, 401, 401, 401, 401, 429, 429]);
  // The per-account limit too: three failures to one account, each spelt otherwise, from three addresses.
  await registerUser(service, 'spelt@example.org');
  for (const [index, url] of spellings.entries()) {
    const failed = await service.app.inject({ method: 'POST', url, remoteAddress: `203.0.113.${60 + index}`, payload: { email: 'spelt@example.org', password: 'guess' } });
    t.equal(failed.statusCode, 401);
  }
  t.equal((await login('203.0.113.70', 'spelt@example.org', 'correct horse battery')).statusCode, 429, 'the account is held');
});

t.test('a burst of sign-ins to one account sent at once checks no more passwords than the limit', async (t) => {
  // Registered from an address of its own: the default one's budget is the other tests'.
  const registered = await service.app.inject({ method: 'POST', url: '/api/v1/auth/register', remoteAddress: '198.18.1.1', payload: { email: 'burst@example.org', password: 'correct horse battery' } });
  t.equal(registered.statusCode, 201);
  // Each from its own address, so that only the per-account limit is in play.
  const answers = await Promise.all(Array.from({ length: 12 }, (_, n) => login(`198.18.0.${n + 1}`, 'burst@example.org', `guess ${n}`)));
  const statuses = answers.map((answer) => answer.statusCode);
  t.equal(statuses.filter((status) => status === 401).length, 3, `three passwords checked (${statuses.join(' ')})`);
  t.equal(statuses.filter((status) => status === 429).length, 9, 'the rest held');
  t.ok(answers.filter((answer) => answer.statusCode === 429).every((answer) => Number(answer.headers['retry-after']) >= 1), 'each with a Retry-After');
  t.equal((await login('198.18.0.99', 'burst@example.org', 'correct horse battery')).statusCode, 429, 'then held, as after three failures one at a time');
});

t.test('attempts in flight count until answered; an attempt whose answer is never seen stops counting after a minute', async (t) => {
  let now = 1_000_000;
  const limiter = new AccountFailureLimiter(2, 300_000, () => now);
  const first = limiter.begin('ada');
  const second = limiter.begin('ada');
  t.notOk('retryAfterSeconds' in first || 'retryAfterSeconds' in second, 'two may go');
  t.same(limiter.begin('ada'), { retryAfterSeconds: 1 }, 'a third waits while two are in flight');
  if ('retryAfterSeconds' in first || 'retryAfterSeconds' in second) return;
  limiter.end(first, false);
  const third = limiter.begin('ada');
  t.notOk('retryAfterSeconds' in third, 'a success frees its place');
  limiter.end(second, true);
  t.same(limiter.begin('ada'), { retryAfterSeconds: 1 }, 'one failure and one in flight fill the two places');
  now += 61_000;
  t.notOk('retryAfterSeconds' in limiter.begin('ada'), 'the attempt never answered no longer counts');
});

t.test('failed sign-ins on the OAuth login page count against the account', async (t) => {
  await registerUser(service, 'page@example.org');
  const registered = await service.app.inject({
    method: 'POST',
    url: '/api/v1/oauth/register',
    remoteAddress: '192.0.2.40',
    payload: { client_name: 'Limits', redirect_uris: ['http://127.0.0.1:33418/callback'] },
  });
  t.equal(registered.statusCode, 201);
  const query = new URLSearchParams({
    response_type: 'code',
    client_id: registered.json().client_id,
    redirect_uri: 'http://127.0.0.1:33418/callback',
    code_challenge: newPkce().challenge,
    code_challenge_method: 'S256',
    scope: 'mcp',
    state: 'limits',
  });
  const page = await service.app.inject({ method: 'GET', url: `/api/v1/oauth/authorize?${query}` });
  t.equal(page.statusCode, 200);
  const cookie = page.cookies.map((set) => `${set.name}=${set.value}`).join('; ');
  const form = formOf({ text: page.body } as PageResponse);
  const signIn = (address: string, password: string) =>
    service.app.inject({
      method: 'POST',
      url: '/api/v1/oauth/authorize/login',
      remoteAddress: address,
      headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
      payload: new URLSearchParams({ email: 'page@example.org', password, ...form }).toString(),
    });
  for (const address of ['192.0.2.41', '192.0.2.42', '192.0.2.43']) {
    const wrong = await signIn(address, 'wrong password');
    t.equal(wrong.statusCode, 400, 'the page again, with its error');
    t.match(wrong.body, 'Wrong email or password');
  }
  t.equal((await signIn('192.0.2.44', 'correct horse battery')).statusCode, 429, 'three failed page sign-ins hold the account');
  t.equal((await login('192.0.2.45', 'page@example.org', 'correct horse battery')).statusCode, 429, 'on the JSON login too');
});

t.test('the per-account count decays: each failure counts for the window only', async (t) => {
  let now = 1_000_000;
  const limiter = new AccountFailureLimiter(3, 300_000, () => now);
  limiter.recordFailure('ada');
  now += 100_000;
  limiter.recordFailure('ada');
  limiter.recordFailure('ada');
  t.equal(limiter.retryAfterSeconds('ada'), 200, 'held until the first failure is 5 minutes old');
  t.equal(limiter.retryAfterSeconds('bob'), 0);
  now += 200_000;
  t.equal(limiter.retryAfterSeconds('ada'), 0, 'free again once the oldest failure decayed');
  limiter.recordFailure('ada');
  t.ok(limiter.retryAfterSeconds('ada') > 0, 'one more failure within the window holds it again');
  now += 300_001;
  t.equal(limiter.retryAfterSeconds('ada'), 0);
});

t.test('the OAuth credential routes are on the list, so they are limited once registered', async (t) => {
  t.ok(CREDENTIAL_PATHS.has('/api/v1/oauth/token'));
  t.ok(CREDENTIAL_PATHS.has('/api/v1/oauth/authorize/login'));
  t.ok(CREDENTIAL_PATHS.has('/api/v1/auth/refresh'));
  t.ok(CREDENTIAL_PATHS.has('/api/v1/oauth/register'), 'open to anyone, and each call appends an event');
});

t.test('failures sprayed over made-up accounts do not grow memory without bound', async (t) => {
  let now = 0;
  const limiter = new AccountFailureLimiter(3, 60_000, () => now);
  for (let index = 0; index < 10_500; index += 1) limiter.recordFailure(`made-up-${index}@example.org`);
  now += 60_001;
  limiter.recordFailure('one-more@example.org');
  t.equal(limiter.size, 1, 'expired accounts are swept once many are tracked');
});

t.test('a route registered later on a listed path (the OAuth sign-in page) gets both limits', async (t) => {
  const { default: Fastify } = await import('fastify');
  const { default: formbody } = await import('@fastify/formbody');
  const { registerErrorHandling } = await import('../../src/api/errors.js');
  const { registerRateLimits } = await import('../../src/api/rateLimits.js');
  const app = Fastify();
  t.teardown(() => app.close());
  registerErrorHandling(app);
  await app.register(formbody);
  await registerRateLimits(app, { enabled: true, per_address: { max: 4, window: '10m' }, per_account_failures: { max: 2, window: '10m' } });
  // A stand-in for the OAuth sign-in page: a failed sign-in shows the form again with 200.
  app.post<{ Body: { email: string; password: string } }>('/api/v1/oauth/authorize/login', async (request, reply) => {
    if (request.body.password !== 'right') request.signInFailed = true;
    return reply.type('text/html').send(request.signInFailed ? '<p>wrong password</p>' : '<p>welcome</p>');
  });
  const signIn = (address: string, password: string) =>
    app.inject({ method: 'POST', url: '/api/v1/oauth/authorize/login', remoteAddress: address, headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: `email=ada%40example.org&password=${password}` });
  t.equal((await signIn('192.0.2.1', 'wrong')).statusCode, 200);
  t.equal((await signIn('192.0.2.2', 'wrong')).statusCode, 200);
  const held = await signIn('192.0.2.3', 'right');
  t.equal(held.statusCode, 429, 'two failed page sign-ins hold the account');
  t.ok(Number(held.headers['retry-after']) > 0);
  for (let attempt = 0; attempt < 4; attempt += 1) await app.inject({ method: 'POST', url: '/api/v1/oauth/authorize/login', remoteAddress: '192.0.2.9', headers: { 'content-type': 'application/x-www-form-urlencoded' }, payload: `email=other${attempt}%40example.org&password=right` });
  const flooded = await signIn('192.0.2.9', 'right');
  t.equal(flooded.statusCode, 429, 'the per-address limit applies to the page too');
  t.equal(flooded.json().error, 'rate_limited');
});
