// An initdb child whose exit hangs (test/db/pgliteThread.test.ts): it reports done, writes its
// pid where the test can find it, and then never exits by itself.
import { writeFileSync } from 'node:fs';
import { INITDB_DONE } from '../../src/db/pgliteProtocol.js';

const [dataDir] = process.argv.slice(2);
writeFileSync(`${dataDir}.pid`, String(process.pid));
process.send?.(INITDB_DONE);
setInterval(() => undefined, 1000);
