#!/bin/bash
# run.sh: shape variables on the GPU machine (PyTorch, torchvision, CUDA).
#
#   bash bench/dynamic/run.sh RILL OUTDIR
#
# 1. The transformer encoder of bench/models/convert.py with BERT-base shapes
#    (12 layers, hidden 768, 12 heads, intermediate 3072), batch 1, $DTYPE,
#    converted once with its length a shape variable (dim S in [1, 512]): one
#    dynamic module, assembled once (--link-weights), and the static twins
#    (the program traced at each timed length, same weights). With TUNE=1
#    each is tuned as a user would: `rill tune` of its source (the dynamic
#    module with --shapes=S=<the timed lengths>: kernel choice trees, and
#    the schedule timed at those lengths; each twin at its own length),
#    then `rill asm --profile`; the tuning times are printed, and every
#    later step takes the tuned modules.
# 2. Dispatch check: every length $CHECK_MIN..$CHECK_MAX and each timed length, run
#    once through the dynamic module (the timed lengths with --graph=on too) and judged by bench/models/compare.py
#    against the exact answer (double precision) and PyTorch's own error;
#    the static twins too at the timed lengths. A run outside that allowance
#    is judged again with the module run on the cpu device as compare.py's
#    peer (the program's own rounding: each op exact, rounded once to the
#    dtype), and the line says so (PEER_CPU=0: no second judgement). Any
#    mismatch fails the run.
# 3. Timing at $LENGTHS: the dynamic module and the static one for that length
#    (rill bench --json, each --graph mode of $GRAPH), PyTorch eager,
#    torch.compile(dynamic=True) and CUDA-graph replay per length
#    (helper.py torch), in $REPEATS rounds of separate processes taking turns;
#    each figure is the median of the rounds' medians, with their range.
# 4. The CNNs ($CNNS) with a symbolic batch (dim B in [1, 32]): checked at
#    each of $BATCHES like the encoder, and timed against their static
#    modules per batch.
# Prints one table (helper.py table) with the ratios beside the goals; logs
# and JSON go to OUTDIR. Exits 1 on a wrong result or a failed run.
# Environment: DEVICE (cuda; cpu checks and times Rill only, no PyTorch
# timing), DTYPE (f16 on cuda, f32 on cpu), CONFIG (encoder
# L,HIDDEN,HEADS,INTER: 12,768,12,3072), LENGTHS ("1 8 32 64 128 256 384
# 512"), CHECK_MIN (1) and CHECK_MAX (128: the range can be split over
# calls), ITERS (200), REPEATS (3), GRAPH ("off on"), CNNS
# ("resnet50 inception_v3 googlenet"; "" for none), BATCHES ("1 8 32"),
# CNN_SIZE (image size; the models' own by default), COMPILE (1; 0 leaves
# torch.compile out), TUNE (1; 0 times the modules untuned), TUNE_ITERS
# (rill tune --iterations, 20), PYTHON (python3).
set -u
rill=$1; out=$2
dev=${DEVICE:-cuda}
dt=${DTYPE:-$([ "$dev" = cpu ] && echo f32 || echo f16)}
config=${CONFIG:-12,768,12,3072}
lengths=${LENGTHS:-1 8 32 64 128 256 384 512}
check_min=${CHECK_MIN:-1}
check_max=${CHECK_MAX:-128}
iters=${ITERS:-200}
repeats=${REPEATS:-3}
graphs=${GRAPH:-off on}
cnns=${CNNS-resnet50 inception_v3 googlenet}
batches=${BATCHES:-1 8 32}
tune=${TUNE:-1}
tune_iters=${TUNE_ITERS:-20}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
models=$here/../models
mkdir -p "$out"
fail=0
csv() { echo "$*" | tr -s ' ' ',' | sed 's/^,//; s/,$//'; }
# check NAME MODULE STEM.N [GRAPH]: one run (--graph=GRAPH, off by default) judged by compare.py (a line in checks.txt)
check() {
  local name=$1 mod=$2 s=$3 gm=${4:-off}
  if ! "$rill" run "$mod" --device=$dev --graph=$gm --input="@$s.input.npy" --output="@$s.$name.out.npy" > "$s.$name.run.log" 2>&1; then
    echo "$(basename "$s") $name: rill run failed: $(grep -v 'ran interpreted' "$s.$name.run.log" | tail -1)" | tee -a "$out/checks.txt"; fail=1; return
  fi
  if "$py" "$models/compare.py" "$s.$name.out.npy" "$s.expected.npy" "$s.reference.npy" > "$s.$name.compare.log" 2>&1; then
    echo "$(basename "$s") $name: $(tail -1 "$s.$name.compare.log")" >> "$out/checks.txt"
  elif [ "$dev" != cpu ] && [ "${PEER_CPU:-1}" = 1 ] &&
       timeout 900 "$rill" run "$mod" --device=cpu --input="@$s.input.npy" --output="@$s.$name.cpu.npy" > "$s.$name.cpu.log" 2>&1 &&
       "$py" "$models/compare.py" "$s.$name.out.npy" "$s.expected.npy" "$s.reference.npy" "$s.$name.cpu.npy" > "$s.$name.compare.log" 2>&1; then
    # The program's own f16 semantics (the cpu device: each op exact, rounded
    # once) can be further from the exact answer than PyTorch's kernels are;
    # then the device is judged as a peer runtime is (compare.py's PEER).
    echo "$(basename "$s") $name: $(tail -1 "$s.$name.compare.log") (the cpu device's run of the module as its peer)" | tee -a "$out/checks.txt"
  else
    echo "$(basename "$s") $name: $(tail -1 "$s.$name.compare.log")" | tee -a "$out/checks.txt"; fail=1
  fi
  rm -f "$s.$name.out.npy" "$s.$name.cpu.npy"
}
# bench TAG MODULE STEM.N ROUND: rill bench in each graph mode to STEM.N.TAG.MODE.bench.ROUND.json
bench() {
  local tag=$1 mod=$2 s=$3 r=$4 gm
  for gm in $graphs; do
    if ! "$rill" bench "$mod" --device=$dev --graph=$gm --iterations="$iters" --input="@$s.input.npy" --json \
         > "$s.$tag.$gm.bench.$r.json" 2> "$s.$tag.$gm.bench.log"; then
      rm -f "$s.$tag.$gm.bench.$r.json"
      [ "$r" = 1 ] && echo "$(basename "$s") $tag --graph=$gm: rill bench failed: $(tail -1 "$s.$tag.$gm.bench.log")"
      fail=1
    fi
  done
}

# 1. The encoder, converted once.
enc=encoder_${dt}_dyn
stem=$out/$enc
sizes=$( (seq "$check_min" "$check_max"; for n in $lengths; do echo "$n"; done) | sort -n -u)
t0=$(date +%s)
if ! "$py" "$models/convert.py" encoder -o "$out" --dtype "$dt" --encoder-config "$config" --dynamic --range 1,512 \
     --sizes "$(csv $sizes)" --static-sizes "$(csv $lengths)" > "$stem.convert.log" 2>&1; then
  echo "encoder: convert.py failed: $(tail -1 "$stem.convert.log")"; exit 1
fi
"$rill" asm "$stem.vmasm" --link-weights -o "$stem.vmbc" > "$stem.asm.log" 2>&1 || { echo "encoder: rill asm failed: $(tail -1 "$stem.asm.log")"; exit 1; }
for n in $lengths; do
  "$rill" asm "$stem.$n.vmasm" --link-weights -o "$stem.$n.vmbc" > "$stem.$n.asm.log" 2>&1 ||
    { echo "encoder S=$n: rill asm of the static twin failed: $(tail -1 "$stem.$n.asm.log")"; fail=1; }
done
echo "encoder: converted and assembled in $(( $(date +%s) - t0 )) s"
# tuned STEM [--shapes=...]: rill tune STEM.vmasm (its ops and schedules), then STEM.vmbc reassembled from STEM.vmasm with the profile
tuned() {
  local s=$1; shift
  if ! "$rill" tune "$s.vmasm" --device=$dev --iterations="$tune_iters" "$@" -o "$s.profile.json" > "$s.tune.log" 2>&1; then
    echo "$(basename "$s"): rill tune failed: $(tail -1 "$s.tune.log")"; fail=1
  elif ! "$rill" asm "$s.vmasm" --link-weights --profile="$s.profile.json" -o "$s.vmbc" > "$s.asm.log" 2>&1; then
    echo "$(basename "$s"): rill asm --profile failed: $(tail -1 "$s.asm.log")"; fail=1
  fi
}
if [ "$tune" = 1 ]; then
  t0=$(date +%s)
  tuned "$stem" --shapes=S="$(csv $lengths)"
  t1=$(date +%s)
  for n in $lengths; do [ -f "$stem.$n.vmbc" ] && tuned "$stem.$n"; done
  echo "tuning (rill tune --iterations=$tune_iters, then rill asm --profile): the dynamic module at S=$(csv $lengths)" \
       "$(( t1 - t0 )) s ($(grep -c '^ *choose' <("$rill" dis "$stem.vmbc" 2>/dev/null)) kernel choice trees);" \
       "the $(echo $lengths | wc -w) static twins $(( $(date +%s) - t1 )) s"
fi

# 2. Dispatch check: every length through the one dynamic module.
t0=$(date +%s); bad0=$fail
: > "$out/checks.txt"
for n in $sizes; do check dyn "$stem.vmbc" "$stem.$n"; done
for n in $lengths; do [ -f "$stem.$n.vmbc" ] && check static "$stem.$n.vmbc" "$stem.$n"; done
# the timed lengths also replayed as graphs (the same results in every mode)
case " $graphs " in *" on "*) for n in $lengths; do check dyn+graph "$stem.vmbc" "$stem.$n" on; done;; esac
nbad=$(grep -c -v ": ok:" "$out/checks.txt")
echo "dispatch check: $(grep -c " dyn: ok:" "$out/checks.txt") of $(echo "$sizes" | wc -w) lengths right through the dynamic module" \
     "($check_min..$check_max and $(csv $lengths)), $(grep -c " dyn+graph: ok:" "$out/checks.txt") as graphs, static twins $(grep -c " static: ok:" "$out/checks.txt") of $(echo $lengths | wc -w);" \
     "$nbad wrong or failed; $(( $(date +%s) - t0 )) s"

# 4 (converted first, timed in the same rounds). The CNNs with a symbolic batch.
for m in $cnns; do
  ms=$out/${m}_${dt}_dyn
  if ! "$py" "$models/convert.py" "$m" -o "$out" --dtype "$dt" --dynamic --range 1,32 ${CNN_SIZE:+--size $CNN_SIZE} \
       --sizes "$(csv $batches)" --static-sizes "$(csv $batches)" > "$ms.convert.log" 2>&1; then
    echo "$m: convert.py failed: $(tail -1 "$ms.convert.log")"; fail=1; continue
  fi
  "$rill" asm "$ms.vmasm" --link-weights -o "$ms.vmbc" > "$ms.asm.log" 2>&1 || { echo "$m: rill asm failed: $(tail -1 "$ms.asm.log")"; fail=1; continue; }
  for b in $batches; do
    "$rill" asm "$ms.$b.vmasm" --link-weights -o "$ms.$b.vmbc" > "$ms.$b.asm.log" 2>&1 || { echo "$m B=$b: rill asm failed"; fail=1; continue; }
    check dyn "$ms.vmbc" "$ms.$b"
    check static "$ms.$b.vmbc" "$ms.$b"
  done
  echo "$m: $(grep "^${m}_${dt}_dyn\." "$out/checks.txt" | grep -c ": ok:") of $(( 2 * $(echo $batches | wc -w) )) checks right (dynamic and static, B in $(csv $batches))"
done

# 3. Timing, REPEATS rounds of separate processes taking turns.
t0=$(date +%s)
for r in $(seq "$repeats"); do
  if [ "$dev" = cuda ]; then
    "$py" "$here/helper.py" torch --config "$config" --dtype "$dt" --lengths "$(csv $lengths)" --iters "$iters" \
      $([ "${COMPILE:-1}" = 1 ] || echo --no-compile) -o "$out/torch.$r.json" > "$out/torch.$r.log" 2>&1 ||
      { echo "PyTorch timing round $r failed: $(tail -1 "$out/torch.$r.log")"; fail=1; }
  fi
  for n in $lengths; do
    bench dyn "$stem.vmbc" "$stem.$n" "$r"
    [ -f "$stem.$n.vmbc" ] && bench static "$stem.$n.vmbc" "$stem.$n" "$r"
  done
  for m in $cnns; do
    ms=$out/${m}_${dt}_dyn
    [ -f "$ms.vmbc" ] || continue
    for b in $batches; do
      bench dyn "$ms.vmbc" "$ms.$b" "$r"
      [ -f "$ms.$b.vmbc" ] && bench static "$ms.$b.vmbc" "$ms.$b" "$r"
    done
  done
done
echo "timing: $repeats rounds in $(( $(date +%s) - t0 )) s"
"$py" "$here/helper.py" table "$out" --stem "$enc" --what "$config (layers,hidden,heads,intermediate)" --dtype "$dt" --device "$dev" \
  --lengths "$(csv $lengths)" --cnns "$(csv $cnns)" --batches "$(csv $batches)" --graph "$(csv $graphs)" \
  $([ "$tune" = 1 ] && echo --tuned) | tee "$out/table.txt"
echo "(rill bench: $iters runs per process, $repeats processes per figure; checks in $out/checks.txt)"
[ $fail = 0 ] || echo "FAILED: wrong results or failed runs above"
exit $fail
