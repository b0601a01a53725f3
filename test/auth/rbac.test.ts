import t from 'tap';
import {
  allows,
  ANY_REPOSITORY_DOMAIN,
  can,
  intersectScopes,
  isKnownPermission,
  isKnownPermissionPattern,
  isKnownRole,
  matchesPermission,
  PERMISSION_CATALOG,
  permissionsOf,
  principalCan,
  repositoryDomain,
  rolesCatalog,
  scopeOfDomain,
  SYSTEM_DOMAIN,
  type Permission,
  type RoleAssignment,
} from '../../src/auth/rbac.js';

const REPO_A = repositoryDomain('repo-a');
const REPO_B = repositoryDomain('repo-b');
const ALL = PERMISSION_CATALOG.map((entry) => entry.permission) as Permission[];
const SYSTEM_PERMISSIONS = PERMISSION_CATALOG.filter((entry) => entry.scope === 'system').map((entry) => entry.permission) as Permission[];
const REPOSITORY_PERMISSIONS = PERMISSION_CATALOG.filter((entry) => entry.scope === 'repository').map((entry) => entry.permission) as Permission[];

const sysadmin: RoleAssignment[] = [{ role: 'sysadmin', domain: SYSTEM_DOMAIN }];
const plainUser: RoleAssignment[] = [{ role: 'user', domain: SYSTEM_DOMAIN }];
const ownerOfA: RoleAssignment[] = [{ role: 'owner', domain: REPO_A }];
const editorOfA: RoleAssignment[] = [{ role: 'editor', domain: REPO_A }];
const readerOfA: RoleAssignment[] = [{ role: 'reader', domain: REPO_A }];

/** The permissions `assignments` hold in `domain`, by asking `can` about every catalog entry. */
function granted(assignments: RoleAssignment[], domain: string): Permission[] {
  return ALL.filter((permission) => can(assignments, domain, permission)).sort();
}

t.test('domains', async (t) => {
  t.equal(SYSTEM_DOMAIN, 'system');
  t.equal(repositoryDomain('0b1c6f1e-4a47-4f3e-9d0a-7a1f0c1d2e3f'), 'repository:0b1c6f1e-4a47-4f3e-9d0a-7a1f0c1d2e3f');
  for (const bad of ['', '*', 'a:b', 'has space', '../x', '-leading', 'x'.repeat(129)]) {
    t.throws(() => repositoryDomain(bad), RangeError, `rejects ${JSON.stringify(bad)}`);
  }
  t.equal(scopeOfDomain('system'), 'system');
  t.equal(scopeOfDomain(REPO_A), 'repository');
  for (const bad of ['', 'System', 'repository:', ANY_REPOSITORY_DOMAIN, 'repository:a:b', 'repo:a', 'global']) {
    t.equal(scopeOfDomain(bad), null, `not a domain: ${JSON.stringify(bad)}`);
  }
});

t.test('the catalog covers the objects and actions of the design and the names of the spec', async (t) => {
  const objects = new Set(ALL.map((permission) => permission.split(':')[0]));
  for (const object of ['user', 'role', 'repositories', 'sources', 'facts', 'concepts', 'reports', 'investigations', 'events', 'jobs', 'projections', 'apikeys', 'members']) {
    t.ok(objects.has(object), `object ${object}`);
  }
  const actions = new Set(ALL.map((permission) => permission.split(':')[1]));
  t.same([...actions].sort(), ['create', 'delete', 'manage', 'read', 'write']);
  for (const named of ['user:read', 'role:read', 'role:manage', 'repositories:read']) t.ok(isKnownPermission(named), named);
  t.equal(new Set(ALL).size, ALL.length, 'no duplicates');
  t.notOk(isKnownPermission('facts:fly'));
  t.notOk(isKnownPermission('*:*'));
});

t.test('sysadmin holds every permission in every domain', async (t) => {
  t.same(granted(sysadmin, SYSTEM_DOMAIN), [...SYSTEM_PERMISSIONS].sort());
  t.same(granted(sysadmin, REPO_A), [...REPOSITORY_PERMISSIONS].sort());
  t.same(granted(sysadmin, repositoryDomain('created-after-the-grant')), [...REPOSITORY_PERMISSIONS].sort());
  t.ok(can(sysadmin, SYSTEM_DOMAIN, 'role:manage'));
  t.ok(can(sysadmin, REPO_B, 'repositories:delete'));
});

t.test('sysadmin only counts on the system domain', async (t) => {
  const onRepository: RoleAssignment[] = [{ role: 'sysadmin', domain: REPO_A }];
  t.notOk(isKnownRole('sysadmin', REPO_A));
  t.same(granted(onRepository, REPO_A), []);
  t.same(granted(onRepository, SYSTEM_DOMAIN), []);
});

t.test('a permission is never held outside its scope, even by sysadmin', async (t) => {
  t.notOk(can(sysadmin, SYSTEM_DOMAIN, 'facts:read'), 'repository permission on the system domain');
  t.notOk(can(sysadmin, REPO_A, 'role:manage'), 'system permission on a repository');
  t.notOk(can(ownerOfA, REPO_A, 'role:manage'), 'owner *:* does not reach system permissions');
  t.notOk(can(ownerOfA, REPO_A, 'user:read'));
});

t.test('the user role (granted on register) may create repositories and API keys, nothing else', async (t) => {
  t.same(granted(plainUser, SYSTEM_DOMAIN), ['apikeys:create', 'repositories:create']);
  t.same(granted(plainUser, REPO_A), []);
  t.notOk(can(plainUser, SYSTEM_DOMAIN, 'user:read'));
  t.notOk(can([], SYSTEM_DOMAIN, 'repositories:create'), 'no roles, no rights');
});

t.test('owner: everything on its repository, including members and deletion', async (t) => {
  t.same(granted(ownerOfA, REPO_A), [...REPOSITORY_PERMISSIONS].sort());
  t.ok(can(ownerOfA, REPO_A, 'members:manage'));
  t.ok(can(ownerOfA, REPO_A, 'repositories:delete'));
  t.same(granted(ownerOfA, SYSTEM_DOMAIN), [], 'nothing on the system domain');
});

t.test('editor: reads, creates and edits content, retries jobs; no delete, settings or members', async (t) => {
  t.same(granted(editorOfA, REPO_A), [
    'concepts:create', 'concepts:read', 'concepts:write',
    'events:read',
    'facts:create', 'facts:read', 'facts:write',
    'investigations:create', 'investigations:read', 'investigations:write',
    'jobs:read', 'jobs:write',
    'reports:create', 'reports:read', 'reports:write',
    'repositories:read',
    'sources:create', 'sources:read', 'sources:write',
  ]);
  for (const denied of ['facts:delete', 'sources:delete', 'repositories:delete', 'repositories:write', 'repositories:manage', 'members:manage', 'members:read', 'jobs:manage'] as const) {
    t.notOk(can(editorOfA, REPO_A, denied), `editor lacks ${denied}`);
  }
});

t.test('reader: read only', async (t) => {
  t.same(granted(readerOfA, REPO_A), [
    'concepts:read', 'events:read', 'facts:read', 'investigations:read', 'jobs:read', 'reports:read', 'repositories:read', 'sources:read',
  ]);
  for (const permission of REPOSITORY_PERMISSIONS) {
    if (!permission.endsWith(':read')) t.notOk(can(readerOfA, REPO_A, permission), `reader cannot ${permission}`);
  }
  t.notOk(can(readerOfA, REPO_A, 'facts:write'));
  t.notOk(can(readerOfA, REPO_A, 'sources:create'));
});

t.test('roles are ordered: reader within editor within owner', async (t) => {
  for (const permission of granted(readerOfA, REPO_A)) t.ok(can(editorOfA, REPO_A, permission), `editor has ${permission}`);
  for (const permission of granted(editorOfA, REPO_A)) t.ok(can(ownerOfA, REPO_A, permission), `owner has ${permission}`);
});

t.test('a role on repository A gives nothing on repository B or the system domain', async (t) => {
  for (const assignments of [ownerOfA, editorOfA, readerOfA]) {
    t.same(granted(assignments, REPO_B), [], `${assignments[0].role} of A on B`);
    t.same(granted(assignments, SYSTEM_DOMAIN), [], `${assignments[0].role} of A on system`);
  }
});

t.test('several assignments add up per domain', async (t) => {
  const mixed: RoleAssignment[] = [...plainUser, { role: 'reader', domain: REPO_A }, { role: 'editor', domain: REPO_B }];
  t.ok(can(mixed, REPO_B, 'facts:write'));
  t.notOk(can(mixed, REPO_A, 'facts:write'));
  t.ok(can(mixed, REPO_A, 'facts:read'));
  t.ok(can(mixed, SYSTEM_DOMAIN, 'repositories:create'));
  const map = permissionsOf(mixed);
  t.same([...map.keys()].sort(), [REPO_A, REPO_B, SYSTEM_DOMAIN].sort());
  t.notOk(map.has(ANY_REPOSITORY_DOMAIN));
});

t.test('unknown roles, wrong-kind domains and malformed domains grant nothing', async (t) => {
  const junk: RoleAssignment[] = [
    { role: 'root', domain: SYSTEM_DOMAIN },
    { role: 'owner', domain: SYSTEM_DOMAIN },
    { role: 'reader', domain: 'repository:' },
    { role: 'editor', domain: ANY_REPOSITORY_DOMAIN },
    { role: 'owner', domain: 'repo-a' },
    { role: 'Owner', domain: REPO_A },
    { role: '', domain: '' },
  ];
  t.equal(permissionsOf(junk).size, 0);
  t.same(granted(junk, REPO_A), []);
  t.same(granted(junk, SYSTEM_DOMAIN), []);
  t.notOk(can(sysadmin, 'repository:', 'facts:read'), 'a malformed domain is denied even for sysadmin');
  t.notOk(can(sysadmin, ANY_REPOSITORY_DOMAIN, 'facts:read'), 'the any-repository key is not a domain one can ask about');
  t.notOk(can(sysadmin, SYSTEM_DOMAIN, 'facts:fly' as Permission), 'unknown permission');
  t.notOk(can(sysadmin, SYSTEM_DOMAIN, '*:*' as Permission), 'a pattern is not a permission');
});

t.test('isKnownRole checks the role against the kind of domain', async (t) => {
  t.ok(isKnownRole('sysadmin', SYSTEM_DOMAIN));
  t.ok(isKnownRole('user', SYSTEM_DOMAIN));
  for (const role of ['owner', 'editor', 'reader']) {
    t.ok(isKnownRole(role, REPO_A), `${role} on a repository`);
    t.notOk(isKnownRole(role, SYSTEM_DOMAIN), `${role} not on system`);
  }
  t.notOk(isKnownRole('user', REPO_A));
  t.notOk(isKnownRole('admin', SYSTEM_DOMAIN));
  t.notOk(isKnownRole('reader', ANY_REPOSITORY_DOMAIN));
  t.notOk(isKnownRole('reader', 'repository:has space'));
});

t.test('wildcard matching', async (t) => {
  t.ok(matchesPermission('*:*', 'facts:read'));
  t.ok(matchesPermission('facts:*', 'facts:delete'));
  t.ok(matchesPermission('*:read', 'concepts:read'));
  t.ok(matchesPermission('facts:read', 'facts:read'));
  t.notOk(matchesPermission('facts:*', 'concepts:read'));
  t.notOk(matchesPermission('*:read', 'facts:write'));
  t.notOk(matchesPermission('facts:rea', 'facts:read'), 'no prefix matching');
  t.notOk(matchesPermission('fact*:read', 'facts:read'), 'star only as a whole part');
  t.notOk(matchesPermission('*', 'facts:read'), 'a bare star is malformed');
  t.notOk(matchesPermission('*:*:*', 'facts:read'));
  t.notOk(matchesPermission(':', 'facts:read'));
  t.notOk(matchesPermission('', 'facts:read'));
  t.ok(isKnownPermissionPattern('*:read'));
  t.ok(isKnownPermissionPattern('facts:*'));
  t.ok(isKnownPermissionPattern('events:read'));
  t.notOk(isKnownPermissionPattern('events:write'), 'no catalog entry matches');
  t.notOk(isKnownPermissionPattern('widgets:*'));
  t.notOk(isKnownPermissionPattern('facts'));
});

t.test('rolesCatalog lists every permission and the roles that grant it', async (t) => {
  const catalog = rolesCatalog();
  t.same(catalog.roles.map((role) => role.name), ['sysadmin', 'user', 'owner', 'editor', 'reader']);
  t.equal(catalog.permissions.length, ALL.length);
  const rolesFor = (permission: string) => catalog.permissions.find((entry) => entry.permission === permission)?.roles;
  t.same(rolesFor('role:manage'), ['sysadmin']);
  t.same(rolesFor('repositories:create'), ['sysadmin', 'user']);
  t.same(rolesFor('facts:read'), ['sysadmin', 'owner', 'editor', 'reader']);
  t.same(rolesFor('facts:write'), ['sysadmin', 'owner', 'editor']);
  t.same(rolesFor('facts:delete'), ['sysadmin', 'owner']);
  t.same(rolesFor('members:manage'), ['sysadmin', 'owner']);
  for (const entry of catalog.permissions) {
    t.ok(entry.roles.includes('sysadmin'), `sysadmin grants ${entry.permission}`);
    t.ok(entry.description.length > 0, `${entry.permission} is described`);
  }
  const reader = catalog.roles.find((role) => role.name === 'reader');
  t.same([...(reader?.permissions ?? [])].sort(), granted(readerOfA, REPO_A), 'catalog agrees with can()');
  t.ok(JSON.stringify(catalog), 'serialisable as a response body');
});

t.test('API key scopes', async (t) => {
  t.test('a key holds the requested permissions the owner has, nothing more', async (t) => {
    const owner: RoleAssignment[] = [...plainUser, { role: 'reader', domain: REPO_A }, { role: 'editor', domain: REPO_B }];
    const scope = intersectScopes(owner, ['facts:read', 'facts:write', 'role:manage', 'repositories:create']);
    t.ok(allows(scope, REPO_A, 'facts:read'));
    t.notOk(allows(scope, REPO_A, 'facts:write'), 'owner is only a reader on A');
    t.ok(allows(scope, REPO_B, 'facts:write'));
    t.notOk(allows(scope, REPO_B, 'concepts:read'), 'not requested');
    t.notOk(allows(scope, SYSTEM_DOMAIN, 'role:manage'), 'requested but not held');
    t.ok(allows(scope, SYSTEM_DOMAIN, 'repositories:create'));
    t.notOk(allows(scope, repositoryDomain('repo-c'), 'facts:read'), 'no role on C');
  });

  t.test('a key bound to one repository holds nothing elsewhere', async (t) => {
    const owner: RoleAssignment[] = [...plainUser, { role: 'owner', domain: REPO_A }, { role: 'owner', domain: REPO_B }];
    const scope = intersectScopes(owner, ['*:*'], 'repo-a');
    t.same([...scope.keys()], [REPO_A]);
    t.ok(allows(scope, REPO_A, 'facts:delete'));
    t.notOk(allows(scope, REPO_B, 'facts:read'));
    t.notOk(allows(scope, SYSTEM_DOMAIN, 'repositories:create'), 'system permissions drop out');
    t.equal(intersectScopes(owner, ['*:*'], 'repo-c').size, 0, 'bound to a repository the owner has no role on');
    t.throws(() => intersectScopes(owner, ['*:*'], 'not a valid id'), RangeError);
  });

  t.test("a sysadmin's key reaches every repository, or the one it is bound to", async (t) => {
    const unbound = intersectScopes(sysadmin, ['*:read']);
    t.ok(allows(unbound, REPO_A, 'facts:read'));
    t.ok(allows(unbound, repositoryDomain('any-other'), 'events:read'));
    t.notOk(allows(unbound, REPO_A, 'facts:write'));
    t.ok(allows(unbound, SYSTEM_DOMAIN, 'user:read'));
    t.notOk(allows(unbound, SYSTEM_DOMAIN, 'role:manage'));
    const bound = intersectScopes(sysadmin, ['facts:*'], 'repo-a');
    t.same([...bound.keys()], [REPO_A]);
    t.ok(allows(bound, REPO_A, 'facts:delete'));
    t.notOk(allows(bound, REPO_B, 'facts:read'));
    t.notOk(allows(bound, SYSTEM_DOMAIN, 'user:read'));
  });

  t.test('unknown or malformed requests match nothing', async (t) => {
    t.equal(intersectScopes(sysadmin, ['widgets:*', '*', '', 'facts', '*:*:*']).size, 0);
    t.equal(intersectScopes(sysadmin, []).size, 0);
    t.equal(intersectScopes([], ['*:*']).size, 0, 'an owner without roles gives a key without rights');
  });

  t.test('revoking the owner narrows the key (scopes are recomputed from current roles)', async (t) => {
    const before = intersectScopes(editorOfA, ['facts:write']);
    t.ok(allows(before, REPO_A, 'facts:write'));
    const after = intersectScopes(readerOfA, ['facts:write']);
    t.notOk(allows(after, REPO_A, 'facts:write'));
  });

  t.test('never exceeds the owner, over many random owners and requests', async (t) => {
    // Deterministic pseudo-random generator (mulberry32) so a failure can be reproduced.
    let seed = 12345;
    const random = (n: number) => {
      seed = (seed + 0x6d2b79f5) | 0;
      let mixed = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      mixed = (mixed + Math.imul(mixed ^ (mixed >>> 7), 61 | mixed)) ^ mixed;
      return (((mixed ^ (mixed >>> 14)) >>> 0) % n);
    };
    const roles = ['sysadmin', 'user', 'owner', 'editor', 'reader', 'bogus'];
    const domains = [SYSTEM_DOMAIN, REPO_A, REPO_B, 'repository:', ANY_REPOSITORY_DOMAIN];
    const patterns = [...ALL, '*:*', '*:read', '*:write', 'facts:*', 'members:*', 'bogus:*', '*'];
    const probeDomains = [SYSTEM_DOMAIN, REPO_A, REPO_B, repositoryDomain('repo-c')];
    let checked = 0;
    let violations = 0;
    for (let round = 0; round < 1000; round++) {
      const owner = Array.from({ length: random(4) }, () => ({ role: roles[random(roles.length)], domain: domains[random(domains.length)] }));
      const requested = Array.from({ length: random(6) }, () => patterns[random(patterns.length)]);
      const bound = [undefined, 'repo-a', 'repo-b'][random(3)];
      const scope = intersectScopes(owner, requested, bound);
      for (const domain of probeDomains) {
        for (const permission of ALL) {
          if (!allows(scope, domain, permission)) continue;
          checked++;
          const requestedIt = requested.some((pattern) => matchesPermission(pattern, permission));
          const inBound = bound === undefined || domain === repositoryDomain(bound);
          if (!can(owner, domain, permission) || !requestedIt || !inBound) violations++;
        }
      }
    }
    t.ok(checked > 500, `exercised ${checked} granted (domain, permission) pairs`);
    t.equal(violations, 0, 'every key permission is held by the owner, requested, and inside the bound repository');
  });
});

t.test('the permissions table in docs/auth.md matches the catalog', async (t) => {
  const { readFile } = await import('node:fs/promises');
  const markdown = await readFile(new URL('../../docs/auth.md', import.meta.url), 'utf8');
  const header = markdown.split('\n').find((line) => line.startsWith('| permission | domain |'));
  t.ok(header, 'table header present');
  const roleColumns = (header ?? '').split('|').map((cell) => cell.trim()).slice(3, -2);
  const rows = new Map<string, { scope: string; roles: string[] }>();
  for (const line of markdown.split('\n')) {
    const match = /^\| `([a-z]+:[a-z]+)` \| (system|repository) \|(.*)\|[^|]*\|$/.exec(line);
    if (!match) continue;
    const marks = match[3].split('|').map((cell) => cell.trim());
    rows.set(match[1], { scope: match[2], roles: roleColumns.filter((_, index) => marks[index] === '✓') });
  }
  const catalog = rolesCatalog();
  t.same([...rows.keys()].sort(), catalog.permissions.map((entry) => entry.permission).sort(), 'same permissions');
  for (const entry of catalog.permissions) {
    t.same(rows.get(entry.permission), { scope: entry.scope, roles: entry.roles }, entry.permission);
  }
});

t.test('principalCan: the roles grant, the scopes of a token narrow', async (t) => {
  const principal = (assignments: RoleAssignment[], scopes?: readonly string[] | 'all') => ({ userId: 'u', credential: { kind: 'session' as const, id: 's' }, assignments, scopes });
  t.ok(principalCan(principal(editorOfA), REPO_A, 'facts:write'), 'a session may do all its roles allow');
  t.ok(principalCan(principal(editorOfA, 'all'), REPO_A, 'facts:write'));
  t.notOk(principalCan(principal(readerOfA), REPO_A, 'facts:write'), 'no role, no right');
  t.ok(principalCan(principal(editorOfA, ['facts:read', 'sources:*']), REPO_A, 'sources:create'), 'a pattern scope');
  t.notOk(principalCan(principal(editorOfA, ['facts:read']), REPO_A, 'facts:write'), 'outside the scopes');
  t.notOk(principalCan(principal(readerOfA, ['*:*']), REPO_A, 'facts:write'), 'scopes never add to the roles');
  t.notOk(principalCan(principal(sysadmin, []), SYSTEM_DOMAIN, 'user:read'), 'no scopes, nothing');
  t.notOk(principalCan(principal(editorOfA, ['facts']), REPO_A, 'facts:read'), 'a malformed scope matches nothing');
  t.notOk(principalCan(principal(ownerOfA), REPO_B, 'facts:read'), 'another repository');
  const boundToA = (assignments: RoleAssignment[], scopes: readonly string[] | 'all') => ({ ...principal(assignments, scopes), repositoryId: 'repo-a' });
  t.ok(principalCan(boundToA(sysadmin, ['facts:read']), REPO_A, 'facts:read'), "a bound sysadmin key works on its repository");
  t.notOk(principalCan(boundToA(sysadmin, ['*:*']), REPO_B, 'facts:read'), 'a bound key works on no other repository');
  t.notOk(principalCan(boundToA(sysadmin, ['*:*']), SYSTEM_DOMAIN, 'user:read'), 'a bound key holds no system permission');
  t.notOk(principalCan(boundToA(ownerOfA, 'all'), SYSTEM_DOMAIN, 'repositories:create'), 'not even with every scope');
});
