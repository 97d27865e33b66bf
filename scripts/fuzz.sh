#!/usr/bin/env bash
# Runs the libFuzzer build of pcast-fuzz on each harness for a number of seconds, growing
# Tests/Corpora/fuzz/<target> in place (RTP and RTCP also start from Tests/Corpora/rtp, rtcp).
# A crash or a broken contract is saved as Tests/Corpora/fuzz/<target>/crash-*, and the run fails.
# PCAST_FUZZ_ONLY="av1 sdp" runs those harnesses alone.
set -uo pipefail
fuzzer=${1:?usage: fuzz.sh <pcast-fuzz built with -sanitize=fuzzer> [seconds]}
seconds=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
corpus="$root/Tests/Corpora/fuzz"
failed=()
for target in ${PCAST_FUZZ_ONLY:-rtp rtcp rtmp amf0 signaling token fmp4 h264 av1 stun sdp scalable}; do
  extra=()
  [ -d "$root/Tests/Corpora/$target" ] && extra=("$root/Tests/Corpora/$target")
  mkdir -p "$corpus/$target"
  before=$(ls "$corpus/$target" | wc -l)
  log=$(mktemp)
  echo "fuzz: $target for ${seconds}s"
  # Swift's own crash reporter would end the process before libFuzzer saves the input: off.
  SWIFT_BACKTRACE=enable=no PCAST_FUZZ_TARGET=$target "$fuzzer" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$corpus/$target/crash-" -print_final_stats=1 "$corpus/$target" "${extra[@]}" \
    > "$log" 2>&1
  status=$?
  after=$(ls "$corpus/$target" | wc -l)
  grep -E "^stat::(number_of_executed_units|new_units_added)" "$log"
  echo "fuzz: $target: exit $status, corpus $before → $after files"
  if [ $status -ne 0 ]; then
    failed+=("$target")
    tail -40 "$log" >&2
  fi
  rm -f "$log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]} (saved as Tests/Corpora/fuzz/<target>/crash-*)" >&2
  exit 1
fi
