#!/usr/bin/env bash
# The examples (Examples/*), each run against a `pcast serve` of this build, as a user would run them.
# Run by `make test` after the main build, which built the plugin (libgstpcast.so) beside pcast.
#   - The Swift examples' package builds against a git URL with a version (a tagged bare clone of
#     this working tree, as it is now): another package can depend on PCastKit.
#   - PublishTestPattern: publishes a test pattern; its own viewer must see 30 frames of it.
#   - GstLaunchPublish: gst-launch-1.0 with pcastsink publishes 640x360 to the channel "window".
#   - WatchInWindow: renders that stream into its own window on a private Xvfb display; the window's
#     pixels, grabbed by GStreamer's ximagesrc, must show the test pattern's colour bars.
#   - PythonViewer: a python3-gi application with pcastsrc receives 60 frames of 640x360 of it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pcast="$root/.build/debug/pcast"
[ -x "$pcast" ] || { echo "examples: $pcast is missing (run swift build first)" >&2; exit 1; }
[ -f "$root/.build/debug/libgstpcast.so" ] || { echo "examples: libgstpcast.so is missing (swift build builds it)" >&2; exit 1; }
fail() { echo "examples: $*" >&2; exit 1; }
work=$(mktemp -d)
server_pid= publisher_pid= viewer_pid= xvfb_pid=
cleanup() {
  for pid in $viewer_pid $publisher_pid $server_pid $xvfb_pid; do
    kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  done
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

# EXAMPLES_BIN: the Swift examples' build folder from an earlier run, for a quicker rerun by hand.
bin=${EXAMPLES_BIN:-$work/examples/.build/debug}
if [ -z "${EXAMPLES_BIN:-}" ]; then
  cp -R "$root/Examples" "$work/examples"
  rm -rf "$work/examples/.build"
  echo "examples: building Examples (PublishTestPattern, WatchInWindow) against file://$work/PCastKit.git from 0.1.0"
  (cd "$work/examples" && PCASTKIT_GIT_URL="file://$work/PCastKit.git" swift build)
fi

mkdir "$work/data"
PCAST_SECRET=example-secret "$pcast" serve --application-id example --host 127.0.0.1 --http-port 0 --media-port 0 --no-rtmp \
  --data-dir "$work/data" > "$work/serve.out" 2>&1 &
server_pid=$!
url=
for _ in $(seq 1 200); do
  url=$(grep -o 'ws://[^ ,]*' "$work/serve.out" | head -1 || true)
  [ -n "$url" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/serve.out" >&2; fail "pcast serve exited"; }
  sleep 0.05
done
[ -n "$url" ] || fail "pcast serve printed no signaling URL"
token() { "$pcast" token create --application-id example --secret example-secret --expires-in 600 "$@"; }
export PCAST_SERVER="$url" PCAST_AUTH_TOKEN
PCAST_AUTH_TOKEN=$(token --type auth)

# waits up to $3 seconds for the extended regular expression $2 in the file $1.
wait_for() {
  for _ in $(seq 1 $(($3 * 10))); do grep -Eqs "$2" "$1" && return 0; sleep 0.1; done
  return 1
}

echo "examples: PublishTestPattern"
PCAST_PUBLISH_TOKEN=$(token --type publish --channel-alias example) \
PCAST_STREAM_TOKEN=$(token --type stream --channel-alias example) \
  "$bin/PublishTestPattern"

echo "examples: GstLaunchPublish (gst-launch-1.0 with pcastsink)"
export GST_PLUGIN_PATH="$root/.build/debug" GST_REGISTRY="$work/registry.bin"
PCAST_PUBLISH_TOKEN=$(token --type publish --channel-alias window) \
  bash "$root/Examples/GstLaunchPublish/publish.sh" 60 window > "$work/publish.out" 2>&1 &
publisher_pid=$!
wait_for "$work/publish.out" 'pcast-stream-published' 30 || { cat "$work/publish.out" >&2; fail "pcastsink did not publish"; }
stream_token=$(token --type stream --channel-alias window)

echo "examples: WatchInWindow (a window on a private Xvfb display)"
exec 3> "$work/display"
Xvfb -displayfd 3 -screen 0 1280x720x24 -nolisten tcp > "$work/xvfb.out" 2>&1 &
xvfb_pid=$!
exec 3>&-
wait_for "$work/display" '^[0-9]+$' 10 || fail "Xvfb printed no display number"
display=":$(head -1 "$work/display")"
DISPLAY="$display" PCAST_AUDIO=off PCAST_STREAM_TOKEN="$stream_token" \
  "$bin/WatchInWindow" 20 > "$work/window.out" 2>&1 &
viewer_pid=$!
wait_for "$work/window.out" '^window 0x[0-9a-f]+$' 30 || { cat "$work/window.out" >&2; fail "no window"; }
wait_for "$work/window.out" '^[1-9][0-9]+ frames shown, 640x360' 30 || { cat "$work/window.out" >&2; fail "no frames shown in the window"; }
window=$(grep -Eo '^window 0x[0-9a-f]+$' "$work/window.out" | head -1 | cut -d' ' -f2)
# The window's own pixels, scaled to 64x36 RGB: the colour bars of videotestsrc's smpte pattern,
# not a black or blank window.
gst-launch-1.0 -q ximagesrc display-name="$display" xid="$window" num-buffers=1 use-damage=false \
  ! videoconvert ! videoscale ! video/x-raw,format=RGB,width=64,height=36 ! filesink location="$work/window.rgb" \
  || { cat "$work/window.out" >&2; fail "could not grab window $window"; }
python3 - "$work/window.rgb" <<'PY' || fail "the window does not show the test pattern"
import sys
pixels = open(sys.argv[1], "rb").read()
assert len(pixels) == 64 * 36 * 3, f"{len(pixels)} bytes"
colours = {tuple(c >> 6 for c in pixels[i:i + 3]) for i in range(0, len(pixels), 3)}
mean = sum(pixels) / len(pixels)
print(f"examples: the window shows {len(colours)} coarse colours, mean level {mean:.0f}")
sys.exit(0 if len(colours) >= 6 and mean > 40 else 1)
PY

echo "examples: PythonViewer (python3-gi with pcastsrc)"
result=$(PCAST_STREAM_TOKEN="$stream_token" timeout 60 /usr/bin/python3 "$root/Examples/PythonViewer/view.py" 60) \
  || { echo "$result" >&2; fail "the Python viewer failed"; }
echo "$result"
echo "$result" | grep -q '^60 frames of 640x360$' || fail "the Python viewer did not receive 60 frames of 640x360"

wait "$viewer_pid" || { cat "$work/window.out" >&2; fail "WatchInWindow exited with an error"; }
viewer_pid=
tail -1 "$work/window.out"
kill -INT "$publisher_pid"
wait "$publisher_pid" || true
publisher_pid=
grep -q 'pcast-stream-ended' "$work/publish.out" || { cat "$work/publish.out" >&2; fail "the gst-launch publisher did not end its stream"; }
echo "examples: all passed"
