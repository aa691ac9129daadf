#!/bin/bash
# test_cli.sh RILL TESTS_DIR: the rill command's contract (spec/cli.md):
# exit codes, messages, specs, output files, tolerances, round trips.
rill=$1; fix=$2/fixtures
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$2/shell_checks.sh"

cp "$fix"/*.vmasm "$tmp"/
check version 0 "$rill" version; has version "bytecode format 1."
check no-command 2 "$rill"
check unknown-command 2 "$rill" frob
check unknown-option 2 "$rill" asm "$tmp/cnn.vmasm" --frob; has unknown-option "unknown option --frob"
check asm-default-output 0 "$rill" asm "$tmp/cnn.vmasm"
[ -f "$tmp/cnn.vmbc" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL asm wrote no cnn.vmbc"; }
check verify 0 "$rill" verify "$tmp/cnn.vmbc"; has verify ok
check dis 0 "$rill" dis "$tmp/cnn.vmbc"; has dis "lowered(streams=1"
"$rill" dis "$tmp/cnn.vmbc" > "$tmp/cnn-dis.vmasm"
check reasm 0 "$rill" asm "$tmp/cnn-dis.vmasm" -o "$tmp/cnn2.vmbc"
cmp -s "$tmp/cnn.vmbc" "$tmp/cnn2.vmbc" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL dis output does not reassemble to the same bytes"; }

# -O0 and -O1: the same results (bit for bit here: fusion only), -O1 fewer ops, both round trip.
check asm-O0 0 "$rill" asm -O0 "$tmp/fusion.vmasm" -o "$tmp/fu0.vmbc"
check asm-O1 0 "$rill" asm -O1 "$tmp/fusion.vmasm" -o "$tmp/fu1.vmbc"
check dis-O1 0 "$rill" dis "$tmp/fu1.vmbc"; has dis-O1 '= fused(f32[37], f32[37], f32[37], f32[37]) -> (f32[37], f32[37], f32[37]) {expr="t0 = mul(x0, f32(0.9));'
has dis-O1 'expr="t0 = mul(x0, x1); t1 = add(t0, x2); t2 = relu(t1); return t2"'
has dis-O1 'epilogue="t0 = gelu(x0); return t0"'
has dis-O1 '= softmax(f32[2,3,8], f32[1,1,8]) -> (f32[2,3,8]) {prologue="t0 = div(x0, f32(4.0)); t1 = add(t0, x1); return t1"}'
"$rill" dis "$tmp/fu1.vmbc" > "$tmp/fu1-dis.vmasm"
check reasm-O1 0 "$rill" asm "$tmp/fu1-dis.vmasm" -o "$tmp/fu1b.vmbc"
cmp -s "$tmp/fu1.vmbc" "$tmp/fu1b.vmbc" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL fused module does not reassemble to the same bytes"; }
check dis-O0 0 "$rill" dis "$tmp/fu0.vmbc"; has dis-O0 "batch_norm("
adam_in=(--input='f32[37]=random' --input='f32[37]=random' --input='f32[37]=random' --input='f32[37]=0.5')
check run-adam-O0 0 "$rill" run -O0 "$tmp/fusion.vmasm" --function=adam --device=cpu --seed=5 "${adam_in[@]}"; a0=$out
check run-adam-O1 0 "$rill" run "$tmp/fusion.vmasm" --function=adam --device=cpu --seed=5 "${adam_in[@]}"; a1=$out
[ -n "$a0" ] && [ "$a0" = "$a1" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL -O0 and -O1 results differ: $a0 / $a1"; }
check bench-O0 0 "$rill" bench -O0 "$tmp/fusion.vmasm" --device=cpu --iterations=2 --warmup=0
check asm-O2 2 "$rill" asm -O2 "$tmp/fusion.vmasm"; has asm-O2 "unknown option -O2"

# A function of 300 parameters and 300 results: 600 --input and --expected-output options (more than any fixed table would hold),
# each value reaching its own parameter (result k is parameter k plus k).
{ printf 'func @main('; for k in $(seq 0 299); do printf '%s%%p%d: f32[1]' "$([ $k -gt 0 ] && echo ', ')" $k; done
  printf ') -> ('; for k in $(seq 0 299); do printf '%sf32[1]' "$([ $k -gt 0 ] && echo ', ')"; done; printf ') {\n'
  for k in $(seq 0 299); do printf '  %%r%d = add(%%p%d, %d.0)\n' $k $k $k; done
  printf '  return'; for k in $(seq 0 299); do printf '%s %%r%d' "$([ $k -gt 0 ] && echo ',')" $k; done; printf '\n}\n'; } > "$tmp/wide.vmasm"
wide=(); for k in $(seq 0 299); do wide+=(--input="f32[1]=$((k * 7))"); done
for k in $(seq 0 299); do wide+=(--expected-output="f32[1]=$((k * 8))"); done
check wide-run 0 "$rill" run "$tmp/wide.vmasm" --device=cpu "${wide[@]}"
wide[599]=--expected-output="f32[1]=1"
check wide-run-mismatch 1 "$rill" run "$tmp/wide.vmasm" --device=cpu "${wide[@]}"

# Assembly errors: position, exit 2, no output file left behind.
printf 'func @main(%%x: f32[2]) -> f32[2] {\n  %%y = relu(%%q)\n  return %%y\n}\n' > "$tmp/bad.vmasm"
check asm-error 2 "$rill" asm "$tmp/bad.vmasm" -o "$tmp/bad.vmbc"; has asm-error "bad.vmasm:2:13: error: unknown value %q"
[ ! -e "$tmp/bad.vmbc" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL asm error left an output file"; }
check missing-file 2 "$rill" asm "$tmp/none.vmasm"; has missing-file "rill: "
head -c 100 "$tmp/cnn.vmbc" > "$tmp/trunc.vmbc"
check truncated-module 2 "$rill" verify "$tmp/trunc.vmbc"; has truncated-module "malformed module"

# A safetensors file whose tensors share bytes is refused, naming them.
python3 -c 'import json, struct, sys
h = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "v": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(12))' "$tmp/overlap.safetensors"
printf 'weights "overlap.safetensors" as w\nconst %%w : f32[2] = w["w"]\nconst %%v : f32[2] = w["v"]\nfunc @main(%%x: f32[2]) -> f32[2] {\n  %%a = add(%%x, %%w)\n  %%b = add(%%a, %%v)\n  return %%b\n}\n' > "$tmp/overlap.vmasm"
check asm-overlap 2 "$rill" asm "$tmp/overlap.vmasm" -o "$tmp/overlap.vmbc"; has asm-overlap 'tensors "w" [0, 8) and "v" [4, 12) overlap'
[ ! -e "$tmp/overlap.vmbc" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL asm-overlap left an output file"; }

# run: inputs, outputs, expected outputs and tolerances.
check run-inline 0 "$rill" run "$tmp/control.vmasm" --device=cpu --input='f32[4]=1 2 3 4' --input='bool[]=true'
has run-inline "result[0]: f32[4] = ["
check run-missing-input 2 "$rill" run "$tmp/control.vmasm" --device=cpu --input='f32[4]=1'; has run-missing-input "missing input for parameter %flag: bool[]"
check run-wrong-type 2 "$rill" run "$tmp/control.vmasm" --device=cpu --input='f32[5]=1' --input='bool[]=1'; has run-wrong-type "expected f32[4], got f32[5]"
check run-bad-value 2 "$rill" run "$tmp/control.vmasm" --device=cpu --input='f32[4]=1 x 3 4' --input='bool[]=1'
check run-count 2 "$rill" run "$tmp/control.vmasm" --device=cpu --input='f32[4]=1 2' --input='bool[]=1'; has run-count "2 values for 4 elements"
check run-npy-out 0 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1,2,3,4' --output="@$tmp/out.npy"
check run-expected-npy 0 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1,2,3,4' --expected-output="@$tmp/out.npy"
check run-expected-inline 0 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1,2,3,4' --expected-output='f32[4]=4 8 12 16'
check run-mismatch 1 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1,2,3,4' --expected-output='f32[4]=4 8 12 16.1'
has run-mismatch "1 of 4 elements outside tolerance"; has run-mismatch "worst at [3]"
check run-tolerance 0 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1,2,3,4' --expected-output='f32[4]=4 8 12 16.1' --atol=0.2
check run-shape-mismatch 1 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1,2,3,4' --expected-output='f32[2]=4 8'
check run-print 0 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1' --output=-; has run-print "result[0]: f32[4] = [4, 4, 4, 4]"
check run-seed-a 0 "$rill" run "$tmp/cnn.vmasm" --device=cpu --input='f32[1,2,9,9]=random' --seed=7; a=$out
check run-seed-b 0 "$rill" run "$tmp/cnn.vmasm" --device=cpu --input='f32[1,2,9,9]=random' --seed=7
[ "$a" = "$out" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --seed is not reproducible"; }
# cuda starts in the background while the file is assembled: an unusable
# device is said after, a file that fails to assemble says its own error.
if "$rill" version | grep -q "cuda: usable"; then
  check run-cuda 0 "$rill" run "$tmp/lowered.vmasm" --device=cuda --input='f32[4]=1' --expected-output='f32[4]=4 4 4 4'
else
  check run-no-cuda 2 "$rill" run "$tmp/lowered.vmasm" --device=cuda --input='f32[4]=1'; has run-no-cuda "device cuda is not usable: "
fi
check run-bad-file-cuda 2 "$rill" run "$tmp/bad.vmasm" --device=cuda --input='f32[2]=1'; has run-bad-file-cuda "bad.vmasm:2:13: error: unknown value %q"
check run-default-device 0 "$rill" run "$tmp/lowered.vmasm" --input='f32[4]=1' --expected-output='f32[4]=4 4 4 4'
check run-bad-device 2 "$rill" run "$tmp/lowered.vmasm" --device=tpu --input='f32[4]=1'; has run-bad-device "unknown device"
check run-bad-npy 2 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input="@$tmp/cnn.vmbc"; has run-bad-npy "malformed .npy"
# .npy as numpy writes them: Fortran order and big-endian read as C order.
printf 'func @main(%%a: f32[2,3,4], %%b: f32[2,3,4]) -> f32[2,3,4] {\n  %%d = sub(%%a, %%b)\n  return %%d\n}\n' > "$tmp/sub.vmasm"
check run-npy-fortran 0 "$rill" run "$tmp/sub.vmasm" --device=cpu --input="@$fix/npy/f32_c.npy" --input="@$fix/npy/f32_fbe.npy" --expected-output='f32[2,3,4]=0' --atol=0
check run-npy-expected-fortran 0 "$rill" run "$tmp/sub.vmasm" --device=cpu --input="@$fix/npy/f32_c.npy" --input='f32[2,3,4]=0' --expected-output="@$fix/npy/f32_f.npy" --atol=0 --rtol=0
check run-npy-expected-big 1 "$rill" run "$tmp/sub.vmasm" --device=cpu --input="@$fix/npy/f32_c.npy" --input='f32[2,3,4]=0.25' --expected-output="@$fix/npy/f32_be.npy"
check run-runtime-error 1 "$rill" run "$tmp/shapes.vmasm" --device=cpu --input='f32[2,3,4]=1' --input='i64[2]=0 9'; has run-runtime-error "out of range"
check run-elementwise 0 "$rill" run "$tmp/elementwise.vmasm" --device=cpu --input='f32[2,3]=random' --input='f32[3]=random'
check run-shapes 0 "$rill" run "$tmp/shapes.vmasm" --device=cpu --input='f32[2,3,4]=random' --input='i64[2]=1 0'
check run-reductions 0 "$rill" run "$tmp/reductions.vmasm" --device=cpu --input='f32[2,3,4]=random'
check run-dtypes 0 "$rill" run "$tmp/dtypes.vmasm" --device=cpu --input='i64[3]=5 -6 7'; has run-dtypes "result[5]: i64[] = 6"
# u64 values above 2^63 read, printed and compared as unsigned (numpy's u64 file: -5 as 2^64 - 5)
printf 'func @main(%%x: u64[3]) -> (u64[3], bool[3]) {\n  %%y = add(%%x, 18446744073709551615)\n  %%g = gt(%%x, 9223372036854775807)\n  return %%y, %%g\n}\n' > "$tmp/u64.vmasm"
check run-u64 0 "$rill" run "$tmp/u64.vmasm" --device=cpu --input='u64[3]=18446744073709551615 1 9223372036854775808'
has run-u64 "u64[3] = [18446744073709551614, 0, 9223372036854775807]"; has run-u64 "bool[3] = [true, false, true]"
check run-u64-expected 1 "$rill" run "$tmp/u64.vmasm" --device=cpu --input='u64[3]=18446744073709551615 1 9223372036854775808' --expected-output='u64[3]=18446744073709551614 0 9223372036854775806' --atol=0 --rtol=0
printf 'func @main(%%x: u64[2,3,4]) -> u64[2,3,4] {\n  %%y = add(%%x, 5)\n  return %%y\n}\n' > "$tmp/u64npy.vmasm"
check run-u64-npy 0 "$rill" run "$tmp/u64npy.vmasm" --device=cpu --input="@$fix/npy/u64_fbe.npy" --output=- ; has run-u64-npy "[[[0, 7, 14, 21]"
# Out of memory is a failed run (1), and says what was being allocated. The
# cpu device's memory is the machine's: 64 TiB is refused at once on any
# machine, whatever the kernel's overcommit.
printf 'func @main(%%x: f32[1,1,1]) -> f32[] {\n  %%y = broadcast_to(%%x) {shape=[65536,65536,4096]}\n  %%s = sum(%%y)\n  return %%s\n}\n' > "$tmp/oom.vmasm"
check run-oom 1 "$rill" run "$tmp/oom.vmasm" --device=cpu --input='f32[1,1,1]=1'
has run-oom "@main+0 (alloc_storage): out of memory: cannot allocate 70368744177664 bytes (65536.0 GiB) on device cpu for storage %slot0 (for %y: f32[65536,65536,4096])"
has run-oom "more than the machine's memory"
printf 'func @main(%%x: f32[65536,65536,4096]) -> f32[] {\n  %%s = sum(%%x)\n  return %%s\n}\n' > "$tmp/big.vmasm"
check run-oom-input 1 "$rill" run "$tmp/big.vmasm" --device=cpu --input='f32[65536,65536,4096]=random'
has run-oom-input "--input 1 (%x): out of memory: cannot allocate 70368744177664 bytes (65536.0 GiB) on the host for f32[65536,65536,4096]"
check bench-oom-input 1 "$rill" bench "$tmp/big.vmasm" --device=cpu; has bench-oom-input "input 1 (%x): out of memory"
printf 'const %%k : f32[65536,65536,4096] = fill(1)\nfunc @main(%%x: f32[]) -> f32[] {\n  %%s = sum(%%k)\n  %%y = add(%%s, %%x)\n  return %%y\n}\n' > "$tmp/bigconst.vmasm"
check run-oom-const 1 "$rill" run "$tmp/bigconst.vmasm" --device=cpu --input='f32[]=1'
has run-oom-const "constant %k: f32[65536,65536,4096] on device cpu: cpu device: 70368744177664 bytes are more than the machine's memory"
check run-oom-expected 1 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1' --expected-output='f32[65536,65536,4096]=0'
has run-oom-expected "--expected-output: out of memory"
# Exit codes of the rest of the command line (spec/cli.md): usage, unreadable
# and malformed files 2; runs that fail and results out of tolerance 1.
check dis-no-file 2 "$rill" dis; has dis-no-file "usage: rill dis"
check verify-two-files 2 "$rill" verify "$tmp/cnn.vmbc" "$tmp/cnn.vmbc"
check verify-missing 2 "$rill" verify "$tmp/none.vmbc"
echo hello > "$tmp/hello.vmbc"
check verify-not-module 2 "$rill" verify "$tmp/hello.vmbc"; has verify-not-module "not a Rill module"
check run-directory 2 "$rill" run "$tmp" --device=cpu; has run-directory "not a regular file"
check run-no-file 2 "$rill" run; has run-no-file "usage: rill run"
check run-option-no-value 2 "$rill" run "$tmp/lowered.vmasm" --input; has run-option-no-value "--input needs a value"
check run-no-function 2 "$rill" run "$tmp/lowered.vmasm" --device=cpu --function=nope --input='f32[4]=1'; has run-no-function "no function @nope"
check run-extra-input 2 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1' --input='f32[4]=1'; has run-extra-input "more inputs than"
check run-bad-rtol 2 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1' --rtol=x
check run-bad-seed 2 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1' --seed=-1
check run-bad-ordinal 2 "$rill" run "$tmp/lowered.vmasm" --device=cuda:x --input='f32[4]=1'; has run-bad-ordinal "unknown device"
check run-expected-missing 2 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1' --expected-output="@$tmp/none.npy"
check run-expected-dtype 1 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1' --expected-output='i32[4]=4'; has run-expected-dtype "got f32[4], expected i32[4]"
check run-too-many-outputs 2 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1' --output=- --output=-; has run-too-many-outputs "1 results, but 2 outputs"
check run-output-unwritable 2 "$rill" run "$tmp/lowered.vmasm" --device=cpu --input='f32[4]=1' --output="@$tmp/no/o.npy"; has run-output-unwritable "cannot write"
# A bad --output is refused before the run: no file written for the good one before it.
check run-output-bad 2 "$rill" run "$tmp/dtypes.vmasm" --device=cpu --input='i64[3]=5 -6 7' --output="@$tmp/first.npy" --output=bogus
has run-output-bad "--output expects @FILE.npy or -, got 'bogus'"
[ ! -e "$tmp/first.npy" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run-output-bad wrote $tmp/first.npy"; }
check asm-unwritable 2 "$rill" asm "$tmp/lowered.vmasm" -o "$tmp/no/x.vmbc"; has asm-unwritable "cannot write"
check asm-no-output-value 2 "$rill" asm "$tmp/lowered.vmasm" -o
check version-extra 2 "$rill" version extra
check bench-bad-warmup 2 "$rill" bench "$tmp/lowered.vmasm" --device=cpu --warmup=-1
check bench-runtime-error 1 "$rill" bench "$tmp/shapes.vmasm" --device=cpu --iterations=1 --input='f32[2,3,4]=1' --input='i64[2]=0 9'; has bench-runtime-error "out of range"
check bench 0 "$rill" bench "$tmp/cnn.vmasm" --device=cpu --iterations=3 --warmup=1; has bench "median"
check bench-json 0 "$rill" bench "$tmp/cnn.vmbc" --device=cpu --iterations=2 --json; has bench-json '"median_ms"'
check bench-bad 2 "$rill" bench "$tmp/cnn.vmasm" --iterations=0
# Stream schedules: several streams, the same results as one stream, and no
# unordered buffer access.
check run-none 0 "$rill" run "$tmp/branches.vmasm" --device=cpu --input='f32[16,16]=random' --input='f32[16,16]=random' --seed=3; want=$out
for p in wavefront asap rank ios; do
  check asm-$p 0 "$rill" asm -O0 "$tmp/branches.vmasm" --schedule=$p --max-streams=3 -o "$tmp/br-$p.vmbc"
  check dis-$p 0 "$rill" dis "$tmp/br-$p.vmbc"; has dis-$p "lowered(streams=3"
  check run-$p 0 "$rill" run "$tmp/br-$p.vmbc" --device=cpu --input='f32[16,16]=random' --input='f32[16,16]=random' --seed=3 --check-streams
  [ "$out" = "$want" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL $p: results differ from one stream"; }
done
check asm-ios-note 0 "$rill" asm "$tmp/branches.vmasm" --schedule=ios -o "$tmp/br-ios2.vmbc"; has asm-ios-note "cost model"
# Profiles for ios: rill tune times every op; asm uses them; bad ones are refused whole.
check tune 0 "$rill" tune -O0 "$tmp/branches.vmasm" --device=cpu --iterations=2 -o "$tmp/prof.json"; has tune "tuned 9 ops on cpu (0 skipped)"
grep -q '"two_us"' "$tmp/prof.json" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL tune: no timings in the profile"; }
# ...and @main under every schedule, the fastest named "best"; without --schedule, asm takes it.
has tune "@main on cpu, median of 10 runs: none "; has tune "; best: "
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); s=[e['schedule'] for e in d['schedules']]
assert s == ['none','wavefront','asap','rank','ios'] and d['best'] in s and all(e['median_ms'] > 0 for e in d['schedules'])
b = [e for e in d['schedules'] if e['schedule'] == d['best']][0]
assert d['best'] == 'none' or (b['rounds_faster_than_none'] == 5 and b['median_ms'] < 0.99 * d['schedules'][0]['median_ms'])" "$tmp/prof.json" 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL tune: the profile's schedules or best"; }
echo '{"ops": [], "best": "rank"}' > "$tmp/best.json"
check asm-profile-best 0 "$rill" asm -O0 "$tmp/branches.vmasm" --profile="$tmp/best.json" -o "$tmp/br-best.vmbc"
check dis-profile-best 0 "$rill" dis "$tmp/br-best.vmbc"; has dis-profile-best "lowered(streams=3"
cmp -s "$tmp/br-best.vmbc" "$tmp/br-rank.vmbc" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL asm with a profile's best: not what --schedule=rank gives"; }
echo '{"ops": [], "best": "fastest"}' > "$tmp/best2.json"
check asm-profile-bad-best 2 "$rill" asm "$tmp/branches.vmasm" --profile="$tmp/best2.json" -o "$tmp/x.vmbc"; has asm-profile-bad-best '"best" names no schedule policy'
check tune-bytecode 0 "$rill" tune "$tmp/br-rank.vmbc" --device=cpu --iterations=2 -o "$tmp/prof2.json"; has tune-bytecode "schedules not timed"
grep -q '"best"' "$tmp/prof2.json" && { fail=$((fail + 1)); echo "FAIL tune of bytecode named a best schedule"; } || pass=$((pass + 1))
printf 'func @f(%%x: f32[4]) -> f32[4] {\n  %%a = relu(%%x)\n  return %%a\n}\n' > "$tmp/nomain.vmasm"
check tune-no-main 0 "$rill" tune "$tmp/nomain.vmasm" --device=cpu --iterations=2 -o "$tmp/prof3.json"; has tune-no-main "no function @main"
grep -q '"relu(f32\[4\]) -> (f32\[4\])"' "$tmp/prof3.json" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL tune without @main: no op timings"; }
check tune-no-out 2 "$rill" tune "$tmp/branches.vmasm" --device=cpu
check asm-ios-profile 0 "$rill" asm "$tmp/branches.vmasm" --schedule=ios --profile="$tmp/prof.json" -o "$tmp/br-iosp.vmbc"
echo "$out" | grep -q "cost model" && { fail=$((fail + 1)); echo "FAIL asm-ios-profile: still says cost model"; } || pass=$((pass + 1))
check run-ios-profile 0 "$rill" run "$tmp/br-iosp.vmbc" --device=cpu --input='f32[16,16]=random' --input='f32[16,16]=random' --seed=3 --check-streams
[ "$out" = "$want" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL ios with a profile: results differ from one stream"; }
check asm-profile-no-ios 2 "$rill" asm "$tmp/branches.vmasm" --schedule=rank --profile="$tmp/prof.json" -o "$tmp/x.vmbc"; has asm-profile-no-ios "--profile is for --schedule=ios"
echo '{"device": "cpu"}' > "$tmp/bad.json"
check asm-bad-profile 2 "$rill" asm "$tmp/branches.vmasm" --schedule=ios --profile="$tmp/bad.json" -o "$tmp/x.vmbc"; has asm-bad-profile "not a profile from rill tune"
echo '{"ops": [{"op": "relu(f32[2]) -> (f32[2])", "us": -1, "two_us": 2}]}' > "$tmp/bad2.json"
check asm-bad-profile-entry 2 "$rill" asm "$tmp/branches.vmasm" --schedule=ios --profile="$tmp/bad2.json" -o "$tmp/x.vmbc"; has asm-bad-profile-entry "entry 1"
check asm-missing-profile 2 "$rill" asm "$tmp/branches.vmasm" --schedule=ios --profile="$tmp/none.json" -o "$tmp/x.vmbc"; has asm-missing-profile "profile"
[ ! -e "$tmp/x.vmbc" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a refused profile left an output file"; }
check asm-bad-schedule 2 "$rill" asm "$tmp/cnn.vmasm" --schedule=fastest -o "$tmp/x.vmbc"; has asm-bad-schedule "unknown schedule policy 'fastest'"
[ ! -e "$tmp/x.vmbc" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL asm-bad-schedule left an output file"; }
check asm-bad-streams 2 "$rill" asm "$tmp/cnn.vmasm" --schedule=rank --max-streams=0 -o "$tmp/x.vmbc"
# Traces: Chrome trace JSON, whole or not at all.
check run-trace 0 "$rill" run "$tmp/br-rank.vmbc" --device=cpu --graph=off --input='f32[16,16]=random' --input='f32[16,16]=random' --trace="$tmp/t.json"
grep -q '"traceEvents"' "$tmp/t.json" && grep -q '"ph":"s"' "$tmp/t.json" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run-trace: no trace events or arrows"; }
check bench-trace 0 "$rill" bench "$tmp/br-rank.vmbc" --device=cpu --iterations=5 --trace="$tmp/tb.json"; has bench-trace "critical path:"; has bench-trace "busy"
has bench-trace "matmul                 f32[16,16]                     2.00" # per-op rows of the profiled runs alone
# Every slice names its run (bench/trace_png.py picks runs by it): five runs, 0 to 4.
[ "$(grep -o '"run":[0-9]*' "$tmp/tb.json" | sort -u | tr '\n' ' ')" = '"run":0 "run":1 "run":2 "run":3 "run":4 ' ] && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL bench-trace-runs: $(grep -o '"run":[0-9]*' "$tmp/tb.json" | sort -u | tr '\n' ' ')"; }
check bench-trace-json 0 "$rill" bench "$tmp/br-rank.vmbc" --device=cpu --iterations=2 --json --trace="$tmp/tb.json"; has bench-trace-json '"critical_path_us"'
check run-trace-bad 2 "$rill" run "$tmp/br-rank.vmbc" --device=cpu --input='f32[16,16]=1' --input='f32[16,16]=1' --trace="$tmp/no/t.json"
has run-trace-bad "writing the trace"
check run-race 0 "$rill" run "$tmp/slot_race.vmasm" --device=cpu --input='f32[16]=1'
check run-race-checked 1 "$rill" run "$tmp/slot_race.vmasm" --device=cpu --input='f32[16]=1' --check-streams
has run-race-checked "sigmoid on stream 0 writes %b, which @main+"
has run-race-checked "(tanh) on stream 1 wrote, and no event orders the two"
# Graph mode (--graph): the same results as interpreted runs; what cannot be
# captured runs interpreted with one line on why (auto) or is an error (on).
for g in off on auto; do
  check run-graph-$g 0 "$rill" run "$tmp/br-rank.vmbc" --device=cpu --graph=$g --input='f32[16,16]=random' --input='f32[16,16]=random' --seed=5 --output=-
  eval "graph_$g=\$out"
done
[ "$graph_on" = "$graph_off" ] && [ "$graph_auto" = "$graph_off" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run-graph: results differ between graph modes"; }
check run-graph-bad 2 "$rill" run "$tmp/br-rank.vmbc" --device=cpu --graph=sometimes; has run-graph-bad "--graph expects auto, on or off"
for f in 0 1; do # if and while become conditional nodes: the same results
  check run-graph-control-on-$f 0 "$rill" run "$tmp/control.vmasm" --device=cpu --graph=on --input='f32[4]=1 2 3 4' --input="bool[]=$f" --output=-
  on=$out
  check run-graph-control-off-$f 0 "$rill" run "$tmp/control.vmasm" --device=cpu --graph=off --input='f32[4]=1 2 3 4' --input="bool[]=$f" --output=-
  [ "$on" = "$out" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run-graph-control-$f: results differ between graph modes"; }
done
printf 'op $0 = neg(f32[4]) -> (f32[4])\nfunc @main(%%x: f32[4], %%c: bool[]) -> (f32[4]) lowered(streams=1, events=0) {\n  reg %%y : f32[4]\n  host_wait %%c\n  br_if %%c, yes, no\nno:\n  alloc_tensor %%y\n  invoke $0, (%%x), (%%y)\n  return (%%y)\nyes:\n  return (%%x)\n}\n' > "$tmp/unstructured.vmasm"
check run-graph-unstructured-on 1 "$rill" run "$tmp/unstructured.vmasm" --device=cpu --graph=on --input='f32[4]=1 2 3 4' --input='bool[]=1'
has run-graph-unstructured-on "rill: @main cannot run as a graph: @main+0 (host_wait): a branch that is not an if or a while"
check run-graph-unstructured-auto 0 "$rill" run "$tmp/unstructured.vmasm" --device=cpu --input='f32[4]=1 2 3 4' --input='bool[]=0'
has run-graph-unstructured-auto "rill: @main ran interpreted, not as a graph: @main+0"
check bench-graph 0 "$rill" bench "$tmp/br-rank.vmbc" --device=cpu --iterations=5; has bench-graph "graph: replayed ("
check bench-graph-off 0 "$rill" bench "$tmp/br-rank.vmbc" --device=cpu --iterations=5 --graph=off; has bench-graph-off "graph: not used (--graph=off)"
check bench-graph-json 0 "$rill" bench "$tmp/br-rank.vmbc" --device=cpu --iterations=3 --json; has bench-graph-json '"graph": {"replayed": true, "nodes": '
check tune-graph 0 "$rill" tune "$tmp/branches.vmasm" --device=cpu --iterations=2 --graph=on -o "$tmp/profg.json"
grep -qP '"graph":\s*"on"' "$tmp/profg.json" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL tune-graph: the profile does not say the schedules were timed as graphs"; }
check tune-graph-bad 2 "$rill" tune "$tmp/branches.vmasm" --device=cpu --graph=maybe -o "$tmp/profg.json"; has tune-graph-bad "--graph expects auto, on or off"
check run-graph-trace 0 "$rill" run "$tmp/br-rank.vmbc" --device=cpu --graph=on --input='f32[16,16]=1' --input='f32[16,16]=1' --trace="$tmp/tg.json"
grep -q '"name":"graph","cat":"op"' "$tmp/tg.json" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL run-graph-trace: no replay slice"; }
# Shape variables: bound at invoke, refused before anything runs (exit 2, naming the parameter, dimension and sizes)
printf 'dim B in [1, 8]\nfunc @main(%%x: f32[B,S], %%y: f32[S]) -> f32[B,S] {\n  %%a = add(%%x, %%y)\n  return %%a\n}\n' > "$tmp/dyn.vmasm"
check dyn-run 0 "$rill" run "$tmp/dyn.vmasm" --device=cpu --input='f32[2,3]=1 2 3 4 5 6' --input='f32[3]=1 1 1'; has dyn-run "result[0]: f32[2,3]"
check dyn-run-bigger 0 "$rill" run "$tmp/dyn.vmasm" --device=cpu --input='f32[8,5]=random' --input='f32[5]=random'
check dyn-two-ways 2 "$rill" run "$tmp/dyn.vmasm" --device=cpu --input='f32[2,3]=1' --input='f32[4]=1'; has dyn-two-ways "parameter %y: dimension 0 binds S to 4, but parameter %x's dimension 1 bound it to 3"
check dyn-range 2 "$rill" run "$tmp/dyn.vmasm" --device=cpu --input='f32[9,3]=1' --input='f32[3]=1'; has dyn-range "dimension 0 binds B to 9, outside its range [1, 8]"
check dyn-trace 2 "$rill" run "$tmp/dyn.vmasm" --device=cpu --input='f32[9,3]=1' --input='f32[3]=1' --trace="$tmp/dyn.json"
# Graphs per size: --graph=on captures the bound size and gives the interpreted results
check dyn-graph-off 0 "$rill" run "$tmp/dyn.vmasm" --device=cpu --graph=off --input='f32[2,3]=1 2 3 4 5 6' --input='f32[3]=1 1 2' --output=-
check dyn-graph-on 0 "$rill" run "$tmp/dyn.vmasm" --device=cpu --graph=on --input='f32[2,3]=1 2 3 4 5 6' --input='f32[3]=1 1 2' --output=- --expected-output='f32[2,3]=2 3 5 5 6 8'
has dyn-graph-on "result[0]: f32[2,3]"
check dyn-graph-auto 0 "$rill" run "$tmp/dyn.vmasm" --device=cpu --input='f32[5,2]=1' --input='f32[2]=1' --expected-output='f32[5,2]=2'
if echo "$out" | grep -q "ran interpreted"; then fail=$((fail + 1)); echo "FAIL dyn-graph-auto: ran interpreted"; else pass=$((pass + 1)); fi
check dyn-bench-graph 0 "$rill" bench "$tmp/dyn.vmasm" --device=cpu --iterations=3 --input='f32[4,3]=random' --input='f32[3]=random'; has dyn-bench-graph "1 size kept, 0 dropped; 1 captures"
# Buckets: B=2 runs as B=4's graph (padded, the interpreted results); a
# softmax over B runs exactly and says why; malformed or bad buckets exit 2.
check dyn-bucket 0 "$rill" run "$tmp/dyn.vmasm" --device=cpu --graph=on --graph-buckets=B=4,8 --input='f32[2,3]=1 2 3 4 5 6' --input='f32[3]=1 1 2' --output=- --expected-output='f32[2,3]=2 3 5 5 6 8'
has dyn-bucket "result[0]: f32[2,3]"
check dyn-bucket-bench 0 "$rill" bench "$tmp/dyn.vmasm" --device=cpu --iterations=3 --graph-buckets=B=4,8 --input='f32[3,3]=random' --input='f32[3]=random'
has dyn-bucket-bench "graph buckets: 6 runs padded"
printf 'dim B in [1, 8]\nfunc @main(%%x: f32[B,2]) -> f32[B,2] {\n  %%a = softmax(%%x) {axis=0}\n  return %%a\n}\n' > "$tmp/dynsm.vmasm"
check dyn-bucket-mixed 0 "$rill" run "$tmp/dynsm.vmasm" --device=cpu --graph=on --graph-buckets=B=4 --input='f32[2,2]=0 0 0 0' --expected-output='f32[2,2]=0.5'
has dyn-bucket-mixed "not padded to a graph bucket: result 1 of @main (f32[B,2]) depends on other rows of its inputs: softmax (line 3) mixes B's rows"
# a gather whose index has B's rows (a padded row's index could be out of
# range), a lowered program writing through an alias after it was made, and
# a function without B: each runs exactly, the first two saying why
printf 'dim B in [1, 16]\nfunc @main(%%d: f32[5,2], %%i: i64[B], %%o: i64[1]) -> f32[B,2] {\n  %%j = add(%%i, %%o)\n  %%g = gather(%%d, %%j) {axis=0}\n  return %%g\n}\n' > "$tmp/dyngather.vmasm"
check dyn-bucket-gather 0 "$rill" run "$tmp/dyngather.vmasm" --device=cpu --graph=on --graph-buckets=B=8 --input='f32[5,2]=0 1 2 3 4 5 6 7 8 9' --input='i64[3]=1 2 3' --input='i64[1]=-1' --expected-output='f32[3,2]=0 1 2 3 4 5'
has dyn-bucket-gather "gather (line 4) mixes B's rows"
printf 'dim B in [1, 16]\nop $0 = relu(f32[B,4]) -> (f32[B,4])\nop $1 = softmax(f32[B,4]) -> (f32[B,4]) {axis=0}\nfunc @main(%%x: f32[B,4]) -> (f32[B,4]) lowered(streams=1, events=0) {\n  reg %%a : f32[B,4]\n  reg %%y : f32[B,4]\n  alloc_tensor %%a\n  invoke $0, (%%x), (%%a)\n  alias %%y, %%a\n  invoke $1, (%%x), (%%a)\n  return (%%y)\n}\n' > "$tmp/dynalias.vmasm"
check dyn-bucket-alias 0 "$rill" run "$tmp/dynalias.vmasm" --device=cpu --graph=on --graph-buckets=B=8 --input='f32[2,4]=0' --expected-output='f32[2,4]=0.5'
has dyn-bucket-alias "depends on other rows of its inputs"
printf 'dim B in [1, 16]\nfunc @main(%%x: f32[4]) -> f32[4] {\n  %%a = relu(%%x)\n  return %%a\n}\n' > "$tmp/dynunused.vmasm"
check dyn-bucket-unused 0 "$rill" bench "$tmp/dynunused.vmasm" --device=cpu --graph=on --graph-buckets=B=8 --iterations=3
if echo "$out" | grep -q "padded"; then fail=$((fail + 1)); echo "FAIL dyn-bucket-unused: a function without B was padded: $out"; else pass=$((pass + 1)); fi
check dyn-bucket-name 2 "$rill" run "$tmp/dyn.vmasm" --device=cpu --graph-buckets=T=4 --input='f32[2,3]=1' --input='f32[3]=1'; has dyn-bucket-name "--graph-buckets: no shape variable T in the module"
check dyn-bucket-range 2 "$rill" run "$tmp/dyn.vmasm" --device=cpu --graph-buckets=B=4,9 --input='f32[2,3]=1' --input='f32[3]=1'; has dyn-bucket-range "graph bucket 9 of B is outside its range [1, 8]"
check dyn-bucket-syntax 2 "$rill" run "$tmp/dyn.vmasm" --device=cpu --graph-buckets=B=4,,8 --input='f32[2,3]=1' --input='f32[3]=1'; has dyn-bucket-syntax "--graph-buckets: '' is not a size in 'B=4,,8'"
check dyn-bucket-order 2 "$rill" run "$tmp/dyn.vmasm" --device=cpu --graph-buckets=B=8,4 --input='f32[2,3]=1' --input='f32[3]=1'; has dyn-bucket-order "must ascend"
check dyn-asm 0 "$rill" asm "$tmp/dyn.vmasm" -o "$tmp/dyn.vmbc"
check dyn-verify 0 "$rill" verify "$tmp/dyn.vmbc"; has dyn-verify ok
check dyn-dis 0 "$rill" dis "$tmp/dyn.vmbc"; has dyn-dis "dim B in [1, 8]"
"$rill" dis "$tmp/dyn.vmbc" > "$tmp/dyn-dis.vmasm"
check dyn-reasm 0 "$rill" asm "$tmp/dyn-dis.vmasm" -o "$tmp/dyn2.vmbc"
cmp -s "$tmp/dyn.vmbc" "$tmp/dyn2.vmbc" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL dyn-reasm: bytes differ"; }
check dyn-run-vmbc 0 "$rill" run "$tmp/dyn2.vmbc" --device=cpu --input='f32[4,2]=1' --input='f32[2]=1' --graph=off
printf 'func @main(%%x: f32[S], %%y: f32[T]) -> f32[S] {\n  %%a = add(%%x, %%y)\n  return %%a\n}\n' > "$tmp/dyn-bad.vmasm"
check dyn-mismatch 2 "$rill" asm "$tmp/dyn-bad.vmasm" -o "$tmp/dyn-bad.vmbc"; has dyn-mismatch "dyn-bad.vmasm:2:8: error: add: shapes f32[S] and f32[T] do not broadcast: sizes S and T"
[ -e "$tmp/dyn-bad.vmbc" ] && { fail=$((fail + 1)); echo "FAIL dyn-mismatch: left an output file"; } || pass=$((pass + 1))
# A transformer encoder whose length is a shape variable (made by bench/models/convert.py --dynamic:
# reshapes to [1, S, 2, 8], attention, layer norm, GELU; at -O1 the scores' product, scale, softmax
# and second product are one attention op over the length) against its concrete twins, one module for
# every length: the twin is the same text with S replaced by the length.
cp "$fix/encoder_f32_dyn.safetensors" "$tmp"/
enc=$tmp/encoder_f32_dyn.vmasm
check enc-asm 0 "$rill" asm "$enc" -o "$tmp/enc.vmbc"
check enc-dis 0 "$rill" dis "$tmp/enc.vmbc"; has enc-dis "dim S in [1, 64]"; has enc-dis "linear(f32[1,S,16], f32[48,16], f32[48]) -> (f32[1,S,48])"
has enc-dis "attention(f32[1,S,6,8]) -> (f32[1,S,2,8]) {scale=0.3535533966440824, layout=\"bshd\", kv_heads=2}"
for n in 1 2 7 16 33 64; do
  sed -e '/^dim /d' -e "s/\bS\b/$n/g" "$enc" > "$tmp/enc$n.vmasm"
  grep -q "f32\[1, $n, 16\]" "$tmp/enc$n.vmasm" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL enc-twin-$n: no f32[1, $n, 16] in the twin"; }
  check enc-static-$n 0 "$rill" run "$tmp/enc$n.vmasm" --device=cpu --seed=$n --input="f32[1,$n,16]=random" --output="@$tmp/enc$n.npy"
  check enc-dyn-$n 0 "$rill" run "$tmp/enc.vmbc" --device=cpu --graph=off --seed=$n --input="f32[1,$n,16]=random" --expected-output="@$tmp/enc$n.npy"
  has enc-dyn-$n "result[0]: matches ($((n * 16)) elements"
done
# and the check can fail: another input does not match the twin's result
check enc-dyn-other 1 "$rill" run "$tmp/enc.vmbc" --device=cpu --seed=99 --input="f32[1,7,16]=random" --expected-output="@$tmp/enc7.npy"
check enc-dyn-range 2 "$rill" run "$tmp/enc.vmbc" --device=cpu --input="f32[1,65,16]=random"; has enc-dyn-range "binds S to 65, outside its range [1, 64]"

# Kernel choices per size: rill tune --shapes measures each op per size and
# fits a tree; asm --profile embeds the trees; results are unchanged.
printf 'dim B in [1, 64]\nfunc @main(%%x: f32[B,4], %%w: f32[4,4]) -> f32[B,4] {\n  %%y = matmul(%%x, %%w)\n  %%z = tanh(%%y)\n  return %%z\n}\n' > "$tmp/dyn.vmasm"
check tune-shapes 0 "$rill" tune "$tmp/dyn.vmasm" --device=cpu --iterations=2 --shapes=B=1,8,32 -o "$tmp/dprof.json"; has tune-shapes "measured per size at 3 sizes"
grep -q '"samples"' "$tmp/dprof.json" && grep -q '"tree"' "$tmp/dprof.json" && grep -q '"candidates"' "$tmp/dprof.json" \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL tune-shapes: no samples, candidates or trees in the profile"; }
# ...and @main's schedules at those sizes, the sum of each size's median; without --shapes, not timed
has tune-shapes "@main on cpu at 3 sample sizes, the sum of each one's median of 10 runs: none "
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['best'] in [e['schedule'] for e in d['schedules']]" "$tmp/dprof.json" 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL tune-shapes: no schedules or best in the profile"; }
# each schedule's score relative to one stream's at each size (none's is 1)
python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['schedules']; assert abs(s[0]['relative'] - 1) < 1e-9 and all(e['relative'] > 0 for e in s)" "$tmp/dprof.json" 2>&1 \
  && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL tune-shapes: no relative scores, or none's is not 1"; }
has tune-shapes "(1 stream; 1.000 of none's)"
check tune-dyn-noshapes 0 "$rill" tune "$tmp/dyn.vmasm" --device=cpu --iterations=2 -o "$tmp/dprof0.json"; has tune-dyn-noshapes "has shape variables (give --shapes"
grep -q '"best"' "$tmp/dprof0.json" && { fail=$((fail + 1)); echo "FAIL tune of a dynamic program without --shapes named a best schedule"; } || pass=$((pass + 1))
check tune-shapes-many 2 "$rill" tune "$tmp/dyn.vmasm" --device=cpu --iterations=100000 --shapes=B=1,2,3,4,5,6,7,8,9 -o "$tmp/x.json"
has tune-shapes-many "are more than it keeps"; [ ! -e "$tmp/x.json" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL tune-shapes-many left a profile"; }
check asm-dyn-plain 0 "$rill" asm "$tmp/dyn.vmasm" -o "$tmp/dyn0.vmbc"
check asm-dyn-profile 0 "$rill" asm "$tmp/dyn.vmasm" --profile="$tmp/dprof.json" -o "$tmp/dyn1.vmbc"
check dis-dyn-profile 0 "$rill" dis "$tmp/dyn1.vmbc"; has dis-dyn-profile 'choose $0 = "default"'
cmp -s "$tmp/dyn0.vmbc" "$tmp/dyn1.vmbc" && { fail=$((fail + 1)); echo "FAIL asm --profile embedded no trees"; } || pass=$((pass + 1))
"$rill" dis "$tmp/dyn1.vmbc" > "$tmp/dyn1.vmasm"
check reasm-dyn-profile 0 "$rill" asm "$tmp/dyn1.vmasm" -o "$tmp/dyn2.vmbc"
cmp -s "$tmp/dyn1.vmbc" "$tmp/dyn2.vmbc" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a module with trees does not reassemble to the same bytes"; }
for b in 1 5 40; do
  check run-dyn0-$b 0 "$rill" run "$tmp/dyn0.vmbc" --device=cpu --seed=4 --input="f32[$b,4]=random" --input='f32[4,4]=random'; r0=$out
  check run-dyn1-$b 0 "$rill" run "$tmp/dyn1.vmbc" --device=cpu --seed=4 --input="f32[$b,4]=random" --input='f32[4,4]=random'
  [ -n "$r0" ] && [ "$out" = "$r0" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL B=$b: results with the trees differ"; }
done
check tune-shapes-var 2 "$rill" tune "$tmp/dyn.vmasm" --device=cpu --shapes=Q=1,2 -o "$tmp/x.json"; has tune-shapes-var "'Q' is not a shape variable"
check tune-shapes-range 2 "$rill" tune "$tmp/dyn.vmasm" --device=cpu --shapes=B=0,8 -o "$tmp/x.json"; has tune-shapes-range "B takes sizes in [1, 64], got '0'"
check tune-shapes-static 2 "$rill" tune "$tmp/branches.vmasm" --device=cpu --shapes=B=1 -o "$tmp/x.json"; has tune-shapes-static "no shape variables"
[ ! -e "$tmp/x.json" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a refused tune left a profile"; }
# A hand-made profile with a switch at 8, then damaged profiles: exit 2, the file and the entry named, no output.
op0=$("$rill" dis "$tmp/dyn0.vmbc" | sed -n 's/^op \$0 = //p' | sed 's/"/\\"/g')
prof() { printf '{"ops": [], "shapes": {"vars": ["B"], "samples": [[1], [8], [32]], "ops": [{"op": "%s", "candidates": ["a", "b"], "us": [[1, 2], [1, 2], [2, 1]], "tree": %s}]}}\n' "$op0" "$1" > "$tmp/dbad.json"; }
prof '[{"var": "B", "le": 8, "yes": 1, "no": 2}, {"use": 0}, {"use": 1}]'
check asm-dyn-switch 0 "$rill" asm "$tmp/dyn.vmasm" --profile="$tmp/dbad.json" -o "$tmp/dyn3.vmbc"
check dis-dyn-switch 0 "$rill" dis "$tmp/dyn3.vmbc"; has dis-dyn-switch 'choose $0 = (le B 8 "a" "b")'
check run-dyn3 0 "$rill" run "$tmp/dyn3.vmbc" --device=cpu --seed=4 --input="f32[40,4]=random" --input='f32[4,4]=random'
[ "$out" = "$r0" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL results with a switching tree differ"; }
deep='[{"var": "B", "le": 1, "yes": 1, "no": 18}'
for i in 2 3 4 5 6 7 8 9; do deep="$deep, {\"var\": \"B\", \"le\": $i, \"yes\": $i, \"no\": $((19 - i + 1))}"; done
deep="$deep, {\"use\": 0}"; for i in $(seq 10 18); do deep="$deep, {\"use\": 1}"; done; deep="$deep]"
bad_profiles=(
  '[{"use": 2}]|tree node 0 uses candidate out of range, but the entry has 2'
  '[{"var": "Q", "le": 8, "yes": 1, "no": 2}, {"use": 0}, {"use": 1}]|splits on "Q", which is not a shape variable of the module'
  '[{"var": "B", "le": 8, "yes": 1, "no": 0}, {"use": 0}]|tree node 0 is reached twice (a cycle or a shared node)'
  '[{"var": "B", "le": 8, "yes": 1, "no": 5}, {"use": 0}]|tree node 5 does not exist'
  '[{"var": "B", "le": 8.5, "yes": 1, "no": 2}, {"use": 0}, {"use": 1}]|tree node 0 needs "use"'
  '[{"use": 0}, {"use": 1}]|tree node 1 is not reached from node 0'
  "$deep|the tree is deeper than 8 splits"
)
for i in "${!bad_profiles[@]}"; do
  prof "${bad_profiles[$i]%%|*}"
  check asm-dyn-bad-$i 2 "$rill" asm "$tmp/dyn.vmasm" --profile="$tmp/dbad.json" -o "$tmp/x.vmbc"
  has asm-dyn-bad-$i "rill: profile $tmp/dbad.json: shapes.ops entry 1 (matmul("; has asm-dyn-bad-$i "${bad_profiles[$i]#*|}"
  [ ! -e "$tmp/x.vmbc" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL asm-dyn-bad-$i left an output file"; }
done
printf '{"ops": [], "shapes": {"vars": ["B"], "samples": [[1]], "ops": [{"op": "x", "candidates": ["a"], "us": [[1, 2]], "tree": [{"use": 0}]}]}}\n' > "$tmp/dbad.json"
check asm-dyn-bad-us 2 "$rill" asm "$tmp/dyn.vmasm" --profile="$tmp/dbad.json" -o "$tmp/x.vmbc"; has asm-dyn-bad-us '"us" row 0 needs a time (or null) for each of the 1 candidates'
printf '{"ops": [], "shapes": {"vars": ["B"], "samples": [[1]], "ops": [{"op": "x", "candidates": ["a", "a"]' > "$tmp/dbad.json"
check asm-dyn-bad-json 2 "$rill" asm "$tmp/dyn.vmasm" --profile="$tmp/dbad.json" -o "$tmp/x.vmbc"; has asm-dyn-bad-json "profile $tmp/dbad.json: not JSON"
printf '{"ops": [], "shapes": {"vars": ["T"], "samples": [], "ops": []}}\n' > "$tmp/dbad.json"
check asm-dyn-bad-vars 2 "$rill" asm "$tmp/dyn.vmasm" --profile="$tmp/dbad.json" -o "$tmp/x.vmbc"; has asm-dyn-bad-vars '"vars" names "T", which is not a shape variable'
[ ! -e "$tmp/x.vmbc" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL a refused profile left an output file"; }

# rill bench reports the VM's memory and the start-up parts, as text and in --json.
check bench-memory 0 "$rill" bench "$tmp/cnn.vmasm" --device=cpu --iterations=2 --warmup=0
has bench-memory "memory: weights "; has bench-memory "start-up: load "
check bench-memory-json 0 "$rill" bench "$tmp/cnn.vmasm" --device=cpu --iterations=2 --warmup=0 --json
echo "$out" | python3 -c 'import json, sys; d = json.load(sys.stdin); m = d["memory"]; s = d["startup"]
assert m["weights"] > 0 and m["peak"] >= m["total"] == m["weights"] + m["buffers"] + m["graphs"] + m["workspaces"], m
assert m["buffers_peak"] > 0 and s["load_ms"] > 0 and s["create_ms"] > 0, s' && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL rill bench --json memory: $out"; }

# Help: every command's help exits 0 (as `rill COMMAND --help`, `-h` and
# `rill help COMMAND`); every option a help names is one the parser takes;
# every option the tool's code reads is named by some command's help.
check help 0 "$rill" help; all_help=$out
cmds=$(echo "$all_help" | sed -n '2,/^rill help COMMAND/p' | awk '/^  [a-z]/ {print $1}')
[ "$(echo "$cmds" | wc -w)" -ge 9 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL rill help lists only: $cmds"; }
for c in $cmds; do
  check "help-$c" 0 "$rill" "$c" --help; h=$out; has "help-$c" "usage: rill $c"
  check "help-$c-h" 0 "$rill" "$c" -h
  [ "$out" = "$h" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL rill $c -h differs from --help"; }
  check "help-cmd-$c" 0 "$rill" help "$c"
  [ "$out" = "$h" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL rill help $c differs from rill $c --help"; }
  echo "$all_help" | grep -qF -- "$h" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL rill help leaves out rill $c --help"; }
  for o in $(echo "$h" | grep -oE '^  (-o, )?-[-A-Za-z0-9]+' | sed 's/^  \(-o, \)\?//'); do
    "$rill" "$c" "$o" > /dev/null 2> "$tmp/opt.err" < /dev/null
    if grep -q "unknown option" "$tmp/opt.err"; then fail=$((fail + 1)); echo "FAIL rill $c --help names $o, which the parser refuses"; else pass=$((pass + 1)); fi
  done
done
check help-unknown 2 "$rill" help frob; has help-unknown "unknown command 'frob'"
src=$(dirname "$2")/tools
for o in $(grep -ohE '(cli_get\([^,]*, |\.name, )"-[-A-Za-z0-9]+"' "$src"/*.c | grep -oE '"-[-A-Za-z0-9]+"' | tr -d '"' | sort -u); do
  echo "$all_help" | grep -qE -- "^  (-o, )?$o([ =]|\$)" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL the code reads $o, which no help names"; }
done

# several devices: the cpu device instanced (cpu:0,cpu:1,...)
check run-devices 0 "$rill" run "$fix/devices.vmasm" --device=cpu:0,cpu:1,cpu:2,cpu:3 --input='f32[4,8]=random'
check run-devices-graph 0 "$rill" run "$fix/devices.vmasm" --device=cpu:0,cpu:1,cpu:2,cpu:3 --graph=on --input='f32[4,8]=random'
check run-devices-few 2 "$rill" run "$fix/devices.vmasm" --device=cpu:0,cpu:1 --input='f32[4,8]=random'
has run-devices-few "@main uses device 3, and the VM has 2 devices (cpu:0,cpu:1): it needs 4, e.g. --device=cpu:0,...,cpu:3"
check run-devices-order 2 "$rill" run "$fix/devices.vmasm" --device=cpu:1,cpu:0; has run-devices-order "cpu devices are listed in order"
check asm-devices 0 "$rill" asm "$fix/devices.vmasm" -o "$tmp/devices.vmbc"
check dis-devices 0 "$rill" dis "$tmp/devices.vmbc"; has dis-devices "cuda_set_device_stream 3, 3"; has dis-devices "copy_device %"
"$rill" dis "$tmp/devices.vmbc" > "$tmp/devices-dis.vmasm"
check reasm-devices 0 "$rill" asm "$tmp/devices-dis.vmasm" -o "$tmp/devices2.vmbc"
cmp -s "$tmp/devices.vmbc" "$tmp/devices2.vmbc" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL reasm-devices: other bytes"; }

# --precision: the mode in rill dis, refused where it is no mode or where a
# module was assembled in another; tf32 on the cpu device rounds the f32
# operands of matmul and conv2d to TF32 (10-bit mantissa, to nearest even),
# which numpy models here; f16 keeps the results within half rounding.
printf 'func @main(%%a: f32[16,64], %%b: f32[64,8], %%x: f32[1,3,6,6], %%w: f32[4,3,3,3]) -> (f32[16,8], f32[1,4,4,4]) {\n  %%y = matmul(%%a, %%b)\n  %%c = conv2d(%%x, %%w)\n  return %%y, %%c\n}\n' > "$tmp/prec.vmasm"
check precision-bad 2 "$rill" run "$tmp/prec.vmasm" --device=cpu --precision=fp16; has precision-bad "rill: --precision expects exact, tf32, f16 or bf16, got 'fp16'"
check precision-asm-bad 2 "$rill" asm "$tmp/prec.vmasm" --precision= -o "$tmp/prec.vmbc"; has precision-asm-bad "--precision expects"
[ ! -e "$tmp/prec.vmbc" ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL precision-asm-bad left an output file"; }
check precision-asm 0 "$rill" asm "$tmp/prec.vmasm" --precision=bf16 -o "$tmp/prec.vmbc"
check precision-dis 0 "$rill" dis "$tmp/prec.vmbc"; has precision-dis "precision bf16"; has precision-dis "matmul(bf16[16,64], bf16[64,8]) -> (bf16[16,8])"
"$rill" dis "$tmp/prec.vmbc" > "$tmp/prec-dis.vmasm"
check precision-reasm 0 "$rill" asm "$tmp/prec-dis.vmasm" -o "$tmp/prec2.vmbc"
cmp -s "$tmp/prec.vmbc" "$tmp/prec2.vmbc" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL precision-reasm: other bytes"; }
check precision-vmbc-other 2 "$rill" run "$tmp/prec.vmbc" --device=cpu --precision=f16; has precision-vmbc-other "prec.vmbc was assembled with --precision=bf16; --precision=f16 applies when assembling"
check precision-vmbc-same 0 "$rill" bench "$tmp/prec.vmbc" --device=cpu --precision=bf16 --iterations=1 --warmup=0
check precision-tune-bad 2 "$rill" tune "$tmp/prec.vmasm" --device=cpu --precision=tf16 -o "$tmp/prec.json"; has precision-tune-bad "--precision expects"
py=python3; $py -c 'import numpy' 2> /dev/null || py=/usr/bin/python3
if $py -c 'import numpy' 2> /dev/null; then
  $py -c 'import numpy as np, sys
r = np.random.default_rng(7)
for n, s in (("a", (16, 64)), ("b", (64, 8)), ("x", (1, 3, 6, 6)), ("w", (4, 3, 3, 3))):
    np.save(sys.argv[1] + "/prec_" + n + ".npy", r.uniform(-1, 1, s).astype(np.float32))' "$tmp"
  pin=(--input="@$tmp/prec_a.npy" --input="@$tmp/prec_b.npy" --input="@$tmp/prec_x.npy" --input="@$tmp/prec_w.npy")
  for p in exact tf32 f16; do
    check precision-run-$p 0 "$rill" run "$tmp/prec.vmasm" --device=cpu --precision=$p "${pin[@]}" --output="@$tmp/prec_y_$p.npy" --output="@$tmp/prec_c_$p.npy"
  done
  check precision-tf32-model 0 $py -c 'import numpy as np, sys
d = sys.argv[1] + "/prec_"
a, b, x, w = (np.load(d + n + ".npy") for n in "abxw")
def tf32(v):  # 13 low mantissa bits dropped, to nearest even
    u = v.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0xFFF + ((u >> 13) & 1)) & 0xFFFFE000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)
def conv(x, w):
    win = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))  # N C OH OW kh kw
    return np.einsum("nchwij,ocij->nohw", win, w)
models = {"exact": (a.astype(np.float64) @ b, conv(x.astype(np.float64), w.astype(np.float64))),
          "tf32": (tf32(a) @ tf32(b), conv(tf32(x), tf32(w)))}
for mode, (my, mc) in models.items():
    for got, want in ((np.load(d + "y_" + mode + ".npy"), my), (np.load(d + "c_" + mode + ".npy"), mc)):
        err = np.abs(got - want.astype(np.float32)).max()
        assert err <= 2e-6 * np.abs(want).max(), (mode, err)
for n in "yc":
    e, t, h = (np.load(d + n + "_" + m + ".npy") for m in ("exact", "tf32", "f16"))
    diff = np.abs(e - t).max() / np.abs(e).max()
    assert 1e-5 < diff < 4e-3, ("tf32 vs exact", n, diff)  # TF32 rounds at 2^-11
    herr = np.abs(e - h).max() / np.abs(e).max()
    assert 0 < herr < 4e-3, ("f16 vs exact", n, herr)
print("ok")' "$tmp"
  has precision-tf32-model ok
else
  echo "note: numpy not found; the TF32 model check skipped"
fi

# --timings (or RILL_TIMINGS=1): each start-up part on stderr, one line
# each; the parts' sum is the one the total line gives, and with the rest
# the total; the results are the same bytes as without.
timings_sum() { # NAME: the parts of $out add up
  if echo "$out" | awk '/^rill: timings: / && !/^rill: timings: total / && !/preparing threads|in the background|before main/ {
      match($0, / [0-9.]+ ms/); s += substr($0, RSTART + 1, RLENGTH - 4); n++ }
    /^rill: timings: total / { split($0, f, " "); tot = f[4]; parts = f[9]; rest = f[13] }
    END { d = s - parts; if (d < 0) d = -d; e = tot - parts - rest; if (e < 0) e = -e;
          exit !(n >= 3 && d <= 0.1 * n + 0.05 && e <= 0.15 && parts <= tot + 0.1) }'; then
    pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: the parts do not add up: $out"; fi
}
check timings-run 0 "$rill" run "$fix/weights.vmasm" --device=cpu --timings --input='f32[2,5]=1'
for part in read assembly "module write" "module load" vm inputs "first run" results teardown total; do has timings-run "rill: timings: $part "; done
has timings-run "rill: timings: assembly "; has timings-run "parse "
timings_sum timings-run
# without --device: cuda where usable, checked in the background (its start a line apart), else cpu
check timings-default 0 "$rill" run "$fix/weights.vmasm" --timings --input='f32[2,5]=1'
for part in vm "first run" teardown; do has timings-default "rill: timings: $part "; done
"$rill" version | grep -q "built without the CUDA backend" || has timings-default "rill: timings: device start in the background "
timings_sum timings-default
"$rill" run "$fix/weights.vmasm" --device=cpu --input='f32[2,5]=1' > "$tmp/t0.txt" 2>&1
"$rill" run "$fix/weights.vmasm" --device=cpu --input='f32[2,5]=1' --timings > "$tmp/t1.txt" 2> /dev/null
cmp -s "$tmp/t0.txt" "$tmp/t1.txt" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --timings changed the results"; }
check timings-env 0 env RILL_TIMINGS=1 "$rill" asm "$tmp/cnn.vmasm" -o "$tmp/t.vmbc"
has timings-env "rill: timings: module write "; timings_sum timings-env
check timings-vmbc 0 "$rill" bench "$tmp/t.vmbc" --device=cpu --iterations=2 --warmup=0 --timings --input='f32[1,2,9,9]=random'
has timings-vmbc "rill: timings: module load "; has timings-vmbc "rill: timings: first run "; timings_sum timings-vmbc
check timings-off 0 env RILL_TIMINGS=0 "$rill" asm "$tmp/cnn.vmasm" -o "$tmp/t.vmbc"
echo "$out" | grep -q "timings" && { fail=$((fail + 1)); echo "FAIL RILL_TIMINGS=0 printed timings"; } || pass=$((pass + 1))
check timings-error 2 "$rill" asm "$tmp/bad.vmasm" -o "$tmp/bad.vmbc" --timings; has timings-error "bad.vmasm:2:13: error:"; has timings-error "rill: timings: total "

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
