#!/usr/bin/env -S node --liftoff-only --max-semi-space-size=2 --heap-growing-percent=10
// The CLI runs the compiled build (`npm run build`; `make run` builds first).
//
// The V8 flags above (also in package.json's start script, the Makefile's run target and the
// Dockerfile's entrypoint, which start node themselves) keep an embedded node's memory down
// (docs/performance.md, "Memory of an embedded node" and "Fifteenth round"): --liftoff-only stops
// V8 from recompiling PGlite's WebAssembly with TurboFan, whose compile of one huge function took
// ~450 MB for a moment; --max-semi-space-size=2 (MB) bounds the young generation of each of the
// three isolates (API thread, PGlite worker, model worker); --heap-growing-percent=10 lets an old
// generation grow to 1.1x what survived its last full collection before the next (the API
// thread's heap was mostly garbage waiting for a collection). --optimize-for-size, used before
// for the last, also forced 1 MB semi-spaces whatever --max-semi-space-size said: about 12% more
// CPU per ingested document for 15-20 MiB less peak RSS.
// V8 flags must be on node's command line (NODE_OPTIONS refuses --liftoff-only).
import '../dist/src/main.js';
