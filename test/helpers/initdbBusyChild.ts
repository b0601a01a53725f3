// An initdb child that never finishes (test/db/pgliteThread.test.ts): it writes its pid where the
// test can find it, then stays busy without turning its event loop, as PGlite's initdb does in
// its WebAssembly, so it cannot notice its parent's end by itself.
import { writeFileSync } from 'node:fs';

const [dataDir] = process.argv.slice(2);
writeFileSync(`${dataDir}.pid`, String(process.pid));
for (;;) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1000);
