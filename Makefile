# Two entry points: `make run` (install, build, serve on the embedded default) and
# `make test` (install, make sure PostgreSQL is up, run every test).
SHELL := /bin/bash
NPM ?= npm

.PHONY: install build run test test-unit bench typecheck clean postgres

install: node_modules/.installed

node_modules/.installed: package.json package-lock.json
	$(NPM) ci --no-audit --no-fund
	@touch $@

build: install
	npx tsc -p tsconfig.json

typecheck: install
	npx tsc -p tsconfig.json --noEmit

run: build
	node bin/factlog.js serve

# The PostgreSQL server the store and pipeline suites run against (127.0.0.1:5432, trust auth).
postgres:
	@pg_isready -q -h 127.0.0.1 -p 5432 || { \
	  echo "starting PostgreSQL"; \
	  pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql | head -1) main start; \
	  for i in $$(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done; }

test: install postgres typecheck
	npx tap

bench: install postgres
	node --import=tsx bench/eventstore.ts

clean:
	rm -rf dist .tap
