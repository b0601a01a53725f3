import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { parseDuration } from '../config/duration.js';
import type { Config } from '../config/types.js';
import { normalizeEmail } from '../domain/user/decider.js';
import { HttpError } from './errors.js';

/**
 * The routes that take a credential, limited per client address, and client registration (no
 * credential, but open to anyone, and each call appends an event). Listed by path so routes other
 * modules register later (the OAuth endpoints) are limited too.
 */
export const CREDENTIAL_PATHS: ReadonlySet<string> = new Set([
  '/api/v1/auth/login',
  '/api/v1/auth/register',
  '/api/v1/auth/refresh',
  '/api/v1/oauth/token',
  '/api/v1/oauth/authorize/login',
  '/api/v1/oauth/register',
]);

/** The credential routes where a failure counts against the account named by the body's `email`. */
export const ACCOUNT_PATHS: ReadonlySet<string> = new Set(['/api/v1/auth/login', '/api/v1/oauth/authorize/login']);

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * Set by a sign-in route that answers a failed sign-in with something other than 401 (an HTML
     * page shown again with an error): the per-account limit counts it like a 401.
     */
    signInFailed: boolean;
  }
}

/**
 * The route a request reached, as registered: the router decodes percent-escapes and ignores a
 * trailing slash, so `/auth/%6cogin` reaches the login route, and a limit chosen by the raw URL
 * would let it pass. A request that reached no route has none (its 404 takes no credential).
 */
const pathOf = (request: FastifyRequest): string => request.routeOptions.url ?? '';

const SWEEP_ABOVE = 10_000;
const MAX_TRACKED_ACCOUNTS = 100_000;

/**
 * Failed sign-ins per account in a sliding window: each failure counts for `windowMs` and then
 * decays on its own, so an attacker who knows an e-mail can hold that account for minutes at
 * most, and only while failing from somewhere; successes are never counted.
 */
export class AccountFailureLimiter {
  private readonly failures = new Map<string, number[]>();
  private lastSweep = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly max: number,
    private readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  private recent(account: string): number[] {
    const since = this.now() - this.windowMs;
    const kept = (this.failures.get(account) ?? []).filter((at) => at > since);
    if (kept.length === 0) this.failures.delete(account);
    else this.failures.set(account, kept);
    return kept;
  }

  /** Seconds until the account may try again, or 0 when it may now. */
  retryAfterSeconds(account: string): number {
    const recent = this.recent(account);
    if (recent.length < this.max) return 0;
    // The oldest failure that keeps the count at max must decay first.
    const unblockAt = recent[recent.length - this.max] + this.windowMs;
    return Math.max(1, Math.ceil((unblockAt - this.now()) / 1000));
  }

  recordFailure(account: string): void {
    const recent = this.recent(account);
    recent.push(this.now());
    this.failures.set(account, recent.slice(-this.max));
    // Sweeping walks every account: at most once a tenth of a window, unless past the hard cap.
    const due = this.now() - this.lastSweep > this.windowMs / 10;
    if ((this.failures.size > SWEEP_ABOVE && due) || this.failures.size > MAX_TRACKED_ACCOUNTS) this.sweep();
  }

  /** Accounts tracked now (failures within the window). */
  get size(): number {
    return this.failures.size;
  }

  /**
   * Bounds memory when failures are sprayed over many made-up accounts: expired entries go, and
   * past a hard cap the oldest-inserted accounts are forgotten (a forgotten account is only
   * un-held early, never held wrongly).
   */
  private sweep(): void {
    this.lastSweep = this.now();
    for (const account of [...this.failures.keys()]) this.recent(account);
    for (const account of this.failures.keys()) {
      if (this.failures.size <= MAX_TRACKED_ACCOUNTS) break;
      this.failures.delete(account);
    }
  }
}

function accountOf(request: FastifyRequest): string | null {
  const body = request.body;
  if (body === null || typeof body !== 'object' || !('email' in body) || typeof body.email !== 'string') return null;
  return normalizeEmail(body.email);
}

function rateLimited(reply: FastifyReply, retryAfterSeconds: number, message: string): HttpError {
  reply.header('retry-after', String(retryAfterSeconds));
  return new HttpError(429, 'rate_limited', message);
}

/**
 * Registers both limits (before the routes, so every route registered later gets them):
 * per client address on CREDENTIAL_PATHS (@fastify/rate-limit, a fixed window), and per account
 * on ACCOUNT_PATHS, counting only failed sign-ins (401). Both are kept in this process's memory:
 * with several API nodes each node counts on its own (docs/api.md, "Rate limits").
 */
export async function registerRateLimits(app: FastifyInstance, config: Config['rate_limits'], now: () => number = Date.now): Promise<void> {
  app.decorateRequest('signInFailed', false);
  if (!config.enabled) return;
  await app.register(rateLimit, {
    global: true,
    max: config.per_address.max,
    timeWindow: parseDuration(config.per_address.window),
    allowList: (request) => !CREDENTIAL_PATHS.has(pathOf(request)),
    addHeadersOnExceeding: { 'x-ratelimit-limit': true, 'x-ratelimit-remaining': true, 'x-ratelimit-reset': true },
    errorResponseBuilder: (_request, context) =>
      new HttpError(429, 'rate_limited', `too many requests from this address to the sign-in routes; retry in ${context.after}`),
  });

  const accounts = new AccountFailureLimiter(config.per_account_failures.max, parseDuration(config.per_account_failures.window), now);
  app.addHook('preHandler', async (request, reply) => {
    if (!ACCOUNT_PATHS.has(pathOf(request))) return;
    const account = accountOf(request);
    if (account === null) return;
    const wait = accounts.retryAfterSeconds(account);
    if (wait > 0) throw rateLimited(reply, wait, `too many failed sign-ins to this account; retry in ${wait} seconds`);
  });
  app.addHook('onResponse', async (request, reply) => {
    if ((reply.statusCode !== 401 && !request.signInFailed) || !ACCOUNT_PATHS.has(pathOf(request))) return;
    const account = accountOf(request);
    if (account !== null) accounts.recordFailure(account);
  });
}
