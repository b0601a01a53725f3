// Set by test/group.ts in a process that runs a group of test files, so helpers can share work
// across those files (kept apart from test/group.ts, which imports tap's root test).
const GROUPED_RUN = Symbol.for('factlog.groupedRun');
const GROUP_END = Symbol.for('factlog.groupEnd');

export function markGroupedRun(): void {
  (globalThis as Record<symbol, unknown>)[GROUPED_RUN] = true;
}

/** Whether this process runs a group of test files. */
export function isGroupedRun(): boolean {
  return (globalThis as Record<symbol, unknown>)[GROUPED_RUN] === true;
}

function groupEndActions(): Array<() => Promise<void>> {
  const global = globalThis as Record<symbol, Array<() => Promise<void>> | undefined>;
  return (global[GROUP_END] ??= []);
}

/** In a grouped run, `action` runs once the group's last file is done (to close what the files shared). */
export function atGroupEnd(action: () => Promise<void>): void {
  groupEndActions().push(action);
}

/** Runs what `atGroupEnd` was given: test/group.ts, when the group's files are done. */
export async function endGroupedRun(): Promise<void> {
  const actions = groupEndActions().splice(0);
  await Promise.allSettled(actions.map((action) => action()));
}
