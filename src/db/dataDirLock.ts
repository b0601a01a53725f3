import { hostname } from 'node:os';
import { linkSync, readFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs';

/**
 * One owner per embedded data directory. PGlite is PostgreSQL in this process: a second process
 * on the same files (a second `serve`, or a CLI command beside a running service) would corrupt
 * them, so whoever opens the directory first holds `<dir>.lock`, a small JSON file naming it.
 * A lock whose process is gone (SIGKILL, power loss) is stale and taken over by the next opener.
 */
export interface DataDirOwner {
  pid: number;
  hostname: string;
  /** What holds the directory, e.g. `factlog serve`. */
  command: string;
  startedAt: string;
  /** The HTTP address of a serving owner, once it listens (see `announceDataDirUrl`). */
  url?: string;
}

export class DataDirLockedError extends Error {
  constructor(readonly dataDir: string, readonly lockPath: string, readonly owner: DataDirOwner) {
    const who = `${owner.command} (pid ${owner.pid}${owner.hostname === hostname() ? '' : ` on ${owner.hostname}`}${owner.url ? `, ${owner.url}` : ''})`;
    const remedy =
      owner.hostname === hostname()
        ? 'stop it first'
        : `stop it first; if that host is gone, delete ${lockPath}`;
    super(`data directory ${dataDir} is in use by ${who}: ${remedy}`);
    this.name = 'DataDirLockedError';
  }
}

export interface DataDirLock {
  readonly lockPath: string;
  /** Removes the lock file (idempotent); only a lock this process still owns is removed. */
  release(): void;
}

const held = new Map<string, DataDirOwner>();

// A process that exits without closing its database (process.exit after a fatal error) does not
// leave its lock behind; SIGKILL does, and the next opener takes that stale lock over.
process.once('exit', () => {
  for (const lockPath of held.keys()) removeIfOwned(lockPath);
});

/** Takes the lock of `dataDir` for this process, or throws `DataDirLockedError` naming the owner. */
export function acquireDataDirLock(dataDir: string, command = describeCommand()): DataDirLock {
  const lockPath = `${dataDir}.lock`;
  if (held.has(lockPath)) throw new DataDirLockedError(dataDir, lockPath, held.get(lockPath)!);
  const owner: DataDirOwner = { pid: process.pid, hostname: hostname(), command, startedAt: new Date().toISOString() };
  for (let attempt = 0; ; attempt++) {
    if (createExclusively(lockPath, owner)) break;
    const current = readOwner(lockPath);
    if (current === 'missing') continue; // released between our attempt and the read
    if (current !== 'unreadable' && isAlive(current)) throw new DataDirLockedError(dataDir, lockPath, current);
    if (attempt >= 3) throw new Error(`cannot take over the stale lock ${lockPath}: another process keeps replacing it`);
    takeOverStale(lockPath, current);
  }
  held.set(lockPath, owner);
  return {
    lockPath,
    release: () => {
      if (held.delete(lockPath)) removeIfOwned(lockPath);
    },
  };
}

/** Records the address a serving process listens on in every lock it holds, for CLI commands. */
export function announceDataDirUrl(url: string): void {
  for (const [lockPath, owner] of held) {
    owner.url = url;
    const temporary = `${lockPath}.${process.pid}.tmp`;
    writeFileSync(temporary, JSON.stringify(owner));
    renameSync(temporary, lockPath); // readers see the old or the new content, never half of it
  }
}

let runningCommand: string | null = null;

/** Names the command this process runs (`factlog projections rebuild`), for the lock's owner; null forgets it. */
export function nameRunningCommand(command: string | null): void {
  runningCommand = command;
}

/**
 * What a second opener is told holds the directory: the command the CLI named, else the first
 * words of the command line that are not options (an option's value may be among them).
 */
function describeCommand(): string {
  if (runningCommand !== null) return runningCommand;
  const args = process.argv.slice(2).filter((arg) => !arg.startsWith('-'));
  return ['factlog', ...args.slice(0, 2)].join(' ');
}

/** Writes the lock next to its final name and links it there: the link fails if a lock exists. */
function createExclusively(lockPath: string, owner: DataDirOwner): boolean {
  const temporary = `${lockPath}.${process.pid}.tmp`;
  writeFileSync(temporary, JSON.stringify(owner));
  try {
    linkSync(temporary, lockPath);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw error;
  } finally {
    unlinkSync(temporary);
  }
}

/**
 * Replaces a stale lock. Two openers may find the same stale lock; a second exclusive file makes
 * one of them do the replacing, and it removes the old lock only if it is still the stale one.
 */
function takeOverStale(lockPath: string, stale: DataDirOwner | 'unreadable'): void {
  const takeover = `${lockPath}.takeover`;
  const self: DataDirOwner = { pid: process.pid, hostname: hostname(), command: 'takeover', startedAt: new Date().toISOString() };
  if (!createExclusively(takeover, self)) {
    const other = readOwner(takeover);
    if (typeof other === 'object' && isAlive(other)) return; // the other opener replaces it; look again
    removeIfUnchanged(takeover, other);
    return;
  }
  try {
    removeIfUnchanged(lockPath, stale);
  } finally {
    unlinkSync(takeover);
  }
}

function removeIfUnchanged(file: string, expected: DataDirOwner | 'unreadable' | 'missing'): void {
  const now = readOwner(file);
  const same = typeof now === 'object' && typeof expected === 'object' ? now.pid === expected.pid && now.startedAt === expected.startedAt : now === expected;
  if (!same) return;
  try {
    unlinkSync(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}

function removeIfOwned(lockPath: string): void {
  const current = readOwner(lockPath);
  if (typeof current === 'object' && current.pid === process.pid && current.hostname === hostname()) removeIfUnchanged(lockPath, current);
}

function readOwner(lockPath: string): DataDirOwner | 'missing' | 'unreadable' {
  let text: string;
  try {
    text = readFileSync(lockPath, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 'missing';
    throw error;
  }
  try {
    const parsed = JSON.parse(text) as Partial<DataDirOwner>;
    if (typeof parsed.pid !== 'number' || typeof parsed.hostname !== 'string') return 'unreadable';
    return { command: 'unknown', startedAt: '', ...parsed } as DataDirOwner;
  } catch {
    return 'unreadable';
  }
}

/** A process on another host cannot be checked from here and counts as alive. */
function isAlive(owner: DataDirOwner): boolean {
  if (owner.hostname !== hostname()) return true;
  // Our own pid: ours if we hold it, else left by an earlier process that had the same pid.
  if (owner.pid === process.pid) return [...held.values()].some((mine) => mine.startedAt === owner.startedAt);
  try {
    process.kill(owner.pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'; // alive, owned by another user
  }
}
