import pino from 'pino';
import t from 'tap';
import { projectionCommands } from '../../src/app/projections.js';
import type { Principal } from '../../src/auth/rbac.js';
import { ProjectionRebuildTakenOverError } from '../../src/projection/busRunner.js';
import { ProjectionRebuildStoppedError } from '../../src/projection/runner.js';
import type { ProjectionStatus, ReadModelRunner } from '../../src/projection/types.js';
import { rejectsWith } from '../helpers/application.js';

// The rebuild command without HTTP, over a runner that only reports states and records rebuilds.

const sysadmin: Principal = { userId: 'admin-1', credential: { kind: 'session', id: 'session-1' }, assignments: [{ role: 'sysadmin', domain: 'system' }] };
const user: Principal = { userId: 'user-1', credential: { kind: 'session', id: 'session-2' }, assignments: [] };

function runnerWith(states: Record<string, ProjectionStatus['state']>, lastError: string | null = null) {
  const rebuilt: string[] = [];
  const runner: ReadModelRunner = {
    start: async () => undefined,
    stop: async () => undefined,
    status: async () => Object.entries(states).map(([name, state]) => ({ name, position: 3, head: 5, lag: 2, state, lastError })),
    settle: async () => [],
    caughtUp: async () => true,
    projectionReached: async () => true,
    rebuild: async (name) => {
      rebuilt.push(name);
    },
  };
  return { commands: projectionCommands({ projections: runner, log: pino({ level: 'silent' }) }), rebuilt, runner };
}

t.test('a rebuild starts in the background and answers the projection as rebuilding', async (t) => {
  const { commands, rebuilt } = runnerWith({ facts: 'running' });
  t.match(await commands.rebuild(sysadmin, { name: 'facts' }), { name: 'facts', state: 'rebuilding', position: 0, head: 5, lag: 5 });
  t.same(rebuilt, ['facts']);
});

t.test('a projection already rebuilding is a conflict, and no second rebuild starts', async (t) => {
  const { commands, rebuilt } = runnerWith({ facts: 'rebuilding' });
  await rejectsWith(t, commands.rebuild(sysadmin, { name: 'facts' }), 'conflict', /^projection facts is already rebuilding; follow it in GET \/projections$/);
  t.same(rebuilt, []);
  // On the distributed tier, a rebuild whose node stopped: the refusal says what the status says.
  const stopped = runnerWith({ facts: 'rebuilding' }, 'the rebuild by worker-1 (started …) stopped before its end');
  await rejectsWith(t, stopped.commands.rebuild(sysadmin, { name: 'facts' }), 'conflict', /already rebuilding; follow it in GET \/projections \(the rebuild by worker-1 \(started …\) stopped before its end\)$/);
  t.same(stopped.rebuilt, []);
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
  const ending = (error: Error): ReadModelRunner => ({
    ...runnerWith({ facts: 'running' }).runner,
    rebuild: async () => {
      throw error;
    },
  });
  await projectionCommands({ projections: ending(new ProjectionRebuildStoppedError('facts')), log }).rebuild(sysadmin, { name: 'facts' });
  await projectionCommands({ projections: ending(new ProjectionRebuildStoppedError('facts', 'a running node takes the rebuild over and replays the log from 0')), log }).rebuild(sysadmin, { name: 'facts' });
  await projectionCommands({ projections: ending(new ProjectionRebuildTakenOverError('facts', 'worker-2')), log }).rebuild(sysadmin, { name: 'facts' });
  await projectionCommands({ projections: ending(new Error('cannot project boom')), log }).rebuild(sysadmin, { name: 'facts' });
  await new Promise((resolve) => setImmediate(resolve)); // the background rebuilds' endings are logged
  t.match(logged, [
    { level: 40, projection: 'facts', msg: 'rebuild stopped before its end (the service is shutting down); the projection goes on from its checkpoint at the next start' },
    { level: 40, projection: 'facts', msg: 'rebuild stopped before its end (the service is shutting down); a running node takes the rebuild over and replays the log from 0' },
    { level: 40, projection: 'facts', by: 'worker-2', msg: 'rebuild taken over by another node, which took it for stopped; that rebuild goes on' },
    { level: 50, projection: 'facts', msg: 'rebuild failed' },
  ]);
  t.equal(logged.length, 4);
});
