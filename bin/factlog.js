#!/usr/bin/env -S MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=131072 node --wasm-debug-mask-for-testing=15 --max-semi-space-size=1 --heap-growing-percent=30
// The CLI runs the compiled build (`npm run build`; `make run` builds first).
//
// The environment and V8 flags above (also in package.json's start script, the Makefile's run
// target and the Dockerfile, which start node themselves) keep an embedded node within 500 MB
// (docs/performance.md, "Memory of an embedded node" and "Twenty-second round"):
// --wasm-debug-mask-for-testing=15 keeps the first four functions of PGlite's WebAssembly on V8's
// baseline compiler (Liftoff) while the rest tiers up to TurboFan: the install puts PostgreSQL's
// parser and three other start-and-DDL functions there (scripts/reorderPgliteWasm.ts), and
// TurboFan's compile of the parser alone takes 604 MB for a moment (before, --liftoff-only kept
// all of PostgreSQL on Liftoff, a quarter slower); --max-semi-space-size=1 keeps every isolate's young
// generation at 2 MB and --heap-growing-percent=30 grows its old generation by 30% of what a full
// collection leaves. MALLOC_ARENA_MAX=1 gives the threads one malloc arena instead of one each,
// and MALLOC_MMAP_THRESHOLD_=131072 gives allocations of 128 KiB and more (messages between the
// threads) pages of their own that go back to the system when freed: together about 45 MiB less
// at the 1,000-page run's peak. These replace --optimize-for-size, which held the memory too but
// cost about a quarter more CPU a document.
// V8 flags must be on node's command line (NODE_OPTIONS refuses them), and glibc reads
// its MALLOC_ settings before any code runs.
import '../dist/src/main.js';
