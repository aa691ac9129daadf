#!/bin/bash
# check_gpu.sh: before bench/serve/run.sh, a functional check of rill serve
# on cuda (what CI cannot run): the staged path (inputs and results in
# pinned, mapped host memory: the graph's input copy reads it, the run's
# result copy writes it) and the generate endpoint.
#
#   bash bench/serve/check_gpu.sh [BUILD_DIR]     (default build-gpu, built with -Dcuda=enabled)
#
# 1. test_graph's invoke_into_host_memory on cuda (host memory in and out,
#    replayed, padded to a bucket, interpreted; bit for bit against
#    rill_vm_invoke).
# 2. rill serve --device=cuda: a model's start must not print "host memory
#    failed" (its probe of the staged path at the start); the load test's
#    240 requests each checked against rill run (cpu).
# 3. rill serve --device=cuda --http-threads=4: 600 requests from 32
#    clients (tests/serve_client.py mtload), each answer its own rows, the
#    requests decoded by their HTTP thread into the pinned batches, runs of
#    requests alone on the HTTP threads' own loops.
# 4. With numpy: a tiny Llama folder served on cuda, 20 generations checked
#    against rill llm (cpu), as tests/test_serve.sh does on cpu.
set -u
build=${1:-build-gpu}
here=$(cd "$(dirname "$0")/../.." && pwd)
rill=$build/tools/rill
fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
CK_RUN_CASE=invoke_into_host_memory "$build/tests/test_graph" 2>&1 | tail -2 | tee "$tmp/g"
grep -q "Failures: 0, Errors: 0" "$tmp/g" && ! grep -q "cuda skipped" "$tmp/g" || { echo "FAIL: invoke_into_host_memory on cuda"; fail=1; }
cat > "$tmp/mlp.vmasm" << 'X'
dim B in [1, 64]
const %w : f32[3,4] = [0.5, -1, 0.25, 2, 1, 1, -0.5, 0, -2, 0.75, 1.5, -1]
const %b : f32[3] = [0.1, -0.2, 0.3]
func @main(%x: f32[B,4]) -> (f32[B,3], i64[B]) {
  %h = linear(%x, %w, %b)
  %y = relu(%h)
  %c = argmax(%y) {axis=1}
  return %y, %c
}
X
serve() { # serve NAME PORT ARGS...
  local name=$1 port=$2; shift 2
  "$rill" serve "$@" --device=cuda --port="$port" > "$tmp/$name.out" 2> "$tmp/$name.err" &
  spid=$!
  for _ in $(seq 600); do grep -q listening "$tmp/$name.out" && break; kill -0 $spid 2> /dev/null || break; sleep 0.2; done
  cat "$tmp/$name.err"
  if grep -q "host memory failed" "$tmp/$name.err"; then echo "FAIL: the staged path failed its probe on cuda"; fail=1; fi
}
serve mlp 18555 "$tmp/mlp.vmasm"
python3 "$here/tests/serve_client.py" load 18555 "$rill" "$tmp/mlp.vmasm" 240 24 || fail=1
kill -TERM $spid; wait $spid || { echo "FAIL: exit after SIGTERM"; fail=1; }
serve rows 18557 "rows=$here/tests/fixtures/serve_rows.vmasm" --http-threads=4 --batch-delay-us=2000
python3 "$here/tests/serve_client.py" mtload 18557 rows 600 32 4 || fail=1
curl -s http://127.0.0.1:18557/metrics | grep -E '^rill_serve_(lane_runs|filled_requests|runs)_total'
kill -TERM $spid; wait $spid || { echo "FAIL: exit after SIGTERM"; fail=1; }
if ${PYTHON:-python3} -c 'import numpy' 2> /dev/null; then
  ${PYTHON:-python3} "$here/tests/llm_ref.py" make "$tmp/tiny" llama
  serve tiny 18556 "$tmp/tiny" --max-tokens=12 --max-prompt=20 --instances=2
  python3 "$here/tests/serve_client.py" generate 18556 "$rill" "$tmp/tiny" 20 2 || fail=1
  kill -TERM $spid; wait $spid || { echo "FAIL: exit after SIGTERM"; fail=1; }
else
  echo "generation part skipped: no numpy"
fi
[ $fail = 0 ] && echo "check_gpu: all passed" || echo "check_gpu: FAILED"
exit $fail
