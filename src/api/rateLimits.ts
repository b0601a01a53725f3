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
    /** The sign-in attempt the per-account limit let through, ended when the request is answered. */
    signInAttempt: SignInAttempt | null;
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

/** How long a sign-in attempt counts as in flight at most, should its end never be seen (a client gone). */
const ATTEMPT_HELD_MS = 60_000;

/** One sign-in attempt between its check and its answer. */
export interface SignInAttempt {
  readonly account: string;
  readonly startedAt: number;
}

/**
 * Failed sign-ins per account in a sliding window: each failure counts for `windowMs` and then
 * decays on its own, so an attacker who knows an e-mail can hold that account for minutes at
 * most, and only while failing from somewhere; successes are never counted. An attempt counts
 * from its check to its answer too (`begin`, `end`): counted only once answered, a burst sent at
 * once had every password checked before the first failure was recorded (25 at once, 25 checked).
 */
export class AccountFailureLimiter {
  private readonly failures = new Map<string, number[]>();
  private readonly inFlight = new Map<string, Set<SignInAttempt>>();
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

  /**
   * A sign-in attempt to `account` may check its password: the attempt to `end` once answered.
   * Or the seconds to wait, when the failures in the window and the attempts in flight together
   * reach the limit (attempts in flight hold the account for a second: they end soon).
   */
  begin(account: string): SignInAttempt | { retryAfterSeconds: number } {
    const held = this.retryAfterSeconds(account);
    if (held > 0) return { retryAfterSeconds: held };
    const attempts = this.pending(account);
    if (this.recent(account).length + attempts.size >= this.max) return { retryAfterSeconds: 1 };
    const attempt = { account, startedAt: this.now() };
    attempts.add(attempt);
    this.inFlight.set(account, attempts);
    return attempt;
  }

  /** An attempt was answered: it no longer counts as in flight, and a failure counts from now. */
  end(attempt: SignInAttempt, failed: boolean): void {
    const attempts = this.inFlight.get(attempt.account);
    attempts?.delete(attempt);
    if (attempts?.size === 0) this.inFlight.delete(attempt.account);
    if (failed) this.recordFailure(attempt.account);
  }

  /** The account's attempts in flight, those whose end was never seen dropped after ATTEMPT_HELD_MS. */
  private pending(account: string): Set<SignInAttempt> {
    const attempts = this.inFlight.get(account) ?? new Set<SignInAttempt>();
    for (const attempt of attempts) if (this.now() - attempt.startedAt > ATTEMPT_HELD_MS) attempts.delete(attempt);
    return attempts;
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
  app.decorateRequest('signInAttempt', null);
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
    const attempt = accounts.begin(account);
    if ('retryAfterSeconds' in attempt) {
      const wait = attempt.retryAfterSeconds;
      throw rateLimited(reply, wait, `too many failed sign-ins to this account; retry in ${wait} seconds`);
    }
    request.signInAttempt = attempt;
  });
  // An attempt ends with its answer, or when its client goes before it (then counted as failed).
  const endAttempt = (request: FastifyRequest, failed: boolean): void => {
    if (request.signInAttempt === null) return;
    accounts.end(request.signInAttempt, failed);
    request.signInAttempt = null;
  };
  app.addHook('onResponse', async (request, reply) => endAttempt(request, reply.statusCode === 401 || request.signInFailed));
  app.addHook('onRequestAbort', async (request) => endAttempt(request, true));
}
