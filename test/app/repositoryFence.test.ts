import t from 'tap';
import { authorizeRepository, authorizeSystem, commandMetadata } from '../../src/app/access.js';
import { withCallContext, type CallContext } from '../../src/app/callContext.js';
import type { CommandBus } from '../../src/app/commands.js';
import { changeRole, setRepositoryRole } from '../../src/app/roleChanges.js';
import { createApplication } from '../../src/app/application.js';
import { createRepositoryService, slugify } from '../../src/app/repositories.js';
import { createRepositoryFence, type RepositoryFence } from '../../src/app/repositoryFence.js';
import { mcpResourceUrl } from '../../src/auth/oauth/resource.js';
import type { Principal } from '../../src/auth/rbac.js';
import { oauthIssuer } from '../../src/config/derived.js';
import { reportDecider } from '../../src/domain/report/decider.js';
import { userDecider } from '../../src/domain/user/decider.js';
import { streamName, type RecordedEvent } from '../../src/eventstore/envelope.js';
import { rejectsWith, startTestApplication, type TestApplication } from '../helpers/application.js';
import { newPkce } from '../helpers/oauthClient.js';
import { racingCommandBus } from '../helpers/racedWrites.js';

let harness: TestApplication;
let owner: Principal;

t.before(async () => {
  harness = await startTestApplication({ name: 'Fenced' });
  ({ owner } = harness);
});
t.teardown(() => harness.close());

/** A call as a transport makes one (authenticated as `principal`, when given): its permission decisions are kept on it. */
const call = <T>(operation: string, run: () => Promise<T>, principal?: Principal): Promise<T> =>
  withCallContext({ transport: 'rest', operation, principal } satisfies CallContext, run);

async function repositoryWithEditor(name: string): Promise<{ repository: string; editor: Principal }> {
  const { id: repository } = await harness.app.repositories.create(owner, { name });
  owner = await harness.refreshed(owner); // now owner of this one too
  const editor = await harness.user(`editor-${name.toLowerCase()}@example.org`);
  await call('add member', () => harness.app.members.setMemberRole(owner, { repository, email: `editor-${name.toLowerCase()}@example.org`, role: 'editor' }));
  return { repository, editor: await harness.refreshed(editor) };
}

/** A report's creation as a call makes it: allowed first, appended after `between` ran. */
function createReportAfter(editor: Principal, repository: string, reportId: string, between: () => Promise<unknown>) {
  return call('create report', async () => {
    await authorizeRepository(harness.service.context.db.knex, editor, repository, 'reports:create');
    await between();
    return harness.service.context.commands.execute(
      streamName('report', reportId),
      reportDecider,
      { type: 'CreateReport', reportId, title: 'Raced', text: 'A sentence.', topic: null, parentId: null, origin: 'text', filename: null },
      commandMetadata(editor, repository),
      { newStream: true },
    );
  });
}

t.test('a command allowed before its repository was deleted appends nothing: not_found', async (t) => {
  const { repository, editor } = await repositoryWithEditor('Deleted');
  const reportId = '00000000-0000-4000-8000-00000000fe01';
  await rejectsWith(t, createReportAfter(editor, repository, reportId, () => call('delete', () => harness.app.repositories.remove(owner, { repository }))), 'not_found', /repository/);
  t.same(await harness.service.context.store.readStream(streamName('report', reportId)), [], 'no report in the log');
});

t.test('a command allowed before its caller lost the role appends nothing: forbidden', async (t) => {
  const { repository, editor } = await repositoryWithEditor('Demoted');
  const demote = () => call('demote', () => harness.app.members.setMemberRole(owner, { repository, user_id: editor.userId, role: 'reader' }));
  const reportId = '00000000-0000-4000-8000-00000000fe02';
  await rejectsWith(t, createReportAfter(editor, repository, reportId, demote), 'forbidden', /reports:create/);
  t.same(await harness.service.context.store.readStream(streamName('report', reportId)), [], 'no report in the log');

  const removed = await repositoryWithEditor('Removed');
  const remove = () => call('remove', () => harness.app.members.removeMember(owner, { repository: removed.repository, user_id: removed.editor.userId }));
  await rejectsWith(t, createReportAfter(removed.editor, removed.repository, '00000000-0000-4000-8000-00000000fe03', remove), 'forbidden');
});

/**
 * Starts a command made by `principal` in `repository` (null: in none, as creating an API key is)
 * that is held between its check and its append, then `change` (given the command's fence; it
 * says what it did), gives the change time to run past a lock it did not wait for, and lets the
 * command finish: the order in which the two ended.
 */
async function orderBehindAppendingCommand(
  principal: Principal,
  repository: string | null,
  operation: string,
  change: (fence: RepositoryFence) => Promise<string>,
): Promise<string[]> {
  const fence = createRepositoryFence({ db: harness.service.context.db, roleAssignments: (userId) => harness.service.context.identity.roleAssignments(userId) });
  const order: string[] = [];
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let entered!: () => void;
  const inside = new Promise<void>((resolve) => (entered = resolve));
  const acting = call(
    operation,
    async () => {
      if (repository !== null) await authorizeRepository(harness.service.context.db.knex, principal, repository, 'reports:create');
      return fence.run(commandMetadata(principal, repository), 'acts', async () => {
        entered();
        await gate;
        order.push('command appended');
      });
    },
    principal,
  );
  await inside;
  const changing = change(fence).then((what) => order.push(what));
  // Had the change no lock to wait for, it would have run by now.
  await new Promise((resolve) => setTimeout(resolve, 50));
  release();
  await Promise.all([acting, changing]);
  return order;
}

t.test("a sysadmin's command in a repository holds the system roles' lock: a revocation of sysadmin waits for it", async (t) => {
  const { repository } = await repositoryWithEditor('Administered');
  const admin = await harness.refreshed(harness.admin);
  const order = await orderBehindAppendingCommand(admin, repository, 'act as sysadmin', (fence) =>
    fence.run(commandMetadata(owner, null), 'changes', async () => 'sysadmin revoked'),
  );
  t.same(order, ['command appended', 'sysadmin revoked']);
});

t.test('a command whose caller still holds the permission appends as before', async (t) => {
  const { repository, editor } = await repositoryWithEditor('Kept');
  // Another member's role changing in between does not concern this caller.
  const other = await harness.user('bystander@example.org');
  const change = () => call('bystander', () => harness.app.members.setMemberRole(owner, { repository, user_id: other.userId, role: 'reader' }));
  const result = await createReportAfter(editor, repository, '00000000-0000-4000-8000-00000000fe04', change);
  t.equal(result.events.length, 1);
});

t.test('sources added while their repository is deleted: each either landed before the deletion or was refused', async (t) => {
  const { repository, editor } = await repositoryWithEditor('Raced');
  const adds = Array.from({ length: 16 }, (_, index) =>
    call('add source', () => harness.app.sources.add(editor, { repository, url: `http://127.0.0.1:9/raced-${index}` })).then(
      (added) => ({ ok: true as const, id: added.source.id }),
      (error: { code?: string }) => ({ ok: false as const, code: error.code }),
    ),
  );
  await new Promise((resolve) => setTimeout(resolve, 5));
  await call('delete', () => harness.app.repositories.remove(owner, { repository }));
  const outcomes = await Promise.all(adds);
  t.same(outcomes.filter((outcome) => !outcome.ok).map((outcome) => outcome.code).filter((code) => code !== 'not_found'), [], 'every refusal is not_found');
  const log = await harness.service.context.store.readAll({ limit: 100_000 });
  const deletedAt = log.find((event) => event.type === 'RepositoryDeleted' && event.repositoryId === repository)?.globalPosition;
  t.ok(deletedAt !== undefined);
  const registered = log.filter((event) => event.type === 'SourceRegistered' && event.repositoryId === repository);
  t.same(registered.filter((event) => event.globalPosition > deletedAt!).map((event) => event.streamId), [], 'no source registered after the deletion');
  t.same(new Set(registered.map((event) => event.streamId.replace(/^source-/, ''))), new Set(outcomes.flatMap((outcome) => (outcome.ok ? [outcome.id] : []))), 'every source answered as added is in the log, and only those');
});

/**
 * Every way a credential ends, each with a credential made for it: `end` ends it (and answers
 * however it answers; a reuse is refused, as it should be). The principal is the editor's of
 * `repository`, as the transport would authenticate it.
 */
interface EndedCredential {
  principal: Principal;
  end(): Promise<unknown>;
}

let credentialHolder: { repository: string; email: string; userId: string } | undefined;
async function holderRepository() {
  if (credentialHolder) return credentialHolder;
  const email = 'holder@example.org';
  const holder = await harness.user(email);
  const { id: repository } = await harness.app.repositories.create(owner, { name: 'Credentials end' });
  owner = await harness.refreshed(owner);
  await call('add member', () => harness.app.members.setMemberRole(owner, { repository, email, role: 'editor' }));
  return (credentialHolder = { repository, email, userId: holder.userId });
}

const REDIRECT = 'http://127.0.0.1:33418/callback';
const settled = (promise: Promise<unknown>) => promise.then(() => 'answered', (error: Error) => `refused: ${error.message}`);

async function session(): Promise<{ principal: Principal; refreshToken: string }> {
  const { identity } = harness.service.context;
  const opened = await identity.login({ email: (await holderRepository()).email, password: 'correct horse battery' });
  return { principal: await identity.authenticate(opened.token), refreshToken: opened.refresh_token };
}

/** An OAuth grant of the holder, through the authorization server's own steps: its code, tokens and the principal its access token authenticates as. */
async function oauthGrant() {
  const { oauth, config, identity } = harness.service.context;
  const { userId } = await holderRepository();
  const issuer = oauthIssuer(config);
  const { client_id } = await oauth.registerClient({ client_name: 'Fenced client', redirect_uris: [REDIRECT] });
  const pkce = newPkce();
  const check = await oauth.checkAuthorizationRequest({ response_type: 'code', client_id, redirect_uri: REDIRECT, code_challenge: pkce.challenge, code_challenge_method: 'S256', scope: 'mcp' }, issuer);
  if (!check.ok) throw check.error;
  const { code } = await oauth.approve(userId, check.request, new Date(Date.now() + 600_000));
  const exchange = { grant_type: 'authorization_code', client_id, code, redirect_uri: REDIRECT, code_verifier: pkce.verifier };
  const tokens = await oauth.token(exchange, issuer);
  const claims = await oauth.verifyAccessToken(tokens.access_token, mcpResourceUrl(issuer));
  const principal: Principal = { userId, credential: { kind: 'oauth', id: claims.sid }, assignments: await identity.roleAssignments(userId) };
  return { principal, client_id, issuer, exchange, refreshToken: tokens.refresh_token ?? '' };
}

const endings: Record<string, () => Promise<EndedCredential>> = {
  'a session ended by logout': async () => {
    const { principal } = await session();
    return { principal, end: () => harness.service.context.identity.logout(principal.credential.id) };
  },
  'a session ended by the reuse of its refresh token': async () => {
    const { identity } = harness.service.context;
    const { principal, refreshToken } = await session();
    await identity.refresh(refreshToken);
    return { principal, end: () => settled(identity.refresh(refreshToken)) };
  },
  'an OAuth grant revoked at the revocation endpoint': async () => {
    const grant = await oauthGrant();
    return { principal: grant.principal, end: () => harness.service.context.oauth.revoke({ token: grant.refreshToken, client_id: grant.client_id }) };
  },
  'an OAuth grant revoked by the reuse of its refresh token': async () => {
    const { oauth } = harness.service.context;
    const grant = await oauthGrant();
    const refresh = { grant_type: 'refresh_token', refresh_token: grant.refreshToken, client_id: grant.client_id };
    await oauth.token(refresh, grant.issuer);
    return { principal: grant.principal, end: () => settled(oauth.token(refresh, grant.issuer)) };
  },
  'an OAuth grant revoked by the reuse of its code': async () => {
    const grant = await oauthGrant();
    return { principal: grant.principal, end: () => settled(harness.service.context.oauth.token(grant.exchange, grant.issuer)) };
  },
};

let fencedReport = 0x100;
const nextReportId = () => `00000000-0000-4000-8000-${(fencedReport++).toString(16).padStart(12, '0')}`;

for (const [ending, made] of Object.entries(endings)) {
  t.test(`${ending}: a command allowed before it appends nothing (forbidden)`, async (t) => {
    const { repository } = await holderRepository();
    const { principal, end } = await made();
    const reportId = nextReportId();
    await rejectsWith(t, createReportAfter(principal, repository, reportId, end), 'forbidden', /revoked|ended/);
    t.same(await harness.service.context.store.readStream(streamName('report', reportId)), [], 'no report in the log');
  });

  t.test(`${ending}: it waits for a command made with the credential that is appending`, async (t) => {
    const { repository } = await holderRepository();
    const { principal, end } = await made();
    const order = await orderBehindAppendingCommand(principal, repository, 'act with the credential', () => end().then(() => 'credential ended'));
    t.same(order, ['command appended', 'credential ended']);
  });
}

/** A change of `principal`'s own profile, a command in no repository, as a call made with the credential makes it: appended after `between` ran. */
function changeProfileAfter(principal: Principal, name: string, between: () => Promise<unknown>) {
  return call(
    'change profile',
    async () => {
      await between();
      return harness.service.context.commands.execute(streamName('user', principal.userId), userDecider, { type: 'UpdateProfile', name }, commandMetadata(principal, null));
    },
    principal,
  );
}

const profileNamesOf = async (userId: string) =>
  (await harness.service.context.store.readStream(streamName('user', userId))).flatMap((event) => (event.type === 'UserProfileUpdated' ? [(event.data as { name: string | null }).name] : []));

for (const [ending, made] of Object.entries(endings)) {
  t.test(`${ending}: a command in no repository allowed before it appends nothing (forbidden)`, async (t) => {
    const { principal, end } = await made();
    const name = `Not after: ${ending}`;
    await rejectsWith(t, changeProfileAfter(principal, name, end), 'forbidden', /revoked|ended/);
    t.notOk((await profileNamesOf(principal.userId)).includes(name), 'no profile change in the log');
  });

  t.test(`${ending}: it waits for a command in no repository made with the credential that is appending`, async (t) => {
    const { principal, end } = await made();
    const order = await orderBehindAppendingCommand(principal, null, 'act with the credential in no repository', () => end().then(() => 'credential ended'));
    t.same(order, ['command appended', 'credential ended']);
  });
}

t.test('a command in no repository made with a live credential appends as before, and one for a system actor is not checked against the call', async (t) => {
  const { principal } = await session();
  await changeProfileAfter(principal, 'Still signed in', async () => undefined);
  t.ok((await profileNamesOf(principal.userId)).includes('Still signed in'));
  // An OAuth client registered during a call whose session has ended: its actor is system:oauth-registration, not the call's user.
  const ended = await session();
  await harness.service.context.identity.logout(ended.principal.credential.id);
  const registered = await call('register client', () => harness.service.context.oauth.registerClient({ client_name: 'Anyone may', redirect_uris: [REDIRECT] }), ended.principal);
  t.ok(registered.client_id);
});

t.test("an API key's revocation is not refused when the session revoking it ends meanwhile: the key ends as its owner asked", async (t) => {
  const { principal } = await session();
  const key = await call('create key', () => harness.app.apiKeys.createApiKey(principal, { name: 'Revoked as the session ends', scopes: ['reports:read'] }), principal);
  // The session ends between the call's authentication and the revocation's append.
  await harness.service.context.identity.logout(principal.credential.id);
  await call('revoke key', () => harness.app.apiKeys.revokeApiKey(principal, { keyId: key.id }), principal);
  t.same((await harness.service.context.store.readStream(streamName('apikey', key.id))).map((event) => event.type), ['ApiKeyCreated', 'ApiKeyRevoked'], 'revoked though the session had ended');
});

t.test("an administrator's change of a role in a repository, allowed by a system permission, is fenced by the administrator's credential", async (t) => {
  const { repository } = await holderRepository();
  const { identity } = harness.service.context;
  const adminSession = await identity.authenticate((await identity.login({ email: 'admin@example.org', password: 'correct horse battery' })).token);
  const bystander = await harness.user('granted-by-admin@example.org');
  const grant = () =>
    call('grant role', () => harness.app.users.grantRole(adminSession, { user_id: bystander.userId, role: 'reader', domain: `repository:${repository}` }), adminSession);
  await identity.logout(adminSession.credential.id);
  await rejectsWith(t, grant(), 'forbidden', /session has ended/);
  const roles = await identity.roleAssignments(bystander.userId);
  t.notOk(roles.some((role) => role.domain === `repository:${repository}`), 'no role granted');
});

t.test('creating a repository is fenced by its credential: a session ended before the appends creates nothing', async (t) => {
  const { principal } = await session();
  // The session ends between the call's authentication and the creation's appends.
  await harness.service.context.identity.logout(principal.credential.id);
  const name = 'Created as the session ends';
  await rejectsWith(t, call('create repository', () => harness.app.repositories.create(principal, { name }), principal), 'forbidden', /session has ended/);
  const log = await harness.service.context.store.readAll({ limit: 100_000 });
  t.notOk(log.some((event) => event.type === 'RepositoryCreated' && event.actor === principal.userId), 'no repository in the log');
  t.same(await harness.service.context.db.knex('slug_reservations').where({ slug: slugify(name) }).pluck('slug'), [], 'no slug left reserved');
});

t.test("creating a repository is one step of the fence: a logout sent once the repository is appended waits for its owner's role", async (t) => {
  const { principal } = await session();
  const { context } = harness.service;
  let logAtLogout: RecordedEvent[] = [];
  const racing = racingCommandBus(context.commands, 'RepositoryCreated', async () => {
    await context.identity.logout(principal.credential.id);
    logAtLogout = await context.store.readAll({ limit: 100_000 });
  });
  const repositories = createRepositoryService({ db: context.db, commands: racing.bus, defaultPreset: context.config.default_repository_preset });
  const app = createApplication({ ...context, commands: racing.bus, repositories });
  const created = await call('create repository', () => app.repositories.create(principal, { name: 'Created beside a logout' }), principal);
  t.equal(await racing.raced(), undefined, 'the logout was answered');
  const owned = (event: RecordedEvent) => event.type === 'RoleGranted' && event.streamId === streamName('user', principal.userId) && event.repositoryId === created.id;
  t.ok(logAtLogout.some(owned), "the owner's role had landed when the logout was answered: the creation was not cut in two");
  await rejectsWith(t, call('create repository', () => app.repositories.create(principal, { name: 'After the logout' }), principal), 'forbidden', /session has ended/);
});

/**
 * The context's commands, with `between` started (not awaited) once the first has appended, and a
 * moment given to it: had it no lock to wait for, it would land before the next command.
 */
function commandsEndingAfterFirst(between: () => Promise<string>): { commands: CommandBus; ended: () => Promise<string> | undefined } {
  const { commands } = harness.service.context;
  let ended: Promise<string> | undefined;
  return {
    commands: {
      ...commands,
      async execute(streamId, decider, command, metadata, options) {
        const result = await commands.execute(streamId, decider, command, metadata, options);
        if (ended === undefined) {
          ended = between();
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        return result;
      },
    },
    ended: () => ended,
  };
}

t.test("a member's role set is fenced as one step: its caller's logout between the grant and the revocation waits for both", async (t) => {
  const { repository, editor } = await repositoryWithEditor('Roleset');
  const { identity, db } = harness.service.context;
  const ownerSession = await identity.authenticate((await identity.login({ email: 'owner@example.org', password: 'correct horse battery' })).token);
  const splitting = commandsEndingAfterFirst(() => settled(identity.logout(ownerSession.credential.id)));
  const outcome = await settled(
    call(
      'set role',
      async () => {
        await authorizeRepository(db.knex, ownerSession, repository, 'members:manage');
        // Editor to reader: RoleGranted reader, then RoleRevoked editor.
        await setRepositoryRole({ db, commands: splitting.commands }, ownerSession, { repositoryId: repository, userId: editor.userId, role: 'reader' });
      },
      ownerSession,
    ),
  );
  t.equal(await splitting.ended(), 'answered', 'the logout ended the session');
  const held = (await identity.roleAssignments(editor.userId)).filter((assignment) => assignment.domain === `repository:${repository}`).map((assignment) => assignment.role);
  t.same([outcome, held], ['answered', ['reader']], 'the whole change landed before the logout, not half of it (reader and editor both)');
});

t.test("a sysadmin's system command allowed before they lost sysadmin appends nothing: forbidden, as in a repository", async (t) => {
  const { context } = harness.service;
  const demoted = await harness.user('demoted-admin@example.org');
  const sysadmin = { role: 'sysadmin', domain: 'system' };
  await harness.app.users.grantRole(harness.admin, { user_id: demoted.userId, ...sysadmin });
  const admin = await harness.refreshed(demoted);
  const target = await harness.user('promoted-by-demoted@example.org');
  const demote = () => call('revoke sysadmin', () => harness.app.users.revokeRole(harness.admin, { user_id: demoted.userId, ...sysadmin }));
  // A role of the system domain granted as the route does: allowed (role:manage), then appended after the demotion.
  const grant = call('grant system role', async () => {
    authorizeSystem(admin, 'role:manage');
    await demote();
    await changeRole(context, admin, { user_id: target.userId, ...sysadmin }, 'GrantRole');
  });
  await rejectsWith(t, grant, 'forbidden', /role:manage/);
  t.notOk((await context.identity.roleAssignments(target.userId)).some((assignment) => assignment.role === 'sysadmin'), 'no sysadmin granted by who is none any more');

  // A command in no repository that a system permission allowed (another user's profile, user:write) is checked again too.
  await harness.app.users.grantRole(harness.admin, { user_id: demoted.userId, ...sysadmin });
  const again = await harness.refreshed(demoted);
  const rename = call('rename another', async () => {
    authorizeSystem(again, 'user:write');
    await demote();
    await harness.app.users.updateProfile(again, { user: target.userId, name: 'Renamed by a former admin' });
  });
  await rejectsWith(t, rename, 'forbidden');
  const profile = await context.db.knex('users').where({ id: target.userId }).first('name');
  t.not(profile?.name, 'Renamed by a former admin', 'the profile is unchanged');
});
