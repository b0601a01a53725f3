/**
 * The worker thread that owns one PGlite instance (src/db/pgliteThread.ts starts it). PGlite runs
 * its WebAssembly synchronously: here a long statement (an HNSW insert of 100+ ms) holds this
 * thread, not the API thread's event loop.
 *
 * Statements are handled one at a time in arrival order; the main thread's priority gate already
 * decided that order (src/db/priority.ts).
 */
import { parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import { DumpBlob } from './pgliteDump.js';
import { ReadOnlySnapshotFS } from './pgliteSnapshot.js';
import { PreparedStatements } from './pglitePrepared.js';
import { serializeDatabaseError, type PgliteRequest, type PgliteReply, type PgliteWorkerData } from './pgliteProtocol.js';

if (parentPort === null) throw new Error('pgliteWorker.ts runs as a worker thread (src/db/pgliteThread.ts)');
const port: MessagePort = parentPort;

const { dataDir, loadDataDir, readOnly, pgliteWasmModule, initdbWasmModule, settings } = workerData as PgliteWorkerData;

async function open(): Promise<PGlite> {
  return PGlite.create({
    // Read-only: the directory's files are read, and what PostgreSQL writes stays in memory (pgliteSnapshot.ts).
    ...(readOnly ? { fs: new ReadOnlySnapshotFS(dataDir) } : { dataDir }),
    extensions: { vector },
    ...(loadDataDir ? { loadDataDir: new DumpBlob(new Uint8Array(loadDataDir)) } : {}),
    pgliteWasmModule,
    initdbWasmModule,
    startParams: [...PGlite.defaultStartParams, ...Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`])],
  });
}

const opened = open();
// Every statement of the `query` op runs as a named prepared statement of this session (pglitePrepared.ts).
let prepared: PreparedStatements | null = null;
opened.then(
  () => port.postMessage({ id: 0, ok: true, value: null } satisfies PgliteReply),
  (error: unknown) => port.postMessage({ id: 0, ok: false, error: serializeDatabaseError(error) } satisfies PgliteReply),
);

port.on('message', (request: PgliteRequest) => {
  void handle(request).then((reply) => port.postMessage(reply));
});

async function handle(request: PgliteRequest): Promise<PgliteReply> {
  try {
    const pglite = await opened;
    prepared ??= new PreparedStatements(pglite);
    if (request.op !== 'close' && request.begin !== undefined) await prepared.query(request.begin);
    switch (request.op) {
      case 'query':
        return { id: request.id, ok: true, value: await prepared.query(request.sql, request.params, request.options) };
      case 'exec':
        return { id: request.id, ok: true, value: await pglite.exec(request.sql, request.options) };
      case 'close':
        if (!pglite.closed) await pglite.close();
        // Nothing else keeps this thread alive: it ends after the reply, running its exit handlers.
        port.unref();
        return { id: request.id, ok: true, value: null };
    }
  } catch (error) {
    return { id: request.id, ok: false, error: serializeDatabaseError(error) };
  }
}
