#!/bin/bash
# test_onnx_cli.sh RILL: `rill import` and .onnx inputs to asm, run, bench
# (spec/cli.md), on models of ONNX's backend tests (libonnx-testdata):
# files written, exit codes, messages, and no partial files on bad input.
rill=$1
data=${RILL_ONNX_DATA:-${RILL_DEB_ROOT:+$RILL_DEB_ROOT/usr/share/libonnx-testdata/data}}
data=${data:-/usr/share/libonnx-testdata/data}
conv=$data/node/test_conv_with_strides_padding/model.onnx
if [ ! -f "$conv" ]; then echo "skipped: no ONNX backend tests at $data (install libonnx-testdata)"; exit 77; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/shell_checks.sh"
exists() { if [ -e "$2" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: $2 missing"; fi; }
absent() { if [ ! -e "$2" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: $2 left behind"; fi; }

cp "$conv" "$tmp/conv.onnx"
check import 0 "$rill" import "$tmp/conv.onnx"
exists import-vmasm "$tmp/conv.vmasm"; exists import-weights "$tmp/conv.safetensors"
check import-o 0 "$rill" import "$tmp/conv.onnx" -o "$tmp/m.vmasm"
exists import-o-weights "$tmp/m.safetensors"
grep -q 'weights "m.safetensors" as w' "$tmp/m.vmasm" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL weights statement"; }
check run-imported 0 "$rill" run "$tmp/m.vmasm" --device=cpu --input='f32[1,1,7,5]=random' --input='f32[1,1,3,3]=random'
check run-onnx 0 "$rill" run "$tmp/conv.onnx" --device=cpu --input='f32[1,1,7,5]=random' --input='f32[1,1,3,3]=random'; has run-onnx "result[0]: f32[1,1,4,3]"
check asm-onnx 0 "$rill" asm "$tmp/conv.onnx"; exists asm-onnx "$tmp/conv.vmbc"
check verify-onnx 0 "$rill" verify "$tmp/conv.vmbc"
# the module names the model file as its source (not the importer's scratch text), and assembles to the same bytes again
check asm-onnx-again 0 "$rill" asm "$tmp/conv.onnx" -o "$tmp/conv2.vmbc"
cmp -s "$tmp/conv.vmbc" "$tmp/conv2.vmbc" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL asm-onnx-again: other bytes"; }
"$rill" dis "$tmp/conv.vmbc" | grep -qx "source \"$tmp/conv.onnx\"" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL dis-onnx: no source \"$tmp/conv.onnx\""; }
check bench-onnx 0 "$rill" bench "$tmp/conv.onnx" --device=cpu --iterations=2 --warmup=0
has bench-onnx "(ONNX import "
check tune-onnx 0 "$rill" tune "$tmp/conv.onnx" --device=cpu --iterations=1 -o "$tmp/prof.json"

# QLinearConv: qconv2d by default, the core-op lowering with RILL_QUANT_FUSION=0
# and with -O0 (import, and run), the same results
qc=$data/node/test_qlinearconv/model.onnx
if [ -f "$qc" ]; then
  cp "$qc" "$tmp/qc.onnx"
  check import-quant-off 0 env RILL_QUANT_FUSION=0 "$rill" import "$tmp/qc.onnx" -o "$tmp/qcd.vmasm"
  grep -q 'qconv2d(' "$tmp/qcd.vmasm" && { fail=$((fail + 1)); echo "FAIL import-quant-off: qconv2d with RILL_QUANT_FUSION=0"; } || pass=$((pass + 1))
  check import-quant 0 "$rill" import "$tmp/qc.onnx"
  grep -q 'qconv2d(' "$tmp/qc.vmasm" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL import-quant: no qconv2d"; }
  check import-quant-O0 0 "$rill" import -O0 "$tmp/qc.onnx" -o "$tmp/qc0.vmasm"
  grep -q 'qconv2d(' "$tmp/qc0.vmasm" && { fail=$((fail + 1)); echo "FAIL import-quant-O0: qconv2d at -O0"; } || pass=$((pass + 1))
  qin=(--device=cpu '--input=u8[1,1,7,7]=random' '--input=f32[]=0.5' '--input=u8[]=3' '--input=u8[1,1,1,1]=random' '--input=f32[1]=0.25'
       '--input=u8[1]=7' '--input=f32[]=0.3' '--input=u8[]=100')
  check run-quant 0 "$rill" run "$tmp/qc.onnx" "${qin[@]}"; fused=$out
  check run-quant-O0 0 "$rill" run "$tmp/qc.onnx" -O0 "${qin[@]}"
  [ "$fused" = "$out" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run-quant: -O0 and -O1 differ"; }
fi

# --timings: `rill run MODEL.onnx` imports and assembles in memory (a
# module image: no module file written or read back), `rill asm` writes
check timings-run 0 "$rill" run "$tmp/conv.onnx" --device=cpu --input='f32[1,1,7,5]=random' --input='f32[1,1,3,3]=random' --timings
for part in import assembly "module image" "module load" vm "first run" total; do has timings-run "rill: timings: $part "; done
echo "$out" | grep -q "module write" && { fail=$((fail + 1)); echo "FAIL rill run MODEL.onnx wrote a module"; } || pass=$((pass + 1))
check timings-asm 0 "$rill" asm "$tmp/conv.onnx" -o "$tmp/t.vmbc" --timings; has timings-asm "rill: timings: import "; has timings-asm "rill: timings: module write "
check timings-import 0 "$rill" import "$tmp/conv.onnx" -o "$tmp/t.vmasm" --timings; has timings-import "rill: timings: import "; has timings-import "rill: timings: import write "
# a Gemm without transB: linear reads B [K,N] as it lies (weight="kn"); the results as from the files
gemm=$data/node/test_gemm_default_no_bias/model.onnx
if [ -f "$gemm" ]; then
  check import-gemm 0 "$rill" import "$gemm" -o "$tmp/gemm.vmasm"
  grep -q 'weight="kn"' "$tmp/gemm.vmasm" || grep -q '= matmul(' "$tmp/gemm.vmasm" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL gemm: neither a kn linear nor a matmul"; }
fi

# bad input: exit 2, a message, no file
head -c 100 "$tmp/conv.onnx" > "$tmp/trunc.onnx"
check truncated 2 "$rill" import "$tmp/trunc.onnx" -o "$tmp/trunc.vmasm"; has truncated "rill: "
absent truncated "$tmp/trunc.vmasm"; absent truncated "$tmp/trunc.safetensors"
printf 'not a model' > "$tmp/text.onnx"
check not-onnx 2 "$rill" import "$tmp/text.onnx"; has not-onnx "not an ONNX model"
absent not-onnx "$tmp/text.vmasm"
check not-onnx-run 2 "$rill" run "$tmp/text.onnx"
check missing 2 "$rill" import "$tmp/none.onnx"
if [ -f "$data/node/test_bernoulli/model.onnx" ]; then
  cp "$data/node/test_bernoulli/model.onnx" "$tmp/bernoulli.onnx"
  check unsupported 2 "$rill" import "$tmp/bernoulli.onnx"; has unsupported "(Bernoulli, opset"; has unsupported "unsupported: random numbers are not generated"
  absent unsupported "$tmp/bernoulli.vmasm"
  check unsupported-run 2 "$rill" run "$tmp/bernoulli.onnx"
fi
check bad-shape 2 "$rill" import "$tmp/conv.onnx" --shape=N; has bad-shape "--shape expects NAME=N"
check usage 2 "$rill" import
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
