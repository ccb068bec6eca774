#!/usr/bin/env bash
# A local Citus cluster on this machine's Debian PostgreSQL 15: one coordinator and N
# workers on loopback ports, run as the postgres OS user (citus must be installed:
# ci/citus/build.sh). Data lives in $CITUS_DIR (default: cwstore-citus under $TMPDIR or
# /tmp). Used by .ci/run's Citus tier, on ports (9800..) apart from a cluster of one's own.
#
#   cluster.sh start [WORKERS]   start (or reuse) it; default 2 workers; coordinator on
#                                $CITUS_PORT (default 9800), workers on the next ports
#   cluster.sh createdb NAME     a database on every node with citus, workers registered;
#                                prints its coordinator DSN
#   cluster.sh dropdb NAME       drop it on every node
#   cluster.sh stop              stop every node (data kept)
#   cluster.sh dsn               the coordinator's DSN for database postgres
set -euo pipefail
BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
DIR=${CITUS_DIR:-${TMPDIR:-/tmp}/cwstore-citus}
BASE=${CITUS_PORT:-9800}
cmd=${1:-start}
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
nodes() { for d in "$DIR"/n*; do [ -f "$d/PG_VERSION" ] && sed -n 's/^port = //p' "$d/postgresql.conf" | tail -n 1; done; }
sql() { PGOPTIONS="-c client_min_messages=warning" psql -qXtA -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$1" -U postgres -d "$2" -c "$3"; }
register() {  # database: citus on every node, workers added on the coordinator
  for p in $(nodes); do sql "$p" "$1" "CREATE EXTENSION IF NOT EXISTS citus" >/dev/null; done
  sql "$BASE" "$1" "SELECT citus_set_coordinator_host('127.0.0.1', $BASE)" >/dev/null
  for p in $(nodes); do
    [ "$p" = "$BASE" ] && continue
    sql "$BASE" "$1" "SELECT citus_add_node('127.0.0.1', $p) WHERE NOT EXISTS (SELECT 1 FROM pg_dist_node WHERE nodeport = $p)" >/dev/null
  done
}
case "$cmd" in
  start)
    n=${2:-2}
    [ -f "$BIN/../lib/citus.so" ] || { echo "citus is not installed: run ci/citus/build.sh first" >&2; exit 1; }
    mkdir -p "$DIR"; chown postgres "$DIR" 2>/dev/null || true
    for i in $(seq 0 "$n"); do
      port=$((BASE + i)); d=$DIR/n$i
      if [ ! -f "$d/PG_VERSION" ]; then
        as_pg "$BIN/initdb" -D "$d" -U postgres --auth=trust >/dev/null
        cat >>"$d/postgresql.conf" <<CONF
shared_preload_libraries = 'citus'
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$DIR'
max_connections = 300
CONF
      fi
      as_pg "$BIN/pg_ctl" -D "$d" status >/dev/null 2>&1 || as_pg "$BIN/pg_ctl" -D "$d" -l "$d/log" -w start >/dev/null
    done
    register postgres
    echo "postgresql://postgres@127.0.0.1:$BASE/postgres"
    ;;
  createdb)
    name=${2:?usage: cluster.sh createdb NAME}
    for p in $(nodes); do sql "$p" postgres "CREATE DATABASE \"$name\"" >/dev/null 2>&1 || true; done
    register "$name"
    echo "postgresql://postgres@127.0.0.1:$BASE/$name"
    ;;
  dropdb)
    name=${2:?usage: cluster.sh dropdb NAME}
    for p in $(nodes); do sql "$p" postgres "DROP DATABASE IF EXISTS \"$name\" WITH (FORCE)" >/dev/null 2>&1 || true; done
    ;;
  stop)
    for d in "$DIR"/n*; do [ -f "$d/PG_VERSION" ] && as_pg "$BIN/pg_ctl" -D "$d" -m fast stop >/dev/null 2>&1 || true; done
    ;;
  dsn) echo "postgresql://postgres@127.0.0.1:$BASE/postgres" ;;
  *) echo "usage: cluster.sh start [workers] | createdb NAME | dropdb NAME | stop | dsn" >&2; exit 2 ;;
esac
