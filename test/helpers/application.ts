import { randomUUID } from 'node:crypto';
import type { Test } from 'tap';
import type { Trace } from '../../src/app/access.js';
import { createApplication, type Application } from '../../src/app/application.js';
import type { CreateRepositoryInput } from '../../src/app/repositories.js';
import type { Principal } from '../../src/auth/rbac.js';
import { DomainError } from '../../src/domain/decider.js';
import { startTestService, type TestService } from './service.js';

/** The application layer over a throwaway service (PGlite, no workers), called without HTTP. */
export interface TestApplication {
  service: TestService;
  app: Application;
  /** The first user, whom the service promotes to sysadmin; users registered later hold only `user`. */
  admin: Principal;
  /** A user who owns `repository`. */
  owner: Principal;
  /** A user with no role on `repository`. */
  stranger: Principal;
  /** The id of a repository created by `owner`. */
  repository: string;
  /** Registers a user and returns its principal, as authentication would give it. */
  user(email: string): Promise<Principal>;
  /** The principal again, with the roles it holds now (after a grant). */
  refreshed(principal: Principal): Promise<Principal>;
  close(): Promise<void>;
}

export async function startTestApplication(
  repository: CreateRepositoryInput = { name: 'Test' },
  trace?: Trace,
  /** Config overrides of the service (its settle time, say). */
  overrides?: Record<string, unknown>,
): Promise<TestApplication> {
  const service = await startTestService({ workers: false, overrides });
  const { identity } = service.context;
  const app = createApplication(service.context);
  const user = async (email: string) => {
    const { token } = await identity.register({ email, password: 'correct horse battery' });
    return identity.authenticate(token);
  };
  const refreshed = async (principal: Principal) => ({ ...principal, assignments: await identity.roleAssignments(principal.userId) });
  const admin = await user('admin@example.org');
  const owner = await user('owner@example.org');
  const stranger = await user('stranger@example.org');
  const { id } = await app.repositories.create(owner, repository, trace);
  return { service, app, admin, owner: await refreshed(owner), stranger, repository: id, user, refreshed, close: () => service.close() };
}

/** Asserts that `call` fails with a DomainError of `code` (the transport maps the code). */
export async function rejectsWith(t: Test, call: Promise<unknown>, code: DomainError['code'], message?: RegExp): Promise<void> {
  await t.rejects(call, { name: 'DomainError', code, ...(message ? { message } : {}) });
}

let triggerPosition = 0;

/** Queues a pipeline job of `kind` for a source, as job intake would. */
export async function enqueueJob(harness: TestApplication, kind: string, repositoryId: string, sourceId: string): Promise<string> {
  triggerPosition += 1;
  const job = { kind, subjectId: sourceId, sourceId, triggerEventId: randomUUID(), triggerPosition, repositoryId, correlationId: null };
  return (await harness.service.context.jobs.enqueue(job)).id;
}

/** Claims the one queued job of `kind` and fails it for good, as a stage would on a 410. */
export async function failQueuedJob(harness: TestApplication, kind: string): Promise<void> {
  const { jobs } = harness.service.context;
  const claimed = await jobs.claim(kind, 'test-worker', { leaseMs: 60_000 });
  if (!claimed) throw new Error(`no queued ${kind} job`);
  await jobs.fail(claimed, { error: 'the host answered 410', permanent: true, retryDelayMs: 0 });
}
