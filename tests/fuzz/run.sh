#!/bin/bash
# run.sh SECONDS [TARGET...]: builds the libFuzzer targets with clang (ASan,
# UBSan) in build-fuzz/ and runs each for SECONDS from seeds made from the
# project's own files. Crashes land in fuzz-out/crashes/; copy each into
# tests/fuzz/regressions/TARGET/ once fixed, so the test suite replays it.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-600}; shift || true
targets=${*:-asm module safetensors npy onnx profile pcache}
[ -d build-fuzz ] || CC=clang meson setup build-fuzz -Dfuzz=true -Dtests=false -Db_sanitize=address,undefined -Db_lundef=false
ninja -C build-fuzz
mkdir -p fuzz-out/crashes
for t in asm module safetensors npy onnx profile pcache; do mkdir -p fuzz-out/$t-seed fuzz-out/$t-corpus; done
cp tests/fixtures/*.vmasm examples/mlp/*.vmasm tests/fuzz/seeds/asm/*.vmasm fuzz-out/asm-seed/
for f in tests/fixtures/*.vmasm tests/fuzz/seeds/asm/*.vmasm; do build-fuzz/tools/rill asm "$f" -o "fuzz-out/module-seed/$(basename "$f" .vmasm).vmbc" 2>/dev/null || true; done
cp tests/fixtures/*.safetensors fuzz-out/safetensors-seed/
for f in examples/mlp/*.safetensors; do cp "$f" "fuzz-out/safetensors-seed/mlp-$(basename "$f")"; done
cp examples/mlp/*.npy fuzz-out/npy-seed/
cp tests/fuzz/seeds/profile/*.json fuzz-out/profile-seed/
cp tests/fuzz/regressions/pcache/* fuzz-out/pcache-seed/
# ONNX: the saved regressions, and small models of ONNX's backend tests where installed
cp tests/fuzz/regressions/onnx/* fuzz-out/onnx-seed/ 2>/dev/null || true
for d in /usr/share/libonnx-testdata/data/node/*/; do
  [ "$(stat -c %s "$d/model.onnx" 2>/dev/null || echo 99999)" -lt 4096 ] && cp "$d/model.onnx" "fuzz-out/onnx-seed/$(basename "$d").onnx"
done 2>/dev/null || true
for t in $targets; do
  echo "fuzzing $t for $secs s"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    build-fuzz/tests/fuzz/fuzz_$t fuzz-out/$t-corpus fuzz-out/$t-seed -max_total_time="$secs" -max_len=16384 \
    -timeout=10 -rss_limit_mb=2048 -artifact_prefix=fuzz-out/crashes/$t- -print_final_stats=1 2>&1 | tail -12
done
