#!/bin/bash
# tp.sh: tensor-parallel decode of a Llama-shaped model, on a machine with
# N >= 2 GPUs (torch, transformers, numpy; NCCL_NVLS_ENABLE=0 is set here).
#
#   bash bench/llm/tp.sh RILL OUTDIR
#
# The model: hf.py make llama4k in f16 (hidden 4096, 16 layers, 32 heads, 8
# key/value heads, intermediate 14336, vocabulary 32000, random weights).
# Rill: @decode at context 128 (batch 1, --graph=on) and @prefill of 512
# tokens, on one GPU and as GPUS ranks (rill launch, --tensor-parallel,
# each rank its own GPU), REPEATS processes each, taking turns. PyTorch:
# tp_torch.py under torchrun on one GPU and on GPUS (eager, and compiled
# where that works; on GPUS only unless TORCH_GPUS says "1 GPUS"). Medians
# and ranges go to OUTDIR/tp.txt, with the host's time issuing a decode replay
# (rank 0's, on 1 GPU and on GPUS ranks).
# Environment: GPUS (2), REPEATS (3), ITERS (50), PYTHON (python3),
# TORCH_GPUS, TORCH_TIMEOUT (300 s), TORCH_EAGER (set: no torch.compile).
set -u
rill=$1; out=$2
here=$(dirname "$0")
py=${PYTHON:-python3}
n=${GPUS:-2}; reps=${REPEATS:-3}; iters=${ITERS:-50}
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
m=$out/llama4k
[ -f "$m/config.json" ] || $py "$here/hf.py" make "$m" llama4k --dtype f16 || exit 1
$py "$here/hf.py" ids "$out/ids512.npy" 1 512 32000
"$rill" llm "$m" -o "$out/decode.vmasm" --batch=1 --max-length=2048 -n 2 --ignore-eos || exit 1
"$rill" llm "$m" -o "$out/p512.vmasm" --batch=1 --max-length=513 -n 1 --ignore-eos || exit 1
# assembled once each, the weights linked (each rank reads its parts from the checkpoint)
for f in decode p512; do
  "$rill" asm "$out/$f.vmasm" --link-weights -o "$out/${f}1.vmbc" || exit 1
  "$rill" asm "$out/$f.vmasm" --link-weights --tensor-parallel="$n" -o "$out/$f$n.vmbc" || exit 1
done

bench() { # bench GPUS NAME ARGS...: one rill bench process (rank 0's JSON)
  local g=$1 name=$2; shift 2
  if [ "$g" = 1 ]; then
    "$rill" bench "$@" --device=cuda --graph=on --iterations=$iters --warmup=5 --json
  else
    "$rill" launch -n "$g" sh -c '"$0" bench "$@" --device=cuda:$LOCAL_RANK' "$rill" "$@" \
      --graph=on --iterations=$iters --warmup=5 --json
  fi > "$out/$name.json" 2> "$out/$name.log" || echo "$name failed: $(tail -2 "$out/$name.log")"
  $py -c 'import json, sys; print(json.load(open(sys.argv[1]))["median_ms"])' "$out/$name.json" 2> /dev/null >> "$out/$name.ms"
  $py -c 'import json, sys; print(json.load(open(sys.argv[1]))["replay_host_us"])' "$out/$name.json" 2> /dev/null >> "$out/$name.host"
}
rm -f "$out"/*.ms "$out"/*.host
for r in $(seq "$reps"); do
  for g in 1 "$n"; do
    bench $g decode$g "$out/decode$g.vmbc" --function=decode --input='i64[1]=5' --input='i64[1]=128'
    bench $g prefill$g "$out/p512$g.vmbc" --function=prefill --input=@"$out/ids512.npy" --input='i64[1]=512'
  done
done
# start-up: from rill launch to the first token of a GPUS-rank tensor-parallel
# rill llm (the checkpoint in the page cache after the runs above); then once
# more with --timings for its parts
$py "$here/hf.py" ids "$out/ids16.npy" 1 16 32000
t0=$(date +%s%N)
"$rill" launch -n "$n" sh -c '"$0" llm "$@" --device=cuda:$LOCAL_RANK' "$rill" "$m" --prompt-ids=@"$out/ids16.npy" -n 1 \
  --tensor-parallel="$n" --stats > "$out/startup.log" 2>&1 || echo "start-up run failed: $(tail -2 "$out/startup.log")"
echo "start-up, rill launch -n $n ... rill llm -n 1 --tensor-parallel=$n: $(( ($(date +%s%N) - t0) / 1000000 )) ms" > "$out/startup.txt"
# the same again with --timings: each rank's parts (conversion, assembly, weights, plans, first run) in startup-timings.log
"$rill" launch -n "$n" sh -c '"$0" llm "$@" --device=cuda:$LOCAL_RANK' "$rill" "$m" --prompt-ids=@"$out/ids16.npy" -n 1 \
  --tensor-parallel="$n" --timings > "$out/startup-timings.log" 2>&1 || echo "start-up run with --timings failed: $(tail -2 "$out/startup-timings.log")"
for g in ${TORCH_GPUS:-$n}; do
  if [ "$g" = 1 ]; then cmd=($py "$here/tp_torch.py"); else cmd=(torchrun --nproc-per-node="$g" "$here/tp_torch.py"); fi
  timeout "${TORCH_TIMEOUT:-300}" "${cmd[@]}" "$m" "$out/torch$g.json" --iters 5 ${TORCH_EAGER:+--no-compile} > "$out/torch$g.log" 2>&1 || echo "torch $g GPUs failed: $(tail -2 "$out/torch$g.log")"
done
$py - "$out" "$n" > "$out/tp.txt" <<'EOF'
import json, statistics, sys
out, n = sys.argv[1], sys.argv[2]
def ms(name):
    try:
        v = [float(x) for x in open("%s/%s.ms" % (out, name)).read().split()]
    except OSError:
        return None, ""
    return statistics.median(v), "%.3f (%.3f to %.3f, %d processes)" % (statistics.median(v), min(v), max(v), len(v))
def torch(g):
    try:
        return json.load(open("%s/torch%s.json" % (out, g)))
    except (OSError, ValueError):
        return {}
d1, s1 = ms("decode1"); dn, sn = ms("decode" + n)
p1, q1 = ms("prefill1"); pn, qn = ms("prefill" + n)
def host(name):
    try:
        v = [float(x) for x in open("%s/%s.host" % (out, name)).read().split()]
        return statistics.median(v) if v else None
    except OSError:
        return None
print("rill decode ctx 128, 1 GPU: %s ms a step" % s1)
print("rill decode ctx 128, %s GPUs: %s ms a step" % (n, sn))
if d1 and dn:
    print("rill speed-up on %s GPUs: %.3fx (goal: 1.7x on 2, 3.0x on 4)" % (n, d1 / dn))
print("rill prefill 512, 1 GPU: %s ms; %s GPUs: %s ms" % (q1, n, qn))
h1, hn = host("decode1"), host("decode" + n)
if h1 is not None and hn is not None:
    print("host time issuing a decode replay (rank 0): 1 GPU %.2f us, %s ranks %.2f us: %+.2f us (goal: within 2 us)" % (h1, n, hn, hn - h1))
for g in ("1", n):
    t = torch(g)
    if not t:
        continue
    print("torch %s GPU(s) (%s): decode eager %s ms, compiled %s ms; prefill 512 eager %s ms" % (
        g, t.get("split"), t.get("decode_ms_eager"), t.get("decode_ms_compiled", t.get("decode_compiled_error")),
        t.get("prefill512_ms_eager")))
t = torch(n)
best = min([x for x in (t.get("decode_ms_eager"), t.get("decode_ms_compiled")) if x] or [0])
if dn and best:
    print("rill / torch tensor parallel on %s GPUs, decode: %.3f (goal < 1)" % (n, dn / best))
EOF
cat "$out/tp.txt" "$out/startup.txt"; grep -i "rank 0\|time\|ms" "$out/startup.log" | head -12
grep "timings" "$out/startup-timings.log" | head -16
