#!/bin/bash
# test_tp_devices.sh RILL TESTS_DIR: the device form of --tensor-parallel,
# --data-parallel and --pipeline-parallel (docs/tensor_parallel.md, "The
# device form"): one VM of 2 and 4 cpu devices runs what a job of as many
# ranks runs, with the same bits as the rank form (same reduction order) and
# as one device where the split reorders no sum (data and pipeline
# parallel), else within f32's rounding; interpreted and captured in graphs;
# each device reads only its part of a split weight (linked weights read in
# place); what cannot be split is the rank form's error; a module with a
# state on device 1 is bytecode 1.11. Two GPUs (cuda:0,cuda:1) where there
# are. Weights come from numpy (skipped without it).
rill=$1; dir=$2; py=${PYTHON:-/usr/bin/python3}
if ! $py -c 'import numpy' 2> /dev/null; then echo "skipped: no numpy for $py"; exit 77; fi
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$dir/shell_checks.sh"
cp "$dir"/fixtures/tp/tp_*.vmasm "$dir"/fixtures/tp/dev_*.vmasm "$dir"/fixtures/tp/dp_*.vmasm "$dir"/fixtures/pp/pp_*.vmasm "$tmp/"
weights() { # weights SEED: tp.safetensors, cnn.safetensors and pp.safetensors with random weights (tests/llm_ref.py)
  for k in tp cnn pp; do $py "$dir/llm_ref.py" $k-weights "$tmp/$k.safetensors" "$1"; done
}
weights 7
devs() { seq -s, -f "$1:%g" 0 $(($2 - 1)); } # devs cpu 4: cpu:0,cpu:1,cpu:2,cpu:3
one() { "$rill" run "$@" --device=cpu --seed=3; }
on() { local n=$1; shift; "$rill" run "$@" --device="$(devs cpu "$n")" --seed=3; }
exact=(--rtol=0 --atol=0)
MLP='f32[4,64]=random'; ATT='f32[2,5,64]=random'; CNN='f32[4,3,8,8]=random'; PPX='f32[8,64]=random'; BLK='f32[4,6,64]=random'

# ---- one device, and the rank form, give the results to compare with ----
check mlp-1 0 one "$tmp/tp_mlp.vmasm" --input="$MLP" --output=@"$tmp/mlp.npy"
check att-1 0 one "$tmp/tp_attention.vmasm" --input="$ATT" --output=@"$tmp/a0.npy" --output=@"$tmp/a1.npy"
check cnn-1 0 one "$tmp/dev_cnn.vmasm" --input="$CNN" --output=@"$tmp/cnn.npy"
check ppmlp-1 0 one "$tmp/pp_mlp.vmasm" --input="$PPX" --output=@"$tmp/ppmlp.npy"
check blocks-1 0 one "$tmp/pp_blocks.vmasm" --input="$BLK" --output=@"$tmp/blk.npy"
for n in 2 4; do
  check "rank-mlp-$n" 0 "$rill" launch -n $n "$rill" run "$tmp/tp_mlp.vmasm" --tensor-parallel=$n --device=cpu --seed=3 --input="$MLP" --output=@"$tmp/rmlp$n.npy"
  check "rank-att-$n" 0 "$rill" launch -n $n "$rill" run "$tmp/tp_attention.vmasm" --tensor-parallel=$n --device=cpu --seed=3 --input="$ATT" \
    --output=@"$tmp/ra0$n.npy" --output=@"$tmp/ra1$n.npy"
done

# ---- the notes and the module: the rank form's split, device d on stream 64-d ----
check asm-att 0 "$rill" asm "$tmp/tp_attention.vmasm" --tensor-parallel=2 --parallel-form=devices -o "$tmp/att2d.vmbc"
has asm-att "tp_attention.vmasm:21:8: note: tensor parallel: attention block split 2 ways (3 column-parallel linears, 1 row-parallel summed by all_reduce)"
check dis 0 "$rill" dis "$tmp/att2d.vmbc"
has dis '{op="sum", part=1, parts=2}'
has dis 'cuda_set_device_stream 1, 63'
has dis 'copy_device %x.1, %x, 0'
has dis 'const %wq.part0 : f32[32,64] = w["q.weight"] {shard=0, ranks=2}'
echo "$out" > "$tmp/att2d.vmasm"
check dis-again 0 "$rill" asm "$tmp/att2d.vmasm" -o "$tmp/att2d2.vmbc"
cmp -s "$tmp/att2d.vmbc" "$tmp/att2d2.vmbc" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL dis-again: the module differs"; }

# ---- tensor parallel: the rank form's bits, interpreted and in graphs; one device's within rounding ----
for n in 2 4; do
  for g in off on; do
    check "tp-mlp-$n-$g" 0 on $n "$tmp/tp_mlp.vmasm" --tensor-parallel=$n --graph=$g --input="$MLP" --expected-output=@"$tmp/rmlp$n.npy" "${exact[@]}"
    has "tp-mlp-$n-$g" "result[0]: matches (256 elements, max abs diff 0"
    check "tp-att-$n-$g" 0 on $n "$tmp/tp_attention.vmasm" --tensor-parallel=$n --graph=$g --input="$ATT" --expected-output=@"$tmp/ra0$n.npy" \
      --expected-output=@"$tmp/ra1$n.npy" "${exact[@]}"
    has "tp-att-$n-$g" "result[1]: matches (960 elements, max abs diff 0"
  done
  check "tp-mlp-$n-one" 0 on $n "$tmp/tp_mlp.vmasm" --tensor-parallel=$n --input="$MLP" --expected-output=@"$tmp/mlp.npy"
  check "tp-att-$n-one" 0 on $n "$tmp/tp_attention.vmasm" --tensor-parallel=$n --input="$ATT" --expected-output=@"$tmp/a0.npy" --expected-output=@"$tmp/a1.npy"
  check "tp-cnn-$n" 0 on $n "$tmp/dev_cnn.vmasm" --tensor-parallel=$n --graph=on --input="$CNN" --expected-output=@"$tmp/cnn.npy"
done
check tp-att-O0 0 on 2 "$tmp/tp_attention.vmasm" -O0 --tensor-parallel=2 --input="$ATT" --expected-output=@"$tmp/a0.npy" --expected-output=@"$tmp/a1.npy"
check tp-att-graph-dis 0 on 2 "$tmp/att2d.vmasm" --graph=on --input="$ATT" --expected-output=@"$tmp/ra02.npy" --expected-output=@"$tmp/ra12.npy" "${exact[@]}"

# ---- data parallel: each device its rows, the same bits as one device ----
for n in 2 4; do
  for g in off on; do
    check "dp-mlp-$n-$g" 0 on $n "$tmp/tp_mlp.vmasm" --data-parallel=$n --graph=$g --input="$MLP" --expected-output=@"$tmp/mlp.npy" "${exact[@]}"
    check "dp-cnn-$n-$g" 0 on $n "$tmp/dev_cnn.vmasm" --data-parallel=$n --graph=$g --input="$CNN" --expected-output=@"$tmp/cnn.npy" "${exact[@]}"
    has "dp-cnn-$n-$g" "result[0]: matches (40 elements, max abs diff 0"
  done
done
check dp-att 0 on 2 "$tmp/tp_attention.vmasm" --data-parallel=2 --input="$ATT" --expected-output=@"$tmp/a0.npy" --expected-output=@"$tmp/a1.npy" "${exact[@]}"

# ---- pipeline parallel: stages on devices, the same bits as one device ----
check pp-asm 0 "$rill" asm "$tmp/pp_mlp.vmasm" --pipeline-parallel=2 --parallel-form=devices -o "$tmp/pp2d.vmbc"
has pp-asm "pp_mlp.vmasm:15:9: note: pipeline parallel: stage 0 (device 0, stream 0): 4 ops to line 18, 4 weights"
has pp-asm "pp_mlp.vmasm:19:9: note: pipeline parallel: stage 1 (device 1, stream 63): 4 ops to line 22, 4 weights"
has pp-asm "note: pipeline parallel: @main cut into 2 stages on 2 devices, 2 micro-batches (copies into device k on stream 63-k)"
check pp-dis 0 "$rill" dis "$tmp/pp2d.vmbc"
has pp-dis 'const %w3 : f32[128,64] = w["l3.weight"] {stage=1, ranks=2}'
has pp-dis 'copy_device'
for n in 2 4; do
  for mb in 1 2 4; do
    check "pp-mlp-$n-$mb" 0 on $n "$tmp/pp_mlp.vmasm" --pipeline-parallel=$n --micro-batches=$mb --graph=on --input="$PPX" --expected-output=@"$tmp/ppmlp.npy" "${exact[@]}"
    check "pp-blocks-$n-$mb" 0 on $n "$tmp/pp_blocks.vmasm" --pipeline-parallel=$n --micro-batches=$mb --input="$BLK" --expected-output=@"$tmp/blk.npy" "${exact[@]}"
  done
  check "pp-cnn-$n" 0 on $n "$tmp/dev_cnn.vmasm" --pipeline-parallel=$n --graph=off --input="$CNN" --expected-output=@"$tmp/cnn.npy" "${exact[@]}"
done

# ---- linked weights: each device reads its part in place, checked ----
check link 0 "$rill" asm "$tmp/tp_attention.vmasm" --tensor-parallel=2 --parallel-form=devices --link-weights -o "$tmp/att2l.vmbc"
check link-run 0 on 2 "$tmp/att2l.vmbc" --input="$ATT" --expected-output=@"$tmp/ra02.npy" --expected-output=@"$tmp/ra12.npy" "${exact[@]}"
check pp-link 0 "$rill" asm "$tmp/pp_mlp.vmasm" --pipeline-parallel=2 --parallel-form=devices --link-weights -o "$tmp/pp2l.vmbc"
check pp-link-run 0 on 2 "$tmp/pp2l.vmbc" --graph=on --input="$PPX" --expected-output=@"$tmp/ppmlp.npy" "${exact[@]}"
weights 8
check link-changed 2 on 2 "$tmp/att2l.vmbc" --input="$ATT"
has link-changed 'does not match the module'"'"'s checksum (the file changed)'
weights 7

# ---- what is refused ----
check one-device 2 "$rill" run "$tmp/att2d.vmbc" --device=cpu --input="$ATT"
has one-device "@main uses device 1, and the VM has 1 device (cpu): it needs 2, e.g. --device=cpu:0,cpu:1"
check heads 2 "$rill" asm "$tmp/tp_heads3.vmasm" --tensor-parallel=2 --parallel-form=devices -o "$tmp/h.vmbc"
has heads "tp_heads3.vmasm:13:9: error: --tensor-parallel=2: nothing in the program can be split 2 ways (a reshape that cuts across the split (heads or sizes not divisible): to f32[2,4,3,16], whose 3 at axis 2 does not divide by 2; heads or sizes must divide by 2)"
[ ! -e "$tmp/h.vmbc" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL heads: output left behind"; }
check heads-run 2 on 2 "$tmp/tp_heads3.vmasm" --tensor-parallel=2 --input='f32[2,4,64]=random'
has heads-run "heads or sizes must divide by 2"
check tp-3 2 "$rill" asm "$tmp/tp_mlp.vmasm" --tensor-parallel=3 --parallel-form=devices -o "$tmp/h.vmbc"
has tp-3 "tp_mlp.vmasm:14:8: note: tensor parallel: this linear stays whole: its output features, 64 (rows of %w2), do not divide by 3"
has tp-3 "tp_mlp.vmasm:12:8: error: --tensor-parallel=3: nothing in the program can be split 3 ways (the output features of this linear, 128, do not divide by 3; heads or sizes must divide by 3)"
check tp-3-att 0 on 3 "$tmp/tp_attention.vmasm" --tensor-parallel=3 --graph=on --input="$ATT" --expected-output=@"$tmp/a0.npy" --expected-output=@"$tmp/a1.npy"
check tp-3-att-asm 0 "$rill" asm "$tmp/tp_attention.vmasm" --tensor-parallel=3 --parallel-form=devices -o "$tmp/h.vmbc"
has tp-3-att-asm "tp_attention.vmasm:38:8: note: tensor parallel: this linear stays whole: its output features, 128 (rows of %wu), do not divide by 3"
has tp-3-att-asm "tp_attention.vmasm:42:13: note: tensor parallel: vocabulary-parallel head split 3 ways (its logits gathered)"
check kv-heads-4 0 "$rill" asm "$tmp/tp_attention.vmasm" --tensor-parallel=4 --parallel-form=devices -o "$tmp/att4d.vmbc"
has kv-heads-4 "tp_attention.vmasm:21:8: note: tensor parallel: this linear stays replicated: attention whose q, k and v are not all split on the head axis (line 32)"
check form-bad 2 "$rill" asm "$tmp/tp_mlp.vmasm" --tensor-parallel=2 --parallel-form=gpus
has form-bad "--parallel-form expects ranks or devices, got 'gpus'"
check form-alone 2 "$rill" asm "$tmp/tp_mlp.vmasm" --parallel-form=devices
has form-alone "--parallel-form=devices goes with --tensor-parallel=N, --data-parallel=N or --pipeline-parallel=N (N > 1)"
check pp-layers 2 "$rill" asm "$tmp/tp_mlp.vmasm" --pipeline-parallel=8 --parallel-form=devices -o "$tmp/l.vmbc"
has pp-layers "tp_mlp.vmasm:11:6: error: --pipeline-parallel=8: @main has 4 ops, fewer than the 8 stages"
check pp-mb 2 "$rill" asm "$tmp/pp_mlp.vmasm" --pipeline-parallel=2 --micro-batches=3 --parallel-form=devices -o "$tmp/l.vmbc"
has pp-mb "pp_mlp.vmasm:14:12: error: --micro-batches=3: the batch of %x (8 rows) does not divide into 3 micro-batches"
printf 'dim B in [1, 64]\nfunc @main(%%x: f32[B, 8]) -> f32[8] {\n  %%y = sum(%%x) {axes=[0]}\n  return %%y\n}\n' > "$tmp/sym.vmasm"
check dp-symbolic 2 "$rill" asm "$tmp/sym.vmasm" --data-parallel=2 --parallel-form=devices -o "$tmp/s.vmbc"
has dp-symbolic "sym.vmasm:3:8: error: --data-parallel=2: sum mixes the rows of the batch (B rows), which each rank holds a part of"
# a batch of 2 over 4 devices: two hold a row each, two a zero row only
check dp-odd 0 on 4 "$tmp/tp_attention.vmasm" --data-parallel=4 --input="$ATT" --expected-output=@"$tmp/a0.npy" --expected-output=@"$tmp/a1.npy" "${exact[@]}"
has dp-odd "result[1]: matches (960 elements, max abs diff 0"

# ---- states: device d keeps its part of a split state (bytecode 1.11: a state on device 1) ----
ST='f32[2,64]=random'
check state-1 0 one "$tmp/dev_state.vmasm" --input="$ST" --output=@"$tmp/st.npy"
check state-asm 0 "$rill" asm "$tmp/dev_state.vmasm" --tensor-parallel=2 --parallel-form=devices -o "$tmp/state_dev.vmbc"
# (1.12 where its weights of 4 KiB and more have XXH64 checksums)
$py -c 'import sys; print(open(sys.argv[1], "rb").read()[10])' "$tmp/state_dev.vmbc" | grep -qxE '11|12' && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL state-minor: not 1.11 or 1.12"; }
check state-dis 0 "$rill" dis "$tmp/state_dev.vmbc"
has state-dis "state %cache.dev1 : f32[2,16]"
has state-dis "load_state %cache.dev1, %cache.dev1"
for g in off on; do
  check "state-run-$g" 0 on 2 "$tmp/state_dev.vmbc" --graph=$g --input="$ST" --expected-output=@"$tmp/st.npy"
done
$py -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[10] = 10; open(p + ".10", "wb").write(b)' "$tmp/state_dev.vmbc"
check state-1.10 2 "$rill" verify "$tmp/state_dev.vmbc.10"
# refused: at the states, or first at the constants' XXH64 flag (1.12) where it has them
grep -qE "malformed module: state 1 is loaded on device 1 \(states on devices but 0 are bytecode 1.11\)|an XXH64 checksum needs bytecode 1.12" <<< "$out" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL state-1.10: not refused at the states or the checksum flag: $out"; }
# a state loaded on two devices (lowered text: @other loads device 1's state on stream 0) is refused
check state-two-dis 0 "$rill" dis "$tmp/state_dev.vmbc"
{ echo "$out"; printf 'func @other(%%x: f32[2,64]) -> (f32[2,64]) lowered(streams=1, events=0) {\n  reg %%c : f32[2,16]\n  load_state %%c, %%cache.dev1\n  return (%%x)\n}\n'; } > "$tmp/two.vmasm"
check state-two 2 "$rill" asm "$tmp/two.vmasm" -o "$tmp/two.vmbc"
has state-two "verification failed: state 1 (%cache.dev1): loaded on two devices (a state lives on one device)"
check state-dp 2 "$rill" asm "$tmp/dev_state.vmasm" --data-parallel=2 --parallel-form=devices -o "$tmp/s.vmbc"
has state-dp "dev_state.vmasm:13:3: error: --data-parallel=2: this update writes state %cache (f32[2,32]) along axis 0, the batch's rows, which each rank holds a part of"

# ---- data parallel: a symbolic batch (B below N, and B that N does not divide) and a KV cache split like the batch ----
for b in 1 3 5 8; do
  check "sym-1-$b" 0 one "$tmp/dp_sym_cnn.vmasm" --input="f32[$b,3,8,8]=random" --output=@"$tmp/sym$b.npy" --output=@"$tmp/symk$b.npy"
  for n in 2 4; do
    for g in off on; do
      check "dp-sym-$n-$b-$g" 0 on $n "$tmp/dp_sym_cnn.vmasm" --data-parallel=$n --graph=$g --input="f32[$b,3,8,8]=random" --expected-output=@"$tmp/sym$b.npy" \
        --expected-output=@"$tmp/symk$b.npy" "${exact[@]}"
      has "dp-sym-$n-$b-$g" "result[0]: matches ($((b * 10)) elements, max abs diff 0"
    done
  done
done
# the first parameter's first size is the batch: %w's 8 rows (which 2 divides) are not cut
printf 'dim B in [1, 32]\nfunc @main(%%x: f32[B, 8], %%w: f32[8, 8]) -> f32[B, 8] {\n  %%y = matmul(%%x, %%w)\n  return %%y\n}\n' > "$tmp/symw.vmasm"
check symw-1 0 one "$tmp/symw.vmasm" --input='f32[7,8]=random' --input='f32[8,8]=random' --output=@"$tmp/symw.npy"
check dp-symw 0 on 2 "$tmp/symw.vmasm" --data-parallel=2 --input='f32[7,8]=random' --input='f32[8,8]=random' --expected-output=@"$tmp/symw.npy" "${exact[@]}"
has dp-symw "result[0]: matches (56 elements, max abs diff 0"
check dp-sym-asm 0 "$rill" asm "$tmp/dp_sym_cnn.vmasm" --data-parallel=2 --parallel-form=devices -o "$tmp/symd.vmbc"
check dp-sym-dis 0 "$rill" dis "$tmp/symd.vmbc"
has dp-sym-dis "all_gather(f32[floordiv(add(1, B), 2),10]) -> (f32[mul(2, floordiv(add(1, B), 2)),10]) {axis=0, part=1, parts=2}"
echo "$out" > "$tmp/symd.vmasm"
check dp-sym-again 0 "$rill" asm "$tmp/symd.vmasm" -o "$tmp/symd2.vmbc"
cmp -s "$tmp/symd.vmbc" "$tmp/symd2.vmbc" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL dp-sym-again: the module differs"; }
check dp-sym-vmbc 0 on 2 "$tmp/symd2.vmbc" --input='f32[5,3,8,8]=random' --expected-output=@"$tmp/sym5.npy" "${exact[@]}"
KV=(--input='f32[4,64]=random' --input='i64[4]=0 3 1 5')
check kv-1 0 one "$tmp/dp_kv.vmasm" "${KV[@]}" --output=@"$tmp/kv0.npy" --output=@"$tmp/kv1.npy" --output=@"$tmp/kv2.npy"
for n in 2 4; do
  for g in off on; do
    check "dp-kv-$n-$g" 0 on $n "$tmp/dp_kv.vmasm" --data-parallel=$n --graph=$g "${KV[@]}" --expected-output=@"$tmp/kv0.npy" --expected-output=@"$tmp/kv1.npy" \
      --expected-output=@"$tmp/kv2.npy" "${exact[@]}"
    has "dp-kv-$n-$g" "result[1]: matches (1024 elements, max abs diff 0"
  done
done
check dp-kv-asm 0 "$rill" asm "$tmp/dp_kv.vmasm" --data-parallel=2 --parallel-form=devices -o "$tmp/kvd.vmbc"
check dp-kv-dis 0 "$rill" dis "$tmp/kvd.vmbc"
has dp-kv-dis "state %k.dev1 : f32[2,2,8,16]"
has dp-kv-dis "state %acc.dev1 : f32[64]"

# ---- two GPUs: the device form on cuda:0,cuda:1 against the cpu results ----
ngpu=$(cuda_gpus "$rill")
if [ "$ngpu" -ge 2 ]; then
  gpu() { "$rill" run "$@" --device=cuda:0,cuda:1 --seed=3 --rtol=1e-4 --atol=1e-4; }
  for g in on off; do
    check "cuda-tp-att-$g" 0 gpu "$tmp/tp_attention.vmasm" --tensor-parallel=2 --graph=$g --input="$ATT" --expected-output=@"$tmp/a0.npy" --expected-output=@"$tmp/a1.npy"
    check "cuda-tp-cnn-$g" 0 gpu "$tmp/dev_cnn.vmasm" --tensor-parallel=2 --graph=$g --input="$CNN" --expected-output=@"$tmp/cnn.npy"
    check "cuda-dp-cnn-$g" 0 gpu "$tmp/dev_cnn.vmasm" --data-parallel=2 --graph=$g --input="$CNN" --expected-output=@"$tmp/cnn.npy"
    check "cuda-dp-sym-$g" 0 gpu "$tmp/dp_sym_cnn.vmasm" --data-parallel=2 --graph=$g --input='f32[5,3,8,8]=random' --expected-output=@"$tmp/sym5.npy" \
      --expected-output=@"$tmp/symk5.npy"
    check "cuda-dp-kv-$g" 0 gpu "$tmp/dp_kv.vmasm" --data-parallel=2 --graph=$g "${KV[@]}" --expected-output=@"$tmp/kv0.npy" --expected-output=@"$tmp/kv1.npy" \
      --expected-output=@"$tmp/kv2.npy"
    check "cuda-pp-mlp-$g" 0 gpu "$tmp/pp_mlp.vmasm" --pipeline-parallel=2 --micro-batches=4 --graph=$g --input="$PPX" --expected-output=@"$tmp/ppmlp.npy"
    check "cuda-pp-blocks-$g" 0 gpu "$tmp/pp_blocks.vmasm" --pipeline-parallel=2 --graph=$g --input="$BLK" --expected-output=@"$tmp/blk.npy"
    check "cuda-state-$g" 0 gpu "$tmp/state_dev.vmbc" --graph=$g --input="$ST" --expected-output=@"$tmp/st.npy"
  done
  check cuda-link 0 gpu "$tmp/att2l.vmbc" --input="$ATT" --expected-output=@"$tmp/a0.npy" --expected-output=@"$tmp/a1.npy"
else
  echo "note: GPU cases skipped (fewer than two GPUs)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
