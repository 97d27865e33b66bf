#!/usr/bin/env bash
# Publishes a test pattern and a tone to a PCast platform with gst-launch-1.0 and our pcastsink
# element: no Swift, no code, one pipeline description. Runs until Ctrl-C (gst-launch's -e sends
# EOS first, so the stream ends as `ended` for its viewers) or for the seconds given.
#
#   GST_PLUGIN_PATH=/path/to/.build/release PCAST_SERVER=ws://127.0.0.1:8080/ws \
#   PCAST_AUTH_TOKEN=… PCAST_PUBLISH_TOKEN=… bash publish.sh [seconds] [channel alias]
set -euo pipefail
: "${PCAST_SERVER:?set PCAST_SERVER (ws://host:port/ws)}"
: "${PCAST_AUTH_TOKEN:?set PCAST_AUTH_TOKEN}"
: "${PCAST_PUBLISH_TOKEN:?set PCAST_PUBLISH_TOKEN}"
seconds=${1:-0}
alias=${2:-example}
# 30 frames a second: num-buffers makes the pattern end, and EOS ends the stream, after `seconds`.
buffers=-1
[ "$seconds" -gt 0 ] && buffers=$((seconds * 30))

# -m prints pcastsink's messages: pcast-stream-published (with the stream id), pcast-stream-ended.
exec gst-launch-1.0 -m -e \
  videotestsrc is-live=true num-buffers="$buffers" pattern=smpte \
    ! video/x-raw,width=640,height=360,framerate=30/1 \
    ! pcastsink name=publisher server="$PCAST_SERVER" auth-token="$PCAST_AUTH_TOKEN" \
        token="$PCAST_PUBLISH_TOKEN" tags="channelAlias:$alias" \
  audiotestsrc is-live=true wave=sine freq=440 \
    ! audio/x-raw,rate=48000,channels=2 \
    ! publisher.audio
