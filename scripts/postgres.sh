#!/usr/bin/env bash
# A throwaway PostgreSQL server for a cluster of pcast nodes (make demo-cluster) and the tests:
# initdb into a folder, one loopback port, trust authentication for the role `pcast`, a database
# `pcast`. PostgreSQL refuses to run as root; as root the server runs as the `postgres` system user.
#
#   scripts/postgres.sh start DIR PORT [WATCH_PID] [ADDRESS...]
#                                                   prints postgres://pcast@127.0.0.1:PORT/pcast
#                                                   (WATCH_PID: stop the server when that process exits;
#                                                   ADDRESS: also listen there, and trust clients of
#                                                   its /24: nodes in network namespaces of a test)
#   scripts/postgres.sh stop DIR                     stops it (fast shutdown) and removes DIR
#   scripts/postgres.sh restart DIR                  stops and starts it again on the same port, data kept
#   scripts/postgres.sh pause DIR / resume DIR       stops it, data kept / starts it again
#
# Exit status 3: PostgreSQL is not installed (scripts/setup.sh installs it).
set -euo pipefail

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
  echo "postgres.sh: PostgreSQL is not installed (scripts/setup.sh installs Debian's postgresql)" >&2
  exit 3
fi

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_server() {
  local dir=$1
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-c listen_addresses=$(cat "$dir/listen") -p $(cat "$dir/port") -k $dir -c max_connections=200" start >/dev/null
}

stop_server() {
  local dir=$1
  [ -d "$dir/data" ] || return 0
  as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
}

command=${1:-}
case "$command" in
  start)
    dir=${2:?DIR}; port=${3:?PORT}; watch=${4:-}
    extra=("${@:5}")
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then chown postgres "$dir"; fi
    echo "$port" > "$dir/port"
    listen=127.0.0.1
    for address in "${extra[@]}"; do
      [[ $address =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "postgres.sh: $address is not an IPv4 address" >&2; exit 2; }
      listen="$listen,$address"
    done
    echo "$listen" > "$dir/listen"
    as_owner "$bin/initdb" -D "$dir/data" -U pcast --auth=trust -E UTF8 --no-locale --no-sync >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    for address in "${extra[@]}"; do
      echo "host all pcast ${address%.*}.0/24 trust" >> "$dir/data/pg_hba.conf"
    done
    start_server "$dir" || { cat "$dir/server.log" >&2; exit 1; }
    "$bin/psql" -h 127.0.0.1 -p "$port" -U pcast -d postgres -qAt -c "CREATE DATABASE pcast" >/dev/null
    if [ -n "$watch" ]; then
      # Outlives this script, not the process it watches.
      setsid bash -c "while kill -0 $watch 2>/dev/null; do sleep 1; done; '$0' stop '$dir'" </dev/null >/dev/null 2>&1 &
    fi
    echo "postgres://pcast@127.0.0.1:$port/pcast"
    ;;
  stop)
    dir=${2:?DIR}
    stop_server "$dir"
    rm -rf "$dir"
    ;;
  restart)
    dir=${2:?DIR}
    stop_server "$dir"
    start_server "$dir" || { cat "$dir/server.log" >&2; exit 1; }
    ;;
  pause)
    stop_server "${2:?DIR}"
    ;;
  resume)
    dir=${2:?DIR}
    start_server "$dir" || { cat "$dir/server.log" >&2; exit 1; }
    ;;
  *)
    echo "usage: $0 start DIR PORT [WATCH_PID] | stop DIR | restart DIR | pause DIR | resume DIR" >&2
    exit 2
    ;;
esac
