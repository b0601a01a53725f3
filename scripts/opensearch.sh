#!/usr/bin/env bash
# A real single-node OpenSearch with the k-NN plugin for the distributed tier's search tests,
# built from Maven Central artifacts with mvn (docs/search.md, "Running OpenSearch locally").
#
#   scripts/opensearch.sh start    fetch + unpack + install k-NN (first run only), start, wait for health
#   scripts/opensearch.sh stop     stop the node started by this script
#   scripts/opensearch.sh status   exit 0 when the node answers with green/yellow health
#   scripts/opensearch.sh reset    stop and delete the node's data (indices)
#
# Environment: OPENSEARCH_PORT (default 19200; transport on OPENSEARCH_PORT+100),
# OPENSEARCH_VERSION (default 2.19.1), OPENSEARCH_CACHE_DIR (default <repo>/.cache/opensearch),
# OPENSEARCH_JAVA_HOME (default: the JDK of `java` on PATH; must be 11..21),
# OPENSEARCH_HEAP (default 512m), OPENSEARCH_START_TIMEOUT seconds (default 120),
# OPENSEARCH_RUN_AS (user to run the node as when this script runs as root; default nobody).
#
# Why 2.19.1: Maven Central holds the opensearch-knn plugin zip only for 2.19.1.0 and 3.5.0.0.
# 3.x needs Java 21+ (this machine kind has 17, and a Temurin 25 JDK); 2.19.1 runs on the default
# Java 17. OpenSearch 2.x needs the Java SecurityManager, so it runs on JDK 11-21, not on 25.
# The plugin zip carries no faiss/nmslib native libraries, so k-NN indices use the pure-Java
# `lucene` engine (HNSW, cosinesimil).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="${OPENSEARCH_VERSION:-2.19.1}"
knn_version="$version.0"
port="${OPENSEARCH_PORT:-19200}"
transport_port="$((port + 100))"
cache="${OPENSEARCH_CACHE_DIR:-$root/.cache/opensearch}"
downloads="$cache/downloads"
home="$cache/opensearch-$version"
# One config/data/log directory per port, so nodes on different ports never share data.
instance="$cache/instance-$port"
conf="$instance/config"
data="$instance/data"
logs="$instance/logs"
pid_file="$instance/opensearch.pid"
heap="${OPENSEARCH_HEAP:-512m}"
timeout="${OPENSEARCH_START_TIMEOUT:-120}"
run_as="${OPENSEARCH_RUN_AS:-nobody}"
base_url="http://127.0.0.1:$port"

name=opensearch
# shellcheck source=lib/daemon.sh
source "$root/scripts/lib/daemon.sh"

# Prints the cluster status (green/yellow/red) or nothing when the node does not answer.
health() {
  local body
  body="$(curl -s -m 3 "$base_url/_cluster/health" 2>/dev/null || true)" # nothing listening is an answer too
  sed -n 's/.*"status":"\([a-z]*\)".*/\1/p' <<<"$body"
}

healthy() {
  local status
  status="$(health)"
  [[ "$status" == green || "$status" == yellow ]]
}

java_home() {
  local candidate="${OPENSEARCH_JAVA_HOME:-${JAVA_HOME:-}}"
  if [[ -z "$candidate" ]]; then
    command -v java >/dev/null || { log "java (11..21) is required, or set OPENSEARCH_JAVA_HOME"; exit 1; }
    candidate="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
  fi
  local major
  major="$("$candidate/bin/java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
  major="${major#1.}"
  if [[ -z "$major" ]] || (( major < 11 || major > 21 )); then
    log "OpenSearch $version needs Java 11..21 (it relies on the SecurityManager); $candidate is Java ${major:-unknown}."
    log "Set OPENSEARCH_JAVA_HOME, e.g. to /usr/lib/jvm/java-17-openjdk-amd64."
    exit 1
  fi
  echo "$candidate"
}

# Runs mvn quietly; its output is shown only when it fails.
mvn_quiet() {
  mkdir -p "$cache"
  mvn -B -q -Dstyle.color=never "$@" >"$cache/mvn.log" 2>&1 || { cat "$cache/mvn.log" >&2; log "mvn failed"; exit 1; }
}

mvn_copy() {
  # The dependency plugin is pinned: mvn 3.8's default (2.x) has a different `copy`.
  mvn_quiet org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy \
    -Dartifact="$1" -DoutputDirectory="$downloads" -Dmdep.overWriteReleases=false
}

fetch() {
  if [[ -f "$home/.complete" ]]; then return 0; fi
  # Nodes on different ports share the cache: one fetch at a time, the others then find it done.
  mkdir -p "$cache"
  exec 8>"$cache/.lock-fetch"
  flock -w 900 8 || { log "another fetch holds $cache/.lock-fetch for 900s"; exit 1; }
  if [[ ! -f "$home/.complete" ]]; then fetch_locked; fi
  exec 8>&-
}

fetch_locked() {
  command -v mvn >/dev/null || { log "mvn is required to fetch OpenSearch from Maven Central"; exit 1; }
  command -v unzip >/dev/null || { log "unzip is required"; exit 1; }
  mkdir -p "$downloads"
  local distribution="$downloads/opensearch-$version.zip" knn="$downloads/opensearch-knn-$knn_version.zip"
  if [[ ! -s "$distribution" ]]; then
    log "fetching org.opensearch.distribution.integ-test-zip:opensearch:$version:zip"
    mvn_copy "org.opensearch.distribution.integ-test-zip:opensearch:$version:zip"
  fi
  if [[ ! -s "$knn" ]]; then
    log "fetching org.opensearch.plugin:opensearch-knn:$knn_version:zip"
    mvn_copy "org.opensearch.plugin:opensearch-knn:$knn_version:zip"
  fi
  fetch_modules
  local partial="$home.partial"
  rm -rf "$partial" "$cache/unpack"
  mkdir -p "$cache/unpack"
  unzip -q "$distribution" -d "$cache/unpack"
  mv "$cache/unpack/opensearch-$version" "$partial"
  rmdir "$cache/unpack"
  install_modules "$partial"
  log "installing the k-NN plugin"
  OPENSEARCH_JAVA_HOME="$(java_home)" OPENSEARCH_PATH_CONF="$partial/config" \
    "$partial/bin/opensearch-plugin" install --batch "file://$knn" >"$cache/plugin-install.log" 2>&1 \
    || { cat "$cache/plugin-install.log" >&2; exit 1; }
  # Written last and moved into place: an interrupted fetch is redone, never half-used.
  touch "$partial/.complete"
  rm -rf "$home"
  mv "$partial" "$home"
  log "installed OpenSearch $version with opensearch-knn $knn_version in $home"
}

# The integ-test zip ships only the transport module. k-NN extends lang-painless, and the
# `english` analyzer lives in analysis-common: both are published on Maven Central as plain
# jars (not module zips), so they are fetched with their dependencies and laid out as modules.
fetch_modules() {
  local jars="$downloads/modules-$version"
  if [[ -f "$jars/.complete" ]]; then return 0; fi
  log "fetching the lang-painless and analysis-common modules"
  local build="$cache/fetch-$version"
  mkdir -p "$build"
  # lang-painless's own pom excludes everything transitive; its SPI jar would pull the
  # OpenSearch server jars, which the distribution already has in lib/.
  cat >"$build/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>factlog.local</groupId>
  <artifactId>opensearch-modules</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.opensearch.plugin</groupId><artifactId>lang-painless</artifactId><version>$version</version>
      <exclusions><exclusion><groupId>org.opensearch</groupId><artifactId>opensearch</artifactId></exclusion></exclusions>
    </dependency>
    <dependency>
      <groupId>org.opensearch.plugin</groupId><artifactId>analysis-common</artifactId><version>$version</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions>
    </dependency>
  </dependencies>
</project>
POM
  rm -rf "$jars.partial"
  mvn_quiet -f "$build/pom.xml" org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$jars.partial"
  touch "$jars.partial/.complete"
  rm -rf "$jars"
  mv "$jars.partial" "$jars"
}

# Lays the fetched jars out as modules with the descriptors and policy the OpenSearch build
# would have generated for them.
install_modules() {
  local target="$1/modules" jars="$downloads/modules-$version"
  mkdir -p "$target/lang-painless" "$target/analysis-common"
  cp "$jars"/analysis-common-*.jar "$target/analysis-common/"
  find "$jars" -name '*.jar' ! -name 'analysis-common-*' -exec cp {} "$target/lang-painless/" \;
  cat >"$target/lang-painless/plugin-descriptor.properties" <<PROPS
description=An easy, safe and fast scripting language for OpenSearch
version=$version
name=lang-painless
classname=org.opensearch.painless.PainlessPlugin
java.version=11
opensearch.version=$version
extended.plugins=
has.native.controller=false
PROPS
  cat >"$target/lang-painless/plugin-security.policy" <<'POLICY'
grant {
  // needed to generate runtime classes
  permission java.lang.RuntimePermission "createClassLoader";
  // needed to find the classloader to load allowlisted classes from
  permission java.lang.RuntimePermission "getClassLoader";
};
POLICY
  cat >"$target/analysis-common/plugin-descriptor.properties" <<PROPS
description=Adds "built in" analyzers to OpenSearch.
version=$version
name=analysis-common
classname=org.opensearch.analysis.common.CommonAnalysisPlugin
java.version=11
opensearch.version=$version
extended.plugins=lang-painless
has.native.controller=false
PROPS
}

write_config() {
  mkdir -p "$data" "$logs"
  if [[ ! -f "$conf/.copied" ]]; then
    rm -rf "$conf"
    cp -r "$home/config" "$conf"
    touch "$conf/.copied"
  fi
  # The integ-test distribution has no security plugin: HTTP is plain and unauthenticated.
  cat >"$conf/opensearch.yml" <<YAML
# Generated by scripts/opensearch.sh on every start.
cluster.name: factlog-search-$port
node.name: factlog-search-$port
discovery.type: single-node
network.host: 127.0.0.1
http.port: $port
transport.port: $transport_port
path.data: $data
path.logs: $logs
# A test node on a nearly full disk must still allocate shards.
cluster.routing.allocation.disk.threshold_enabled: false
YAML
  # The stock jvm.options name logs/ and data/ relative to the installation (GC log, heap
  # dumps, fatal error logs): point them at this instance.
  sed -e "s|file=logs/|file=$logs/|; s|ErrorFile=logs/|ErrorFile=$logs/|; s|HeapDumpPath=data|HeapDumpPath=$data|; /^-Xm[sx]/d" \
    "$home/config/jvm.options" >"$conf/jvm.options"
  mkdir -p "$conf/jvm.options.d"
  printf -- '-Xms%s\n-Xmx%s\n' "$heap" "$heap" >"$conf/jvm.options.d/heap.options"
}

start() {
  if pid="$(running_pid)" && healthy; then
    log "already running (pid $pid) on $base_url"
    return 0
  fi
  if ! running_pid >/dev/null && [[ -n "$(health)" ]]; then
    # Another checkout (or an earlier run) started a healthy node there: use it rather than fail.
    log "a healthy node already answers on port $port (not started from this checkout); using it"
    return 0
  fi
  fetch
  local jdk
  jdk="$(java_home)"
  if ! running_pid >/dev/null; then
    write_config
    local -a prefix=()
    if [[ "$(id -u)" == 0 ]]; then
      # OpenSearch refuses to run as root: run it as an unprivileged user that owns its instance.
      local uid gid
      uid="$(id -u "$run_as")"
      gid="$(id -g "$run_as")"
      chown -R "$uid:$gid" "$instance"
      prefix=(setpriv "--reuid=$uid" "--regid=$gid" --clear-groups)
    fi
    log "starting OpenSearch $version on $base_url (logs: $logs, java: $jdk)"
    # -d daemonizes (the node outlives this shell and the test process); -p writes the pid file.
    # 8>&- 9>&-: the node must not inherit the fetch or start/stop locks, or it would hold them for its lifetime.
    HOME="$instance" OPENSEARCH_JAVA_HOME="$jdk" OPENSEARCH_PATH_CONF="$conf" \
      setsid "${prefix[@]}" "$home/bin/opensearch" -d -p "$pid_file" >"$logs/startup.out" 2>&1 </dev/null 8>&- 9>&- \
      || { log "start-up failed:"; tail -n 30 "$logs/startup.out" >&2; exit 1; }
  fi
  local started=$SECONDS seen_pid=0
  until healthy; do
    # The daemonized node writes its pid file only once its JVM has bootstrapped, which takes
    # more than a few seconds on a busy machine: only a node whose pid file appeared and whose
    # process then went away has exited (one that never writes it meets the timeout below).
    if running_pid >/dev/null; then seen_pid=1; fi
    if (( seen_pid )) && ! running_pid >/dev/null; then
      log "the node exited during start-up; last lines of $logs/factlog-search-$port.log:"
      tail -n 30 "$logs/factlog-search-$port.log" >&2 2>/dev/null || tail -n 30 "$logs/startup.out" >&2 || true
      rm -f "$pid_file"
      exit 1
    fi
    if (( SECONDS - started > timeout )); then
      log "not healthy after ${timeout}s; see $logs"
      # A node left running would answer the next start as "already there" and outlive this
      # checkout's files.
      local stale
      if stale="$(running_pid)"; then kill "$stale" 2>/dev/null || true; rm -f "$pid_file"; fi
      exit 1
    fi
    sleep 0.5
  done
  if ! curl -s -m 5 "$base_url/_cat/plugins" | grep -q opensearch-knn; then
    log "the node runs without the opensearch-knn plugin; delete $home and start again"
    exit 1
  fi
  log "ready ($(health)) on $base_url after $((SECONDS - started))s (pid $(cat "$pid_file"))"
}

status() {
  local status
  status="$(health)"
  if [[ "$status" == green || "$status" == yellow ]]; then
    log "$status on $base_url (pid $(running_pid || echo 'not ours'))"
    return 0
  fi
  log "not healthy on $base_url${status:+ (status $status)}"
  return 1
}

command="${1:-}"
case "$command" in
  start | stop | reset)
    # Two test files may start the node at once: one start (or stop) at a time per port.
    mkdir -p "$cache"
    exec 9>"$cache/.lock-$port"
    flock -w 300 9 || { log "another start/stop holds $cache/.lock-$port for 300s"; exit 1; }
    case "$command" in
      start) start ;;
      stop) stop ;;
      reset) stop; rm -rf "$instance"; log "deleted $instance" ;;
    esac
    ;;
  status) status ;;
  *)
    echo "usage: $0 start|stop|status|reset" >&2
    exit 2
    ;;
esac
