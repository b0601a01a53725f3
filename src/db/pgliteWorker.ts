/**
 * The worker thread that owns one PGlite instance (src/db/pgliteThread.ts starts it). PGlite runs
 * its WebAssembly synchronously: here a long statement (an HNSW insert of 100+ ms) holds this
 * thread, not the API thread's event loop.
 *
 * Statements run one at a time, in the order of src/db/statementScheduler.ts: by level
 * (src/db/priority.ts), each level in arrival order, a transaction's statements alone until it ends.
 */
import { parentPort, receiveMessageOnPort, workerData, type MessagePort } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import { PreparedStatements } from './pglitePrepared.js';
import { serializeDatabaseError, type PgliteRequest, type PgliteReply, type PgliteStatementRequest, type PgliteWorkerData } from './pgliteProtocol.js';
import { StatementScheduler } from './statementScheduler.js';

if (parentPort === null) throw new Error('pgliteWorker.ts runs as a worker thread (src/db/pgliteThread.ts)');
const port: MessagePort = parentPort;

const { dataDir, loadDataDir, pgliteWasmModule, initdbWasmModule, settings } = workerData as PgliteWorkerData;

async function open(): Promise<PGlite> {
  return PGlite.create(dataDir, {
    extensions: { vector },
    ...(loadDataDir ? { loadDataDir: new Blob([loadDataDir]) } : {}),
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

const scheduler = new StatementScheduler<PgliteStatementRequest>();
let closeRequest: { id: number } | null = null;
let running = false;
let holdTimer: NodeJS.Timeout | null = null;

function accept(request: PgliteRequest): void {
  if (request.op === 'yield') scheduler.requestYielded();
  else if (request.op === 'close') closeRequest = request;
  else scheduler.add(request);
}

port.on('message', (request: PgliteRequest) => {
  accept(request);
  void pump();
});

/**
 * Runs statements while one may run (src/db/statementScheduler.ts). A statement's PGlite work
 * settles in microtasks, so messages that came meanwhile are taken from the port here rather
 * than waiting for their 'message' events: a request's statement that arrived during a pipeline
 * statement runs next, not after every statement already queued.
 */
async function pump(): Promise<void> {
  if (running) return;
  running = true;
  if (holdTimer !== null) clearTimeout(holdTimer);
  holdTimer = null;
  try {
    const pglite = await opened.catch(() => null);
    for (;;) {
      for (let message = receiveMessageOnPort(port); message !== undefined; message = receiveMessageOnPort(port)) accept(message.message as PgliteRequest);
      const statement = scheduler.next();
      if (statement === undefined) break;
      const reply = await run(statement);
      const inTransaction = pglite !== null && !pglite.closed && pglite.isInTransaction();
      port.postMessage(reply);
      scheduler.ran(statement, inTransaction);
    }
    // Close once nothing more may run now: a transaction left open is rolled back, and the
    // statements still waiting fail with the thread's exit, as statements sent after a close do.
    if (closeRequest !== null) await close(closeRequest.id);
    else if (scheduler.holdRemainingMs() > 0) holdTimer = setTimeout(() => void pump(), scheduler.holdRemainingMs());
  } finally {
    running = false;
  }
}

async function run(request: PgliteStatementRequest): Promise<PgliteReply> {
  try {
    const pglite = await opened;
    switch (request.op) {
      case 'query':
        prepared ??= new PreparedStatements(pglite);
        if (request.begin !== undefined) await prepared.query(request.begin);
        return { id: request.id, ok: true, value: await prepared.query(request.sql, request.params, request.options) };
      case 'exec':
        return { id: request.id, ok: true, value: await pglite.exec(request.sql, request.options) };
    }
  } catch (error) {
    return { id: request.id, ok: false, error: serializeDatabaseError(error) };
  }
}

async function close(id: number): Promise<void> {
  try {
    const pglite = await opened;
    if (!pglite.closed) await pglite.close();
    port.postMessage({ id, ok: true, value: null } satisfies PgliteReply);
  } catch (error) {
    port.postMessage({ id, ok: false, error: serializeDatabaseError(error) } satisfies PgliteReply);
  }
  // Nothing else keeps this thread alive: it ends after the reply, running its exit handlers.
  port.unref();
}
