#!/bin/bash
# sanitize-graph.sh TOOL OUTDIR: test_graph under compute-sanitizer TOOL
# (memcheck, racecheck, ...), each of its cases in a process of its own, side
# by side (racecheck of the whole suite in one process had not ended after
# 300 s; each case alone, side by side, took at most 15 s). tests/gpu/run.sh uses it for racecheck; see there about memcheck.
# Prints one line; exits non-zero when a case fails or the tool reports.
# The suite's fault injection fails calls inside captures on purpose, and the
# driver's answer to ending such a capture (CUDA_ERROR_STREAM_CAPTURE_UNJOINED)
# would count as an error here: API errors are the suite's own to check.
set -u
tool=$1; out=$2; here=$(cd "$(dirname "$0")/../.." && pwd)
cases=$(sed -n 's/^ *add_test_case(s, \([a-z_0-9]*\),.*/\1/p' "$here/tests/test_graph.c")
# replay_ends_after_the_device checks the host's ordering with 16 cuBLAS
# matmuls of 2048x2048 a run: under racecheck it had not ended after 280 s,
# and racecheck sees only the library's kernels there (memcheck runs it).
skipped=""
if [ "$tool" = racecheck ]; then cases=$(echo "$cases" | grep -vx replay_ends_after_the_device); skipped=" (replay_ends_after_the_device not run: cuBLAS only, too slow)"; fi
for c in $cases; do
  # --require-cuda-init no: the cases that run on the cpu device only pass too.
  ( t0=$(date +%s)
    CK_RUN_CASE=$c CK_FORK=no RILL_QUICK=1 timeout "${RILL_SANITIZE_TIMEOUT:-900}" compute-sanitizer --tool "$tool" --require-cuda-init no \
      --report-api-errors no --error-exitcode 99 "$here/build-gpu/tests/test_graph" > "$out/sanitizer-graph-$tool-$c.log" 2>&1
    echo "$? $(( $(date +%s) - t0 ))" > "$out/sanitizer-graph-$tool-$c.rc" ) &
done
wait
n=0; failed=0; bad=""; slowest=0
for c in $cases; do
  n=$((n + 1)); read -r r secs < "$out/sanitizer-graph-$tool-$c.rc"; [ "$secs" -gt "$slowest" ] && slowest=$secs
  [ "$r" = 0 ] || { failed=$((failed + 1)); bad="$bad; $c: exit $r in $secs s ($(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|Checks|:[FE]:' "$out/sanitizer-graph-$tool-$c.log" | cut -c1-300 | tr '\n' ' '))"; }
done
summaries=$(cat "$out"/sanitizer-graph-$tool-*.log | grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' | sed 's/=* *//' | sort | uniq -c | sed 's/^ *//' | paste -sd, -)
echo "compute-sanitizer $tool on graph replays: $((n - failed)) of $n cases passed$skipped (each alone, side by side, the slowest $slowest s; summaries: $summaries)$bad"
[ $failed = 0 ]
