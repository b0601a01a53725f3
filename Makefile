# Two entry points: `make run` (install, build, serve on the embedded default) and
# `make test` (install, make sure PostgreSQL is up, run every test).
SHELL := /bin/bash
NPM ?= npm

.PHONY: install build run test bench typecheck clean postgres infra infra-stop

install: node_modules/.installed

node_modules/.installed: package.json package-lock.json
	$(NPM) ci --no-audit --no-fund
	@touch $@

build: install
	npx tsc -p tsconfig.json

typecheck: install
	npx tsc -p tsconfig.json --noEmit
	npx tsc -p tsconfig.test.json

run: build
	node bin/factlog.js serve

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

test: install postgres typecheck infra
	npx tap

bench: install postgres
	node --import=tsx bench/eventstore.ts

clean:
	rm -rf dist .tap
