#!/usr/bin/env -S node --liftoff-only --max-semi-space-size=8
// The CLI runs the compiled build (`npm run build`; `make run` builds first).
//
// The V8 flags above (also in package.json's start script, the Makefile's run target and the
// Dockerfile's entrypoint, which start node themselves) keep an embedded node's memory down
// (docs/performance.md, "Memory of an embedded node"): --liftoff-only stops V8 from recompiling
// PGlite's WebAssembly with TurboFan, whose compile of one huge function took ~450 MB for a
// moment; --max-semi-space-size=8 (MB) bounds the young generation of each of the three
// isolates (API thread, PGlite worker, model worker). V8 flags must be on node's command line.
import '../dist/src/main.js';
