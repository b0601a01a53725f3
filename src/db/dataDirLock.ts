import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
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
  /**
   * The kernel's boot id and the process's start time (clock ticks since boot) where /proc has
   * them: a pid alive after a reboot, or reused by another process, is not the owner.
   */
  bootId?: string;
  processStartTicks?: string;
  /**
   * A random key of this run of the owner (the lock file is readable by its user only). A CLI
   * command that would send a token to `url` first has the service there prove it knows the key
   * (`proveInstance`, `GET /healthz/instance`): an address can be taken by another process once
   * the owner is gone, and a lock written by an older factlog, without the key, cannot vouch for it.
   */
  instanceKey?: string;
}

/** This process's instance key, recorded in every lock it takes. */
const instanceKey = randomBytes(32).toString('base64url');

/** The proof that this process holds the instance key of its locks: an HMAC of the caller's challenge. */
export function proveInstance(challenge: string): string {
  return instanceProof(instanceKey, challenge);
}

function instanceProof(key: string, challenge: string): string {
  return createHmac('sha256', key).update(challenge).digest('base64url');
}

/** Whether `proof` answers `challenge` for the owner's instance key (false for a lock without one). */
export function verifyInstanceProof(owner: DataDirOwner, challenge: string, proof: string): boolean {
  if (owner.instanceKey === undefined) return false;
  const expected = Buffer.from(instanceProof(owner.instanceKey, challenge));
  const given = Buffer.from(proof);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** The lock file's text and its mode: its instance key is for its user only. */
function writeLockFile(file: string, owner: DataDirOwner): void {
  writeFileSync(file, JSON.stringify(owner), { mode: 0o600 });
}

export class DataDirLockedError extends Error {
  /** The owner as the message names it: `factlog serve (pid 4242, http://127.0.0.1:8080)`. */
  readonly holder: string;

  constructor(readonly dataDir: string, readonly lockPath: string, readonly owner: DataDirOwner) {
    const who = `${owner.command} (pid ${owner.pid}${owner.hostname === hostname() ? '' : ` on ${owner.hostname}`}${owner.url ? `, ${owner.url}` : ''})`;
    const remedy =
      owner.hostname === hostname()
        ? 'stop it first'
        : `stop it first; if that host is gone, delete ${lockPath}`;
    super(`data directory ${dataDir} is in use by ${who}: ${remedy}`);
    this.name = 'DataDirLockedError';
    this.holder = who;
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
  const owner: DataDirOwner = { pid: process.pid, hostname: hostname(), command, startedAt: new Date().toISOString(), ...processIdentity(process.pid), instanceKey };
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
    writeLockFile(temporary, owner);
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
  writeLockFile(temporary, owner);
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
  const self: DataDirOwner = { pid: process.pid, hostname: hostname(), command: 'takeover', startedAt: new Date().toISOString(), ...processIdentity(process.pid) };
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
    throw unreadableLockError(lockPath, error as NodeJS.ErrnoException);
  }
  try {
    const parsed = JSON.parse(text) as Partial<DataDirOwner>;
    if (typeof parsed.pid !== 'number' || typeof parsed.hostname !== 'string') return 'unreadable';
    return { command: 'unknown', startedAt: '', ...parsed } as DataDirOwner;
  } catch {
    return 'unreadable';
  }
}

/**
 * Why a lock file cannot be read, naming it and what to do: Node's own message (`EISDIR: illegal
 * operation on a directory, read`) names neither the file nor that it is the data directory's lock.
 */
export function unreadableLockError(lockPath: string, error: NodeJS.ErrnoException): Error {
  const problem = `cannot read the data directory's lock ${lockPath}`;
  switch (error.code) {
    case 'EISDIR':
      return new Error(`${problem}: it is a directory; remove it`, { cause: error });
    case 'EACCES':
    case 'EPERM':
      return new Error(`${problem}: permission denied; run factlog as the user that owns it, or remove it if no factlog uses the data directory`, { cause: error });
    default:
      return new Error(`${problem} (${error.message}); remove it if no factlog uses the data directory`, { cause: error });
  }
}

/** A process on another host cannot be checked from here and counts as alive. */
function isAlive(owner: DataDirOwner): boolean {
  if (owner.hostname !== hostname()) return true;
  // Our own pid: ours if we hold it, else left by an earlier process that had the same pid.
  if (owner.pid === process.pid) return [...held.values()].some((mine) => mine.startedAt === owner.startedAt);
  try {
    process.kill(owner.pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EPERM') return false; // EPERM: alive, owned by another user
  }
  // A live pid is the owner only if it is the same process: not after a reboot, nor reused since.
  // Locks written without the identity (older versions, no /proc) trust the pid alone.
  if (owner.bootId === undefined || owner.processStartTicks === undefined) return true;
  const now = processIdentity(owner.pid);
  if (now.bootId === undefined) return true; // no /proc here: cannot tell
  if (now.bootId !== owner.bootId) return false; // written before a reboot
  return now.processStartTicks === undefined || now.processStartTicks === owner.processStartTicks; // unreadable stat: trust the pid
}

/**
 * What tells a process from a later one with the same pid, on Linux: the boot id
 * (/proc/sys/kernel/random/boot_id) and the start time (field 22 of /proc/<pid>/stat). Empty
 * where /proc has no such files; `processStartTicks` is absent when the process is gone.
 */
function processIdentity(pid: number): Pick<DataDirOwner, 'bootId' | 'processStartTicks'> {
  let bootId: string;
  try {
    bootId = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
  } catch {
    return {};
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 2, the command name, is in parentheses and may hold spaces and ')': count from the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { bootId, processStartTicks: fields[22 - 3] };
  } catch {
    return { bootId };
  }
}
