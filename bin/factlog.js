#!/usr/bin/env -S node --liftoff-only --max-semi-space-size=8 --optimize-for-size
// The CLI runs the compiled build (`npm run build`; `make run` builds first).
//
// The V8 flags above (also in package.json's start script, the Makefile's run target and the
// Dockerfile's entrypoint, which start node themselves) keep an embedded node's memory down
// (docs/performance.md, "Memory of an embedded node"): --liftoff-only stops V8 from recompiling
// PGlite's WebAssembly with TurboFan, whose compile of one huge function took ~450 MB for a
// moment; --optimize-for-size makes V8 grow its heaps less eagerly (the API thread's heap was
// mostly garbage waiting for a collection) and also fixes each isolate's semi-spaces at 1 MB:
// --max-semi-space-size=8 has no effect beside it (docs/performance.md, "Fifteenth round", with
// the flags measured instead: about 12% less CPU a page for 15-45 MiB more peak RSS).
// Together: peak RSS ~450 MB instead of ~1.2 GB, for ~30% more CPU per ingested document.
// V8 flags must be on node's command line (NODE_OPTIONS refuses --liftoff-only).
import '../dist/src/main.js';
