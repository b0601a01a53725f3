import { randomUUID } from 'node:crypto';
import type { Database } from '../db/database.js';
import { databaseErrorCode, UNIQUE_VIOLATION } from '../db/errorCodes.js';
import { withNamedLock } from '../db/namedLock.js';
import { DomainError } from '../domain/decider.js';
import { EMAIL_PATTERN, normalizeEmail, userDecider, type UserEvent } from '../domain/user/decider.js';
import { streamName, type EventMetadata } from '../eventstore/envelope.js';
import type { EventStore } from '../eventstore/port.js';
import type { CommandBus } from '../app/commands.js';
import { revokeFenced } from '../app/repositoryFence.js';
import { jsonColumn } from '../read/present.js';
import { hashPassword, needsRehash, validatePasswordPolicy, verifyPassword } from './passwords.js';
import { SYSTEM_DOMAIN, type Principal, type RoleAssignment } from './rbac.js';
import { hashToken, InvalidTokenError, newOpaqueToken, OPAQUE_TOKEN_PREFIX, type TokenService } from './tokens.js';

export interface PublicUser {
  id: string;
  email: string;
  name: string;
}

export interface SessionGrant {
  user: PublicUser;
  token: string;
  refresh_token: string;
}


export interface IdentitySettings {
  passwordMinLength: number;
  /** log2 of scrypt's N for new hashes (`auth.password_hash_cost`); older hashes are re-made at their next login. */
  passwordHashCost: number;
  refreshTtlMs: number;
  autoPromoteFirstUser: boolean;
}

/**
 * Why the sign-up rules refuse an email and password (an address that is none, a password the
 * policy refuses), or null when they accept them. Pure: the bootstrap's default admin is checked
 * with it before `serve` listens (src/app/bootstrap.ts), with the rules every registration meets.
 */
export function signUpRefusal(input: { email: string; password: string }, passwordMinLength: number): string | null {
  if (!EMAIL_PATTERN.test(normalizeEmail(String(input.email ?? '')))) return 'email is not a valid address';
  return validatePasswordPolicy(input.password, passwordMinLength);
}

/** How precisely an API key's last use is recorded. */
const API_KEY_LAST_USED_RESOLUTION_MS = 60_000;

/** Authentication failures the HTTP layer answers with 401. */
export class AuthenticationError extends Error {
  override readonly name = 'AuthenticationError';
}

/**
 * Users, credentials and sessions. Profiles and roles are events on `user-<id>` streams;
 * password hashes and refresh-token hashes live only in the `credentials` and `sessions` tables,
 * never in the log.
 */
export function createIdentityService(deps: {
  db: Database;
  store: EventStore;
  commands: CommandBus;
  tokens: TokenService;
  settings: IdentitySettings;
  log: { info(object: object, message: string): void };
}) {
  const { tokens, settings } = deps;
  const knex = deps.db.knex;

  async function loadUser(userId: string): Promise<PublicUser | null> {
    const row = await knex('users').where({ id: userId }).first(['id', 'email', 'name']);
    return row ?? null;
  }

  async function roleAssignments(userId: string): Promise<RoleAssignment[]> {
    return knex('role_assignments').where({ user_id: userId }).select('role', 'domain');
  }

  /**
   * The user's role assignments as a column of the statement that finds the credential, so a
   * request authenticates in one statement instead of two: on the embedded tier each statement
   * queues anew for the database's one connection (docs/performance.md, "Sixth round").
   */
  const assignmentsOf = (userIdColumn: string) =>
    knex.raw(
      `COALESCE((SELECT json_agg(json_build_object('role', ra.role, 'domain', ra.domain)) FROM role_assignments ra WHERE ra.user_id = ??), '[]'::json) AS assignments`,
      [userIdColumn],
    );

  /**
   * Ends a session (logout, or the reuse of its refresh token) while no command made with it is
   * between its check and its append (revokeFenced). Never inside a transaction: the fence waits
   * for those commands, which on PGlite's one connection a transaction held open would stall.
   */
  const endSession = (sessionId: string) =>
    revokeFenced(deps.db, { kind: 'session', id: sessionId }, async () => {
      await knex('sessions').where({ id: sessionId }).whereNull('revoked_at').update({ revoked_at: new Date() });
    });

  async function openSession(user: PublicUser): Promise<SessionGrant> {
    const sessionId = randomUUID();
    const refreshToken = newOpaqueToken(OPAQUE_TOKEN_PREFIX.refreshToken);
    await knex('sessions').insert({
      id: sessionId,
      user_id: user.id,
      refresh_token_hash: hashToken(refreshToken),
      refresh_expires_at: new Date(Date.now() + settings.refreshTtlMs),
    });
    const { token } = await tokens.signSession({ userId: user.id, sessionId });
    return { user, token, refresh_token: refreshToken };
  }

  /**
   * Registers a user with `extraRoles` (used by the admin bootstrap). The credentials row is the
   * lock on the email: it is inserted first, and removed again if the append fails.
   */
  async function createUser(input: { email: string; password: string; name?: string }, extraRoles: RoleAssignment[]) {
    const refusal = signUpRefusal(input, settings.passwordMinLength);
    if (refusal) throw new DomainError('invalid', refusal);
    const email = normalizeEmail(String(input.email ?? ''));
    const passwordHash = await hashPassword(input.password, settings.passwordHashCost);
    const userId = randomUUID();
    const isFirstUser = await knex.transaction(async (trx) => {
      // Serialises registrations so exactly one of two racing first users is promoted.
      await trx.raw(`SELECT pg_advisory_xact_lock(hashtext('factlog.register'))`);
      if (await trx('credentials').where({ email }).first('user_id')) {
        throw new DomainError('conflict', 'email is already registered');
      }
      const first = !(await trx('credentials').first('user_id'));
      await trx('credentials').insert({ user_id: userId, email, password_hash: passwordHash });
      return first;
    });
    const roles: RoleAssignment[] = [{ role: 'user', domain: SYSTEM_DOMAIN }, ...extraRoles];
    if (isFirstUser && settings.autoPromoteFirstUser && !roles.some((r) => r.role === 'sysadmin')) {
      roles.push({ role: 'sysadmin', domain: SYSTEM_DOMAIN });
      deps.log.info({ userId, email }, 'first registered user promoted to sysadmin (bootstrap.auto_promote_first_user)');
    }
    const events: UserEvent[] = [
      { type: 'UserRegistered', data: { email, name: (input.name ?? '').trim() } },
      ...roles.map((assignment): UserEvent => ({ type: 'RoleGranted', data: assignment })),
    ];
    const metadata: EventMetadata = { repositoryId: null, actor: userId, causationId: null, correlationId: randomUUID() };
    try {
      const appended = await deps.store.append(
        streamName('user', userId),
        events.map((event) => ({ type: event.type, data: event.data, metadata })),
        'no_stream',
      );
      await deps.commands.settle({
        position: appended.lastPosition,
        streamId: streamName('user', userId),
        streamVersion: appended.nextExpectedVersion,
        types: events.map((event) => event.type),
      });
    } catch (error) {
      await knex('credentials').where({ user_id: userId }).delete();
      throw error;
    }
    return { id: userId, email, name: (input.name ?? '').trim() };
  }

  async function verifyCredentials(input: { email: string; password: string }): Promise<PublicUser> {
    const email = normalizeEmail(String(input.email ?? ''));
    const credentials = await knex('credentials').where({ email }).first(['user_id', 'password_hash']);
    // Verify against a dummy hash when the email is unknown so timing does not reveal accounts.
    const ok = await verifyPassword(input.password, credentials?.password_hash ?? (await dummyHash(settings.passwordHashCost)));
    if (!credentials || !ok) throw new AuthenticationError('invalid email or password');
    const user = await loadUser(credentials.user_id);
    if (!user) throw new AuthenticationError('invalid email or password');
    if (needsRehash(credentials.password_hash, settings.passwordHashCost)) await rehash(credentials.user_id, credentials.password_hash, input.password);
    return user;
  }

  /**
   * A hash made at another cost (the setting changed since) is made again while the password is
   * at hand. Only the hash that was verified is replaced: a password changed meanwhile stays.
   */
  async function rehash(userId: string, verifiedHash: string, password: string): Promise<void> {
    const passwordHash = await hashPassword(password, settings.passwordHashCost);
    const replaced = await knex('credentials').where({ user_id: userId, password_hash: verifiedHash }).update({ password_hash: passwordHash });
    if (replaced > 0) deps.log.info({ userId }, 'password hash re-made at the configured cost (auth.password_hash_cost)');
  }

  /**
   * A personal API key acts for its owner with the owner's roles of this moment, narrowed to the
   * key's scopes and repository (rbac.ts, effectivePermissions). Its last use is recorded at most
   * once a minute, so a busy script costs one extra write a minute, not one per request.
   */
  async function authenticateApiKey(raw: string): Promise<Principal> {
    const key = await knex('api_key_secrets as secret')
      .join('api_keys as key', 'key.id', 'secret.key_id')
      .where('secret.token_hash', hashToken(raw))
      .first('key.id', 'key.user_id', 'key.scopes', 'key.repository_id', 'key.expires_at', 'key.revoked_at', 'secret.last_used_at', assignmentsOf('key.user_id'));
    if (!key) throw new AuthenticationError('invalid API key');
    if (key.revoked_at) throw new AuthenticationError('API key was revoked');
    const now = Date.now();
    if (key.expires_at && new Date(key.expires_at).getTime() <= now) throw new AuthenticationError('API key expired');
    if (!key.last_used_at || now - new Date(key.last_used_at).getTime() >= API_KEY_LAST_USED_RESOLUTION_MS) {
      await knex('api_key_secrets').where({ key_id: key.id }).update({ last_used_at: new Date(now) });
    }
    const scopes = jsonColumn(key.scopes) as string[];
    return {
      userId: key.user_id,
      credential: { kind: 'api_key', id: key.id },
      assignments: jsonColumn(key.assignments) as RoleAssignment[],
      scopes,
      ...(key.repository_id ? { repositoryId: key.repository_id } : {}),
    };
  }

  return {
    loadUser,
    roleAssignments,

    async register(input: { email: string; password: string; name?: string }): Promise<SessionGrant> {
      return openSession(await createUser(input, []));
    },

    async login(input: { email: string; password: string }): Promise<SessionGrant> {
      return openSession(await verifyCredentials(input));
    },

    /** Checks an email and password without opening a session (the OAuth login page). */
    verifyCredentials,

    /** Ends the session at once, under its fence: a command made with it meanwhile lands first or is refused (src/app/repositoryFence.ts). */
    async logout(sessionId: string): Promise<void> {
      await endSession(sessionId);
    },

    /**
     * Rotates the refresh token: the old one stops working at once. Presenting a rotated token
     * again means two parties hold the session (one stole it): the whole session is revoked, so
     * the current access and refresh tokens stop working too.
     */
    async refresh(refreshToken: string): Promise<{ token: string; refresh_token: string }> {
      const next = newOpaqueToken(OPAQUE_TOKEN_PREFIX.refreshToken);
      const presentedHash = hashToken(String(refreshToken ?? ''));
      const outcome = await knex.transaction(async (trx) => {
        const row = await trx('sessions')
          .where({ refresh_token_hash: presentedHash })
          .whereNull('revoked_at')
          .where('refresh_expires_at', '>', new Date())
          .forUpdate()
          .first(['id', 'user_id']);
        if (!row) {
          const retired = await trx('retired_refresh_tokens').where({ token_hash: presentedHash }).first(['session_id']);
          if (!retired) return { kind: 'unknown' as const };
          // Ended once this transaction committed, under the session's fence (endSession).
          return { kind: 'reused' as const, sessionId: retired.session_id as string };
        }
        await trx('retired_refresh_tokens').insert({ token_hash: presentedHash, session_id: row.id });
        // A retired token older than a refresh lifetime would have expired unused anyway: forgetting it keeps the table small.
        await trx('retired_refresh_tokens').where('retired_at', '<', new Date(Date.now() - settings.refreshTtlMs)).delete();
        await trx('sessions')
          .where({ id: row.id })
          .update({ refresh_token_hash: hashToken(next), rotated_at: new Date(), refresh_expires_at: new Date(Date.now() + settings.refreshTtlMs) });
        return { kind: 'rotated' as const, session: row as { id: string; user_id: string } };
      });
      if (outcome.kind === 'reused') {
        await endSession(outcome.sessionId);
        throw new AuthenticationError('refresh token was already used: the session is revoked, sign in again');
      }
      if (outcome.kind === 'unknown') throw new AuthenticationError('invalid or expired refresh token');
      const { token } = await tokens.signSession({ userId: outcome.session.user_id, sessionId: outcome.session.id });
      return { token, refresh_token: next };
    },

    /** Resolves a bearer token (a session JWT or a personal API key) to a principal, or throws AuthenticationError. */
    async authenticate(bearer: string): Promise<Principal> {
      if (bearer.startsWith(OPAQUE_TOKEN_PREFIX.apiKey)) return authenticateApiKey(bearer);
      let claims;
      try {
        claims = await tokens.verify(bearer, 'session');
      } catch (error) {
        if (error instanceof InvalidTokenError) throw new AuthenticationError(error.reason === 'expired' ? 'token expired' : 'invalid token');
        throw error;
      }
      const session = await knex('sessions').where({ id: claims.sid, user_id: claims.sub }).first('revoked_at', assignmentsOf('sessions.user_id'));
      if (!session || session.revoked_at) throw new AuthenticationError('session has ended');
      return { userId: claims.sub, credential: { kind: 'session', id: claims.sid }, assignments: jsonColumn(session.assignments) as RoleAssignment[] };
    },

    /**
     * Profile changes are events; an email change also moves the credentials row, which keeps
     * emails unique. One change of a user's profile at a time (across processes on a server): two
     * at once could otherwise leave the credentials row with one's email and the profile with the
     * other's, or put back an email read before the other had changed it.
     */
    async updateProfile(actor: string, userId: string, change: { name?: string; email?: string }): Promise<PublicUser> {
      const updateOnce = async () => {
        const before = await loadUser(userId);
        const credentials: { email: string } | undefined = await knex('credentials').where({ user_id: userId }).first('email');
        if (!before || !credentials) throw new DomainError('not_found', 'user not found');
        const email = change.email === undefined ? undefined : normalizeEmail(change.email);
        if (email !== undefined && email !== credentials.email) {
          if (!EMAIL_PATTERN.test(email)) throw new DomainError('invalid', 'email is not a valid address');
          const taken = await knex('credentials').where({ email }).whereNot({ user_id: userId }).first('user_id');
          if (taken) throw new DomainError('conflict', 'email is already registered');
          try {
            await knex('credentials').where({ user_id: userId }).update({ email, updated_at: new Date() });
          } catch (error) {
            // Another user took the address between the check and the update.
            if (databaseErrorCode(error) === UNIQUE_VIOLATION) throw new DomainError('conflict', 'email is already registered');
            throw error;
          }
        }
        const metadata: EventMetadata = { repositoryId: null, actor, causationId: null, correlationId: randomUUID() };
        try {
          await deps.commands.execute(streamName('user', userId), userDecider, { type: 'UpdateProfile', ...change }, metadata);
        } catch (error) {
          await knex('credentials').where({ user_id: userId }).update({ email: credentials.email });
          throw error;
        }
        return (await loadUser(userId)) ?? before;
      };
      return withNamedLock(deps.db, `factlog.profile.${userId}`, updateOnce, 'exclusive', ['users']);
    },

    /**
     * The spec's dev-profile operator command (`factlog users promote <email>`): a registered user
     * becomes sysadmin on the system domain. Idempotent: `promoted` is false when the user already
     * was one. Roles are read per request, so a running service needs no restart.
     */
    async promoteToSysadmin(email: string, actor: string): Promise<{ user: PublicUser; promoted: boolean }> {
      const normalized = normalizeEmail(email);
      const credentials = await knex('credentials').where({ email: normalized }).first('user_id');
      const user = credentials ? await loadUser(credentials.user_id) : null;
      if (!user) throw new DomainError('not_found', `no user is registered with ${normalized}`);
      const metadata: EventMetadata = { repositoryId: null, actor, causationId: null, correlationId: randomUUID() };
      const result = await deps.commands.execute(streamName('user', user.id), userDecider, { type: 'GrantRole', role: 'sysadmin', domain: SYSTEM_DOMAIN }, metadata);
      if (result.events.length > 0) deps.log.info({ userId: user.id, email: user.email, actor }, 'user promoted to sysadmin by the operator command');
      return { user, promoted: result.events.length > 0 };
    },

    /**
     * `bootstrap.default_admin`: seeds a sysadmin from the environment, only while no user exists.
     * Runs at boot, before the server accepts any register call, so it wins over first-user promotion.
     */
    async seedDefaultAdmin(admin: { email: string; password: string; displayName?: string }): Promise<PublicUser | null> {
      if (await knex('credentials').first('user_id')) return null;
      const user = await createUser(
        { email: admin.email, password: admin.password, name: admin.displayName },
        [{ role: 'sysadmin', domain: SYSTEM_DOMAIN }],
      );
      deps.log.info({ userId: user.id, email: user.email }, 'default admin seeded (bootstrap.default_admin)');
      return user;
    },
  };
}

export type IdentityService = ReturnType<typeof createIdentityService>;

/** Valid scrypt encodings of a random password by cost: verifying against one costs as much as a real check. */
const dummyHashes = new Map<number, Promise<string>>();

function dummyHash(cost: number): Promise<string> {
  let hash = dummyHashes.get(cost);
  if (!hash) {
    hash = hashPassword(randomUUID(), cost);
    dummyHashes.set(cost, hash);
  }
  return hash;
}
