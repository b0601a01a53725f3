import { closeSync, lstatSync, openSync, readdirSync, readSync } from 'node:fs';
import path from 'node:path';
import type { PGlite } from '@electric-sql/pglite';
import { EmscriptenBuiltinFilesystem } from '@electric-sql/pglite/basefs';

/** Where PGlite keeps its data directory in its (emscripten) file system: PGDATA of PGlite's initdb.ts. */
const PGDATA = '/pglite/data';

/** The part of an emscripten MEMFS node this file uses. */
interface MemNode {
  mode: number;
  contents: Uint8Array | null;
  usedBytes: number;
  node_ops: Record<string, (...args: never[]) => unknown>;
  stream_ops: Record<string, (...args: never[]) => unknown>;
  /** The file on disk whose bytes this node stands for, until they are first needed. */
  snapshotOf?: string;
}

/**
 * A PGlite file system that reads a data directory on disk and never writes it: an in-memory
 * (MEMFS) copy whose files are read from disk when PostgreSQL first touches them, and whose
 * writes stay in memory and are dropped on close. Opening PostgreSQL on the directory itself
 * writes it even for a SELECT (the control file at start-up, a checkpoint at shutdown, hint
 * bits); a command that only reads opens it this way (`openDatabase`'s `readOnly`) and leaves
 * every byte as it was. Memory holds only the files it touched (the catalogues and the tables
 * read), not the whole directory.
 *
 * The directory must not change meanwhile: its lock (src/db/dataDirLock.ts) is held by the
 * opener, as for any other open.
 */
export class ReadOnlySnapshotFS extends EmscriptenBuiltinFilesystem {
  constructor(private readonly root: string) {
    super();
  }

  override async initialSyncFs(): Promise<void> {
    const FS = (this.pg as PGlite).Module.FS as EmscriptenFS;
    FS.mkdirTree(PGDATA);
    const MEMFS = FS.filesystems.MEMFS as { ops_table: { file: { node: Record<string, Function>; stream: Record<string, Function> } } };
    // MEMFS's ops table exists once a node was made (the module's own files were).
    const fileNode = MEMFS.ops_table.file.node;
    const fileStream = MEMFS.ops_table.file.stream;
    const withBytes =
      (operation: Function) =>
      (stream: { node: MemNode }, ...args: unknown[]) => {
        loadBytes(stream.node);
        return operation(stream, ...args);
      };
    const streamOps = {
      ...fileStream,
      read: withBytes(fileStream.read),
      write: withBytes(fileStream.write),
      allocate: withBytes(fileStream.allocate),
      mmap: withBytes(fileStream.mmap),
      msync: withBytes(fileStream.msync),
    };
    const nodeOps = {
      ...fileNode,
      setattr: (node: MemNode, attr: { size?: number }) => {
        // Truncated to nothing: the bytes on disk are not needed; resized otherwise: they are.
        if (attr.size !== undefined) {
          if (attr.size === 0) delete node.snapshotOf;
          else loadBytes(node);
        }
        return fileNode.setattr(node, attr);
      },
    };
    const walk = (relative: string) => {
      for (const name of readdirSync(path.join(this.root, relative))) {
        const entry = path.join(relative, name);
        const onDisk = path.join(this.root, entry);
        const stat = lstatSync(onDisk);
        const inMemory = `${PGDATA}/${entry}`;
        if (stat.isDirectory()) {
          FS.mkdir(inMemory, 0o700);
          walk(entry);
        } else if (stat.isFile()) {
          FS.writeFile(inMemory, new Uint8Array(0), { mode: 0o600 });
          const node = FS.lookupPath(inMemory).node as MemNode;
          node.node_ops = nodeOps as MemNode['node_ops'];
          node.stream_ops = streamOps as MemNode['stream_ops'];
          node.usedBytes = stat.size;
          node.contents = null;
          node.snapshotOf = onDisk;
        }
        // Nothing else belongs in a PGlite data directory (no tablespaces, no sockets).
      }
    };
    walk('');
  }
}

/** Gives a node the bytes of its file on disk, once. */
function loadBytes(node: MemNode): void {
  if (node.snapshotOf === undefined) return;
  const bytes = new Uint8Array(node.usedBytes);
  const fd = openSync(node.snapshotOf, 'r');
  try {
    let read = 0;
    while (read < bytes.length) {
      const n = readSync(fd, bytes, read, bytes.length - read, read);
      if (n === 0) break; // shorter than it was: the rest reads as zeros, as a torn read would
      read += n;
    }
  } finally {
    closeSync(fd);
  }
  node.contents = bytes;
  delete node.snapshotOf;
}

interface EmscriptenFS {
  mkdirTree(path: string): void;
  mkdir(path: string, mode: number): void;
  writeFile(path: string, data: Uint8Array, options: { mode: number }): void;
  lookupPath(path: string): { node: unknown };
  filesystems: Record<string, unknown>;
}
