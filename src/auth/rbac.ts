/**
 * Role-based access control by domain, table-driven and pure.
 *
 * A domain is the system domain `system` or one repository `repository:<id>`. A permission is an
 * `object:action` pair from PERMISSION_CATALOG; each has a scope telling which kind of domain it
 * is checked in. A role belongs to one kind of domain and grants permission patterns, where `*`
 * stands for any object or any action. Patterns are expanded against the catalog, and only to
 * permissions of the role's own scope: a repository role can never grant a system permission.
 *
 * The one cross-domain rule: `sysadmin` on the system domain grants every permission in every
 * domain. In a permission map that reach is the key `repository:*` (ANY_REPOSITORY_DOMAIN).
 *
 * Unknown roles, roles on the wrong kind of domain, malformed domains and unknown permissions
 * grant nothing (fail closed). A permission is only ever held in a domain of its own scope, so
 * checking one in the other kind of domain (e.g. `facts:read` on `system`) is false even for a
 * sysadmin: that check is a bug in the caller, and it should show in tests, not pass.
 */

export const SYSTEM_DOMAIN = 'system';
export const REPOSITORY_DOMAIN_PREFIX = 'repository:';
/** Key of a permission map for "every repository"; never a valid assignment domain. */
export const ANY_REPOSITORY_DOMAIN = 'repository:*';

/** Repository ids are UUIDs or slugs; ':' and '*' are excluded so a domain can never be a pattern. */
const REPOSITORY_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

export type Scope = 'system' | 'repository';

export interface RoleAssignment {
  role: string;
  domain: string;
}

export function repositoryDomain(repositoryId: string): string {
  if (typeof repositoryId !== 'string' || !REPOSITORY_ID.test(repositoryId)) {
    throw new RangeError(`not a valid repository id: ${JSON.stringify(repositoryId)}`);
  }
  return REPOSITORY_DOMAIN_PREFIX + repositoryId;
}

/** The kind of a concrete domain, or null when the string is not one. */
export function scopeOfDomain(domain: string): Scope | null {
  if (domain === SYSTEM_DOMAIN) return 'system';
  if (typeof domain === 'string' && domain.startsWith(REPOSITORY_DOMAIN_PREFIX)) {
    return REPOSITORY_ID.test(domain.slice(REPOSITORY_DOMAIN_PREFIX.length)) ? 'repository' : null;
  }
  return null;
}

/** Every permission the service checks. Adding one here is how a new check comes into being. */
export const PERMISSION_CATALOG = [
  // System domain
  { permission: 'user:read', scope: 'system', description: 'list users and read any profile' },
  { permission: 'user:write', scope: 'system', description: "change another user's profile" },
  { permission: 'user:delete', scope: 'system', description: 'delete or disable a user' },
  { permission: 'role:read', scope: 'system', description: 'read role assignments and the permission catalog' },
  { permission: 'role:manage', scope: 'system', description: 'grant and revoke roles in any domain' },
  { permission: 'repositories:create', scope: 'system', description: 'create a repository (the creator becomes its owner)' },
  { permission: 'apikeys:create', scope: 'system', description: 'create personal API keys for oneself' },
  { permission: 'apikeys:manage', scope: 'system', description: "list and revoke any user's API keys" },
  { permission: 'projections:read', scope: 'system', description: 'read projection positions and health' },
  { permission: 'projections:manage', scope: 'system', description: 'rebuild projections' },
  { permission: 'audit:read', scope: 'system', description: 'read the permission audit of the whole service' },
  // Repository domain
  { permission: 'repositories:read', scope: 'repository', description: 'see the repository and its settings' },
  { permission: 'repositories:write', scope: 'repository', description: 'rename, change description' },
  { permission: 'repositories:manage', scope: 'repository', description: 'settings: registry, presets, promptset whitelist; import and export' },
  { permission: 'repositories:delete', scope: 'repository', description: 'delete the repository' },
  { permission: 'members:read', scope: 'repository', description: 'list who holds which role on the repository, and read its permission audit' },
  { permission: 'members:manage', scope: 'repository', description: 'grant and revoke roles on the repository' },
  { permission: 'sources:read', scope: 'repository', description: 'read sources' },
  { permission: 'sources:create', scope: 'repository', description: 'add sources (URL, upload)' },
  { permission: 'sources:write', scope: 'repository', description: 'edit, refetch, redecompose sources' },
  { permission: 'sources:delete', scope: 'repository', description: 'delete sources' },
  { permission: 'facts:read', scope: 'repository', description: 'read and search facts' },
  { permission: 'facts:create', scope: 'repository', description: 'add facts by hand' },
  { permission: 'facts:write', scope: 'repository', description: 'edit, merge, link facts' },
  { permission: 'facts:delete', scope: 'repository', description: 'delete facts' },
  { permission: 'concepts:read', scope: 'repository', description: 'read and search concepts and relations' },
  { permission: 'concepts:create', scope: 'repository', description: 'add concepts' },
  { permission: 'concepts:write', scope: 'repository', description: 'edit, alias, merge, resynthesize concepts' },
  { permission: 'concepts:delete', scope: 'repository', description: 'delete concepts' },
  { permission: 'reports:read', scope: 'repository', description: 'read reports and annotations' },
  { permission: 'reports:create', scope: 'repository', description: 'create reports' },
  { permission: 'reports:write', scope: 'repository', description: 'edit, re-annotate reports' },
  { permission: 'reports:delete', scope: 'repository', description: 'delete reports' },
  { permission: 'investigations:read', scope: 'repository', description: 'read investigations' },
  { permission: 'investigations:create', scope: 'repository', description: 'start investigations' },
  { permission: 'investigations:write', scope: 'repository', description: 'edit investigations' },
  { permission: 'investigations:delete', scope: 'repository', description: 'delete investigations' },
  { permission: 'events:read', scope: 'repository', description: "read the repository's event streams" },
  { permission: 'jobs:read', scope: 'repository', description: 'see background jobs and their state' },
  { permission: 'jobs:write', scope: 'repository', description: 'retry failed jobs, enqueue jobs' },
  { permission: 'jobs:manage', scope: 'repository', description: 'cancel and purge jobs' },
] as const satisfies readonly { permission: `${string}:${string}`; scope: Scope; description: string }[];

export type Permission = (typeof PERMISSION_CATALOG)[number]['permission'];

const SCOPE_OF_PERMISSION: ReadonlyMap<string, Scope> = new Map(PERMISSION_CATALOG.map((entry) => [entry.permission, entry.scope]));
const ALL_PERMISSIONS: readonly Permission[] = PERMISSION_CATALOG.map((entry) => entry.permission);

export function isKnownPermission(value: string): value is Permission {
  return SCOPE_OF_PERMISSION.has(value);
}

interface RoleDefinition {
  name: string;
  scope: Scope;
  description: string;
  grants: readonly string[];
}

const CONTENT_OBJECTS = ['sources', 'facts', 'concepts', 'reports', 'investigations'] as const;

const ROLE_DEFINITIONS: readonly RoleDefinition[] = [
  {
    name: 'sysadmin',
    scope: 'system',
    description: 'every permission in every domain',
    grants: ['*:*'],
  },
  {
    name: 'user',
    scope: 'system',
    description: 'granted to every account on register: create repositories and personal API keys',
    grants: ['repositories:create', 'apikeys:create'],
  },
  {
    name: 'owner',
    scope: 'repository',
    description: 'everything on the repository, including members and deletion',
    grants: ['*:*'],
  },
  {
    name: 'editor',
    scope: 'repository',
    description: 'read everything; create and edit content; retry jobs; no deletion, settings or members',
    grants: [
      'repositories:read',
      ...CONTENT_OBJECTS.flatMap((object) => [`${object}:read`, `${object}:create`, `${object}:write`]),
      'events:read',
      'jobs:read',
      'jobs:write',
    ],
  },
  {
    name: 'reader',
    scope: 'repository',
    description: 'read-only access to the repository',
    grants: ['repositories:read', ...CONTENT_OBJECTS.map((object) => `${object}:read`), 'events:read', 'jobs:read'],
  },
];

/** Does `pattern` (`object:action`, either part possibly `*`) cover `permission`? */
export function matchesPermission(pattern: string, permission: string): boolean {
  const patternParts = splitPair(pattern);
  const permissionParts = splitPair(permission);
  if (!patternParts || !permissionParts) return false;
  const [patternObject, patternAction] = patternParts;
  const [object, action] = permissionParts;
  return (patternObject === '*' || patternObject === object) && (patternAction === '*' || patternAction === action);
}

function splitPair(value: string): [string, string] | null {
  if (typeof value !== 'string') return null;
  const parts = value.split(':');
  if (parts.length !== 2 || parts[0] === '' || parts[1] === '') return null;
  return [parts[0], parts[1]];
}

/** Catalog permissions a pattern covers, optionally only those of one scope. */
function expandPattern(pattern: string, scope?: Scope): Permission[] {
  return ALL_PERMISSIONS.filter(
    (permission) => (scope === undefined || SCOPE_OF_PERMISSION.get(permission) === scope) && matchesPermission(pattern, permission),
  );
}

/** True when the pattern names at least one catalog permission (validates API-key scopes). */
export function isKnownPermissionPattern(pattern: string): boolean {
  return expandPattern(pattern).length > 0;
}

/** Each role's concrete permissions, computed once from the table. */
const ROLE_PERMISSIONS: ReadonlyMap<string, { scope: Scope; permissions: ReadonlySet<Permission> }> = new Map(
  ROLE_DEFINITIONS.map((role) => [
    role.name,
    { scope: role.scope, permissions: new Set(role.grants.flatMap((grant) => expandPattern(grant, role.scope))) },
  ]),
);

const ALL_SYSTEM_PERMISSIONS: readonly Permission[] = expandPattern('*:*', 'system');
const ALL_REPOSITORY_PERMISSIONS: readonly Permission[] = expandPattern('*:*', 'repository');

/** The roles a repository's members can hold, in the catalog's order (owner first). */
export const REPOSITORY_ROLE_NAMES: readonly string[] = ROLE_DEFINITIONS.filter((role) => role.scope === 'repository').map((role) => role.name);

export function isKnownRole(role: string, domain: string): boolean {
  const definition = ROLE_PERMISSIONS.get(role);
  return definition !== undefined && definition.scope === scopeOfDomain(domain);
}

/**
 * The concrete permissions held in each domain. Invalid assignments are skipped. A sysadmin gets
 * every system permission on `system` and every repository permission on ANY_REPOSITORY_DOMAIN.
 */
export function permissionsOf(assignments: readonly RoleAssignment[]): Map<string, Set<Permission>> {
  const byDomain = new Map<string, Set<Permission>>();
  const add = (domain: string, permissions: Iterable<Permission>) => {
    let held = byDomain.get(domain);
    if (!held) byDomain.set(domain, (held = new Set()));
    for (const permission of permissions) held.add(permission);
  };
  for (const { role, domain } of assignments) {
    if (!isKnownRole(role, domain)) continue;
    if (role === 'sysadmin') {
      add(SYSTEM_DOMAIN, ALL_SYSTEM_PERMISSIONS);
      add(ANY_REPOSITORY_DOMAIN, ALL_REPOSITORY_PERMISSIONS);
    } else {
      add(domain, ROLE_PERMISSIONS.get(role)?.permissions ?? []);
    }
  }
  return byDomain;
}

/**
 * Does a permission map (from permissionsOf or intersectScopes) allow `permission` in the concrete
 * `domain`? Entries under ANY_REPOSITORY_DOMAIN apply to every repository domain.
 */
export function allows(permissions: ReadonlyMap<string, ReadonlySet<Permission>>, domain: string, permission: Permission): boolean {
  // Maps from permissionsOf never hold a permission outside its scope, so no scope check is needed here.
  const scope = scopeOfDomain(domain);
  if (!scope) return false;
  if (permissions.get(domain)?.has(permission)) return true;
  return scope === 'repository' && (permissions.get(ANY_REPOSITORY_DOMAIN)?.has(permission) ?? false);
}

export function can(assignments: readonly RoleAssignment[], domain: string, permission: Permission): boolean {
  return allows(permissionsOf(assignments), domain, permission);
}

/**
 * Who calls the application layer, whatever the transport: a user with their roles, and what
 * the credential may do. A session may do all its user's roles allow; an OAuth token or API key
 * only what its scopes (permission patterns such as `facts:read` or `sources:*`) also allow.
 */
export interface Principal {
  userId: string;
  /** What authenticated the call; the permission audit records its kind. */
  credential: Credential;
  assignments: RoleAssignment[];
  /** Absent or `all` for a session; permission patterns for a scoped token. */
  scopes?: readonly string[] | 'all';
  /** A credential bound to one repository (an API key's optional scope): no permission in any other. */
  repositoryId?: string;
}

/**
 * The kinds of credential a principal can come from: a session (register, login, refresh; logout
 * ends it), an OAuth 2.1 access token of a tool client, or a personal API key. `id` names the
 * session, the token's grant family, or the key; never the secret itself.
 */
export type CredentialKind = 'session' | 'oauth' | 'api_key';
export interface Credential {
  kind: CredentialKind;
  id: string;
}

/**
 * What the principal may do, per domain: its roles' permissions, cut down to its scopes and, for a
 * credential bound to one repository, to that repository (system permissions then drop out).
 * Computed from the current role assignments, so a scoped credential never outlives a role.
 */
export function effectivePermissions(principal: Principal): Map<string, Set<Permission>> {
  const { scopes = 'all', repositoryId } = principal;
  if (scopes === 'all' && repositoryId === undefined) return permissionsOf(principal.assignments);
  return intersectScopes(principal.assignments, scopes === 'all' ? ['*:*'] : scopes, repositoryId);
}

/**
 * May the principal do `permission` in `domain`: its roles grant it, its scopes cover it, and a
 * credential bound to one repository is used on that repository.
 */
export function principalCan(principal: Principal, domain: string, permission: Permission): boolean {
  return allows(effectivePermissions(principal), domain, permission);
}

/**
 * Does the principal hold any permission in the repository domain (through a role there, a
 * sysadmin's reach, within its scopes and binding)? Who holds none may not learn the repository
 * exists: its refusals are those of a missing repository.
 */
export function principalSeesRepository(principal: Principal, domain: string): boolean {
  if (scopeOfDomain(domain) !== 'repository') return false;
  const permissions = effectivePermissions(principal);
  return (permissions.get(domain)?.size ?? 0) > 0 || (permissions.get(ANY_REPOSITORY_DOMAIN)?.size ?? 0) > 0;
}

export interface RolesCatalog {
  roles: { name: string; scope: Scope; description: string; permissions: Permission[] }[];
  permissions: { permission: Permission; scope: Scope; description: string; roles: string[] }[];
}

/** All known permissions and the roles that grant them (GET /api/v1/admin/permissions). */
export function rolesCatalog(): RolesCatalog {
  const roles = ROLE_DEFINITIONS.map(({ name, scope, description }) => {
    // sysadmin holds repository permissions too (in every repository), so list them all.
    const permissions = name === 'sysadmin' ? [...ALL_PERMISSIONS] : [...(ROLE_PERMISSIONS.get(name)?.permissions ?? [])];
    return { name, scope, description, permissions };
  });
  const permissions = PERMISSION_CATALOG.map(({ permission, scope, description }) => ({
    permission,
    scope,
    description,
    roles: roles.filter((role) => role.permissions.includes(permission)).map((role) => role.name),
  }));
  return { roles, permissions };
}

/**
 * What a personal API key may do: the owner's current permissions, cut down to the requested
 * patterns and, when `repositoryId` is given, to that one repository (system permissions then
 * drop out). Call it on every request with the owner's current roles, so revoking an owner's role
 * also narrows their keys. The result never holds a (domain, permission) the owner lacks.
 * Unknown or malformed patterns match nothing.
 */
export function intersectScopes(
  ownerAssignments: readonly RoleAssignment[],
  requestedPermissions: readonly string[],
  repositoryId?: string,
): Map<string, Set<Permission>> {
  const requested = new Set(requestedPermissions.flatMap((pattern) => expandPattern(pattern)));
  const ownerPermissions = permissionsOf(ownerAssignments);
  const onlyDomain = repositoryId === undefined ? undefined : repositoryDomain(repositoryId);
  const result = new Map<string, Set<Permission>>();
  for (const [domain, held] of ownerPermissions) {
    const targetDomain = keyDomainFor(domain, onlyDomain);
    if (targetDomain === undefined) continue;
    const kept = [...held].filter((permission) => requested.has(permission));
    if (kept.length === 0) continue;
    const existing = result.get(targetDomain);
    if (existing) kept.forEach((permission) => existing.add(permission));
    else result.set(targetDomain, new Set(kept));
  }
  return result;
}

/**
 * Where an owner's permissions in `ownerDomain` land for a key: unchanged for an unbound key; for a
 * key bound to one repository, that repository's rights (held directly or as sysadmin) and nothing else.
 */
function keyDomainFor(ownerDomain: string, boundDomain: string | undefined): string | undefined {
  if (boundDomain === undefined) return ownerDomain;
  return ownerDomain === boundDomain || ownerDomain === ANY_REPOSITORY_DOMAIN ? boundDomain : undefined;
}
