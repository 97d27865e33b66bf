#!/usr/bin/env bash
# A cluster of pcast nodes on one machine: a throwaway PostgreSQL (scripts/postgres.sh) and N
# `pcast serve` nodes on 127.0.0.2, 127.0.0.3, … sharing it. `make demo-cluster` runs `demo`.
#
#   scripts/cluster.sh start DIR [NODES]   starts them; DIR/nodes lists "id http-url" per node
#   scripts/cluster.sh stop DIR            stops every node and the database, removes DIR
#   scripts/cluster.sh demo                start, a room and chat across the nodes, kill -9 of one, stop
#
# PCAST (default .build/release/pcast) is the binary; PCAST_SECRET the application secret.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
pcast=${PCAST:-$here/../.build/release/pcast}
secret=${PCAST_SECRET:-cluster-demo-secret}
application=${PCAST_APPLICATION_ID:-pcast}
base_port=${PCAST_CLUSTER_PORT:-18080}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

start() {
  local dir=$1 count=${2:-3}
  mkdir -p "$dir"
  local url
  url=$("$here/postgres.sh" start "$dir/postgres" "$(free_port)" $$)
  echo "$url" > "$dir/database"
  : > "$dir/nodes"
  for index in $(seq 1 "$count"); do
    local host="127.0.0.$((index + 1))" port=$((base_port + index))
    PCAST_SECRET=$secret "$pcast" serve --application-id "$application" --host "$host" --http-port "$port" --media-port 0 \
      --no-rtmp --data-dir "$dir/node-$index" --database "$url" --node-id "node-$index" >"$dir/node-$index.log" 2>&1 &
    echo $! > "$dir/node-$index.pid"
    echo "node-$index http://$host:$port" >> "$dir/nodes"
  done
  while read -r id http; do
    for _ in $(seq 1 100); do
      curl -sf "$http/readyz" >/dev/null 2>&1 && break
      sleep 0.1
    done
    curl -sf "$http/readyz" >/dev/null || { echo "cluster: $id did not get ready:" >&2; cat "$dir/$id.log" >&2; exit 1; }
  done < "$dir/nodes"
  # The watcher of scripts/postgres.sh follows this shell; a long-lived cluster needs its own.
  setsid bash -c "while kill -0 $(head -1 "$dir/node-1.pid") 2>/dev/null; do sleep 1; done; '$here/postgres.sh' stop '$dir/postgres'" \
    </dev/null >/dev/null 2>&1 &
  echo "cluster: database $url"
  cat "$dir/nodes"
}

stop() {
  local dir=$1
  for pidfile in "$dir"/node-*.pid; do
    [ -f "$pidfile" ] && kill -INT "$(cat "$pidfile")" 2>/dev/null || true
  done
  for pidfile in "$dir"/node-*.pid; do
    [ -f "$pidfile" ] || continue
    for _ in $(seq 1 50); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$(cat "$pidfile")" 2>/dev/null || true
  done
  "$here/postgres.sh" stop "$dir/postgres"
  rm -rf "$dir"
}

demo() {
  demo_dir=$(mktemp -d /tmp/pcast-cluster-XXXXXX)
  # PostgreSQL runs as the postgres user when root: it must reach the folder.
  chmod 755 "$demo_dir"
  trap 'stop "$demo_dir"' EXIT
  local dir=$demo_dir
  start "$dir" 3
  mapfile -t urls < <(awk '{print $2}' "$dir/nodes")
  token() { "$pcast" token create --application-id "$application" --secret "$secret" --expires-in 600 --type auth; }
  echo "--- a room created on node 1"
  "$pcast" room create --server "${urls[0]}" --auth-token "$(token)" --name "Across the cluster" --alias across
  echo "--- chat sent through node 2 and node 3"
  "$pcast" chat send --server "${urls[1]}" --auth-token "$(token)" --alias across --message "hello from node 2" --screen-name two
  "$pcast" chat send --server "${urls[2]}" --auth-token "$(token)" --alias across --message "hello from node 3" --screen-name three
  echo "--- history read on node 1"
  "$pcast" chat history --server "${urls[0]}" --auth-token "$(token)" --alias across
  echo "--- the nodes node 1 sees"
  curl -s -u "$application:$secret" "${urls[0]}/admin/nodes"; echo
  echo "--- kill -9 of node 3; 4 s later node 1 sees"
  kill -KILL "$(cat "$dir/node-3.pid")"
  sleep 4
  curl -s -u "$application:$secret" "${urls[0]}/admin/nodes"; echo
}

case "${1:-}" in
  start) start "${2:?DIR}" "${3:-3}" ;;
  stop) stop "${2:?DIR}" ;;
  demo) demo ;;
  *) echo "usage: $0 start DIR [NODES] | stop DIR | demo" >&2; exit 2 ;;
esac
