#!/usr/bin/env bash
# Proves another package can depend on PCastKit: builds Examples/PublishTestPattern against a git
# URL with a version (a tagged bare clone of this working tree, as it is now), then runs it against
# a `pcast serve` of this build: it publishes a test pattern and a viewer must see 30 frames of it.
# Run by `make test` after the main build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pcast="$root/.build/debug/pcast"
[ -x "$pcast" ] || { echo "example: $pcast is missing (run swift build first)" >&2; exit 1; }
work=$(mktemp -d)
server_pid=
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The working tree as git sees it (tracked and untracked-but-not-ignored files that exist), committed
# and tagged in a repository of its own, then cloned bare: what a package manager fetches.
mkdir "$work/src"
(cd "$root" && git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' file; do [ -e "$file" ] || [ -L "$file" ] && printf '%s\0' "$file"; done \
  | xargs -0 cp -P --parents -t "$work/src")
git -C "$work/src" init -q
git -C "$work/src" add -A
git -C "$work/src" -c user.name=example -c user.email=example@localhost commit -qm "PCastKit working tree"
git -C "$work/src" tag 0.1.0
git clone -q --bare "$work/src" "$work/PCastKit.git"

cp -R "$root/Examples/PublishTestPattern" "$work/example"
rm -rf "$work/example/.build"
echo "example: building Examples/PublishTestPattern against file://$work/PCastKit.git from 0.1.0"
(cd "$work/example" && PCASTKIT_GIT_URL="file://$work/PCastKit.git" swift build)

mkdir "$work/data"
PCAST_SECRET=example-secret "$pcast" serve --application-id example --host 127.0.0.1 --http-port 0 --media-port 0 --no-rtmp \
  --data-dir "$work/data" > "$work/serve.out" 2>&1 &
server_pid=$!
url=
for _ in $(seq 1 200); do
  url=$(grep -o 'ws://[^ ,]*' "$work/serve.out" | head -1 || true)
  [ -n "$url" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.out" >&2; echo "example: pcast serve exited" >&2; exit 1; }
  sleep 0.05
done
[ -n "$url" ] || { echo "example: pcast serve printed no signaling URL" >&2; exit 1; }
token() { "$pcast" token create --application-id example --secret example-secret --expires-in 600 "$@"; }
PCAST_SERVER="$url" \
PCAST_AUTH_TOKEN=$(token --type auth) \
PCAST_PUBLISH_TOKEN=$(token --type publish --channel-alias example) \
PCAST_STREAM_TOKEN=$(token --type stream --channel-alias example) \
  "$work/example/.build/debug/PublishTestPattern"
