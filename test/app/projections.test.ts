import pino from 'pino';
import t from 'tap';
import { projectionCommands } from '../../src/app/projections.js';
import type { Principal } from '../../src/auth/rbac.js';
import { ProjectionRebuildTakenOverError } from '../../src/projection/busRunner.js';
import { ProjectionRebuildConflictError, ProjectionRebuildStoppedError } from '../../src/projection/runner.js';
import type { ProjectionStatus, ReadModelRunner } from '../../src/projection/types.js';
import { rejectsWith } from '../helpers/application.js';

// The rebuild command without HTTP, over a runner that only reports states and records rebuilds.

const sysadmin: Principal = { userId: 'admin-1', credential: { kind: 'session', id: 'session-1' }, assignments: [{ role: 'sysadmin', domain: 'system' }] };
const user: Principal = { userId: 'user-1', credential: { kind: 'session', id: 'session-2' }, assignments: [] };

/**
 * A runner that reports `states` and records rebuilds: a rebuild of a projection in `underWay`
 * is refused as the runners refuse it; any other starts (onProgress(0, head)) and then ends when
 * `finish` is called, so a test sees what the command answers before the rebuild's end.
 */
function runnerWith(states: Record<string, ProjectionStatus['state']>, lastError: string | null = null, underWay: readonly string[] = []) {
  const rebuilt: string[] = [];
  const endings: Array<() => void> = [];
  const runner: ReadModelRunner = {
    start: async () => undefined,
    stop: async () => undefined,
    status: async () => Object.entries(states).map(([name, state]) => ({ name, position: 3, head: 5, lag: 2, state, lastError })),
    settle: async () => [],
    caughtUp: async () => true,
    projectionReached: async () => true,
    rebuild: async (name, onProgress) => {
      if (underWay.includes(name)) throw new ProjectionRebuildConflictError(`projection ${name} is already rebuilding on worker-1 (since 2026-12-02T10:00:00.000Z)`);
      rebuilt.push(name);
      onProgress?.(0, 5);
      await new Promise<void>((resolve) => endings.push(resolve));
    },
  };
  const finish = () => endings.splice(0).forEach((end) => end());
  return { commands: projectionCommands({ projections: runner, log: pino({ level: 'silent' }) }), rebuilt, runner, finish };
}

t.test('a rebuild answers the projection as rebuilding once it has started, not at its end', async (t) => {
  const { commands, rebuilt, finish } = runnerWith({ facts: 'running' }, 'an earlier failure');
  t.teardown(finish);
  t.same(await commands.rebuild(sysadmin, { name: 'facts' }), { name: 'facts', state: 'rebuilding', position: 0, head: 5, lag: 5, last_error: null });
  t.same(rebuilt, ['facts']);
});

t.test('a rebuild the runner refuses (one under way) is a conflict naming it; the runner, not the status, decides', async (t) => {
  const { commands, rebuilt } = runnerWith({ facts: 'rebuilding' }, null, ['facts']);
  await rejectsWith(t, commands.rebuild(sysadmin, { name: 'facts' }), 'conflict', /^projection facts is already rebuilding on worker-1 \(since 2026-12-02T10:00:00\.000Z\); follow it in GET \/projections$/);
  t.same(rebuilt, []);
  // On the distributed tier a rebuild whose node stopped still shows as rebuilding: the runner takes it over.
  const stopped = runnerWith({ facts: 'rebuilding' }, 'the rebuild by worker-1 (started …) stopped before its end');
  t.teardown(stopped.finish);
  t.match(await stopped.commands.rebuild(sysadmin, { name: 'facts' }), { name: 'facts', state: 'rebuilding', position: 0, last_error: null });
  t.same(stopped.rebuilt, ['facts']);
});

t.test('a rebuild that fails before it starts is the answer, not a 202 with a failure in the log', async (t) => {
  const { runner } = runnerWith({ facts: 'running' });
  const failing: ReadModelRunner = {
    ...runner,
    rebuild: async () => {
      throw new Error('connection terminated');
    },
  };
  await t.rejects(projectionCommands({ projections: failing, log: pino({ level: 'silent' }) }).rebuild(sysadmin, { name: 'facts' }), { message: 'connection terminated' });
});

t.test('an unknown projection is not found; without projections:manage forbidden', async (t) => {
  const { commands, rebuilt } = runnerWith({ facts: 'running' });
  await rejectsWith(t, commands.rebuild(sysadmin, { name: 'nope' }), 'not_found', /projection not found/);
  await rejectsWith(t, commands.rebuild(user, { name: 'facts' }), 'forbidden');
  t.same(rebuilt, []);
});

t.test("a background rebuild the shutdown stops, or another node takes over, is no failure: a warning says how it goes on; a failed one is an error", async (t) => {
  const logged: { level: number; msg: string; projection?: string; by?: string }[] = [];
  const log = pino({ level: 'info' }, { write: (line: string) => void logged.push(JSON.parse(line)) });
  // Each starts, then ends with the error.
  const ending = (error: Error): ReadModelRunner => ({
    ...runnerWith({ facts: 'running' }).runner,
    rebuild: async (_name, onProgress) => {
      onProgress?.(0, 5);
      await new Promise((resolve) => setImmediate(resolve));
      throw error;
    },
  });
  await projectionCommands({ projections: ending(new ProjectionRebuildStoppedError('facts')), log }).rebuild(sysadmin, { name: 'facts' });
  await projectionCommands({ projections: ending(new ProjectionRebuildStoppedError('facts', 'a running node takes the rebuild over and replays the log from 0')), log }).rebuild(sysadmin, { name: 'facts' });
  await projectionCommands({ projections: ending(new ProjectionRebuildTakenOverError('facts', 'worker-2')), log }).rebuild(sysadmin, { name: 'facts' });
  await projectionCommands({ projections: ending(new Error('cannot project boom')), log }).rebuild(sysadmin, { name: 'facts' });
  await new Promise((resolve) => setTimeout(resolve, 10)); // the background rebuilds' endings are logged
  t.match(logged, [
    { level: 40, projection: 'facts', msg: 'rebuild stopped before its end (the service is shutting down); the projection goes on from its checkpoint at the next start' },
    { level: 40, projection: 'facts', msg: 'rebuild stopped before its end (the service is shutting down); a running node takes the rebuild over and replays the log from 0' },
    { level: 40, projection: 'facts', by: 'worker-2', msg: 'rebuild taken over by another node, which took it for stopped; that rebuild goes on' },
    { level: 50, projection: 'facts', msg: 'rebuild failed' },
  ]);
  t.equal(logged.length, 4);
});
