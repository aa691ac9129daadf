#!/bin/bash
# run.sh: the attention op alone against PyTorch's scaled_dot_product_attention on the same shapes.
#
#   bash bench/attention/run.sh [BUILD_DIR] [ROUNDS]     (default build-gpu, 2)
#
# Each program here is one `attention` op at a transformer's shapes: ViT-B/16
# at batch 1 and 32 ([B,197,12,64], layout="bshd"), BERT-base at sequence 128
# with a padding mask (batch 1 and 32), and a causal prompt of 1024 tokens with
# 32 query and 8 key-value heads (D=128). `rill bench --graph=on` gives the
# median of 200 replays in ms (a replay of a one-op graph each, its launch
# included), ROUNDS processes each, taking turns; sdpa.py times torch's SDPA
# on the same shapes as device time (a CUDA graph of 200 calls replayed, the
# median of 5, per call), so at batch 1 Rill's figure carries a graph
# launch that torch's does not. The ratio is Rill's median over torch's.
# Needs -Dcuda=enabled and PyTorch (PYTHON, default python3).
set -u
build=${1:-build-gpu}; rounds=${2:-2}; py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$build/tools/rill" ] || { echo "no $build/tools/rill: build first (meson setup $build -Dcuda=enabled && ninja -C $build)"; exit 1; }
progs="vit1 vit32 bert1 bert32 llama"
declare -A ms
for r in $(seq "$rounds"); do
  for p in $progs; do
    v=$("$build/tools/rill" bench "$here/$p.vmasm" --device=cuda --graph=on --iterations=200 --json 2> /dev/null \
        | "$py" -c 'import json, sys; print(json.load(sys.stdin)["median_ms"])') || { echo "$p: rill bench failed"; exit 1; }
    ms[$p]="${ms[$p]:-} $v"
  done
done
declare -A sd
while read -r _ _ name us _; do sd[$name]=$us; done < <("$py" "$here/sdpa.py")
for p in $progs; do
  "$py" - "$p" "${sd[$p]:-0}" ${ms[$p]} <<'PY'
import statistics, sys
name, torch_us, runs = sys.argv[1], float(sys.argv[2]), [float(x) * 1000 for x in sys.argv[3:]]
med = statistics.median(runs)
print(f"{name:7s} rill {med:8.1f} us (range {min(runs):.1f} to {max(runs):.1f})  torch sdpa {torch_us:8.1f} us  ratio {med / torch_us if torch_us else 0:.2f}")
PY
done
