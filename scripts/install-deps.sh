#!/usr/bin/env bash
# Install everything the test suites need; safe to run again (each step skips what is already there).
#
#   bash scripts/install-deps.sh                 # every step
#   bash scripts/install-deps.sh python java-client   # only these steps
#
# Steps: system (apt: kcat, Java 17, Maven, a C compiler and Python's headers), python (pip install -e '.[test]'),
#        java-client (build compat_tests/java/target/compat-client.jar),
#        streams-client (build compat_tests/streams/target/streams-wordcount.jar: Kafka Streams 4.3.1),
#        apache-kafka (resolve the reference Apache Kafka jars for compat_tests/reference, and the
#        kafka-tools jars for bench/compare.py),
#        zookeeper (resolve Apache ZooKeeper 3.9.5 for cluster mode: zookeeper.connect, the cluster tests;
#        $ZOOKEEPER_HOME or Debian's zookeeper package are used when Maven cannot resolve it),
#        go-client (apt golang-go if there is no go; build compat_tests/go into .cache/go-bin/compat-go,
#        modules from the Go module proxy cached in .cache/gomod; an older go fetches the go.mod toolchain),
#        spark (pip install '.[spark]' and resolve the Spark kafka connector into .cache/ivy),
#        browser (apt: Debian's chromium and chromium-driver, for the web console's browser tests).
# Maven resolves into the project-local repository .cache/m2 (override with PYBROKER_MAVEN_REPO).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
MAVEN_REPO="${PYBROKER_MAVEN_REPO:-$ROOT/.cache/m2}"

log() { printf '[install-deps] %s\n' "$*"; }

# Each step runs with its output captured: on success it prints one line (its last `note`, if any, and
# its time); on failure the captured output (colour escapes removed) and the exit status, then stops.
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
note() { printf '%s\n' "$*" >"$WORK/note"; }

run_step() {
  local name="$1" started status=0
  started=$(date +%s)
  : >"$WORK/note"
  set +e
  ( set -e; "step_${name//-/_}" ) >"$WORK/output" 2>&1 </dev/null
  status=$?
  set -e
  local elapsed=$(($(date +%s) - started)) summary
  summary="$(cat "$WORK/note")"
  if [ "$status" -ne 0 ]; then
    log "step $name FAILED (exit $status after ${elapsed}s); its output:"
    sed -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' "$WORK/output" >&2
    exit "$status"
  fi
  log "$name: ${summary:-done} (${elapsed}s)"
}

apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    log "not root: please install these packages yourself: $*"
    return 1
  fi
  # Steps run in subshells, so "apt-get update already ran" is a file, not a variable.
  if [ ! -e "$WORK/apt-updated" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    touch "$WORK/apt-updated"
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

java_major_version() {
  java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p'
}

step_system() {
  local missing=()
  command -v kcat >/dev/null 2>&1 || missing+=(kcat)
  if ! command -v java >/dev/null 2>&1 || [ "$(java_major_version)" -lt 17 ]; then
    missing+=(openjdk-17-jdk-headless)
  fi
  command -v mvn >/dev/null 2>&1 || missing+=(maven)
  # A C compiler and Python's headers build pybroker.records._walk (setup.py) at pip install -e .
  command -v cc >/dev/null 2>&1 || missing+=(gcc)
  "$PYTHON" -c 'import os, sysconfig, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)' \
    || missing+=(python3-dev)
  if [ "${#missing[@]}" -gt 0 ]; then
    apt_install "${missing[@]}"
    note "installed ${missing[*]}"
  else
    note "kcat, java $(java_major_version), mvn already installed"
  fi
}

step_python() {
  local extra=()
  # A distribution Python marked externally managed (PEP 668) refuses plain pip installs; this
  # machine's test dependencies belong to it, so say so explicitly there and nowhere else.
  if "$PYTHON" -c 'import os, sys, sysconfig; sys.exit(0 if sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
    extra+=(--break-system-packages)
  fi
  "$PYTHON" -m pip install -q "${extra[@]}" -e '.[test]'
  # The C record walk is optional to install (no compiler: the Python walk answers alike) but CI must have it.
  "$PYTHON" -c 'import pybroker.records._walk' \
    || { echo "pybroker.records._walk was not built (is there a C compiler?)" >&2; exit 1; }
  note "pip install -e '.[test]' (C record walk built)"
}

step_java_client() {
  local jar=compat_tests/java/target/compat-client.jar
  if [ -f "$jar" ] && [ -z "$(find compat_tests/java/pom.xml compat_tests/java/src -newer "$jar" -print -quit)" ]; then
    note "$jar is up to date"
    return
  fi
  (cd compat_tests/java && mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$MAVEN_REPO" package -DskipTests)
  test -f "$jar"
  note "built $jar"
  # kafka-clients 4.3.1 (KafkaShareConsumer for the share-group scenario); the adapter rebuilds it when stale
  (cd compat_tests/java && mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$MAVEN_REPO" -Pkafka43 package -DskipTests)
  note "built compat_tests/java/target/compat-client-43.jar"
}

step_streams_client() {
  local jar=compat_tests/streams/target/streams-wordcount.jar
  if [ -f "$jar" ] && [ -z "$(find compat_tests/streams/pom.xml compat_tests/streams/src -newer "$jar" -print -quit)" ]; then
    note "$jar is up to date"
    return
  fi
  (cd compat_tests/streams && mvn -B -q -Dstyle.color=never -Dmaven.repo.local="$MAVEN_REPO" package -DskipTests)
  test -f "$jar"
  note "built $jar"
}

step_apache_kafka() {
  "$PYTHON" -m compat_tests.reference.apache_kafka install
  # Kafka's own load tools (ProducerPerformance, ...) for python -m bench.compare.
  "$PYTHON" -m bench.kafka_tools install
  note "Apache Kafka reference and kafka-tools jars resolved"
}

step_zookeeper() {
  "$PYTHON" -m pybroker.controller.zookeeper_server install
  note "Apache ZooKeeper server jars resolved"
}

step_go_client() {
  if ! command -v go >/dev/null 2>&1; then
    apt_install golang-go ca-certificates
  fi
  local binary
  binary="$(GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" "$PYTHON" -c 'from compat_tests.go.adapter import ensure_binary; print(ensure_binary())')"
  note "Go compat client ready: ${binary##*$'\n'}"
}

step_spark() {
  # PySpark 4.0.0: the newest whose kafka connector dependencies are all on Maven Central from here.
  local extra=()
  if "$PYTHON" -c 'import os, sys, sysconfig; sys.exit(0 if sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)'; then
    extra+=(--break-system-packages)
  fi
  "$PYTHON" -m pip install -q "${extra[@]}" -e '.[spark]'
  # Resolves spark-sql-kafka-0-10 into the Ivy cache .cache/ivy (offline on the next run).
  "$PYTHON" -m spark_examples.common
  note "pyspark installed, Spark kafka connector resolved"
}

step_browser() {
  if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    note "chromium and chromedriver already installed"
    return
  fi
  apt_install chromium chromium-driver
  note "installed chromium chromium-driver"
}

main() {
  local steps=("$@")
  if [ "${#steps[@]}" -eq 0 ]; then
    steps=(system python java-client streams-client apache-kafka zookeeper go-client spark browser)
  fi
  for step in "${steps[@]}"; do
    case "$step" in
      system | python | java-client | streams-client | apache-kafka | zookeeper | go-client | spark | browser) run_step "$step" ;;
      *) log "unknown step: $step (steps: system python java-client streams-client apache-kafka zookeeper go-client spark browser)"; exit 2 ;;
    esac
  done
}

main "$@"
