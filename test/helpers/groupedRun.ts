// Set by test/group.ts in a process that runs a group of test files, so helpers can share work
// across those files (kept apart from test/group.ts, which imports tap's root test).
const GROUPED_RUN = Symbol.for('factlog.groupedRun');

export function markGroupedRun(): void {
  (globalThis as Record<symbol, unknown>)[GROUPED_RUN] = true;
}

/** Whether this process runs a group of test files. */
export function isGroupedRun(): boolean {
  return (globalThis as Record<symbol, unknown>)[GROUPED_RUN] === true;
}
