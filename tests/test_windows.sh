#!/bin/bash
# test_windows.sh RILL GEN: Swin's windows at -O1 (assembler/windows.c and
# the attention pass's shifted-window masks). GEN (bench_import_gen) writes
# a small Swin as torch.onnx.export writes torchvision's swin_t (two stages:
# a 14x14 map of 2x2 windows of 7x7, shifted in every second block, the
# relative position bias, the patch merging; then a 7x7 map, one window).
# At -O0 its windows, q/k/v split, heads and rolls are transposes, gathers,
# slices and concats; at -O1 no transpose may remain but the two around the
# network (the patch embedding's permute and the head's, in f32; in f16
# the input's channels-last copy alone), no q/k/v gather, no slice or
# concat (rolls and the patch merging's strided slices are gathers);
# and -O1 computes on the cpu what -O0 computes, in f32 and in f16. Then
# swin_t's sizes (two blocks a stage), assembled only: the same counts.
rill=$1; gen=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/shell_checks.sh"
# the invokes of op NAME in a disassembly
invokes() {
  awk -v op="$2" '/^op \$[0-9]+ = / { split($2, a, "$"); if ($4 ~ "^" op "\\(") want[a[2]] = 1 }
    /invoke \$[0-9]+,/ { match($0, /invoke \$[0-9]+,/); n = substr($0, RSTART + 8, RLENGTH - 9); if (n in want) k++ }
    END { print k + 0 }' "$1"
}
at_most() { # at_most NAME GOT MAX
  if [ "$2" -le "$3" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: $2, want at most $3"; fi
}
at_least() { # at_least NAME GOT MIN
  if [ "$2" -ge "$3" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: $2, want at least $3"; fi
}

m=$tmp/swin.onnx
# (the generator, a one-shot bench tool, frees nothing: no leak check of it under ASan)
gen() { ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 "$gen" "$@"; }
check gen 0 gen swin "$m" --batch 2 --image 56 --embed 32 --depths 2,2 --heads 2,4 --window 7
check gen-bad 2 gen swin "$tmp/bad.onnx" --image 60 --window 7; has gen-bad "multiple of the window"
for prec in exact f16; do
  check "asm-O0-$prec" 0 "$rill" asm "$m" -O0 --precision=$prec -o "$tmp/o0.vmbc"
  check "asm-O1-$prec" 0 "$rill" asm "$m" -O1 --precision=$prec -o "$tmp/o1.vmbc"
  "$rill" dis "$tmp/o0.vmbc" > "$tmp/o0.dis"; "$rill" dis "$tmp/o1.vmbc" > "$tmp/o1.dis"
  # before: per block the partition, q/k/v, keys, heads and reverse (4 blocks), and the two permutes
  at_least "transposes-O0-$prec" "$(invokes "$tmp/o0.dis" transpose)" 22
  at_least "gathers-O0-$prec" "$(invokes "$tmp/o0.dis" gather)" 12
  at_least "concats-O0-$prec" "$(invokes "$tmp/o0.dis" concat)" 5
  at_least "slices-O0-$prec" "$(invokes "$tmp/o0.dis" slice)" 16
  want=2; [ $prec = f16 ] && want=1
  at_most "transposes-O1-$prec" "$(invokes "$tmp/o1.dis" transpose)" $want
  # the windows of stage 1 (two blocks, partition and reverse each) and the patch merging are gathers of rows; no q/k/v gather
  at_most "gathers-O1-$prec" "$(invokes "$tmp/o1.dis" gather)" 5
  at_most "concats-O1-$prec" "$(invokes "$tmp/o1.dis" concat)" 0
  at_most "slices-O1-$prec" "$(invokes "$tmp/o1.dis" slice)" 0
  # every block's attention one op, the shifted one with its windows' mask
  at_least "attention-O1-$prec" "$(invokes "$tmp/o1.dis" attention)" 4
  grep -q 'windows=4, layout="bshd"' "$tmp/o1.dis" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL windows-mask-$prec: no attention {windows=4}"; }
  tol="--rtol=1e-4 --atol=1e-5"; [ $prec = f16 ] && tol="--rtol=2e-2 --atol=2e-2"
  for seed in 1 2; do
    check "run-O0-$prec-$seed" 0 "$rill" run "$tmp/o0.vmbc" --device=cpu --seed=$seed --input='f32[2,3,56,56]=random' --output="@$tmp/y.npy"
    check "run-O1-$prec-$seed" 0 "$rill" run "$tmp/o1.vmbc" --device=cpu --seed=$seed --input='f32[2,3,56,56]=random' --expected-output="@$tmp/y.npy" $tol
    has "same-$prec-$seed" "result[0]: matches"
  done
done
# swin_t's sizes (batch 32 at 224x224, widths 96 to 768, windows of 7 over maps of 56 to 7), two
# blocks a stage: assembled only (f16), the same forms at full size (no size limit met)
big=$tmp/swin_t.onnx
check gen-t 0 gen swin "$big" --batch 32 --depths 2,2,2,2
check asm-t 0 "$rill" asm "$big" -O1 --precision=f16 -o "$tmp/t.vmbc"
"$rill" dis "$tmp/t.vmbc" > "$tmp/t.dis"
at_most transposes-t "$(invokes "$tmp/t.dis" transpose)" 1
at_most slices-t "$(invokes "$tmp/t.dis" slice)" 0
at_most concats-t "$(invokes "$tmp/t.dis" concat)" 0
# stages 1 to 3: each block's partition and reverse, each merge; stage 4 (one window) none
at_most gathers-t "$(invokes "$tmp/t.dis" gather)" 15
at_least attention-t "$(invokes "$tmp/t.dis" attention)" 8
rm -f "$big"
# the check can fail: another input's result is not -O0's
check differs 1 "$rill" run "$tmp/o1.vmbc" --device=cpu --seed=9 --input='f32[2,3,56,56]=random' --expected-output="@$tmp/y.npy" --rtol=1e-4 --atol=1e-5
echo "windows: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
