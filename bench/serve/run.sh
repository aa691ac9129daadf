#!/bin/bash
# run.sh: rill serve on the GPU machine against offline runs (issue 31's goals).
#
#   bash bench/serve/run.sh [BUILD_DIR [OUTDIR]]    (default build-gpu, bench/serve/out)
#
# The build needs -Dcuda=enabled and libh2o-dev (bench_serve_load is built
# with it); the first run converts resnet50 with PyTorch and torchvision.
#
# 1. resnet50 in f16 with a symbolic batch (dim B in [1, $RANGE_HI]) from
#    bench/models/convert.py (PyTorch and torchvision), once, into OUTDIR.
# 2. Offline: `rill bench --graph=on` at batch $BATCH (images per second =
#    BATCH / the median run) and at batch 1 (the median run: the one-client
#    goal's baseline).
# 3. Served: `rill serve --device=cuda` on a loopback port, for each
#    --batch-delay-us of $DELAYS and --instances of $INSTANCES, and
#    $CLIENTS closed-loop clients (BUILD_DIR/bench/bench_serve_load: one
#    connection each, one image a request, binary tensors) for $DURATION s
#    after $WARMUP s: requests per second, p50/p90/p99 latency; the batch
#    sizes the server ran (its /metrics) saved beside them. Then one client,
#    --batch-delay-us=0: its median latency.
# With COMPARE_STAGING=1 (the default) the best configuration and the one
# client run again with --staging=off (batches uploaded and results read
# after the run, the path before staging), for comparison.
# 4. Turns (ROUNDS > 0): ROUNDS rounds, each of offline batch BATCH, the
#    best configuration served, offline batch 1 and one client, one after
#    another, so that each goal's two sides are measured side by side as
#    the machine's speed drifts: each figure's median and range, each
#    round's ratio, and the goals judged on the medians.
# Prints each figure beside its goal: served throughput >= 0.9 x offline
# batch-$BATCH images per second; one client's median within 0.2 ms of
# rill bench's batch-1 median. Logs and JSON go to OUTDIR.
# Environment: BATCH (32), MAX_BATCH (the server's --max-batch, BATCH), RANGE_HI (64), CLIENTS (64), DURATION (20),
# WARMUP (5), DELAYS ("0 500 2000"), INSTANCES ("2 3"), HTTP_THREADS
# ("default": the server's own, the cores up to 4; e.g. "2 4 8" tries
# each --http-threads, the 1 client included), ITERS (200), ROUNDS (0),
# PORT (18000), PYTHON (python3); to try the script elsewhere, DEVICE (cuda)
# and MODEL (a .vmasm whose @main takes %x: DTYPE[B,SHAPE...]) with
# DTYPE (f16) and SHAPE (3,224,224) instead of the converted resnet50.
set -u
build=${1:-build-gpu}; out=${2:-bench/serve/out}
[ -x "$build/tools/rill" ] || { echo "no $build/tools/rill: build first (meson setup $build -Dcuda=enabled && ninja -C $build)"; exit 1; }
[ -x "$build/bench/bench_serve_load" ] || { echo "no $build/bench/bench_serve_load"; exit 1; }
rill=$build/tools/rill; load=$build/bench/bench_serve_load
batch=${BATCH:-32}; hi=${RANGE_HI:-64}; clients=${CLIENTS:-64}
secs=${DURATION:-20}; warm=${WARMUP:-5}; delays=${DELAYS:-0 500 2000}; instances=${INSTANCES:-2 3}
iters=${ITERS:-200}; port=${PORT:-18000}; py=${PYTHON:-python3}; http_threads=${HTTP_THREADS:-default}
here=$(cd "$(dirname "$0")" && pwd)
dev=${DEVICE:-cuda}; dt=${DTYPE:-f16}; shape=${SHAPE:-3,224,224}
kdt=$(case $dt in f16) echo FP16;; bf16) echo BF16;; f32) echo FP32;; *) echo "$dt";; esac)
mkdir -p "$out"
model=${MODEL:-$out/resnet50_f16_dyn.vmasm}
if [ ! -f "$model" ]; then
  "$py" "$here/../models/convert.py" resnet50 -o "$out" --dtype f16 --dynamic --range 1,"$hi" > "$out/convert.log" 2>&1 \
    || { echo "convert.py failed: $(tail -3 "$out/convert.log")"; exit 1; }
fi

echo "== offline: rill bench --graph=on, batch $batch and batch 1"
for b in "$batch" 1; do
  "$rill" bench "$model" --device="$dev" --graph=on --iterations="$iters" --input="$dt[$b,$shape]=random" --json > "$out/bench_b$b.json" 2> "$out/bench_b$b.err" \
    || { echo "rill bench failed: $(tail -3 "$out/bench_b$b.err")"; exit 1; }
done
med() { "$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["median_ms"])' "$1"; }
off_ms=$(med "$out/bench_b$batch.json"); b1_ms=$(med "$out/bench_b1.json")
off_ips=$("$py" -c "print(round($batch / ($off_ms / 1000.0), 1))")
echo "offline batch $batch: $off_ms ms a run, $off_ips images/s; batch 1: $b1_ms ms"

# serve_once NAME CLIENTS ARGS...: the load's JSON in OUTDIR/NAME.json ($ht: --http-threads, or default)
serve_once() {
  local name=$1 nc=$2; shift 2
  [ "$ht" = default ] || set -- "$@" --http-threads="$ht"
  "$rill" serve "resnet50=$model" --device="$dev" --host=127.0.0.1 --port="$port" --max-batch="${MAX_BATCH:-$batch}" "$@" \
    > "$out/$name.serve.out" 2> "$out/$name.serve.err" &
  local pid=$!
  for _ in $(seq 1200); do grep -q "listening on" "$out/$name.serve.out" && break; kill -0 $pid 2> /dev/null || break; sleep 0.5; done
  if ! grep -q "listening on" "$out/$name.serve.out"; then echo "$name: the server did not start: $(tail -3 "$out/$name.serve.err")"; kill $pid 2> /dev/null; return 1; fi
  "$load" 127.0.0.1 "$port" resnet50 x "$kdt" "1,$shape" "$nc" "$secs" "$warm" > "$out/$name.json" 2> "$out/$name.load.err"
  curl -s "http://127.0.0.1:$port/metrics" > "$out/$name.metrics"
  kill -TERM $pid; wait $pid; local rc=$?
  [ $rc -eq 0 ] || echo "$name: rill serve exited $rc after SIGTERM"
}
field() { "$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
# the mean rows of the runs a server's /metrics counted
mean_rows() { awk '/^rill_serve_batch_rows_sum/ {s = $2} /^rill_serve_batch_rows_count/ {c = $2} END {printf "%.2f", c ? s / c : 0}' "$1"; }
# the input's name: the model's first parameter
grep -q "func @main(%x:" "$model" || { echo "the model's input is not %x"; exit 1; }

echo "== served: $clients clients"
best=0; best_name=; best_ht=
for ht in $http_threads; do
for inst in $instances; do
  for d in $delays; do
    name=c${clients}_i${inst}_d${d}_t${ht}
    serve_once "$name" "$clients" --instances="$inst" --batch-delay-us="$d" || continue
    ips=$(field "$out/$name.json" per_second)
    echo "$name: $ips images/s ($(field "$out/$name.json" errors) errors), p50 $(field "$out/$name.json" p50_ms) ms, p99 $(field "$out/$name.json" p99_ms) ms, mean batch $(mean_rows "$out/$name.metrics")"
    if "$py" -c "import sys; sys.exit(0 if $ips > $best else 1)"; then best=$ips; best_name=$name; best_ht=$ht; best_inst=$inst; best_d=$d; fi
  done
done
done
# the best configuration again with each batch uploaded before its run (the path before staging)
if [ -n "$best_name" ] && [ "${COMPARE_STAGING:-1}" = 1 ]; then
  inst=$best_inst; d=$best_d; ht=$best_ht
  serve_once "${best_name}_nostaging" "$clients" --instances="$inst" --batch-delay-us="$d" --staging=off \
    && echo "${best_name} with --staging=off: $(field "$out/${best_name}_nostaging.json" per_second) images/s, p99 $(field "$out/${best_name}_nostaging.json" p99_ms) ms"
fi
echo "== served: 1 client, --batch-delay-us=0"
one=
for ht in $http_threads; do
  serve_once c1_t$ht 1 --instances=2 --batch-delay-us=0 || continue
  o=$(field "$out/c1_t$ht.json" p50_ms)
  echo "1 client, --http-threads=$ht: median $o ms"
  if [ -z "$one" ] || "$py" -c "import sys; sys.exit(0 if $o < $one else 1)"; then one=$o; fi
done
ht=${best_ht:-default}
if [ "${COMPARE_STAGING:-1}" = 1 ] && serve_once c1_nostaging 1 --instances=2 --batch-delay-us=0 --staging=off; then
  echo "1 client: median $one ms; with --staging=off $(field "$out/c1_nostaging.json" p50_ms) ms"
fi

rounds=${ROUNDS:-0}
if [ "$rounds" -gt 0 ] && [ -n "$best_name" ]; then
  echo "== turns: $rounds rounds of offline batch $batch, $best_name, offline batch 1, 1 client"
  inst=$best_inst; d=$best_d; ht=$best_ht
  : > "$out/turns.txt"
  for r in $(seq "$rounds"); do
    for b in "$batch" 1; do
      "$rill" bench "$model" --device="$dev" --graph=on --iterations="$iters" --input="$dt[$b,$shape]=random" --json > "$out/turn${r}_b$b.json" 2> /dev/null \
        || { echo "round $r: rill bench batch $b failed"; continue 2; }
      if [ "$b" = "$batch" ]; then serve_once "turn${r}_c$clients" "$clients" --instances="$inst" --batch-delay-us="$d" || continue 2
      else serve_once "turn${r}_c1" 1 --instances=2 --batch-delay-us=0 || continue 2; fi
    done
    echo "$r $(med "$out/turn${r}_b$batch.json") $(field "$out/turn${r}_c$clients.json" per_second) $(med "$out/turn${r}_b1.json") $(field "$out/turn${r}_c1.json" p50_ms) $(mean_rows "$out/turn${r}_c$clients.metrics")" >> "$out/turns.txt"
  done
  "$py" - "$out/turns.txt" "$batch" <<'PY'
import statistics, sys
rows = [list(map(float, l.split()))[1:] for l in open(sys.argv[1]) if l.strip()]
b = int(sys.argv[2])
if not rows:
    sys.exit("no round completed")
off = [b / (r[0] / 1e3) for r in rows]; srv = [r[1] for r in rows]; b1 = [r[2] for r in rows]; c1 = [r[3] for r in rows]
def show(name, v, unit):
    f = "%.1f" if unit == "img/s" else "%.4f"
    print(("  %-34s median " + f + " %s (" + f + " to " + f + ")") % (name, statistics.median(v), unit, min(v), max(v)))
show("offline batch %d" % b, off, "img/s"); show("served", srv, "img/s"); show("offline batch 1", b1, "ms"); show("1 client", c1, "ms")
print("  each round: served / offline " + ", ".join("%.3f" % (s / o) for s, o in zip(srv, off)) +
      "; 1 client - batch 1 " + ", ".join("%+.3f ms" % (c - o) for c, o in zip(c1, b1)) +
      "; the server's mean batch " + ", ".join("%.1f rows" % r[4] for r in rows))
t = statistics.median(srv) / statistics.median(off); l = statistics.median(c1) - statistics.median(b1)
print("  on the medians: throughput %.3f (goal >= 0.9: %s), latency %+.3f ms (goal <= 0.2: %s)" % (t, "met" if t >= 0.9 else "NOT met", l, "met" if l <= 0.2 else "NOT met"))
PY
fi

echo
printf "%-52s %-14s %s\n" "figure" "value" "goal"
printf "%-52s %-14s %s\n" "offline batch $batch (rill bench --graph=on)" "$off_ips img/s" ""
printf "%-52s %-14s %s\n" "served, $clients clients, best ($best_name)" "$best img/s" ">= $("$py" -c "print(round(0.9 * $off_ips, 1))") (0.9x offline): $("$py" -c "print('met' if $best >= 0.9 * $off_ips else 'NOT met')")"
[ -n "$best_name" ] && printf "%-52s %-14s %s\n" "  its p99 latency" "$(field "$out/$best_name.json" p99_ms) ms" "reported"
printf "%-52s %-14s %s\n" "1 client, median latency" "$one ms" "<= $("$py" -c "print(round($b1_ms + 0.2, 3))") (rill bench batch 1 + 0.2 ms): $("$py" -c "print('met' if $one <= $b1_ms + 0.2 else 'NOT met')")"
echo
echo "goal ratios:"
echo "  throughput: served / offline batch $batch = $("$py" -c "print(round($best / $off_ips, 3))") (goal >= 0.9)"
echo "  latency: 1 client - rill bench batch 1 = $("$py" -c "print(round($one - $b1_ms, 3))") ms (goal <= 0.2 ms)"
