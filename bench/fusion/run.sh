#!/bin/bash
# run.sh RILL OUT [N]: the fusion benchmarks on the GPU (the programs:
# make.py). N f32 elements (64M by default). Each program is timed by
# `rill bench --json --graph=off` (per-op device times, from events around
# each op, and whole runs) at -O1 and the unfused ones at -O0; PyTorch's copy, eager and compiled sigmoid and its
# fused and foreach Adam in the same run (torch_ref.py); report.py prints the
# ratios. Logs and JSON stay in OUT.
set -u
rill=$1; out=$2; n=${3:-67108864}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
echo "$n" > "$out/n"
python3 "$here/make.py" "$out" "$n" || exit 1
it=${RILL_FUSION_ITERATIONS:-30}
for p in copy sigmoid adam; do
  "$rill" bench "$out/$p.vmasm" --device=cuda --graph=off --iterations="$it" --warmup=5 --json > "$out/$p.json" 2> "$out/$p.log" || echo "rill bench $p failed: $(tail -2 "$out/$p.log")"
done
for p in sigmoid adam; do
  "$rill" bench -O0 "$out/$p.vmasm" --device=cuda --graph=off --iterations="$it" --warmup=5 --json > "$out/$p-O0.json" 2> "$out/$p-O0.log" || echo "rill bench -O0 $p failed"
done
if python3 -c "import torch" 2> /dev/null; then
  python3 "$here/torch_ref.py" "$n" > "$out/torch.json" 2> "$out/torch.log" || echo "torch_ref.py failed: $(tail -2 "$out/torch.log")"
fi
python3 "$here/report.py" "$out" | tee "$out/report.txt"
