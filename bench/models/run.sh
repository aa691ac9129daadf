#!/bin/bash
# run.sh: the model benchmark, on the GPU machine (PyTorch, torchvision, CUDA).
#
#   bash bench/models/run.sh RILL OUTDIR [MODEL...]
#
# For each model (inception_v3, googlenet and resnet50 by default), in f32
# and f16, batch 1, in one run side by side:
#   1. convert.py: .vmasm, safetensors, input, PyTorch's output, and PyTorch's
#      own latency (eager, CUDA-graph replay);
#   2. rill tune --device=$dev: the profile that ios and tuned use (only
#      when one of them is among the schedules);
#   3. every schedule (none, wavefront, asap, rank, ios with the profile, and
#      "tuned": no --schedule, so the one rill tune measured best) is
#      assembled, run on the GPU, judged by compare.py against the exact
#      answer and PyTorch's error, and timed with rill bench;
#   4. the seeds' two-convolution case (batch 1, C in 375..750 channels, 3x3,
#      15x15): ios with the measured profile against none and two streams.
# Prints one table; logs and JSON go to OUTDIR. Environment: POLICIES (the
# schedules, all six by default), CUDNN (convolution paths: "auto", the
# default, takes the faster per shape; "legacy" sets RILL_CUDNN_LEGACY=1,
# "graph" RILL_CUDNN_GRAPH=1, "fused" RILL_CUDNN_FUSED=1 (a convolution's
# bias and activation in cuDNN's plan wherever it has one), "unfused"
# RILL_CUDNN_FUSED=0 (never); several side by side), ITERS (rill bench
# and PyTorch runs, 300 by default), REPEATS (rounds of rill bench processes,
# 3), TUNE_ITERS (rill tune --iterations, 20),
# TRACE (1: a traced run of each schedule, summed up in traces.txt),
# DEVICE (cuda; with cpu, PyTorch is not timed), DTYPES ("f32 f16"), TWOCONV (channel counts, "375 512 750"),
# GRAPH (rill's --graph modes side by side, "off" by default; "off on" times
# each schedule interpreted and replayed as a graph, tagged SCHEDULE+graph),
# COMPILE (1: PyTorch's torch.compile, reduce-overhead with freezing, too).
set -u
rill=$1; out=$2; shift 2
models=${*:-inception_v3 googlenet resnet50}
iters=${ITERS:-300}
tune_iters=${TUNE_ITERS:-20}
repeats=${REPEATS:-3}
dev=${DEVICE:-cuda}
dtypes=${DTYPES:-f32 f16}
timing="--time $iters${COMPILE:+ --compile}"; [ "$dev" = cuda ] || timing=""
graphs=${GRAPH:-off}
here=$(dirname "$0")
policies=${POLICIES:-none wavefront asap rank ios tuned}
paths=${CUDNN:-auto}
mkdir -p "$out"
fail=0
# A number in a JSON file by its keys, to 3 decimals, or "-".
jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2:]: d=d[k]
print('%.3f' % d)" "$@" 2>/dev/null || echo "-"; }
# The median over rounds of PREFIX.N.json's median_ms, and the range: "m[lo-hi]".
rounds() { python3 -c "import json,sys,glob,statistics as S
v=sorted(json.load(open(f))['median_ms'] for f in glob.glob(sys.argv[1] + '.*.json'))
print('%.3f[%.3f-%.3f]' % (S.median(v), v[0], v[-1]))" "$1" 2>/dev/null || echo "-"; }
# A schedule's name in the files and the table: with one convolution path,
# the schedule; with several, SCHEDULE.PATH.
tag_of() { local t=$1; [ "$paths" = auto ] || t="$t.$2"; [ "${3:-off}" = off ] || t="$t+graph"; echo "$t"; }
# The environment for a convolution path.
path_env() { case $1 in legacy) echo RILL_CUDNN_LEGACY=1;; graph) echo RILL_CUDNN_GRAPH=1;; fused) echo RILL_CUDNN_FUSED=1;; unfused) echo RILL_CUDNN_FUSED=0;; esac; }
# rill asm's options for a schedule and a profile (may be empty): "tuned" is
# no --schedule, so rill tune's pick; "ios" uses the profile; "ios-model" is
# ios with its cost model.
asm_args() { case $1 in
  tuned) echo ${2:+--profile=$2};; ios) echo --schedule=ios ${2:+--profile=$2};; ios-model) echo --schedule=ios;; *) echo --schedule=$1;; esac; }
streams() { "$rill" dis "$1" | grep -o "^func @main.*lowered(streams=[0-9]*" | grep -o "[0-9]*$"; }

for m in $models; do
  for dt in $dtypes; do
    stem=$out/${m}_$dt
    if ! python3 "$here/convert.py" "$m" -o "$out" --dtype "$dt" $timing > "$stem.convert.log" 2>&1; then
      echo "$m $dt: convert.py failed: $(tail -1 "$stem.convert.log")"; fail=1; continue
    fi
    # The profile is for ios and tuned alone.
    case " $policies " in *" ios "*|*" tuned "*|*" ios-model "*)
      "$rill" tune "$stem.vmasm" --device=$dev --iterations="$tune_iters" -o "$stem.profile.json" > "$stem.tune.log" 2>&1 ||
        { echo "$m $dt: rill tune failed: $(tail -1 "$stem.tune.log")"; fail=1; };;
    esac
    row="$m $dt"
    for k in eager cuda_graph torch_compile; do row="$row torch_${k#torch_}=$(jget "$stem.torch.json" $k median_ms)"; done
    for p in $policies; do
      prof=""; [ -s "$stem.profile.json" ] && prof=$stem.profile.json
      if ! "$rill" asm "$stem.vmasm" $(asm_args "$p" "$prof") -o "$stem.$p.vmbc" > "$stem.$p.asm.log" 2>&1; then
        echo "$m $dt $p: rill asm failed: $(tail -1 "$stem.$p.asm.log")"; fail=1; continue
      fi
      for cp in $paths; do for gm in $graphs; do
        tag=$(tag_of "$p" "$cp" "$gm")
        if ! env $(path_env $cp) "$rill" run "$stem.$p.vmbc" --device=$dev --graph=$gm --input="@$stem.input.npy" --output="@$stem.$tag.out.npy" > "$stem.$tag.check.log" 2>&1; then
          echo "$m $dt $tag: rill run failed: $(tail -1 "$stem.$tag.check.log")"; fail=1
        elif ! python3 "$here/compare.py" "$stem.$tag.out.npy" "$stem.expected.npy" "$stem.reference.npy" >> "$stem.$tag.check.log" 2>&1; then
          echo "$m $dt $tag: $(tail -1 "$stem.$tag.check.log")"; fail=1
        fi
        echo "$m $dt $tag: streams $(streams "$stem.$p.vmbc"), $(tail -1 "$stem.$tag.check.log")" >> "$out/checks.txt"
      done; done
    done
    # Timed in separate processes, REPEATS rounds that take turns: medians
    # of one process vary more between processes (about 15% on the H100 we
    # measured) than within one, so each figure is the median of the rounds'
    # medians, with their range.
    tags=""
    for r in $(seq "$repeats"); do
      for p in $policies; do
        [ -f "$stem.$p.vmbc" ] || continue
        for cp in $paths; do for gm in $graphs; do
          tag=$(tag_of "$p" "$cp" "$gm")
          [ "$r" = 1 ] && tags="$tags $tag"
          env $(path_env $cp) "$rill" bench "$stem.$p.vmbc" --device=$dev --graph=$gm --iterations="$iters" --input="@$stem.input.npy" --json > "$stem.$tag.bench.$r.json" 2> "$stem.$tag.bench.log"
        done; done
      done
    done
    for tag in $tags; do row="$row $tag=$(rounds "$stem.$tag.bench")"; done
    # TRACE=1: one traced process per schedule; its summary goes to traces.txt.
    for p in $policies; do
      [ "${TRACE:-0}" = 1 ] || break
      [ -f "$stem.$p.vmbc" ] || continue
      for cp in $paths; do
        tag=$(tag_of "$p" "$cp")
        env $(path_env $cp) "$rill" bench "$stem.$p.vmbc" --device=$dev --iterations=20 --input="@$stem.input.npy" --trace="$stem.$tag.trace.json" --json \
          > "$stem.$tag.trace.bench.json" 2>> "$stem.$tag.bench.log"
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); t=d['trace']
print('%s: median %.3f ms; span %.0f us, critical path %.0f us (%.0f ops); busy %s' % (sys.argv[2], d['median_ms'], t['span_us'],
        t['critical_path_us'], t['critical_path_ops'], ' '.join('%d:%.0f%%' % (s['stream'], 100 * s['busy']) for s in t['streams'])))" \
          "$stem.$tag.trace.bench.json" "$m $dt $tag" >> "$out/traces.txt" 2>/dev/null || echo "$m $dt $tag: no trace" >> "$out/traces.txt"
      done
    done
    echo "$row tuned_is=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('best', '-'))" "$stem.profile.json" 2>/dev/null)" | tee -a "$out/models.txt"
  done
done

# The seeds' two-convolution case.
for c in ${TWOCONV-375 512 750}; do
  src=$out/twoconv_$c.vmasm
  t="f32[1,$c,15,15]"
  cat > "$src" <<EOF
# two independent 3x3 convolutions on one 15x15 input, $c channels, batch 1
func @main(%x: $t, %w1: f32[$c,$c,3,3], %w2: f32[$c,$c,3,3]) -> ($t, $t) {
  %a = conv2d(%x, %w1) {stride=[1,1], padding=[1,1], dilation=[1,1], groups=1}
  %b = conv2d(%x, %w2) {stride=[1,1], padding=[1,1], dilation=[1,1], groups=1}
  return %a, %b
}
EOF
  "$rill" tune "$src" --device=$dev --iterations="$tune_iters" -o "$out/twoconv_$c.profile.json" > "$out/twoconv_$c.tune.log" 2>&1 ||
    { echo "twoconv $c: rill tune failed: $(tail -1 "$out/twoconv_$c.tune.log")"; fail=1; }
  row="twoconv C=$c"
  for p in none wavefront ios ios-model tuned; do
    "$rill" asm "$src" $(asm_args "$p" "$out/twoconv_$c.profile.json") -o "$out/twoconv_$c.$p.vmbc" > /dev/null 2>&1 || { echo "twoconv $c $p: asm failed"; fail=1; continue; }
    "$rill" bench "$out/twoconv_$c.$p.vmbc" --device=$dev --iterations="$iters" --json > "$out/twoconv_$c.$p.bench.json" 2> /dev/null
    row="$row $p=$(jget "$out/twoconv_$c.$p.bench.json" median_ms)(streams $(streams "$out/twoconv_$c.$p.vmbc"))"
  done
  echo "$row  profile: $(python3 -c "import json,sys; o=json.load(open(sys.argv[1]))['ops'][0]; print('one %.1f us, two at once %.1f us' % (o['us'], o['two_us']))" "$out/twoconv_$c.profile.json" 2>/dev/null)" | tee -a "$out/models.txt"
done
exit $fail
