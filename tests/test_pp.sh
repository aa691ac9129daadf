#!/bin/bash
# test_pp.sh RILL TESTS_DIR: --pipeline-parallel=N (docs/tensor_parallel.md,
# "Pipeline parallel") on cpu ranks over loopback: a four-layer MLP and a
# stack of four transformer blocks cut into 2 and 4 stages with 1, 2 and 4
# micro-batches give the unsplit results bit for bit; each rank uploads only
# its stage's weights; the stage form prints and reassembles to the same
# bytes; what cannot be cut is an error at its position; a cut module run
# alone or by a job of another size is refused. Weights come from numpy
# (skipped without it).
rill=$1; dir=$2; py=${PYTHON:-/usr/bin/python3}
if ! $py -c 'import numpy' 2> /dev/null; then echo "skipped: no numpy for $py"; exit 77; fi
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$dir/shell_checks.sh"
cp "$dir"/fixtures/pp/pp_*.vmasm "$tmp/"
$py "$dir/llm_ref.py" pp-weights "$tmp/pp.safetensors" 7

# ---- the notes: where each stage starts and ends, what crosses the cut ----
check asm-mlp-2 0 "$rill" asm "$tmp/pp_mlp.vmasm" --pipeline-parallel=2 -o "$tmp/mlp2.vmbc"
has asm-mlp-2 "pp_mlp.vmasm:15:9: note: pipeline parallel: stage 0 (rank 0): 4 ops to line 18, 4 weights"
has asm-mlp-2 ", sends %r2 on"
has asm-mlp-2 "pp_mlp.vmasm:19:9: note: pipeline parallel: stage 1 (rank 1): 4 ops to line 22, 4 weights"
has asm-mlp-2 "pp_mlp.vmasm:14:6: note: pipeline parallel: @main cut into 2 stages, 2 micro-batches"
# four stages: the residual %r2 and the layer's %g3 both cross the cut before stage 3
check asm-mlp-4 0 "$rill" asm "$tmp/pp_mlp.vmasm" --pipeline-parallel=4 --micro-batches=1 -o "$tmp/mlp4.vmbc"
has asm-mlp-4 "pp_mlp.vmasm:21:9: note: pipeline parallel: stage 3 (rank 3): 2 ops to line 22, 2 weights"
has asm-mlp-4 "stage 2 (rank 2): 2 ops to line 20, 2 weights, cost 1.65e+05, sends 2 values on"
has asm-mlp-4 "cut into 4 stages, 1 micro-batch"
# the blocks balance by cost: one block a stage
check asm-blocks-4 0 "$rill" asm "$tmp/pp_blocks.vmasm" --pipeline-parallel=4 -o "$tmp/blk4.vmbc"
has asm-blocks-4 "pp_blocks.vmasm:67:12: note: pipeline parallel: stage 1 (rank 1): 23 ops to line 89, 9 weights"
has asm-blocks-4 ", sends %y1 on"

# ---- the stage form: printed, assembled again to the same bytes ----
check dis 0 "$rill" dis "$tmp/mlp2.vmbc"
has dis '# lowered form, bytecode 1.12' # (its weights of 4 KiB and more have XXH64 checksums)
has dis 'const %w1 : f32[128,64] = w["l1.weight"] {stage=0, ranks=2}'
has dis 'const %b4 : f32[64] = w["l4.bias"] {stage=1, ranks=2}'
has dis 'call @main.stage0, (%x), (%y)'
has dis 'sendrecv(f32[4,64]) -> () {to=[1], to_shift=[0]}'
echo "$out" > "$tmp/mlp2.vmasm"
check dis-again 0 "$rill" asm "$tmp/mlp2.vmasm" -o "$tmp/mlp2b.vmbc"
cmp -s "$tmp/mlp2.vmbc" "$tmp/mlp2b.vmbc" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL dis-again: the module differs"; }
printf 'weights "pp.safetensors" as w\nconst %%a : f32[128,64] = w["l1.weight"] {stage=2, ranks=2}\nfunc @main(%%x: f32[2]) -> f32[2] {\n  return %%x\n}\n' > "$tmp/bad.vmasm"
check stage-range 2 "$rill" asm "$tmp/bad.vmasm" -o "$tmp/bad.vmbc"; has stage-range "bad.vmasm:2:41: error: {stage=K, ranks=N} needs N in 2..1024 and K in 0..N-1"

# ---- cut runs give the unsplit results, bit for bit ----
run() { "$rill" launch -n "$1" "$rill" run "${@:2}" --device=cpu --seed=3 --rtol=0 --atol=0; }
check mlp-1 0 "$rill" run "$tmp/pp_mlp.vmasm" --device=cpu --seed=3 --input='f32[8,64]=random' --output=@"$tmp/mlp.npy"
check blocks-1 0 "$rill" run "$tmp/pp_blocks.vmasm" --device=cpu --seed=3 --input='f32[4,6,64]=random' --output=@"$tmp/blk.npy"
for n in 2 4; do
  for m in 1 2 4; do
    check "mlp-$n-$m" 0 run $n "$tmp/pp_mlp.vmasm" --pipeline-parallel=$n --micro-batches=$m --input='f32[8,64]=random' --expected-output=@"$tmp/mlp.npy"
    [ "$(echo "$out" | grep -c 'result\[0\]: matches (512 elements, max abs diff 0')" -eq "$n" ] && pass=$((pass + 1)) ||
      { fail=$((fail + 1)); echo "FAIL mlp-$n-$m: not every rank's result matches: $(echo "$out" | head -3)"; }
    check "blocks-$n-$m" 0 run $n "$tmp/pp_blocks.vmasm" --pipeline-parallel=$n --micro-batches=$m --input='f32[4,6,64]=random' --expected-output=@"$tmp/blk.npy"
    [ "$(echo "$out" | grep -c 'result\[0\]: matches (1536 elements, max abs diff 0')" -eq "$n" ] && pass=$((pass + 1)) ||
      { fail=$((fail + 1)); echo "FAIL blocks-$n-$m: not every rank's result matches: $(echo "$out" | head -3)"; }
  done
done
check blocks-O0 0 run 2 "$tmp/pp_blocks.vmasm" -O0 --pipeline-parallel=2 --input='f32[4,6,64]=random' --expected-output=@"$tmp/blk.npy"
has blocks-O0 "ran interpreted, not as a graph: the module is cut into pipeline stages"
check asm-linked 0 "$rill" asm "$tmp/pp_mlp.vmasm" --link-weights --pipeline-parallel=2 -o "$tmp/mlp2l.vmbc"
check linked 0 run 2 "$tmp/mlp2l.vmbc" --input='f32[8,64]=random' --expected-output=@"$tmp/mlp.npy"
has linked "result[0]: matches (512 elements, max abs diff 0"
check graph-on 1 run 2 "$tmp/mlp2.vmbc" --graph=on --input='f32[8,64]=random'
has graph-on "@main cannot run as a graph: the module is cut into pipeline stages"
# a sum over the batch: one micro-batch cuts it fine (no weights: graphs refused for the branches' sends)
check mix-1 0 "$rill" run "$tmp/pp_mix.vmasm" --device=cpu --seed=3 --input='f32[8,64]=random' --output=@"$tmp/mix.npy"
check mix-2 0 run 2 "$tmp/pp_mix.vmasm" --pipeline-parallel=2 --micro-batches=1 --input='f32[8,64]=random' --expected-output=@"$tmp/mix.npy"
has mix-2 "sends and receives under an if (a rank's pipeline stage): a graph records every branch"

# two GPUs or more: each rank's stage on its own GPU (sends and receives through NCCL), against the cpu results
ngpu=$(cuda_gpus "$rill")
if [ "$ngpu" -ge 2 ]; then
  for m in 1 2; do
    check "blocks-cuda-$m" 0 "$rill" launch -n 2 sh -c '"$0" run "$@" --device=cuda:$LOCAL_RANK' "$rill" "$tmp/pp_blocks.vmasm" --pipeline-parallel=2 \
      --micro-batches=$m --seed=3 --input='f32[4,6,64]=random' --expected-output=@"$tmp/blk.npy" --rtol=1e-4 --atol=1e-4
  done
  check mlp-cuda-linked 0 "$rill" launch -n 2 sh -c '"$0" run "$@" --device=cuda:$LOCAL_RANK' "$rill" "$tmp/mlp2l.vmbc" --seed=3 \
    --input='f32[8,64]=random' --expected-output=@"$tmp/mlp.npy" --rtol=1e-4 --atol=1e-4
else
  echo "note: GPU cases skipped (fewer than two GPUs)"
fi

# ---- each rank holds its stage's weights only: rill bench's figures on rank 0 ----
# (MLP: 129.5 KiB whole; stage 0 of 2 its two layers, 64.8 KiB, and of 4 one, 32.5 KiB; plus the
# micro-batches' row indices, and the zeros a rank that is not the last returns into the broadcast)
check mem-1 0 "$rill" bench "$tmp/pp_mlp.vmasm" --device=cpu --iterations=1; has mem-1 "memory: weights 129.5 KiB"
check mem-2 0 "$rill" launch -n 2 "$rill" bench "$tmp/pp_mlp.vmasm" --device=cpu --iterations=1 --pipeline-parallel=2; has mem-2 "memory: weights 66.8 KiB"
check mem-4 0 "$rill" launch -n 4 "$rill" bench "$tmp/pp_mlp.vmasm" --device=cpu --iterations=1 --pipeline-parallel=4 --micro-batches=1; has mem-4 "memory: weights 34.5 KiB"

# ---- what cannot be cut: errors at their positions ----
check state 2 "$rill" asm "$tmp/pp_bad_state.vmasm" --pipeline-parallel=2 -o "$tmp/x.vmbc"
has state "pp_bad_state.vmasm:5:3: error: --pipeline-parallel=2: @main reads or updates state %acc: it cannot be cut into stages"
check call 2 "$rill" asm "$tmp/pp_bad_call.vmasm" --pipeline-parallel=2 -o "$tmp/x.vmbc"
has call "pp_bad_call.vmasm:2:6: note: pipeline parallel: @twice stays whole (only @main is cut into stages)"
has call "pp_bad_call.vmasm:8:8: error: --pipeline-parallel=2: @main must be a straight line of ops to be cut into stages (a call here)"
check mix 2 "$rill" asm "$tmp/pp_mix.vmasm" --pipeline-parallel=2 -o "$tmp/x.vmbc"
has mix "pp_mix.vmasm:4:8: error: --micro-batches=2: sum mixes the rows of the batch (8 rows), which the micro-batches cut (give --micro-batches=1)"
check batch 2 "$rill" asm "$tmp/pp_mlp.vmasm" --pipeline-parallel=2 --micro-batches=3 -o "$tmp/x.vmbc"
has batch "pp_mlp.vmasm:14:12: error: --micro-batches=3: the batch of %x (8 rows) does not divide into 3 micro-batches"
check few 2 "$rill" asm "$tmp/pp_mlp.vmasm" --pipeline-parallel=16 -o "$tmp/x.vmbc"
has few "pp_mlp.vmasm:14:6: error: --pipeline-parallel=16: @main has 8 ops, fewer than the 16 stages"
check no-main 2 "$rill" asm "$tmp/bad.vmasm" --pipeline-parallel=2 -o "$tmp/x.vmbc"
check mb-alone 2 "$rill" asm "$tmp/pp_mlp.vmasm" --micro-batches=2 -o "$tmp/x.vmbc"; has mb-alone "rill: --micro-batches goes with --pipeline-parallel=N (N > 1)"
check grid 2 "$rill" asm "$tmp/pp_mlp.vmasm" --pipeline-parallel=2 --tensor-parallel=2 -o "$tmp/x.vmbc"; has grid "is not built: give one"
check tune 2 "$rill" tune "$tmp/pp_mlp.vmasm" --pipeline-parallel=2 -o "$tmp/p.json"; has tune "tune the unsplit program"
mkdir "$tmp/llm"
check llm 2 "$rill" llm "$tmp/llm" --pipeline-parallel=2 --prompt-ids='i64[1,2]=1,2'; has llm "rill: --pipeline-parallel: rill llm's programs keep a KV cache"
check serve 2 "$rill" serve "$tmp/pp_mlp.vmasm" --pipeline-parallel=2; has serve "which rill serve does not run"
[ ! -e "$tmp/x.vmbc" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: a refused assembly left an output file"; }
# a cut module run alone, or by a job of another size
check alone 2 "$rill" run "$tmp/mlp2.vmbc" --device=cpu --input='f32[8,64]=random'
has alone "the module is split for a job of 2 ranks (--pipeline-parallel=2): run it as one, e.g. rill launch -n 2 rill run ..."
check job-size 2 "$rill" launch -n 4 "$rill" run "$tmp/mlp2.vmbc" --device=cpu --input='f32[8,64]=random'
has job-size "the module is split for a job of 2 ranks (--pipeline-parallel=2), and this job has 4"

echo "pp: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
