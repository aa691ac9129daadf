#!/bin/bash
# run.sh: transposes' share of device time before and after the global
# layout pass, batch norms as affines and norms in fusion (GPU machine,
# PyTorch and torchvision for the export).
#
#   bash bench/layout/run.sh RILL_BEFORE RILL_AFTER OUTDIR [MODEL...]
#
# RILL_BEFORE and RILL_AFTER are two `rill` commands (say main's build and
# this one's, both -Dcuda=enabled). For each model (convnext_tiny and
# densenet121 by default) at batch $BATCH (32) in f16: export.py writes the
# ONNX file and an input; each rill runs it interpreted (--graph=off) with
# --trace, $ITERS (20) runs after the warm-up, and transposes.py prints the
# device time a run, the transposes' count, time and share, the batch
# norms' and fused kernels' beside them; then the median time of
# `rill bench` in graph mode (--iterations=$BENCH_ITERS, 200), and the op
# counts of `rill dis` (transpose, batch_norm, fused, layer_norm with an
# epilogue). Results go to OUTDIR/layout.txt. The goal (issue: no model
# spends more than 3% of its device time in transposes).
set -u
before=$1; after=$2; out=$3; shift 3
models=${*:-convnext_tiny densenet121 swin_t}
batch=${BATCH:-32}; iters=${ITERS:-20}; bench_iters=${BENCH_ITERS:-200}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for m in $models; do
  python3 "$here/export.py" "$m" "$out" --batch "$batch" > /dev/null || { echo "$m: export failed" | tee -a "$out/layout.txt"; continue; }
  for side in before after; do
    rill=$before; [ $side = after ] && rill=$after
    "$rill" asm "$out/$m.onnx" -o "$out/$m.$side.vmbc" 2> "$out/$m.$side.log" || { echo "$m $side: asm failed" | tee -a "$out/layout.txt"; continue; }
    "$rill" dis "$out/$m.$side.vmbc" > "$out/$m.$side.dis" 2>> "$out/$m.$side.log"
    python3 - "$out/$m.$side.dis" "$m $side" >> "$out/layout.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
ops = dict(re.findall(r"^op \$(\d+) = (\w+)\(", text, re.M))
counts = {}
for i in re.findall(r"invoke \$(\d+),", text):
    counts[ops[i]] = counts.get(ops[i], 0) + 1
epi = len(re.findall(r"^op \$\d+ = (?:layer_norm|softmax|log_softmax)\(.*(?:epilogue|prologue)=", text, re.M))
print(f"{sys.argv[2]}: invokes {sum(counts.values())}; transpose {counts.get('transpose', 0)}, batch_norm {counts.get('batch_norm', 0)}, "
      f"fused {counts.get('fused', 0)}, conv2d {counts.get('conv2d', 0)}; norm entries with a prologue or epilogue {epi}")
PY
    "$rill" bench "$out/$m.$side.vmbc" --device=cuda --graph=off --iterations="$iters" --input="@$out/$m.input.npy" \
      --trace="$out/$m.$side.trace.json" > /dev/null 2>> "$out/$m.$side.log"
    python3 "$here/transposes.py" "$out/$m.$side.trace.json" "$m $side (bs$batch f16, interpreted)" | tee -a "$out/layout.txt"
    "$rill" bench "$out/$m.$side.vmbc" --device=cuda --graph=on --iterations="$bench_iters" --input="@$out/$m.input.npy" --json \
      > "$out/$m.$side.bench.json" 2>> "$out/$m.$side.log"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('%s: graph median %.3f ms' % (sys.argv[2], d['median_ms']))" \
      "$out/$m.$side.bench.json" "$m $side" | tee -a "$out/layout.txt"
  done
done
