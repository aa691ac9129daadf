#!/bin/bash
# sanitize-graph.sh TOOL OUTDIR: test_graph under compute-sanitizer TOOL
# (memcheck, racecheck, ...), each of its cases in a process of its own, side
# by side (run one after another, racecheck needs more than 15 minutes).
# Prints one line; exits non-zero when a case fails or the tool reports.
# The suite's fault injection fails calls inside captures on purpose, and the
# driver's answer to ending such a capture (CUDA_ERROR_STREAM_CAPTURE_UNJOINED)
# would count as an error here: API errors are the suite's own to check.
set -u
tool=$1; out=$2; here=$(cd "$(dirname "$0")/../.." && pwd)
cases=$(sed -n 's/^ *add_test_case(s, \([a-z_0-9]*\),.*/\1/p' "$here/tests/test_graph.c")
for c in $cases; do
  ( CK_RUN_CASE=$c CK_FORK=no RILL_QUICK=1 timeout "${RILL_SANITIZE_TIMEOUT:-900}" compute-sanitizer --tool "$tool" \
      --report-api-errors no --error-exitcode 99 "$here/build-gpu/tests/test_graph" > "$out/sanitizer-graph-$tool-$c.log" 2>&1
    echo $? > "$out/sanitizer-graph-$tool-$c.rc" ) &
done
wait
n=0; failed=0; bad=""
for c in $cases; do
  n=$((n + 1)); r=$(cat "$out/sanitizer-graph-$tool-$c.rc")
  [ "$r" = 0 ] || { failed=$((failed + 1)); bad="$bad; $c: exit $r ($(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|Checks' "$out/sanitizer-graph-$tool-$c.log" | tr '\n' ' '))"; }
done
summaries=$(cat "$out"/sanitizer-graph-$tool-*.log | grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' | sed 's/=* *//' | sort | uniq -c | sed 's/^ *//' | paste -sd, -)
echo "compute-sanitizer $tool on graph replays: $((n - failed)) of $n cases passed (each alone, side by side; summaries: $summaries)$bad"
[ $failed = 0 ]
