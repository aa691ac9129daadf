#!/bin/bash
# run.sh: on the GPU machine, from the repository root, after
#   source .gpu-deps/device-env.sh
# Builds in a fresh folder with the CUDA backend, runs the whole test suite
# (GPU tests included) and the conformance cases on the GPU. Full logs go to
# $OUT (or /tmp/rill-gpu); a short summary is printed last.
set -u
out=${OUT:-/tmp/rill-gpu}; mkdir -p "$out"
rm -rf build-gpu
conf=${RILL_CONFORMANCE:-$PWD/../shared/conformance}
{ meson setup build-gpu -Dcuda=enabled -Dwerror=true -Dconformance_dir="$conf" && ninja -C build-gpu; } > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
build-gpu/tools/rill version
meson test -C build-gpu --print-errorlogs > "$out/test.log" 2>&1; rc=$?
grep -E "^ *[0-9]+/[0-9]+ " "$out/test.log"
grep -E "^(unary|binary|fused):|^conv2d with fused|^NVRTC:|^FAIL|random seed" "$out/test.log" | head -20
if [ -f "$conf/run.sh" ]; then
  bash "$conf/run.sh" build-gpu/tools/rill "$conf" cuda > "$out/conformance-cuda.log" 2>&1
  tail -8 "$out/conformance-cuda.log"
fi
# The cases with shape variables on cuda, interpreted and as graphs per size.
if [ -d "$conf/dynamic" ]; then
  for g in off on; do
    w=$PWD/build-gpu/rill-graph-$g  # rill, with --graph=$g added to each `run`
    printf '#!/bin/sh\nc=$1; shift\n[ "$c" = run ] && exec %s run "$@" --graph=%s\nexec %s "$c" "$@"\n' "$PWD/build-gpu/tools/rill" $g "$PWD/build-gpu/tools/rill" > "$w"
    chmod +x "$w"
    bash "$conf/run.sh" "$w" "$conf/dynamic" cuda > "$out/conformance-dynamic-cuda-$g.log" 2>&1
    echo "conformance dynamic on cuda, --graph=$g: $(tail -1 "$out/conformance-dynamic-cuda-$g.log")"
    grep -q " 0 failed" "$out/conformance-dynamic-cuda-$g.log" || rc=1
  done
fi
# Kernel choices per size on cuda: rill tune --shapes times each candidate
# (cuDNN engines and algorithms, cuBLASLt algorithms, the generated matmul) at
# each batch size and fits a tree per op; the module with the trees embedded
# gives the cpu device's results at sizes inside and between the samples.
printf 'dim B in [1, 64]\nfunc @main(%%x: f32[B,3,32,32], %%w: f32[16,3,3,3], %%a: f32[B,256], %%m: f32[256,512]) -> (f32[B,16,30,30], f32[B,512]) {\n  %%y = conv2d(%%x, %%w)\n  %%z = matmul(%%a, %%m)\n  return %%y, %%z\n}\n' > "$out/dyn-tune.vmasm"
{ build-gpu/tools/rill tune "$out/dyn-tune.vmasm" --device=cuda --iterations=20 --shapes=B=1,4,16,64 -o "$out/dyn-tune.json" &&
  build-gpu/tools/rill asm "$out/dyn-tune.vmasm" --profile="$out/dyn-tune.json" -o build-gpu/dyn-tune.vmbc &&
  build-gpu/tools/rill dis build-gpu/dyn-tune.vmbc | grep '^choose'; } > "$out/dyn-tune.log" 2>&1; r=$?
echo "rill tune --shapes on cuda: exit $r; $(grep -c '^choose' "$out/dyn-tune.log") trees; $(python3 -c "import json,sys; d=json.load(open(sys.argv[1]))['shapes']['ops']; print('; '.join('%d candidates, %d timed' % (len(o['candidates']), sum(t is not None for r in o['us'] for t in r)) for o in d))" "$out/dyn-tune.json" 2>&1)"
[ $r -eq 0 ] || rc=1
for b in 1 3 16 40; do
  build-gpu/tools/rill run build-gpu/dyn-tune.vmbc --device=cpu --seed=$b --input="f32[$b,3,32,32]=random" --input='f32[16,3,3,3]=random' --input="f32[$b,256]=random" --input='f32[256,512]=random' --output="@build-gpu/dt$b.0.npy" --output="@build-gpu/dt$b.1.npy" > /dev/null 2>> "$out/dyn-tune.log" &&
  build-gpu/tools/rill run build-gpu/dyn-tune.vmbc --device=cuda --seed=$b --rtol=1e-3 --atol=1e-3 --input="f32[$b,3,32,32]=random" --input='f32[16,3,3,3]=random' --input="f32[$b,256]=random" --input='f32[256,512]=random' --expected-output="@build-gpu/dt$b.0.npy" --expected-output="@build-gpu/dt$b.1.npy" >> "$out/dyn-tune.log" 2>&1
  r=$?; echo "trees' choices at B=$b on cuda against cpu: exit $r"; [ $r -eq 0 ] || rc=1
done
cp build-gpu/meson-logs/testlog.txt "$out/" 2>/dev/null
# Out of device memory is a failed run (exit 1) naming what was allocated and the device.
printf 'func @main(%%x: f32[1,1,1]) -> f32[] {\n  %%y = broadcast_to(%%x) {shape=[1024,1024,65536]}\n  %%s = sum(%%y)\n  return %%s\n}\n' > "$out/oom.vmasm"
build-gpu/tools/rill run "$out/oom.vmasm" --device=cuda --input='f32[1,1,1]=1' > "$out/oom-cuda.log" 2>&1; r=$?
echo "cuda out of memory: exit $r: $(head -c 300 "$out/oom-cuda.log")"; [ $r -eq 1 ] && grep -q "out of memory" "$out/oom-cuda.log" || rc=1
if [ "${RILL_BENCH:-1}" = 1 ]; then
  build-gpu/bench/bench_gpu 2000 examples/mlp/mlp.vmasm 2>&1 | tee "$out/bench-gpu.txt"
fi
# Fusion (bench/fusion/run.sh): sigmoid(x0*x1+x2) on 64M f32 against the
# device's copy bandwidth, an Adam step against PyTorch's fused and foreach
# Adam; RILL_FUSION_BENCH=1 runs it, its files in $OUT/fusion.
if [ "${RILL_FUSION_BENCH:-0}" = 1 ]; then
  timeout 900 bash bench/fusion/run.sh build-gpu/tools/rill "$out/fusion" 2>&1 | tail -12
  python3 bench/fusion/counts.py build-gpu/tools/rill "$conf"/*/prog.vmasm tests/fixtures/*.vmasm > "$out/fusion/counts.txt" 2>&1
fi
# The convolution tests through each cuDNN path alone (by default a shape
# takes whichever is faster, so a path may go untested: FUSED takes a plan
# with the bias and activation fused wherever cuDNN has one), and with
# poisoned memory; RILL_VARIANTS=0 skips these runs.
[ "${RILL_VARIANTS:-1}" = 1 ] && for path in LEGACY GRAPH FUSED; do
  env RILL_CUDNN_$path=1 CK_FORK=no timeout 900 build-gpu/tests/test_cuda > "$out/cudnn-$path.log" 2>&1
  echo "test_cuda with RILL_CUDNN_$path=1: exit $? ($(grep -E 'Checks' "$out/cudnn-$path.log"))"
done
# Every new device allocation poisoned (0xff, NaN for floats): an output no
# kernel wrote cannot match the CPU reference.
if [ "${RILL_VARIANTS:-1}" = 1 ]; then
  RILL_POISON=1 RILL_QUICK=1 CK_FORK=no timeout 900 build-gpu/tests/test_cuda > "$out/poison.log" 2>&1
  echo "test_cuda with poisoned memory: exit $? ($(grep -E 'Checks' "$out/poison.log"))"
fi
if [ "${RILL_ASAN:-1}" = 1 ]; then
  # Host-side memory errors in the CUDA paths (fault injection included). CUDA
  # needs ASan's shadow gap unprotected; the driver's own allocations are not ours to check for leaks.
  { meson setup build-gpu-asan -Dcuda=enabled -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug \
      -Dconformance_dir="$conf" && ninja -C build-gpu-asan; } > "$out/build-asan.log" 2>&1 || tail -20 "$out/build-asan.log"
  CK_FORK=no RILL_QUICK=1 ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    timeout 900 build-gpu-asan/tests/test_cuda > "$out/asan-cuda.log" 2>&1
  echo "test_cuda under ASan+UBSan: exit $? ($(grep -E 'Checks|ERROR: AddressSanitizer|runtime error' "$out/asan-cuda.log" | head -3 | tr '\n' ' '))"
fi
if [ "${RILL_SANITIZE:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  for tool in ${RILL_SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
    extra=""; [ $tool = memcheck ] && extra="--leak-check full"
    CK_FORK=no RILL_QUICK=1 timeout 900 compute-sanitizer --tool $tool $extra --error-exitcode 99 build-gpu/tests/test_cuda > "$out/sanitizer-$tool.log" 2>&1
    r=$?; echo "compute-sanitizer $tool: exit $r ($(grep -E 'ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY' "$out/sanitizer-$tool.log" | tr '\n' ' '))"; [ $r -eq 0 ] || rc=1
  done
  # Graph replays (captured runs, conditional on nothing the host reads) under
  # memcheck (the suite in one process, 7 s) and racecheck (each case alone,
  # side by side: in one process it had not ended after 300 s). Memcheck's
  # processes side by side are not used: there the `control` fixture's replays
  # met CUDA_ERROR_ILLEGAL_ADDRESS with memcheck reporting no access of its own,
  # and so did tests/gpu/cond_probe, a conditional node made without the VM
  # (bench/RESULTS.md, runs BI and BL); without memcheck both always pass.
  CK_FORK=no RILL_QUICK=1 timeout 900 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 build-gpu/tests/test_graph > "$out/sanitizer-graph-memcheck.log" 2>&1; r=$?
  echo "compute-sanitizer memcheck on graph replays: exit $r ($(grep -E 'ERROR SUMMARY|Checks' "$out/sanitizer-graph-memcheck.log" | tr '\n' ' '))"; [ $r -eq 0 ] || rc=1
  bash tests/gpu/sanitize-graph.sh racecheck "$out" || rc=1
  # Whether initcheck sees cp.async.bulk stores (why cuBLASLt's outputs are
  # marked written: ops/cuda_nn.c, mark_written).
  if [ -x build-gpu/tests/initcheck_probe ]; then
    compute-sanitizer --tool initcheck build-gpu/tests/initcheck_probe > "$out/initcheck-probe.log" 2>&1
    echo "initcheck probe: exit $?; $(awk '/Uninitialized access/{n++} /values wrong|skipped/{printf "%s (%d reports); ", $0, n; n=0}' "$out/initcheck-probe.log")"
  fi
fi
# What cuDNN can fuse (a convolution with its bias and relu, f16 channels-last,
# batch-1 shapes): engines listed, plans made, times, the fused result checked
# (tests/gpu/cudnn_fusion_probe.c); RILL_CUDNN_PROBE=1 runs it.
if [ "${RILL_CUDNN_PROBE:-0}" = 1 ] && [ -x build-gpu/tests/cudnn_fusion_probe ]; then
  timeout 600 build-gpu/tests/cudnn_fusion_probe > "$out/cudnn-fusion-probe.txt" 2>&1; r=$?
  cat "$out/cudnn-fusion-probe.txt"; echo "cudnn_fusion_probe: exit $r"; [ $r -eq 0 ] || rc=1
fi
# DLPack with PyTorch: a CUDA tensor into a Rill run and the result back, no
# copies, values and deleters checked (tests/gpu/dlpack_torch.py).
if python3 -c "import torch" 2> /dev/null; then
  python3 tests/gpu/dlpack_torch.py build-gpu/librill.so > "$out/dlpack-torch.log" 2>&1; r=$?
  echo "dlpack_torch: exit $r ($(tail -1 "$out/dlpack-torch.log"))"; [ $r -eq 0 ] || rc=1
else
  echo "dlpack_torch skipped: PyTorch is missing"
fi
# left LIMIT: LIMIT seconds, or fewer where RILL_DEADLINE comes sooner.
left() {
  local l=$1
  [ -n "${RILL_DEADLINE:-}" ] && [ $((RILL_DEADLINE - $(date +%s))) -lt "$l" ] && l=$((RILL_DEADLINE - $(date +%s)))
  echo $((l > 1 ? l : 1))
}
# bench_torch NAME LIMIT LINES SCRIPT [ARG...]: a PyTorch-side benchmark script
# run as `SCRIPT build-gpu/tools/rill WORK ARG...` for up to LIMIT seconds (or
# until RILL_DEADLINE, a time in seconds since 1970, so that its logs still
# come back), its last LINES lines shown; weights and bytecode stay in /tmp,
# logs and JSON come back in $OUT/NAME.txt and NAME.tgz.
bench_torch() {
  local name=$1 limit=$2 lines=$3 script=$4 work; shift 4
  if ! python3 -c "import torch, torchvision" 2> /dev/null; then echo "$name skipped: PyTorch or torchvision is missing"; return; fi
  work=$(mktemp -d)
  limit=$(left "$limit")
  echo "$name: up to $limit s"
  timeout "$limit" bash "$script" build-gpu/tools/rill "$work" "$@" > "$out/$name.txt" 2>&1 || rc=1
  tail -"$lines" "$out/$name.txt"
  tar czf "$out/$name.tgz" -C "$work" --exclude='*.safetensors' --exclude='*.vmbc' --exclude='*.npy' .
  rm -rf "$work"
}
# The model benchmark (bench/models/run.sh): every schedule checked and timed
# against PyTorch (RILL_MODELS_TIMEOUT seconds at most).
# shellcheck disable=SC2086
[ "${RILL_MODELS:-0}" = 1 ] && bench_torch models "${RILL_MODELS_TIMEOUT:-3600}" 20 bench/models/run.sh ${RILL_MODEL_NAMES:-}
# Shape variables (bench/dynamic/run.sh): the BERT-base encoder with its
# length symbolic, checked at every length 1..128 and timed at 8 lengths
# against static modules, PyTorch eager, torch.compile(dynamic=True) and
# CUDA-graph replay; the CNNs with a symbolic batch against static modules.
[ "${RILL_DYNAMIC:-0}" = 1 ] && bench_torch dynamic "${RILL_DYNAMIC_TIMEOUT:-2700}" 40 bench/dynamic/run.sh
if [ "${RILL_ONNX:-0}" = 1 ]; then
  # ONNX: the backend tests on the GPU (libonnx-testdata under $RILL_DEB_ROOT),
  # and torchvision models exported to ONNX, imported, checked and timed
  # against onnxruntime and the torch.fx path (bench/models/onnx.sh).
  if [ -x build-gpu/tests/onnx_backend ]; then
    for lvl in O1 O0; do
      flag=""; [ $lvl = O0 ] && flag=--O0
      timeout "$(left 1800)" build-gpu/tests/onnx_backend --device=cuda $flag > "$out/onnx-backend-cuda-$lvl.log" 2>&1; r=$?
      grep -E "^FAIL" "$out/onnx-backend-cuda-$lvl.log" | head -20
      grep -E "passed, .* failed" "$out/onnx-backend-cuda-$lvl.log"
      echo "onnx_backend --device=cuda $flag: exit $r"; [ $r -eq 0 ] || [ $r -eq 77 ] || rc=1
    done
  else
    echo "onnx_backend not built (the importer was left out: $(grep -m1 'ONNX importer' "$out/build.log"))"
  fi
  if python3 -c "import torch, torchvision" 2> /dev/null; then
    work=$(mktemp -d)
    timeout "$(left "${RILL_ONNX_MODELS_TIMEOUT:-1800}")" bash bench/models/onnx.sh build-gpu/tools/rill "$work" ${RILL_MODEL_NAMES:-} > "$out/onnx-models.txt" 2>&1 || rc=1
    tail -16 "$out/onnx-models.txt"
    tar czf "$out/onnx-models.tgz" -C "$work" --exclude='*.safetensors' --exclude='*.vmbc' --exclude='*.npy' --exclude='*.onnx' .
    rm -rf "$work"
  else
    echo "onnx models skipped: PyTorch or torchvision is missing"
  fi
fi
exit $rc
