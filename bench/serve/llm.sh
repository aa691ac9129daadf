#!/bin/bash
# llm.sh: rill serve's generate endpoint, tokens per second per stream with
# 1, 8 and 32 concurrent generations (issue 31's LLM benchmark).
#
#   bash bench/serve/llm.sh MODEL_DIR [BUILD_DIR [OUTDIR]]   (default build-gpu, bench/serve/out-llm)
#
# MODEL_DIR is a Hugging Face folder `rill llm` takes. For each count C of
# $CONCURRENCY, `rill serve MODEL_DIR --instances=C` (one generation at a
# time per instance: C VMs of the program, each with its own weights and
# KV cache), then C clients each stream $REPEAT generations of $TOKENS
# tokens (ignore_eos, greedy) from a $PROMPT-token prompt through
# /generate_stream, timing each token's arrival. Prints per stream: tokens
# per second after the first token (decode), time to the first token, and
# the aggregate tokens per second. JSON per count in OUTDIR.
# Environment: CONCURRENCY ("1 8 32"), TOKENS (128), PROMPT (32), REPEAT (3),
# DEVICE (cuda), PORT (18100), PYTHON (python3), EXTRA (more serve options).
set -u
dir=${1:?usage: llm.sh MODEL_DIR [BUILD_DIR [OUTDIR]]}
build=${2:-build-gpu}; out=${3:-bench/serve/out-llm}
rill=$build/tools/rill
[ -x "$rill" ] || { echo "no $rill: build first"; exit 1; }
py=${PYTHON:-python3}; port=${PORT:-18100}; dev=${DEVICE:-cuda}
tokens=${TOKENS:-128}; prompt=${PROMPT:-32}; repeat=${REPEAT:-3}
mkdir -p "$out"
for c in ${CONCURRENCY:-1 8 32}; do
  "$rill" serve "$dir" --device="$dev" --port="$port" --instances="$c" --max-queue=$((c * 2)) --max-tokens="$tokens" \
    --max-prompt=$((prompt > 64 ? prompt : 64)) ${EXTRA:-} > "$out/c$c.serve.out" 2> "$out/c$c.serve.err" &
  pid=$!
  for _ in $(seq 1200); do grep -q "listening on" "$out/c$c.serve.out" && break; kill -0 $pid 2> /dev/null || break; sleep 0.5; done
  if ! grep -q "listening on" "$out/c$c.serve.out"; then echo "c$c: the server did not start: $(tail -3 "$out/c$c.serve.err")"; kill $pid 2> /dev/null; continue; fi
  "$py" - "$port" "$c" "$tokens" "$prompt" "$repeat" > "$out/c$c.json" << 'EOF'
import http.client, json, statistics, sys, threading, time
port, c, tokens, prompt, repeat = (int(x) for x in sys.argv[1:6])
conn = http.client.HTTPConnection("127.0.0.1", port)
conn.request("POST", "/v2/repository/index", body=b"{}")
model = json.loads(conn.getresponse().read())[0]["name"]
body = json.dumps({"input_ids": [(7 * i) % 50 + 1 for i in range(prompt)],
                   "parameters": {"max_tokens": tokens, "ignore_eos": True}}).encode()
def stream(results, warm):
    h = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    for r in range(repeat + (1 if warm else 0)):
        t0 = time.perf_counter()
        h.request("POST", "/v2/models/%s/generate_stream" % model, body=body, headers={"Content-Type": "application/json"})
        resp = h.getresponse()
        times = []
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: ") and b'"token_id"' in line:
                times.append(time.perf_counter())
        if warm and r == 0:
            continue
        if len(times) >= 2:
            results.append({"first_ms": (times[0] - t0) * 1e3, "decode_tps": (len(times) - 1) / (times[-1] - times[0]), "tokens": len(times),
                            "seconds": times[-1] - t0})
# one warm-up generation per client (programs, graphs), then the timed ones
res = [[] for _ in range(c)]
t_start = time.perf_counter()
th = [threading.Thread(target=stream, args=(res[i], True)) for i in range(c)]
for t in th: t.start()
for t in th: t.join()
flat = [x for r in res for x in r]
if not flat:
    print(json.dumps({"concurrency": c, "error": "no generations timed"})); sys.exit(1)
tps = [x["decode_tps"] for x in flat]
total_tokens = sum(x["tokens"] for x in flat)
wall = max(sum(x["seconds"] for x in r) for r in res if r)
print(json.dumps({"concurrency": c, "generations": len(flat), "tokens_each": tokens, "prompt": prompt,
                  "per_stream_tokens_per_s_median": statistics.median(tps), "per_stream_tokens_per_s_min": min(tps),
                  "first_token_ms_median": statistics.median(x["first_ms"] for x in flat),
                  "aggregate_tokens_per_s": total_tokens / wall}))
EOF
  rc=$?
  kill -TERM $pid; wait $pid
  [ $rc -eq 0 ] || { echo "c$c: the client failed: $(tail -3 "$out/c$c.json")"; continue; }
  "$py" -c 'import json, sys; d = json.load(open(sys.argv[1]))
print("%2d concurrent: %.1f tokens/s per stream (median; slowest %.1f), first token %.1f ms, %.1f tokens/s in all" % (
    d["concurrency"], d["per_stream_tokens_per_s_median"], d["per_stream_tokens_per_s_min"], d["first_token_ms_median"], d["aggregate_tokens_per_s"]))' "$out/c$c.json"
done
