#!/usr/bin/env bash
# Checks tools/heartbeat.sh (test-structure): into a pipe, a quiet step gets a line per interval
# and the step's exit status comes back; its own output passes through unchanged.
set -uo pipefail
out=$(HEARTBEAT_EVERY=1 bash tools/heartbeat.sh "a quiet step" bash -c 'echo started; sleep 3.5; exit 3' | cat)
rc=$?
beats=$(grep -c '^  \.\.\. a quiet step: still running' <<<"$out")
if [[ $rc != 3 || $beats -lt 2 || $(head -n 1 <<<"$out") != started ]]; then
  echo "heartbeat: expected 'started', 2 or more beats and exit status 3; got status $rc and:"
  echo "$out"
  exit 1
fi
echo "heartbeat: $beats lines in a 3.5 s quiet step, its exit status kept"
