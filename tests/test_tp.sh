#!/bin/bash
# test_tp.sh RILL TESTS_DIR: --tensor-parallel=N (docs/tensor_parallel.md)
# on cpu ranks over loopback: .vmasm MLP and attention blocks split over 2
# and 4 ranks give the unsplit results; shard constants read from the
# weights file per rank (embedded and linked); what cannot be split is an
# error at its position; a split module run by a job of another size is
# refused. Weights come from numpy (skipped without it).
rill=$1; dir=$2; py=${PYTHON:-/usr/bin/python3}
if ! $py -c 'import numpy' 2> /dev/null; then echo "skipped: no numpy for $py"; exit 77; fi
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$dir/shell_checks.sh"
cp "$dir"/fixtures/tp/tp_*.vmasm "$tmp/"
weights() { $py "$dir/llm_ref.py" tp-weights "$tmp/tp.safetensors" "$1"; } # weights SEED: tp.safetensors with random weights
weights 7

# ---- the notes: what was split ----
check asm-mlp 0 "$rill" asm "$tmp/tp_mlp.vmasm" --tensor-parallel=2 -o "$tmp/mlp2.vmbc"
has asm-mlp "tp_mlp.vmasm:12:8: note: tensor parallel: MLP block split 2 ways (1 column-parallel linear, 1 row-parallel summed by all_reduce)"
check asm-attention 0 "$rill" asm "$tmp/tp_attention.vmasm" --tensor-parallel=2 -o "$tmp/att2.vmbc"
has asm-attention "tp_attention.vmasm:21:8: note: tensor parallel: attention block split 2 ways (3 column-parallel linears, 1 row-parallel summed by all_reduce)"
has asm-attention "tp_attention.vmasm:37:8: note: tensor parallel: MLP block split 2 ways (2 column-parallel linears"
has asm-attention "tp_attention.vmasm:42:13: note: tensor parallel: vocabulary-parallel head split 2 ways (its logits gathered)"
# four ranks: 2 key/value heads do not divide, so attention stays whole; the MLP and the head split
check asm-attention-4 0 "$rill" asm "$tmp/tp_attention.vmasm" --tensor-parallel=4 -o "$tmp/att4.vmbc"
has asm-attention-4 "tp_attention.vmasm:21:8: note: tensor parallel: this linear stays replicated: attention whose q, k and v are not all split on the head axis (line 32)"
has asm-attention-4 "tp_attention.vmasm:22:8: note: tensor parallel: this linear stays replicated: a reshape that cuts across the split (heads or sizes not divisible): to f32[2,S,2,16], whose 2 at axis 2 does not divide by 4 (line 25)"
has asm-attention-4 "tp_attention.vmasm:37:8: note: tensor parallel: MLP block split 4 ways"

# ---- the shard form: printed, assembled again to the same bytes ----
check dis 0 "$rill" dis "$tmp/mlp2.vmbc"
has dis 'const %w1.part0 : f32[64,64] = w["up.weight"] {shard=0, ranks=2}'
has dis 'const %w2.part1 : f32[64,64] = w["down.weight"] {shard=1, ranks=2}'
has dis 'all_reduce'
echo "$out" > "$tmp/mlp2.vmasm"
check dis-again 0 "$rill" asm "$tmp/mlp2.vmasm" -o "$tmp/mlp2b.vmbc"
cmp -s "$tmp/mlp2.vmbc" "$tmp/mlp2b.vmbc" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL dis-again: the module differs"; }
printf 'weights "tp.safetensors" as w\nconst %%a : f32[64,64] = w["up.weight"] {shard=0, ranks=3}\nfunc @main(%%x: f32[2]) -> f32[2] {\n  return %%x\n}\n' > "$tmp/bad.vmasm"
check shard-wrong 2 "$rill" asm "$tmp/bad.vmasm" -o "$tmp/bad.vmbc"
has shard-wrong 'bad.vmasm:2:1: error: const %a is declared f32[64,64], part of 3 along axis 0, but tensor "up.weight" in tp.safetensors is f32[128,64]'
sed -i 's/{shard=0, ranks=3}/{shard=2, ranks=2}/' "$tmp/bad.vmasm"
check shard-axis 2 "$rill" asm "$tmp/bad.vmasm" -o "$tmp/bad.vmbc"; has shard-axis "bad.vmasm:2:40: error: shard= must be an axis"

# ---- split runs give the unsplit results ----
run() { "$rill" launch -n "$1" "$rill" run "${@:2}" --device=cpu --seed=3; }
check mlp-1 0 "$rill" run "$tmp/tp_mlp.vmasm" --device=cpu --seed=3 --input='f32[4,64]=random' --output=@"$tmp/mlp.npy"
for n in 2 4; do
  check "mlp-$n" 0 run $n "$tmp/tp_mlp.vmasm" --tensor-parallel=$n --input='f32[4,64]=random' --expected-output=@"$tmp/mlp.npy"
  has "mlp-$n" "result[0]: matches (256 elements"
done
check att-1 0 "$rill" run "$tmp/tp_attention.vmasm" --device=cpu --seed=3 --input='f32[2,5,64]=random' --output=@"$tmp/a0.npy" --output=@"$tmp/a1.npy"
for n in 2 4; do
  check "attention-$n" 0 run $n "$tmp/tp_attention.vmasm" --tensor-parallel=$n --input='f32[2,5,64]=random' --expected-output=@"$tmp/a0.npy" \
    --expected-output=@"$tmp/a1.npy"
  has "attention-$n" "result[1]: matches (960 elements"
done
check attention-graph 0 run 2 "$tmp/att2.vmbc" --graph=on --input='f32[2,5,64]=random' --expected-output=@"$tmp/a0.npy" --expected-output=@"$tmp/a1.npy"
check attention-O0 0 run 2 "$tmp/tp_attention.vmasm" -O0 --tensor-parallel=2 --input='f32[2,5,64]=random' --expected-output=@"$tmp/a0.npy" \
  --expected-output=@"$tmp/a1.npy"
# each rank holds its parts only: rill bench's weights on rank 0 (the MLP's 64.8 KiB whole, 32.5 KiB split: its down bias whole)
check mem-1 0 "$rill" bench "$tmp/tp_mlp.vmasm" --device=cpu --iterations=1; has mem-1 "memory: weights 64.8 KiB"
check mem-2 0 "$rill" launch -n 2 "$rill" bench "$tmp/tp_mlp.vmasm" --device=cpu --iterations=1 --tensor-parallel=2; has mem-2 "memory: weights 32.5 KiB"

# two GPUs or more: each rank on its own GPU, against the cpu results
ngpu=$(cuda_gpus "$rill")
if [ "$ngpu" -ge 2 ]; then
  for g in on off; do
    check "attention-cuda-graph-$g" 0 "$rill" launch -n 2 sh -c '"$0" run "$@" --device=cuda:$LOCAL_RANK' "$rill" "$tmp/tp_attention.vmasm" --tensor-parallel=2 \
      --graph=$g --seed=3 --input='f32[2,5,64]=random' --expected-output=@"$tmp/a0.npy" --expected-output=@"$tmp/a1.npy" --rtol=1e-4 --atol=1e-4
  done
  check mlp-cuda-dp 0 "$rill" launch -n 2 sh -c '"$0" run "$@" --device=cuda:$LOCAL_RANK' "$rill" "$tmp/tp_mlp.vmasm" --data-parallel=2 --seed=3 \
    --input='f32[4,64]=random' --expected-output=@"$tmp/mlp.npy" --rtol=1e-4 --atol=1e-4
else
  echo "note: GPU cases skipped (fewer than two GPUs)"
fi

# ---- linked weights: each rank reads its parts from the file ----
check link 0 "$rill" asm "$tmp/tp_attention.vmasm" --tensor-parallel=2 --link-weights -o "$tmp/att2l.vmbc"
check link-run 0 run 2 "$tmp/att2l.vmbc" --input='f32[2,5,64]=random' --expected-output=@"$tmp/a0.npy" --expected-output=@"$tmp/a1.npy"
weights 8
check link-changed 2 run 2 "$tmp/att2l.vmbc" --input='f32[2,5,64]=random'
has link-changed 'does not match the module'"'"'s checksum (the file changed)'

# ---- what cannot be split, and jobs of another size ----
check heads 2 "$rill" asm "$tmp/tp_heads3.vmasm" --tensor-parallel=2 -o "$tmp/h.vmbc"
has heads "tp_heads3.vmasm:13:9: error: --tensor-parallel=2: nothing in the program can be split 2 ways (a reshape that cuts across the split (heads or sizes not divisible)"
[ ! -e "$tmp/h.vmbc" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL heads: output left behind"; }
printf 'const %%w : f32[2,2] = [[1, 2], [3, 4]]\nfunc @main(%%x: f32[3,2]) -> f32[3,2] {\n  %%y = linear(%%x, %%w)\n  return %%y\n}\n' > "$tmp/lit.vmasm"
check inline-weights 2 "$rill" asm "$tmp/lit.vmasm" --tensor-parallel=2 -o "$tmp/lit.vmbc"
has inline-weights "lit.vmasm:1:1: error: --tensor-parallel=2: the program has no linear, matmul or embedding by a constant weight from a weights file to split"
# half precision: the parts' products rounded as the whole's are, within bf16's tolerance
check bf16-1 0 "$rill" run "$tmp/tp_attention.vmasm" --device=cpu --seed=3 --precision=bf16 --input='f32[2,5,64]=random' --output=@"$tmp/b0.npy" --output=@"$tmp/b1.npy"
check bf16-2 0 run 2 "$tmp/tp_attention.vmasm" --tensor-parallel=2 --precision=bf16 --input='f32[2,5,64]=random' --expected-output=@"$tmp/b0.npy" \
  --expected-output=@"$tmp/b1.npy" --rtol=2e-2 --atol=2e-2
check tp-zero 2 "$rill" asm "$tmp/tp_mlp.vmasm" --tensor-parallel=0; has tp-zero "--tensor-parallel expects 1..1024, got '0'"
check alone 2 "$rill" run "$tmp/mlp2.vmbc" --device=cpu --input='f32[4,64]=random'
has alone "the module is split for a job of 2 ranks (--tensor-parallel=2): run it as one, e.g. rill launch -n 2 rill run ..."
check job-larger 2 run 4 "$tmp/mlp2.vmbc" --input='f32[4,64]=random'
has job-larger "the module is split for a job of 2 ranks (--tensor-parallel=2), and this job has 4"

# ---- data parallel: each rank its rows of the batch, the results gathered ----
weights 7
check dp-asm 0 "$rill" asm "$tmp/tp_mlp.vmasm" --data-parallel=2 -o "$tmp/dp.vmbc"
has dp-asm "tp_mlp.vmasm:11:6: note: data parallel: @main split 2 ways (each rank takes its rows of the batch; results gathered)"
for n in 2 4; do
  check "dp-mlp-$n" 0 run $n "$tmp/tp_mlp.vmasm" --data-parallel=$n --input='f32[4,64]=random' --expected-output=@"$tmp/mlp.npy"
  has "dp-mlp-$n" "result[0]: matches (256 elements"
done
# a batch of 4 that 3 does not divide, and one smaller than the job (8 ranks): dealt round robin, the same bits
check dp-asm-3 0 "$rill" asm "$tmp/tp_mlp.vmasm" --data-parallel=3 -o "$tmp/dp3.vmbc"
has dp-asm-3 "tp_mlp.vmasm:11:6: note: data parallel: @main split 3 ways (the batch, 4 rows, does not divide by 3: dealt round robin, rank 0 takes 2 rows, the others 1, every rank computing 2"
for n in 3 8; do
  check "dp-mlp-$n" 0 run $n "$tmp/tp_mlp.vmasm" --data-parallel=$n --input='f32[4,64]=random' --expected-output=@"$tmp/mlp.npy" --rtol=0 --atol=0
  has "dp-mlp-$n" "result[0]: matches (256 elements, max abs diff 0"
done
check dp-attention 0 run 2 "$tmp/tp_attention.vmasm" --data-parallel=2 --input='f32[2,5,64]=random' --expected-output=@"$tmp/a0.npy" \
  --expected-output=@"$tmp/a1.npy"
has dp-attention "result[1]: matches (960 elements"
# a symbolic batch: each rank ceil(B/N) or floor(B/N) rows dealt round robin (B below N, and B that N does not divide), gathered in order
cp "$dir"/fixtures/tp/dp_sym_cnn.vmasm "$dir"/fixtures/tp/dp_kv.vmasm "$tmp/"
$py "$dir/llm_ref.py" cnn-weights "$tmp/cnn.safetensors" 7
check dp-sym-asm 0 "$rill" asm "$tmp/dp_sym_cnn.vmasm" --data-parallel=4 -o "$tmp/dpsym.vmbc"
has dp-sym-asm "dp_sym_cnn.vmasm:14:6: note: data parallel: @main split 4 ways (the batch, B rows, dealt round robin: each rank takes ceil(B/4) or floor(B/4) of them"
for b in 1 3 5 8; do
  check "dp-sym-1-$b" 0 "$rill" run "$tmp/dp_sym_cnn.vmasm" --device=cpu --seed=3 --input="f32[$b,3,8,8]=random" --output=@"$tmp/sym$b.npy" --output=@"$tmp/symk$b.npy"
  for n in 2 4; do
    check "dp-sym-$n-$b" 0 run $n "$tmp/dp_sym_cnn.vmasm" --data-parallel=$n --input="f32[$b,3,8,8]=random" --expected-output=@"$tmp/sym$b.npy" \
      --expected-output=@"$tmp/symk$b.npy" --rtol=0 --atol=0
    has "dp-sym-$n-$b" "result[0]: matches ($((b * 10)) elements, max abs diff 0"
  done
done
# one module for every B: the .vmbc split for 4, run at two sizes
for b in 3 8; do
  check "dp-sym-vmbc-$b" 0 "$rill" launch -n 4 "$rill" run "$tmp/dpsym.vmbc" --device=cpu --seed=3 --input="f32[$b,3,8,8]=random" --expected-output=@"$tmp/sym$b.npy" --rtol=0 --atol=0
done
# states: a KV cache [B, ...] split like the batch over three decode steps (at 3 dealt round robin), %acc whole on every rank
KV=(--input='f32[4,64]=random' --input='i64[4]=0 3 1 5')
check dp-kv-1 0 "$rill" run "$tmp/dp_kv.vmasm" --device=cpu --seed=3 "${KV[@]}" --output=@"$tmp/kv0.npy" --output=@"$tmp/kv1.npy" --output=@"$tmp/kv2.npy"
check dp-kv-asm 0 "$rill" asm "$tmp/dp_kv.vmasm" --data-parallel=2 -o "$tmp/kv.vmbc"
has dp-kv-asm "dp_kv.vmasm:17:6: note: data parallel: state %k (f32[4,2,8,16]) split like the batch of @main (each rank holds its 2 rows)"
has dp-kv-asm "dp_kv.vmasm:17:6: note: data parallel: state %acc (f32[64]) stays whole on every rank (its first size is not the batch, 4), written alike from whole values"
for n in 2 3 4; do
  check "dp-kv-$n" 0 run $n "$tmp/dp_kv.vmasm" --data-parallel=$n "${KV[@]}" --expected-output=@"$tmp/kv0.npy" --expected-output=@"$tmp/kv1.npy" \
    --expected-output=@"$tmp/kv2.npy" --rtol=0 --atol=0
  has "dp-kv-$n" "result[1]: matches (1024 elements, max abs diff 0"
done
# refused: a state every rank holds whole written from the ranks' rows; a split state written along its rows; a split state
# touched by a function without the batch
printf 'const %%zero : i64[] = 0\nstate %%last : f32[8, 16]\n\nfunc @main(%%x: f32[4, 16]) -> f32[4, 16] {\n  %%h = relu(%%x)\n  update(%%last, %%h, %%zero) {axis=0}\n  return %%h\n}\n' > "$tmp/dpw.vmasm"
check dp-state-whole 2 "$rill" asm "$tmp/dpw.vmasm" --data-parallel=2 -o "$tmp/dpw.vmbc"
has dp-state-whole "dpw.vmasm:6:3: error: --data-parallel=2: this update writes %h, which holds each rank's part of the batch's rows, into state %last (f32[8,16]), which every rank holds whole"
[ ! -e "$tmp/dpw.vmbc" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL dp-state-whole: output left behind"; }
sed 's/state %last : f32\[8, 16\]/state %last : f32[4, 16]/' "$tmp/dpw.vmasm" > "$tmp/dpa.vmasm"
check dp-state-axis0 2 "$rill" asm "$tmp/dpa.vmasm" --data-parallel=2 -o "$tmp/dpa.vmbc"
has dp-state-axis0 "dpa.vmasm:6:3: error: --data-parallel=2: this update writes state %last (f32[4,16]) along axis 0, the batch's rows, which each rank holds a part of"
{ sed 's/axis=0/axis=1/' "$tmp/dpa.vmasm"; printf '\nfunc @peek(%%t: f32[3]) -> f32[4, 16] {\n  %%c = copy(%%last)\n  return %%c\n}\n'; } > "$tmp/dpp.vmasm"
check dp-state-other 2 "$rill" asm "$tmp/dpp.vmasm" --data-parallel=2 -o "$tmp/dpp.vmbc"
has dp-state-other "dpp.vmasm:10:6: error: --data-parallel=2: state %last (f32[4,16]) is split like the batch (its first size is the batch of @main), and @peek, which reads or updates it, has no parameter with a batch of 4 rows"
# two GPUs: the symbolic batch (5 rows over 2 ranks) and the KV cache, each rank on its own GPU, against the cpu results
if [ "$ngpu" -ge 2 ]; then
  for g in on off; do
    check "dp-sym-cuda-$g" 0 "$rill" launch -n 2 sh -c '"$0" run "$@" --device=cuda:$LOCAL_RANK' "$rill" "$tmp/dp_sym_cnn.vmasm" --data-parallel=2 --graph=$g \
      --seed=3 --input='f32[5,3,8,8]=random' --expected-output=@"$tmp/sym5.npy" --expected-output=@"$tmp/symk5.npy" --rtol=1e-4 --atol=1e-4
    check "dp-kv-cuda-$g" 0 "$rill" launch -n 2 sh -c '"$0" run "$@" --device=cuda:$LOCAL_RANK' "$rill" "$tmp/dp_kv.vmasm" --data-parallel=2 --graph=$g \
      --seed=3 "${KV[@]}" --expected-output=@"$tmp/kv0.npy" --expected-output=@"$tmp/kv1.npy" --expected-output=@"$tmp/kv2.npy" --rtol=1e-4 --atol=1e-4
  done
fi
printf 'func @main(%%x: f32[4, 8]) -> (f32[4, 8], f32[8]) {\n  %%y = relu(%%x)\n  %%s = sum(%%y) {axes=[0]}\n  return %%y, %%s\n}\n' > "$tmp/dpsum.vmasm"
check dp-mixes 2 "$rill" asm "$tmp/dpsum.vmasm" --data-parallel=2 -o "$tmp/dps.vmbc"
has dp-mixes "dpsum.vmasm:3:8: error: --data-parallel=2: sum mixes the rows of the batch (4 rows), which each rank holds a part of"
check dp-mixes-3 2 "$rill" asm "$tmp/dpsum.vmasm" --data-parallel=3 -o "$tmp/dps.vmbc"
has dp-mixes-3 "dpsum.vmasm:3:8: error: --data-parallel=3: sum mixes the rows of the batch (4 rows), which each rank holds a part of"
printf 'func @main(%%t: i64[]) -> i64[] {\n  %%y = add(%%t, 1)\n  return %%y\n}\n' > "$tmp/dpnone.vmasm"
check dp-no-batch 2 "$rill" asm "$tmp/dpnone.vmasm" --data-parallel=2 -o "$tmp/dps.vmbc"
has dp-no-batch "dpnone.vmasm:1:6: error: --data-parallel=2: no function can be split (a parameter whose first size, the batch, divides by 2, or is symbolic): @main: no parameter has a batch axis (axis 0)"
check dp-and-tp 2 "$rill" asm "$tmp/tp_mlp.vmasm" --data-parallel=2 --tensor-parallel=2
has dp-and-tp "--data-parallel and --tensor-parallel together are not built: give one"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
