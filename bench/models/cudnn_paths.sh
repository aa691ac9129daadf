#!/bin/bash
# cudnn_paths.sh: convolutions through cuDNN's graph API against its legacy
# call, side by side in one run, on the GPU machine.
#
#   bash bench/models/cudnn_paths.sh RILL OUTDIR [MODEL]
#
# For the model (inception_v3 by default) in f32 and f16, batch 1: PyTorch's
# latency (eager, CUDA graph), then Rill's under none and asap, with
# RILL_CUDNN_LEGACY=1 (every convolution through cudnnConvolutionForward) and
# without (graph API plans where they are faster), each checked by compare.py.
set -u
rill=$1; out=$2; m=${3:-inception_v3}
iters=${ITERS:-150}
here=$(dirname "$0")
mkdir -p "$out"
for dt in f32 f16; do
  stem=$out/${m}_$dt
  python3 "$here/convert.py" "$m" -o "$out" --dtype "$dt" --time "$iters" > "$stem.convert.log" 2>&1 || { echo "convert failed: $(tail -1 "$stem.convert.log")"; continue; }
  row="$m $dt $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('torch_eager=%.3f torch_cuda_graph=%.3f' % (d['eager']['median_ms'], d['cuda_graph']['median_ms']))" "$stem.torch.json")"
  for p in none asap; do
    "$rill" asm "$stem.vmasm" --schedule=$p -o "$stem.$p.vmbc" || continue
    for legacy in 1 0; do
      tag=$p.$([ $legacy = 1 ] && echo legacy || echo graph)
      RILL_CUDNN_LEGACY=$legacy "$rill" run "$stem.$p.vmbc" --device=cuda --input="@$stem.input.npy" --output="@$stem.$tag.out.npy" > "$stem.$tag.log" 2>&1 &&
        echo "$m $dt $tag: $(python3 "$here/compare.py" "$stem.$tag.out.npy" "$stem.expected.npy" "$stem.reference.npy")" ||
        echo "$m $dt $tag: run failed: $(tail -1 "$stem.$tag.log")"
      RILL_CUDNN_LEGACY=$legacy "$rill" bench "$stem.$p.vmbc" --device=cuda --iterations="$iters" --input="@$stem.input.npy" --json > "$stem.$tag.bench.json" 2>/dev/null
      row="$row $tag=$(python3 -c "import json,sys; print('%.3f' % json.load(open(sys.argv[1]))['median_ms'])" "$stem.$tag.bench.json" 2>/dev/null || echo -)"
    done
  done
  echo "$row"
done
