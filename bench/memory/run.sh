#!/bin/bash
# run.sh: device memory and start-up on the GPU machine, Rill beside PyTorch.
#
#   bash bench/memory/run.sh RILL OUTDIR [MODEL...]   (default resnet50)
#
# For each model in f16 and f32 at batch 1 and 32: `rill bench --json`
# (graph mode) of the model converted by bench/models/convert.py at that
# batch (and, tagged "dyn", with the batch a shape variable in 1..32, whose
# buffers are planned for 32), its rill_vm_memory_info figures and start-up parts,
# beside PyTorch's torch.cuda.max_memory_allocated for the same model
# (bench/memory/torch_memory.py: eager, and CUDA-graph capture and replay).
# Every process is a fresh one; the first rill process of a model finds the
# kernel cache cold. Prints one line a case; JSON goes to OUTDIR.
set -u
rill=$1; out=$2; shift 2
models=${*:-resnet50}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for m in $models; do
  for dt in f16 f32; do
    python3 "$here/../models/convert.py" "$m" -o "$out" --dtype $dt --dynamic --static-sizes 1,32 > "$out/convert-$m-$dt.log" 2>&1 || { tail -5 "$out/convert-$m-$dt.log"; continue; }
    size=$([ "$m" = inception_v3 ] && echo 299 || echo 224)
    for b in 1 32; do
      python3 "$here/torch_memory.py" "$m" $dt $b > "$out/torch-$m-$dt-$b.json" 2> "$out/torch-$m-$dt-$b.err"
      for prog in "${m}_${dt}_dyn.$b" "${m}_${dt}_dyn"; do
        "$rill" bench "$out/$prog.vmasm" --device=cuda --graph=on --iterations=50 --input="$dt[$b,3,$size,$size]=random" --json \
          > "$out/rill-$prog-$b.json" 2> "$out/rill-$prog-$b.err"
        python3 - "$out/rill-$prog-$b.json" "$out/torch-$m-$dt-$b.json" "$prog" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1])); t = json.load(open(sys.argv[2]))
except Exception as e:
    print("%s: no figures (%s)" % (sys.argv[1], e)); sys.exit(0)
M = 1024 * 1024
m, s = r["memory"], r["startup"]
print("%s %s batch %d%s: rill peak %.1f MiB (weights %.1f, buffers peak %.1f, graphs %.1f, workspaces %.1f) | torch max_memory_allocated "
      "eager %.1f MiB, graph %.1f MiB (weights %.1f) | rill/torch-eager %.2f, rill/torch-graph %.2f | start-up: load %.0f ms, VM %.0f ms "
      "(kernels %.0f ms: %d compiled, %d from disk; plans %.0f ms), first run %.0f ms (capture %.0f ms); median run %.3f ms"
      % (t["model"], t["dtype"], t["batch"], " dyn" if sys.argv[3].endswith("_dyn") else "", m["peak"] / M, m["weights"] / M, m["buffers_peak"] / M, m["graphs"] / M, m["workspaces"] / M,
         t["eager_peak"] / M, t["graph_peak"] / M, t["weights"] / M, m["peak"] / t["eager_peak"], m["peak"] / t["graph_peak"],
         s["load_ms"], s["create_ms"], s["kernels_ms"], s["kernels_compiled"], s["kernels_from_disk"], s["plans_ms"], s["first_run_ms"],
         s["capture_ms"], r["median_ms"]))
PY
      done
    done
  done
done
