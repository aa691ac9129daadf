#!/bin/bash
# onnx.sh: torchvision models through ONNX, on the GPU machine (PyTorch,
# torchvision, onnxruntime where installed).
#
#   bash bench/models/onnx.sh RILL OUTDIR [MODEL...]
#
# For each model (resnet50, inception_v3 and googlenet by default), batch 1,
# in each of $DTYPES (f32 by default):
#   1. convert.py --onnx: the model exported with torch.onnx.export (opset 17)
#      beside the torch.fx conversion (.vmasm), with the same weights, input,
#      PyTorch's output and the exact answer (double precision);
#   2. onnxruntime on the same .onnx file: its CUDA provider where the
#      installed package has one (inputs and outputs bound on the GPU), else
#      the provider that ran, named in the table; output checked by compare.py;
#   3. Rill on the .onnx file (imported in memory) and on the torch.fx
#      .vmasm: each run on the GPU and judged by compare.py against the exact
#      answer and PyTorch's error (for the .onnx, also onnxruntime's on the
#      same file: the exporter folds batch norm into the convolutions in the
#      model's dtype, a rounding the file carries), then timed with rill bench (median of
#      $ITERS runs, interpreted and replayed as a CUDA graph), with the
#      kernels launched per run (the op calls rill bench counts) side by side.
# The model `encoder` (in the default list, last) is the transformer encoder
# of convert.py (BERT-base shapes; ENC_CONFIG=L,H,HEADS,I for another), batch
# 1, exported with its sequence axis dynamic (dynamic_axes: dim_param S):
# `rill import --shape S=1..512` must give a module with the shape variable S
# (dim S in [1, 512], input DTYPE[1,S,HIDDEN]), which runs at each of
# $ENC_LENGTHS and is judged by compare.py against PyTorch and the exact
# answer at each (the .onnx file run directly too, at the first length);
# any mismatch fails the run. Then a table row at ENC_TIME_LENGTH (64, or the
# first length when it is not among them): the imported module and
# convert.py's torch.fx one, both with S symbolic, timed like the CNNs, and
# onnxruntime on the same file (PyTorch's columns stay empty:
# bench/dynamic/run.sh times PyTorch per length).
# Prints one table; logs and JSON go to OUTDIR. Environment: ITERS (300),
# DTYPES ("f32"), DEVICE (cuda), ENC_CONFIG (12,768,12,3072), ENC_LENGTHS
# ("1 7 64 200 512").
set -u
rill=$1; out=$2; shift 2
models=${*:-resnet50 inception_v3 googlenet encoder}
iters=${ITERS:-300}
dtypes=${DTYPES:-f32}
dev=${DEVICE:-cuda}
here=$(dirname "$0")
mkdir -p "$out"
fail=0
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: d=d[k]
print('%.3f' % d if isinstance(d, float) else d)" "$@" 2>/dev/null || echo "-"; }
# kernels per run: the op calls rill bench counted
kernels() { python3 -c "import json,sys; d=json.load(open(sys.argv[1]))
print('%.0f' % sum(o['calls_per_run'] for o in d['ops']))" "$1" 2>/dev/null || echo "-"; }

ort_py='
import json, statistics, sys, time
import numpy as np
import onnxruntime as ort
path, inp, outp, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
avail = ort.get_available_providers()
want = ["CUDAExecutionProvider", "CPUExecutionProvider"] if "CUDAExecutionProvider" in avail else ["CPUExecutionProvider"]
so = ort.SessionOptions()
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
s = ort.InferenceSession(path, so, providers=want)
prov = s.get_providers()[0]
x = np.load(inp)
name, oname = s.get_inputs()[0].name, s.get_outputs()[0].name
if prov == "CUDAExecutionProvider":
    b = s.io_binding()
    xv = ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    b.bind_ortvalue_input(name, xv)
    b.bind_output(oname, "cuda", 0)
    def step():
        s.run_with_iobinding(b)
        b.synchronize_outputs()
    def result():
        return b.copy_outputs_to_cpu()[0]
else:
    def step():
        s.run([oname], {name: x})
    def result():
        return s.run([oname], {name: x})[0]
for _ in range(max(10, n // 10)):
    step()
t = []
for _ in range(n):
    t0 = time.perf_counter()
    step()
    t.append((time.perf_counter() - t0) * 1e3)
np.save(outp, result())
json.dump({"provider": prov, "available": avail, "median_ms": statistics.median(t), "min_ms": min(t), "version": ort.__version__}, sys.stdout)
'
have_ort=1; python3 -c "import onnxruntime" 2> /dev/null || have_ort=0
[ $have_ort = 1 ] || echo "onnxruntime: not installed (pip install onnxruntime-gpu): its column stays empty"
cols="%-14s %-4s %-9s %-9s %-9s %-11s %-11s %-11s %-11s %-8s %-8s %s\n"
# The files of one timed case share a prefix P: P.input.npy, P.expected.npy,
# P.reference.npy (convert.py's), P.ort.*, P.{onnx,fx}.{off,on}.bench.json.
# run_ort P MODEL LABEL: onnxruntime on MODEL, timed and judged; sets prov.
run_ort() {
  prov="-"
  [ $have_ort = 1 ] || return 0
  if python3 -c "$ort_py" "$2" "$1.input.npy" "$1.ort.out.npy" "$iters" > "$1.ort.json" 2> "$1.ort.log"; then
    prov=$(jget "$1.ort.json" provider)
    python3 "$here/compare.py" "$1.ort.out.npy" "$1.expected.npy" "$1.reference.npy" > "$1.ort.compare.log" 2>&1
    echo "$3 onnxruntime ($prov): $(cat "$1.ort.compare.log")"
  else
    echo "$3 onnxruntime failed: $(tail -1 "$1.ort.log")"
  fi
}
# bench_pair P ONNX FX LABEL: rill bench of the .onnx path and the torch.fx one, interpreted and replayed.
bench_pair() {
  local src f gm
  for src in onnx fx; do
    f=$2; [ $src = fx ] && f=$3
    for gm in off on; do
      "$rill" bench "$f" --device=$dev --graph=$gm --iterations="$iters" --input="@$1.input.npy" --json > "$1.$src.$gm.bench.json" 2> "$1.$src.$gm.bench.log" ||
        { echo "$4 rill bench $src --graph=$gm failed: $(tail -1 "$1.$src.$gm.bench.log")"; fail=1; }
    done
  done
}
# row NAME DTYPE EAGER CUDA_GRAPH P: one line of the table.
row() {
  printf "$cols" "$1" "$2" "$3" "$4" "$(jget "$5.ort.json" median_ms)" \
    "$(jget "$5.onnx.off.bench.json" median_ms)" "$(jget "$5.onnx.on.bench.json" median_ms)" \
    "$(jget "$5.fx.off.bench.json" median_ms)" "$(jget "$5.fx.on.bench.json" median_ms)" \
    "$(kernels "$5.onnx.off.bench.json")" "$(kernels "$5.fx.off.bench.json")" "$prov" | tee -a "$out/table.txt"
}
# The encoder with a dynamic length through ONNX: checks only (no table row).
encoder() {
  local dt=$1 stem=$out/encoder_${1}_dyn lengths=${ENC_LENGTHS:-1 7 64 200 512} n ok=0 total=0
  if ! python3 "$here/convert.py" encoder -o "$out" --dtype "$dt" --encoder-config "${ENC_CONFIG:-12,768,12,3072}" --dynamic \
       --sizes "$(echo $lengths | tr ' ' ',')" --onnx > "$stem.convert.log" 2>&1; then
    echo "encoder $dt: convert.py failed: $(tail -1 "$stem.convert.log")"; fail=1; return
  fi
  if ! "$rill" import "$stem.onnx" --shape S=1..512 -o "$stem.imported.vmasm" > "$stem.import.log" 2>&1; then
    echo "encoder $dt: rill import failed: $(tail -1 "$stem.import.log")"; fail=1; return
  fi
  if ! grep -q "^dim S in \[1, 512\]" "$stem.imported.vmasm" || ! grep -q "^func @main(%x: $dt\[1,S,[0-9]*\])" "$stem.imported.vmasm"; then
    echo "encoder $dt: FAIL: the imported module has no shape variable S: $(grep -m1 '^func' "$stem.imported.vmasm" | cut -c1-200)"; fail=1; return
  fi
  for n in $lengths; do
    total=$((total + 1))
    if "$rill" run "$stem.imported.vmasm" --device=$dev --graph=off --input="@$stem.$n.input.npy" --output="@$stem.$n.onnx.out.npy" > "$stem.$n.run.log" 2>&1 &&
       python3 "$here/compare.py" "$stem.$n.onnx.out.npy" "$stem.$n.expected.npy" "$stem.$n.reference.npy" > "$stem.$n.compare.log" 2>&1; then
      ok=$((ok + 1)); echo "encoder $dt S=$n (imported, one module): $(cat "$stem.$n.compare.log")"
    else
      echo "encoder $dt S=$n (imported, one module): FAIL: $(tail -1 "$stem.$n.compare.log" 2>/dev/null || grep -v 'ran interpreted' "$stem.$n.run.log" | tail -1)"; fail=1
    fi
  done
  n=${lengths%% *}
  if "$rill" run "$stem.onnx" --device=$dev --graph=off --input="@$stem.$n.input.npy" --output="@$stem.$n.direct.out.npy" > "$stem.direct.log" 2>&1 &&
     python3 "$here/compare.py" "$stem.$n.direct.out.npy" "$stem.$n.expected.npy" "$stem.$n.reference.npy" > "$stem.direct.compare.log" 2>&1; then
    echo "encoder $dt S=$n (the .onnx run directly): $(cat "$stem.direct.compare.log")"
  else
    echo "encoder $dt S=$n (the .onnx run directly): FAIL: $(tail -1 "$stem.direct.compare.log" 2>/dev/null || tail -1 "$stem.direct.log")"; fail=1
  fi
  echo "encoder $dt: dynamic length through ONNX: $ok of $total lengths right ($(grep -m1 '^func' "$stem.imported.vmasm" | cut -c1-80))" | tee -a "$out/table.txt"
  # A table row at one length: the imported module and the torch.fx one
  # (both with S symbolic), interpreted and replayed, and onnxruntime on the
  # same file (PyTorch's own times are bench/dynamic's).
  n=${ENC_TIME_LENGTH:-64}
  case " $lengths " in *" $n "*) ;; *) n=${lengths%% *};; esac
  bench_pair "$stem.$n" "$stem.imported.vmasm" "$stem.vmasm" "encoder $dt S=$n"
  run_ort "$stem.$n" "$stem.onnx" "encoder $dt S=$n"
  row "encoder(S=$n)" "$dt" - - "$stem.$n"
}

printf "$cols" model dtype torch_eag torch_gr ort rill_onnx rill_onnx+g rill_fx rill_fx+g k_onnx k_fx ort_provider
for m in $models; do
  if [ "$m" = encoder ]; then
    for dt in $dtypes; do encoder "$dt"; done
    continue
  fi
  for dt in $dtypes; do
    stem=$out/${m}_$dt
    timing="--time $iters"; [ "$dev" = cuda ] || timing=""
    if ! python3 "$here/convert.py" "$m" -o "$out" --dtype "$dt" $timing --onnx > "$stem.convert.log" 2>&1; then
      echo "$m $dt: convert.py failed: $(tail -1 "$stem.convert.log")"; fail=1; continue
    fi
    "$rill" import "$stem.onnx" -o "$stem.imported.vmasm" > "$stem.import.log" 2>&1 ||
      { echo "$m $dt: rill import failed: $(tail -1 "$stem.import.log")"; fail=1; continue; }
    run_ort "$stem" "$stem.onnx" "$m $dt"
    for src in onnx fx; do
      # The .onnx path is also judged against onnxruntime's error on the same
      # file, which carries the exporter's roundings (compare.py's PEER).
      f=$stem.onnx peer=""; [ $src = fx ] && f=$stem.vmasm
      [ $src = onnx ] && [ -s "$stem.ort.out.npy" ] && peer=$stem.ort.out.npy
      if "$rill" run "$f" --device=$dev --input="@$stem.input.npy" --output="@$stem.$src.out.npy" > "$stem.$src.run.log" 2>&1 &&
         python3 "$here/compare.py" "$stem.$src.out.npy" "$stem.expected.npy" "$stem.reference.npy" $peer > "$stem.$src.compare.log" 2>&1; then
        echo "$m $dt rill $src: $(cat "$stem.$src.compare.log")"
      else
        echo "$m $dt rill $src: FAIL: $(tail -1 "$stem.$src.compare.log" 2>/dev/null || tail -1 "$stem.$src.run.log")"; fail=1
      fi
    done
    bench_pair "$stem" "$stem.onnx" "$stem.vmasm" "$m $dt"
    row "$m" "$dt" "$(jget "$stem.torch.json" eager median_ms)" "$(jget "$stem.torch.json" cuda_graph median_ms)" "$stem"
  done
done
echo "(medians in ms of $iters runs, batch 1 on $dev; +g: replayed as a CUDA graph; k_*: kernels per run, the op calls rill bench counted)"
exit $fail
