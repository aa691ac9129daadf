#!/bin/bash
# test_serve.sh RILL TESTS_DIR: `rill serve` on the cpu device, on free
# loopback ports: every KServe v2 endpoint with curl, JSON and binary tensors
# of every dtype, every error status, limits (queue, deadline, body size,
# slow and idle connections), a load test whose every answer is checked
# against `rill run` of the same rows, a fuzzer, and SIGTERM's drain
# (tests/serve_client.py does the Python parts).
rill=$1; here=$2
client="python3 $here/serve_client.py"
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2> /dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
. "$here/shell_checks.sh"

if ! command -v curl > /dev/null || ! command -v python3 > /dev/null; then echo "skipped: needs curl and python3"; exit 77; fi
"$rill" serve "$tmp/none.vmasm" > "$tmp/probe.out" 2>&1
if grep -q "built without h2o" "$tmp/probe.out"; then echo "skipped: $(cat "$tmp/probe.out")"; exit 77; fi

cat > "$tmp/mlp.vmasm" << 'EOF'
dim B in [1, 64]
const %w : f32[3,4] = [0.5, -1, 0.25, 2, 1, 1, -0.5, 0, -2, 0.75, 1.5, -1]
const %b : f32[3] = [0.1, -0.2, 0.3]
func @main(%x: f32[B,4]) -> (f32[B,3], i64[B]) {
  %h = linear(%x, %w, %b)
  %y = relu(%h)
  %c = argmax(%y) {axis=1}
  return %y, %c
}
EOF
cat > "$tmp/dtypes.vmasm" << 'EOF'
dim B in [1, 16]
func @main(%a: i8[B,2], %b: u8[B,2], %c: i32[B,2], %d: i64[B,2], %e: f16[B,2], %f: bf16[B,2], %g: f64[B,2], %h: bool[B,2], %k: f32[B,2]) -> (i8[B,2], u8[B,2], i32[B,2], i64[B,2], f16[B,2], bf16[B,2], f64[B,2], bool[B,2], f32[B,2]) {
  %a2 = add(%a, 1)
  %b2 = mul(%b, 2)
  %c2 = sub(%c, 3)
  %d2 = add(%d, %d)
  %e2 = mul(%e, 2)
  %f2 = add(%f, 1)
  %g2 = mul(%g, 0.5)
  %h2 = logical_not(%h)
  %k2 = neg(%k)
  return %a2, %b2, %c2, %d2, %e2, %f2, %g2, %h2, %k2
}
EOF
# two shape variables: requests join along B only with those of the same S
cat > "$tmp/twice.vmasm" << 'EOF'
dim B in [1, 16]
dim S in [1, 8]
func @main(%x: f32[B,S]) -> f32[B,S] {
  %y = mul(%x, 2)
  return %y
}
EOF
# gathers at the indexes it is given: an index out of range fails the run
cat > "$tmp/gather.vmasm" << 'EOF'
func @main(%x: f32[4], %i: i64[2]) -> f32[2] {
  %y = gather(%x, %i) {axis=0}
  return %y
}
EOF
# loops n times: a run as slow as asked
cat > "$tmp/slow.vmasm" << 'EOF'
func @more(%i: i64[], %n: i64[], %x: f32[64]) -> bool[] {
  %c = lt(%i, %n)
  return %c
}
func @step(%i: i64[], %n: i64[], %x: f32[64]) -> (i64[], i64[], f32[64]) {
  %j = add(%i, 1)
  %y = tanh(%x)
  return %j, %n, %y
}
const %zero : i64[] = 0
func @main(%x: f32[64], %n: i64[]) -> f32[64] {
  %k, %m, %z = while(@more, @step, %zero, %n, %x)
  return %z
}
EOF
"$rill" asm "$tmp/gather.vmasm" -o "$tmp/gather.vmbc" || exit 1

# start_server NAME ARGS...: $port and $spid of a server on a free port
start_server() {
  local name=$1; shift
  "$rill" serve "$@" --device=cpu --host=127.0.0.1 --port=0 > "$tmp/$name.out" 2> "$tmp/$name.err" &
  spid=$!; pids+=("$spid")
  # (up to 120 s: a slow model's warm-up under ThreadSanitizer on a busy machine took more than 30)
  for _ in $(seq 1200); do grep -q "listening on" "$tmp/$name.out" && break; kill -0 "$spid" 2> /dev/null || break; sleep 0.1; done
  port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\).*/\1/p' "$tmp/$name.out")
  if [ -z "$port" ]; then echo "FAIL $name: the server did not start: $(cat "$tmp/$name.err")"; exit 1; fi
}
# http NAME WANT_STATUS CURL_ARGS...: the body in $out, the headers in $tmp/h
http() {
  local name=$1 want=$2; shift 2
  local code
  code=$(curl -s -o "$tmp/body" -D "$tmp/h" -w '%{http_code}' "$@")
  out=$(tr -d '\0' < "$tmp/body")
  if [ "$code" = "$want" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $name: status $code, want $want: $(head -c 300 "$tmp/body")"; fi
}
has_out() { if echo "$out" | grep -qF -- "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: no '$2' in: $(echo "$out" | head -c 300)"; fi; }
pyok() { # pyok NAME CMD...: a serve_client.py mode passes
  local name=$1; shift
  if "$@" > "$tmp/py.out" 2>&1; then pass=$((pass + 1)); tail -3 "$tmp/py.out"; else fail=$((fail + 1)); echo "FAIL $name:"; tail -20 "$tmp/py.out"; fi
}
# stop NAME: SIGTERM, then the server must exit 0 within 10 s
stop() {
  kill -TERM "$spid"
  local rc=124
  for _ in $(seq 100); do kill -0 "$spid" 2> /dev/null || { wait "$spid"; rc=$?; break; }; sleep 0.1; done
  if [ "$rc" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: exit $rc after SIGTERM: $(tail -3 "$tmp/$1.err")"; fi
  # a sanitizer's report that did not stop the server (UBSan without halt_on_error)
  if grep -q "runtime error:\|ERROR: AddressSanitizer\|ERROR: LeakSanitizer\|WARNING: ThreadSanitizer" "$tmp/$1.err"; then
    fail=$((fail + 1)); echo "FAIL $1: a sanitizer reported: $(grep -m1 -A6 "runtime error:\|ERROR: \|WARNING: ThreadSanitizer" "$tmp/$1.err")"
  fi
}

check serve-no-model 2 "$rill" serve; has serve-no-model "usage: rill serve MODEL"
check serve-missing 2 "$rill" serve "$tmp/none.vmasm" --device=cpu --port=0
check serve-bad-port 2 "$rill" serve "$tmp/mlp.vmasm" --port=70000; has serve-bad-port "--port expects"
check serve-same-name 2 "$rill" serve "$tmp/mlp.vmasm" "$tmp/mlp.vmasm" --device=cpu --port=0; has serve-same-name "two models are named 'mlp'"
check serve-bad-name 2 "$rill" serve "a/b=$tmp/mlp.vmasm" --device=cpu --port=0

# a model whose rows mix (a softmax over the batch) is not batched: the VM's padding check says so
cat > "$tmp/mix.vmasm" << 'EOF'
dim B in [1, 64]
func @main(%x: f32[B,4]) -> f32[B,4] {
  %y = softmax(%x) {axis=0}
  return %y
}
EOF
start_server mix "$tmp/mix.vmasm" --max-connections=3
out=$(cat "$tmp/mix.err"); has mix-alone "model 'mix' runs each request alone"
http mix-meta 200 http://127.0.0.1:$port/v2/models/mix; has_out mix-meta '"max_batch_size":1'
pyok maxconn $client maxconn "$port" 3
stop mix
# with a --max-batch whose every size would be a bucket (3, 9), one is left out so that the warm-up still pads a run and sees the rows mix
for mb in 3 9; do
  start_server mix$mb "$tmp/mix.vmasm" --max-batch=$mb
  out=$(cat "$tmp/mix$mb.err"); has mix-alone-$mb "model 'mix' runs each request alone"
  stop mix$mb
done

# ---- the endpoints, errors and limits (on 3 HTTP threads) ----
start_server main "$tmp/mlp.vmasm" "$tmp/dtypes.vmasm" "$tmp/twice.vmasm" "g=$tmp/gather.vmbc" "$tmp/slow.vmasm" \
  --timeout-ms=700 --max-body-bytes=200000 --idle-timeout-ms=1000 --http-threads=3
u=http://127.0.0.1:$port
# the port is taken: a second server fails to listen (it does not share the port)
check serve-port-taken 2 "$rill" serve "$tmp/mlp.vmasm" --device=cpu --port=$port --http-threads=2; has serve-port-taken "cannot listen on 127.0.0.1 port $port"
has_header() { if grep -qi -- "^$2" "$tmp/h"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: no header '$2' in: $(cat "$tmp/h")"; fi; }
http live 200 $u/v2/health/live; has_out live '"live":true'
http ready 200 $u/v2/health/ready; has_out ready '"ready":true'
http server-meta 200 $u/v2; has_out server-meta '"name":"rill"'; has_out server-meta binary_tensor_data
http model-meta 200 $u/v2/models/mlp
has_out model-meta '"inputs":[{"name":"x","datatype":"FP32","shape":[-1,4]}]'
has_out model-meta '"outputs":[{"name":"output_0","datatype":"FP32","shape":[-1,3]},{"name":"output_1","datatype":"INT64","shape":[-1]}]'
http model-meta-version 200 $u/v2/models/mlp/versions/1; has_out model-meta-version '"versions":["1"]'
http model-meta-fixed 200 $u/v2/models/g; has_out model-meta-fixed '{"name":"i","datatype":"INT64","shape":[2]}'
http model-meta-dtypes 200 $u/v2/models/dtypes
for dt in INT8 UINT8 INT32 INT64 FP16 BF16 FP64 BOOL FP32; do has_out "model-meta-dtypes-$dt" "\"datatype\":\"$dt\",\"shape\":[-1,2]"; done
http repository 200 -X POST -d '{}' $u/v2/repository/index; has_out repository '{"name":"dtypes","version":"1","state":"READY"}'
http model-ready 200 $u/v2/models/mlp/ready; has_out model-ready '"ready":true'
http model-ready-version 200 $u/v2/models/mlp/versions/1/ready
http unknown-model 404 $u/v2/models/nope; has_out unknown-model '"error":'
http unknown-model-infer 404 -X POST -d '{}' $u/v2/models/nope/infer
http unknown-version 404 $u/v2/models/mlp/versions/2
http unknown-path 404 $u/v3; has_out unknown-path '"error":'
http unknown-subpath 404 $u/v2/models/mlp/frob
http infer-get 405 $u/v2/models/mlp/infer; has_header infer-get "allow: POST"
http meta-post 405 -X POST -d '{}' $u/v2/models/mlp

x='{"id":"r1","inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","data":[[1,2,3,4],[5,6,7,8]]}]}'
http infer-json 200 -X POST -H 'Content-Type: application/json' -d "$x" $u/v2/models/mlp/infer
has_out infer-json '"id":"r1"'
has_out infer-json '{"name":"output_0","datatype":"FP32","shape":[2,3],"data":[7.3499999,1.29999995,0.300000012,14.3500004,7.30000019,0]}'
has_out infer-json '{"name":"output_1","datatype":"INT64","shape":[2],"data":[0,0]}'
http infer-version 200 -X POST -d "$x" $u/v2/models/mlp/versions/1/infer
# binary in and out: 8 floats after the JSON; the answer's JSON then 6 floats and 2 int64
python3 -c 'import json, struct, sys
h = json.dumps({"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "parameters": {"binary_data_size": 32}}],
                "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}, {"name": "output_1", "parameters": {"binary_data": True}}]}).encode()
open(sys.argv[1], "wb").write(h + struct.pack("<8f", 1, 2, 3, 4, 5, 6, 7, 8)); print(len(h))' "$tmp/bin.req" > "$tmp/bin.len"
http infer-binary 200 -X POST -H 'Content-Type: application/octet-stream' -H "Inference-Header-Content-Length: $(cat "$tmp/bin.len")" \
  --data-binary @"$tmp/bin.req" $u/v2/models/mlp/infer
has_header infer-binary "inference-header-content-length:"; has_header infer-binary "content-type: application/octet-stream"
python3 -c 'import json, struct, sys
d = open(sys.argv[1], "rb").read(); n = int(sys.argv[2])
doc = json.loads(d[:n]); y = struct.unpack("<6f", d[n:n + 24]); c = struct.unpack("<2q", d[n + 24:])
assert [o["parameters"]["binary_data_size"] for o in doc["outputs"]] == [24, 16], doc
assert [round(v, 4) for v in y] == [7.35, 1.3, 0.3, 14.35, 7.3, 0.0] and c == (0, 0), (y, c)' \
  "$tmp/body" "$(sed -n 's/^inference-header-content-length: *\([0-9]*\).*/\1/Ip' "$tmp/h" | tr -d '\r')" \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL infer-binary: the binary answer is wrong"; }

# 400s, each with a JSON message, and the server serving after each
bad() { # bad NAME TEXT_IN_MESSAGE BODY [CURL_ARGS...]
  local name=$1 text=$2 body=$3; shift 3
  http "$name" 400 -X POST -d "$body" "$@" $u/v2/models/mlp/infer; has_out "$name" '"error":'; has_out "$name" "$text"
}
bad bad-json "not JSON" '{"inputs": [' 
bad bad-not-object "JSON object" '[1,2]'
bad bad-trailing "bytes after the JSON" "$x 12345678"
bad bad-no-inputs 'an array' '{}'
bad bad-dtype "datatype FP64, the model takes FP32" '{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP64","data":[1,2,3,4,5,6,7,8]}]}'
bad bad-unknown-dtype "unknown datatype" '{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP8","data":[1,2,3,4,5,6,7,8]}]}'
bad bad-shape "the model takes FP32[-1,4]" '{"inputs":[{"name":"x","shape":[2,5],"datatype":"FP32","data":[1,2,3,4,5,6,7,8,9,10]}]}'
bad bad-rank "rank 1" '{"inputs":[{"name":"x","shape":[8],"datatype":"FP32","data":[1,2,3,4,5,6,7,8]}]}'
bad bad-range "outside its range [1, 64]" '{"inputs":[{"name":"x","shape":[65,4],"datatype":"FP32","data":[1]}]}'
bad bad-count "7 values for shape" '{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","data":[1,2,3,4,5,6,7]}]}'
bad bad-value "not a number" '{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,"3",4]}]}'
bad bad-name "unknown input 'y'" '{"inputs":[{"name":"y","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
bad bad-twice "given twice" '{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]},{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}'
bad bad-missing "missing input 'x'" '{"inputs":[]}'
bad bad-output "unknown output 'z'" '{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"z"}]}'
j='{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":12}}]}'
bad bad-binary-size "binary_data_size must be 16" "${j}123456789012" -H "Inference-Header-Content-Length: ${#j}"
j='{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}'
bad bad-binary-short "binary data ends after 8 of its 16 bytes" "${j}12345678" -H "Inference-Header-Content-Length: ${#j}"
bad bad-binary-extra "bytes of binary data after the JSON" "${j}12345678123456789" -H "Inference-Header-Content-Length: ${#j}"
bad bad-header-length "Inference-Header-Content-Length" "$j" -H "Inference-Header-Content-Length: 99999"
bad bad-header-text "'12abc' is not a length" "$j" -H "Inference-Header-Content-Length: 12abc"
bad bad-header-negative "'-1' is not a length" "$j" -H "Inference-Header-Content-Length: -1"
bad bad-header-empty "'' is not a length" "$j" -H "Inference-Header-Content-Length;"
http after-400s 200 -X POST -d "$x" $u/v2/models/mlp/infer

# 500: a run that fails; 413: a body over --max-body-bytes; 504: past --timeout-ms
http run-fails 500 -X POST -d '{"inputs":[{"name":"x","shape":[4],"datatype":"FP32","data":[1,2,3,4]},{"name":"i","shape":[2],"datatype":"INT64","data":[0,9]}]}' $u/v2/models/g/infer
has_out run-fails "out of range"
http run-ok 200 -X POST -d '{"inputs":[{"name":"x","shape":[4],"datatype":"FP32","data":[1,2,3,4]},{"name":"i","shape":[2],"datatype":"INT64","data":[3,0]}]}' $u/v2/models/g/infer
has_out run-ok '"data":[4,1]'
head -c 250000 /dev/zero > "$tmp/big"
http body-limit 413 -X POST --data-binary @"$tmp/big" $u/v2/models/mlp/infer
pyok body-at-limit $client limit "$port" mlp 200000
# HEAD: the headers of GET's answer, no body
python3 -c 'import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"HEAD /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
got = b""
while True:
    b = s.recv(65536)
    if not b: break
    got += b
head, _, rest = got.partition(b"\r\n\r\n")
assert head.startswith(b"HTTP/1.1 200") and b"content-length: 13" in head.lower() and rest == b"", got' "$port" \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL head-live: HEAD is not the headers alone"; }
http head-after 200 $u/v2/health/live; has_out head-after '{"live":true}'
slow() { python3 -c 'import json, sys; print(json.dumps({"inputs": [{"name": "x", "shape": [64], "datatype": "FP32", "data": [0.5] * 64}, {"name": "n", "shape": [], "datatype": "INT64", "data": [int(sys.argv[1])]}]}))' "$1"; }
http deadline 504 -X POST -d "$(slow 80000)" $u/v2/models/slow/infer; has_out deadline "deadline"
http after-deadline 200 -X POST -d "$(slow 10)" $u/v2/models/slow/infer
# a request's own "timeout" (microseconds, as Triton's clients send it), sooner than --timeout-ms
body=$(slow 40000 | sed 's/^{/{"parameters":{"timeout":50000},/')
http own-timeout 504 -X POST -d "$body" $u/v2/models/slow/infer
took=$(curl -s -o /dev/null -w '%{time_total}' -X POST -d "$body" $u/v2/models/slow/infer)
python3 -c "import sys; sys.exit(0 if $took < 0.45 else 1)" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL own-timeout: answered after $took s, not at the request's 0.05 s"; }
bad bad-timeout "timeout must be" '{"parameters":{"timeout":-5},"inputs":[]}'

pyok dtypes $client dtypes "$port" dtypes
pyok idle $client idle "$port" 1
http twice-range 400 -X POST -d '{"inputs":[{"name":"x","shape":[1,9],"datatype":"FP32","data":[1,2,3,4,5,6,7,8,9]}]}' $u/v2/models/twice/infer
has_out twice-range "S = 9, outside its range [1, 8]"
pyok fuzz $client fuzz "$port" 1500 60
http metrics 200 $u/metrics
for m in 'rill_serve_requests_total{model="mlp"}' 'rill_serve_failures_total{model="mlp"}' 'rill_serve_queue_length{model="mlp"} 0' \
         'rill_serve_batch_rows_bucket{model="mlp",le="+Inf"}' 'rill_serve_batch_requests_bucket{model="mlp",le="1"}' \
         'rill_serve_request_seconds_bucket{model="mlp",le="0.001"}' 'rill_serve_request_seconds_count{model="dtypes"}' \
         'rill_serve_timeouts_total{model="slow"} 3' 'rill_serve_responses_total{model="g",code="5xx"} 1' \
         'rill_serve_http_responses_total{code="400"}' '# TYPE rill_serve_run_seconds histogram'; do
  has_out "metrics $m" "$m"
done
# the model's device memory: its weights (the mlp's constants) held, the total at least that, the peak at least the total
echo "$out" | python3 -c 'import re, sys
v = {k: int(n) for k, n in re.findall(r"rill_serve_device_memory_bytes\{model=\"mlp\",kind=\"(\w+)\"\} (\d+)", sys.stdin.read())}
assert v["weights"] > 0 and v["total"] >= v["weights"] + v["buffers"] and v["peak"] >= v["total"], v' \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL metrics: device memory"; }
# The deadline tests' runs go on past their 504s (a run is not cut short for one request), and SIGTERM
# drains what is running: wait for the slow model's runs to end first, so that the stop below times the
# shutdown and not that model's loop (80,000 steps: 20 s and more under ThreadSanitizer on a small machine).
python3 - "$port" << 'PY' || { fail=$((fail + 1)); echo "FAIL main: the slow model's runs still running after 300 s"; }
import re, sys, time, urllib.request
t0 = time.time()
while time.time() - t0 < 300:
    m = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10).read().decode()
    runs = re.search(r'rill_serve_runs_total\{model="slow"\} (\d+)', m)
    done = re.search(r'rill_serve_run_seconds_count\{model="slow"\} (\d+)', m)
    if runs and done and int(runs.group(1)) <= int(done.group(1)):
        sys.exit(0)
    time.sleep(0.2)
sys.exit(1)
PY
stop main

# ---- 4 HTTP threads under load: every answer holds its own request's rows, runs join requests ----
check serve-bad-threads 2 "$rill" serve "rows=$here/fixtures/serve_rows.vmasm" --device=cpu --port=0 --http-threads=0; has serve-bad-threads "--http-threads expects"
check serve-bad-quiet 2 "$rill" serve "rows=$here/fixtures/serve_rows.vmasm" --device=cpu --port=0 --batch-quiet-us=-1; has serve-bad-quiet "--batch-quiet-us expects"
# (the loads run here, not on the server above, whose --timeout-ms=700 a slow machine or a sanitizer's build could pass)
start_server mt "rows=$here/fixtures/serve_rows.vmasm" "$tmp/mlp.vmasm" "$tmp/twice.vmasm" --http-threads=4 --batch-delay-us=2000
pyok mtload $client mtload "$port" rows 600 32 4
pyok shapes $client shapes "$port" twice 200 24
pyok load $client load "$port" "$rill" "$tmp/mlp.vmasm" 240 24
stop mt

# ---- a request alone with an instance free does not wait out --batch-delay-us (2 s here) ----
start_server delay "$tmp/mlp.vmasm" --batch-delay-us=2000000
took=$(curl -s -o "$tmp/body" -w '%{time_total}' -X POST -d "$x" http://127.0.0.1:$port/v2/models/mlp/infer)
python3 -c "import sys; sys.exit(0 if $took < 0.5 else 1)" && grep -q '"output_0"' "$tmp/body" && pass=$((pass + 1)) \
  || { fail=$((fail + 1)); echo "FAIL lone-request: answered after $took s: $(head -c 200 "$tmp/body")"; }
# one after another, each finds the model idle: each runs on its HTTP thread (a lane), none through the main loop's queue
for _ in 1 2 3; do curl -s -o /dev/null -X POST -d "$x" http://127.0.0.1:$port/v2/models/mlp/infer; done
http lane-metrics 200 http://127.0.0.1:$port/metrics
has_out lane-metrics 'rill_serve_lane_runs_total{model="mlp"} 4'; has_out lane-metrics 'rill_serve_runs_total{model="mlp"} 4'
has_out lane-metrics 'rill_serve_requests_total{model="mlp"} 4'; has_out lane-metrics 'rill_serve_request_seconds_count{model="mlp"} 4'
stop delay

# ---- while a run is in flight, requests wait for its end and join one batch (though an instance is free; no quiet time) ----
cat > "$tmp/slowb.vmasm" << 'EOF'
dim B in [1, 8]
const %zero : i64[] = 0
const %lim : i64[] = 16000
func @more(%i: i64[], %x: f32[B,4]) -> bool[] {
  %c = lt(%i, %lim)
  return %c
}
func @step(%i: i64[], %x: f32[B,4]) -> (i64[], f32[B,4]) {
  %j = add(%i, 1)
  %y = tanh(%x)
  return %j, %y
}
func @main(%x: f32[B,4]) -> f32[B,4] {
  %k, %z = while(@more, @step, %zero, %x)
  return %z
}
EOF
start_server holdjoin "$tmp/slowb.vmasm" --instances=2 --batch-delay-us=20000000 --batch-quiet-us=0 --http-threads=4
pyok holdjoin $client holdjoin "$port" slowb
stop holdjoin
# ---- --batch-quiet-us: requests waiting while a run is in flight start their own once none has come for
# that long (0.1 s; the delay 20 s), before that run ends: 2 runs in flight (waiting out the delay: 1) ----
# slowp: slowb's result plus its input, so that each answer names its request
lim=$(sed -n 's/^const %lim : i64\[\] = \([0-9]*\)$/\1/p' "$tmp/slowb.vmasm")
sed -e 's/^  return %z$/  %y = add(%z, %x)\n  return %y/' "$tmp/slowb.vmasm" > "$tmp/slowp.vmasm"
start_server quiet "$tmp/slowp.vmasm" --instances=2 --batch-delay-us=20000000 --batch-quiet-us=100000 --http-threads=2
pyok quiet $client quiet "$port" slowp "$lim" 120
stop quiet

# ---- --graph-buckets as given: the warm-up captures each (more than the 8 sizes a function keeps by
# default, and 11, which the default buckets leave out at --max-batch=12 for the warm-up's padded run),
# and requests at every size replay them ----
start_server buckets "$tmp/mlp.vmasm" --graph=on --max-batch=12 --graph-buckets=B=1,2,3,4,5,6,7,8,9,10,11,12 --http-threads=2
captures() { curl -s http://127.0.0.1:$port/metrics | sed -n 's/^rill_serve_graph_captures_total{model="mlp"} //p'; }
c0=$(captures)
for r in 1 2 3 4 5 6 7 8 9 10 11 12; do
  xs=$(python3 -c "print(','.join(['1,2,3,4'] * $r))")
  http buckets-$r 200 -X POST -d "{\"inputs\":[{\"name\":\"x\",\"shape\":[$r,4],\"datatype\":\"FP32\",\"data\":[$xs]}]}" http://127.0.0.1:$port/v2/models/mlp/infer
done
c1=$(captures)
if [ -n "$c0" ] && [ "$c0" -ge 12 ] && [ "$c1" = "$c0" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL buckets: graphs captured by the warm-up $c0 (want 12 or more), after a request at each size $c1 (want no more)"; fi
stop buckets

# ---- batches of megabytes: the copy into staging split among --copy-threads (and done by the loop alone) ----
cat > "$tmp/big.vmasm" << 'EOF'
dim B in [1, 16]
func @main(%x: f32[B,65536]) -> (f32[B], f32[B,1]) {
  %s = sum(%x) {axes=[1]}
  %f = slice(%x) {starts=[0,0], ends=[16,1]}
  %g = mul(%f, 2)
  return %s, %g
}
EOF
for ct in 3 0; do
  start_server big$ct "$tmp/big.vmasm" --copy-threads=$ct --batch-delay-us=20000 --max-body-bytes=8000000
  pyok bigload-$ct $client bigload "$port" big 48 12 65536
  [ $ct = 3 ] && pyok pieces $client pieces "$port" big 65536
  stop big$ct
done

# ---- batches uploaded (--staging=off, the path a model takes where host memory fails its probe): the same rows ----
check serve-bad-staging 2 "$rill" serve "$tmp/mlp.vmasm" --device=cpu --port=0 --staging=on; has serve-bad-staging "--staging expects auto or off"
start_server nostage "$tmp/mlp.vmasm" --staging=off
out=$(cat "$tmp/nostage.err"); if echo "$out" | grep -q "host memory failed"; then fail=$((fail + 1)); echo "FAIL nostage: $out"; else pass=$((pass + 1)); fi
pyok load-nostaging $client load "$port" "$rill" "$tmp/mlp.vmasm" 120 12
stop nostage
out=$(cat "$tmp/main.err"); if echo "$out" | grep -q "host memory failed"; then fail=$((fail + 1)); echo "FAIL staging probe: $out"; else pass=$((pass + 1)); fi

# ---- the queue's limit, then SIGTERM while requests run (two: one running, one waiting;
# with --max-queue=2 a third arriving with them could find the queue full) ----
start_server queue "$tmp/slow.vmasm" --instances=1 --max-queue=2 --http-threads=4
pyok queue $client queue "$port" slow 12
pyok drain $client drain "$port" "$spid" slow 2
for _ in $(seq 100); do kill -0 "$spid" 2> /dev/null || break; sleep 0.1; done
wait "$spid"; rc=$?
[ "$rc" -eq 0 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL drain: exit $rc: $(tail -3 "$tmp/queue.err")"; }

# ---- an ONNX model (from libonnx-testdata, where it is installed) ----
onnx=${RILL_ONNX_DATA:-/usr/share/libonnx-testdata/data}/node/test_gemm_default_vector_bias/model.onnx
if [ -f "$onnx" ] && "$rill" run "$onnx" --device=cpu --input='f32[2,7]=1' --input='f32[7,4]=1' --input='f32[1,4]=1' > /dev/null 2>&1; then
  cp "$onnx" "$tmp/gemm.onnx"
  start_server onnx "$tmp/gemm.onnx"
  http onnx-meta 200 http://127.0.0.1:$port/v2/models/gemm; has_out onnx-meta '"datatype":"FP32","shape":[2,7]'
  pyok onnx $client compare "$port" "$rill" gemm "$tmp/gemm.onnx"
  stop onnx
else
  echo "ONNX part skipped: no $onnx or the importer is left out"
fi

# ---- generation: a tiny random-weight Hugging Face folder (tests/llm_ref.py, numpy) ----
py=${PYTHON:-/usr/bin/python3}
if $py -c 'import numpy' 2> /dev/null; then
  $py "$here/llm_ref.py" make "$tmp/tiny" llama
  start_server gen "$tmp/tiny" --instances=3 --max-queue=4 --max-tokens=12 --max-prompt=20 --timeout-ms=20000
  u=http://127.0.0.1:$port
  out=$(cat "$tmp/gen.err"); has_out gen-start "model 'tiny': generation"
  http gen-meta 200 $u/v2/models/tiny; has_out gen-meta '"inputs":[{"name":"input_ids","datatype":"INT64","shape":[-1]}]'; has_out gen-meta '"max_tokens":12'
  http gen-server-meta 200 $u/v2; has_out gen-server-meta '"generate"'
  http gen-one 200 -X POST -d '{"id":"a","input_ids":[1,5,9],"parameters":{"max_tokens":6}}' $u/v2/models/tiny/generate
  want=$("$rill" llm "$tmp/tiny" --device=cpu --prompt-ids='i64[1,3]=1 5 9' -n 12 --max-length=32 --output=- | sed 's/.*= \[\[//; s/,.*//')
  has_out gen-one "\"output_ids\":[$want,"; has_out gen-one '"finish_reason":"length"'
  http gen-stream 200 -N -X POST -d '{"input_ids":[1,5,9],"parameters":{"max_tokens":3}}' $u/v2/models/tiny/generate_stream
  has_header gen-stream "content-type: text/event-stream"; has_out gen-stream "data: {\"model_name\":\"tiny\",\"model_version\":\"1\",\"index\":0,\"token_id\":$want}"
  pyok generate $client generate "$port" "$rill" "$tmp/tiny" 40 6
  pyok generate-errors $client generate-errors "$port" tiny 4
  pyok genfuzz $client genfuzz "$port" tiny 300 60
  # a program that cannot be made (its weights gone) is a 500, and the server goes on
  mv "$tmp/tiny/model.safetensors" "$tmp/weights.away"
  http gen-500 500 -X POST -d '{"input_ids":[3],"parameters":{"max_tokens":2,"temperature":0.9,"seed":77}}' $u/v2/models/tiny/generate
  has_out gen-500 '"error":'
  http gen-500-stream 200 -N -X POST -d '{"input_ids":[3],"parameters":{"max_tokens":2,"temperature":0.9,"seed":78}}' $u/v2/models/tiny/generate_stream
  has_out gen-500-stream 'event: error'; has_out gen-500-stream '"status":500'
  mv "$tmp/weights.away" "$tmp/tiny/model.safetensors"
  http gen-after-500 200 -X POST -d '{"input_ids":[3],"parameters":{"max_tokens":2,"temperature":0.9,"seed":77}}' $u/v2/models/tiny/generate
  has_out gen-after-500 '"finish_reason":"length"'
  http gen-metrics 200 $u/metrics; has_out gen-metrics 'rill_serve_generated_tokens_total{model="tiny"}'; has_out gen-metrics 'rill_serve_device_memory_bytes{model="tiny",kind="weights"}'
  # SIGTERM while generations stream: each ends whole, then the server exits 0
  cpids=()
  for i in 1 2 3; do curl -s -N -X POST -d '{"input_ids":[2],"parameters":{"max_tokens":12,"ignore_eos":true}}' $u/v2/models/tiny/generate_stream > "$tmp/drain$i" & cpids+=($!); done
  for _ in $(seq 100); do [ "$(grep -l '^data:' "$tmp"/drain? | wc -l)" -ge 3 ] && break; sleep 0.1; done
  stop gen
  wait "${cpids[@]}"
  for i in 1 2 3; do
    if grep -q '"finish_reason":"length"' "$tmp/drain$i"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL gen-drain $i: $(head -c 300 "$tmp/drain$i")"; fi
  done
else
  echo "generation part skipped: no numpy for $py"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
