#!/usr/bin/env node
// The CLI runs the compiled build (`npm run build`; `make run` builds first).
import '../dist/src/main.js';
