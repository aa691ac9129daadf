#!/bin/bash
# test_llm_cli.sh RILL TESTS_DIR: `rill llm` on tiny Hugging Face model
# folders with random weights written by tests/llm_ref.py (numpy), whose
# reference forward pass gives the tokens to expect; bad checkpoints exit 2
# naming the problem and leave no output file.
rill=$1; ref="${PYTHON:-/usr/bin/python3} $2/llm_ref.py"
if ! ${PYTHON:-/usr/bin/python3} -c 'import numpy' 2> /dev/null; then echo "skipped: no numpy for ${PYTHON:-/usr/bin/python3}"; exit 77; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$2/shell_checks.sh"
absent() { if [ ! -e "$2" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1: $2 left behind"; fi; }
# bad NAME MESSAGE DIR: rill llm DIR -o exits 2 with MESSAGE and writes nothing
bad() {
  check "$1" 2 "$rill" llm "$3" -o "$tmp/bad.vmasm"; has "$1" "$2"; absent "$1" "$tmp/bad.vmasm"
}
fresh() { rm -rf "$tmp/$1"; $ref make "$tmp/$1" "${@:2}"; }

# ---- checkpoints that are not right ----
fresh m llama
$ref drop "$tmp/m" model.layers.1.mlp.up_proj.weight
bad missing-tensor 'no tensor "model.layers.1.mlp.up_proj.weight" in the checkpoint' "$tmp/m"
fresh m llama
$ref drop "$tmp/m" lm_head.weight
bad missing-head 'no tensor "lm_head.weight" in the checkpoint (and tie_word_embeddings is false)' "$tmp/m"
fresh m llama
$ref config "$tmp/m" intermediate_size=96
bad wrong-shape 'tensor "model.layers.0.mlp.gate_proj.weight" in model.safetensors is f32[128,64], but config.json makes it f32[96,64]' "$tmp/m"
fresh m gpt2
$ref config "$tmp/m" n_embd=32
bad wrong-shape-gpt2 'tensor "transformer.wte.weight" in model.safetensors is f32[97,64], but config.json makes it f32[97,32]' "$tmp/m"
fresh m llama
$ref config "$tmp/m" model_type='"bert"' architectures='["BertForMaskedLM"]'
bad unknown-model-type 'architecture "BertForMaskedLM" has no language-model head' "$tmp/m"
$ref config "$tmp/m" model_type='"falcon"' architectures='["FalconForCausalLM"]'
bad unknown-architecture 'model_type "falcon" (architecture "FalconForCausalLM") is not supported (llama, mistral, qwen2, gpt2 are)' "$tmp/m"
$ref config "$tmp/m" model_type= architectures='["FooForCausalLM"]'
bad no-model-type 'config.json: no "model_type" and no architecture this reader knows ("FooForCausalLM")' "$tmp/m"
$ref config "$tmp/m" model_type='"ev\u001bil"' architectures=
bad escaped-name 'model_type "ev\x1bil"' "$tmp/m"
fresh m llama
$ref config "$tmp/m" rope_scaling='{"rope_type": "yarn", "factor": 4.0}'
bad rope-yarn 'rope_scaling type "yarn" is not supported (default, linear and llama3 are)' "$tmp/m"
$ref config "$tmp/m" rope_scaling='{"type": "linear"}'
bad rope-no-factor 'rope_scaling "linear" needs a number "factor"' "$tmp/m"
fresh m llama
$ref config "$tmp/m" num_attention_heads=3
bad heads 'num_attention_heads (3) is not a multiple of num_key_value_heads (2)' "$tmp/m"
$ref config "$tmp/m" num_attention_heads='"4"'
bad heads-type '"num_attention_heads" must be an integer in [1, 100000]' "$tmp/m"
$ref config "$tmp/m" num_attention_heads= 
bad heads-missing 'config.json: "num_attention_heads" is missing' "$tmp/m"
fresh m llama
head -c 200 "$tmp/m/config.json" > "$tmp/m/c" && mv "$tmp/m/c" "$tmp/m/config.json"
bad malformed-config 'config.json is not valid JSON' "$tmp/m"
echo '[1, 2]' > "$tmp/m/config.json"
bad config-not-object 'config.json is not a JSON object' "$tmp/m"
rm "$tmp/m/config.json"
bad no-config 'config.json: cannot open' "$tmp/m"
fresh m llama
rm "$tmp/m/model.safetensors"
bad no-weights 'no model.safetensors and no model.safetensors.index.json' "$tmp/m"
fresh m llama
head -c 300 "$tmp/m/model.safetensors" > "$tmp/m/w" && mv "$tmp/m/w" "$tmp/m/model.safetensors"
bad truncated-weights 'not a safetensors file (header length' "$tmp/m"
fresh m llama --shards 3
rm "$tmp/m/model-00002-of-00003.safetensors"
bad missing-shard 'is in "model-00002-of-00003.safetensors", which is not in' "$tmp/m"
fresh m llama --shards 3
${PYTHON:-/usr/bin/python3} -c 'import json, sys
p = sys.argv[1] + "/model.safetensors.index.json"; d = json.load(open(p))
d["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors"; json.dump(d, open(p, "w"))' "$tmp/m"
bad shard-outside 'tensor "model.norm.weight" maps to something other than a file name of the folder' "$tmp/m"
fresh m mistral
$ref config "$tmp/m" sliding_window=16
check sliding-window 2 "$rill" llm "$tmp/m" -o "$tmp/bad.vmasm" --max-length=40; has sliding-window "40 positions exceed the model's sliding_window of 16"
absent sliding-window "$tmp/bad.vmasm"
check not-a-folder 2 "$rill" llm "$tmp/m/config.json" -o "$tmp/bad.vmasm"; has not-a-folder "not a folder"
check no-folder 2 "$rill" llm "$tmp/none" -o "$tmp/bad.vmasm"; has no-folder "none"

# ---- usage ----
fresh m llama
check no-prompt 2 "$rill" llm "$tmp/m"; has no-prompt "needs --prompt-ids=SPEC to run, or -o OUT.vmasm"
check o-and-output 2 "$rill" llm "$tmp/m" -o "$tmp/x.vmasm" --output=-; has o-and-output "--output and --expected-output are for runs"
check bad-n 2 "$rill" llm "$tmp/m" -o "$tmp/x.vmasm" -n 0; has bad-n "-n expects an integer in [1,"
check top-k-greedy 2 "$rill" llm "$tmp/m" -o "$tmp/x.vmasm" --top-k=5; has top-k-greedy "give a --temperature above 0"
check bad-top-p 2 "$rill" llm "$tmp/m" -o "$tmp/x.vmasm" --temperature=1 --top-p=1.5; has bad-top-p "--top-p expects a number"
check prompt-vocab 2 "$rill" llm "$tmp/m" --device=cpu --prompt-ids='i64[1,3]=1 97 2'
has prompt-vocab "token 97 (row 0, position 1) is outside the vocabulary [0, 97)"
check prompt-rank 2 "$rill" llm "$tmp/m" --device=cpu --prompt-ids='i64[3]=1 2 3'; has prompt-rank "expected token ids i64[B,S]"
check prompt-lengths 2 "$rill" llm "$tmp/m" --device=cpu --prompt-ids='i64[2,3]=1' --prompt-lengths='i64[2]=3 4'
has prompt-lengths "row 1 is 4 tokens long; a row has 1 to 3"
check max-length 2 "$rill" llm "$tmp/m" --device=cpu --prompt-ids='i64[1,8]=1' -n 10 --max-length=12; has max-length "need 18 positions"
fresh g gpt2
check gpt2-positions 2 "$rill" llm "$tmp/g" -o "$tmp/x.vmasm" --max-length=65; has gpt2-positions "GPT-2's position table (n_positions) has 64"
absent gpt2-positions "$tmp/x.vmasm"

# ---- generation against the numpy reference ----
# Three prompts right-padded to 8 (the padding random ids, which no row may
# see), 32 new tokens a row: the reference runs each row alone.
$ref ids "$tmp/ids.npy" 3 8 97 1
lens='i64[3]=8 5 3'
${PYTHON:-/usr/bin/python3} -c 'import numpy as np, sys; np.save(sys.argv[1], np.array([8, 5, 3], np.int64))' "$tmp/lens.npy"
cuda=0; "$rill" version | grep -q "cuda: usable" && cuda=1
for spec in "llama" "qwen2 --rope llama3 --tie" "mistral --rope linear --shards 3" "gpt2" "gpt2 --tie --shards 2"; do
  name=$(echo "$spec" | tr -d ' -')
  fresh m $spec
  $ref greedy "$tmp/m" "$tmp/ids.npy" "$tmp/lens.npy" 32 "$tmp/want.npy"
  run=("$rill" llm "$tmp/m" --prompt-ids=@"$tmp/ids.npy" --prompt-lengths="$lens" -n 32)
  check "greedy-$name" 0 "${run[@]}" --device=cpu --expected-output=@"$tmp/want.npy"; has "greedy-$name" "result[0]: matches (96 elements"
  check "greedy-graph-$name" 0 "${run[@]}" --device=cpu --graph=on --expected-output=@"$tmp/want.npy"
  check "greedy-O0-$name" 0 "${run[@]}" --device=cpu -O0 --graph=off --expected-output=@"$tmp/want.npy"
  [ $cuda = 1 ] && { check "greedy-cuda-$name" 0 "${run[@]}" --device=cuda --expected-output=@"$tmp/want.npy"; }
done
# a wrong expectation fails (exit 1)
${PYTHON:-/usr/bin/python3} -c 'import numpy as np, sys; w = np.load(sys.argv[1]); w[1, 7] = (w[1, 7] + 1) % 97; np.save(sys.argv[2], w)' "$tmp/want.npy" "$tmp/wrong.npy"
check greedy-wrong 1 "${run[@]}" --device=cpu --expected-output=@"$tmp/wrong.npy"; has greedy-wrong "1 of 96 elements outside tolerance"

# End tokens: row 0's sixth token made an end id (with another, a list): that
# row gives the pad id after it, the others go on; with one row, the loop stops.
fresh m llama
$ref greedy "$tmp/m" "$tmp/ids.npy" "$tmp/lens.npy" 32 "$tmp/free.npy"
eos=$(${PYTHON:-/usr/bin/python3} -c 'import numpy as np, sys; print(np.load(sys.argv[1])[0, 5])' "$tmp/free.npy")
$ref config "$tmp/m" eos_token_id="[96, $eos]" pad_token_id=0
$ref greedy "$tmp/m" "$tmp/ids.npy" "$tmp/lens.npy" 32 "$tmp/want.npy"
${PYTHON:-/usr/bin/python3} -c 'import numpy as np, sys; w = np.load(sys.argv[1]); assert (w[0, 6:] == 0).all() and not (w[1:, -1] == 0).all(), w' "$tmp/want.npy" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL the end-token case does not end row 0 alone"; }
check eos-rows 0 "${run[@]}" --device=cpu --expected-output=@"$tmp/want.npy"
check eos-graph 0 "${run[@]}" --device=cpu --graph=on --expected-output=@"$tmp/want.npy"
check eos-ignored 0 "${run[@]}" --device=cpu --ignore-eos --expected-output=@"$tmp/free.npy"
${PYTHON:-/usr/bin/python3} -c 'import numpy as np, sys; np.save(sys.argv[2], np.load(sys.argv[1])[:1]); np.save(sys.argv[3], np.array([8]))' "$tmp/ids.npy" "$tmp/ids1.npy" "$tmp/lens1.npy"
$ref greedy "$tmp/m" "$tmp/ids1.npy" "$tmp/lens1.npy" 32 "$tmp/want1.npy"
check eos-stop 0 "$rill" llm "$tmp/m" --device=cpu --prompt-ids=@"$tmp/ids1.npy" -n 32 --expected-output=@"$tmp/want1.npy"

# Sampling: the same seed the same tokens, another seed others; top-k 1 is greedy.
fresh m llama
$ref greedy "$tmp/m" "$tmp/ids.npy" "$tmp/lens.npy" 32 "$tmp/want.npy"
check sample-a 0 "${run[@]}" --device=cpu --temperature=0.8 --top-p=0.9 --seed=5 --output=@"$tmp/s5a.npy"
check sample-b 0 "${run[@]}" --device=cpu --temperature=0.8 --top-p=0.9 --seed=5 --graph=off --expected-output=@"$tmp/s5a.npy"
check sample-c 0 "${run[@]}" --device=cpu --temperature=0.8 --top-p=0.9 --seed=6 --output=@"$tmp/s6.npy"
${PYTHON:-/usr/bin/python3} -c 'import numpy as np, sys; a, b, g = (np.load(f) for f in sys.argv[1:4])
assert (a != b).sum() > 10 and (a != g).sum() > 10 and a.min() >= 0 and a.max() < 97, (a, b)' "$tmp/s5a.npy" "$tmp/s6.npy" "$tmp/want.npy" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL seeds 5 and 6 give the same tokens, or greedy ones"; }
check sample-top-k-1 0 "${run[@]}" --device=cpu --temperature=1.5 --top-k=1 --seed=3 --expected-output=@"$tmp/want.npy"
[ $cuda = 1 ] && check sample-cuda 0 "${run[@]}" --device=cuda --temperature=0.8 --top-p=0.9 --seed=5 --expected-output=@"$tmp/s5a.npy"

# Tokens reach the host as they are made: --stream's lines are the result's
# columns; --stats counts one host round trip a step when interpreted.
check stream 0 "${run[@]}" --device=cpu --stream --output=@"$tmp/st.npy"
echo "$out" > "$tmp/stream.txt"
${PYTHON:-/usr/bin/python3} -c 'import numpy as np, sys
rows = [l.split(":") for l in open(sys.argv[1]) if l.strip()]
assert [int(r[0]) for r in rows] == list(range(32)), rows
got = np.array([[int(v) for v in r[1].split()] for r in rows]).T
want = np.load(sys.argv[2]); assert (got == want).all() and (want == np.load(sys.argv[3])).all(), (got, want)' "$tmp/stream.txt" "$tmp/st.npy" "$tmp/want.npy" &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL --stream's lines are not the tokens"; }
check stats 0 "${run[@]}" --device=cpu --graph=off --stats --output="@$tmp/x.npy"
has stats "rill: 32 steps of 3 rows in"; has stats "32 host round trips (1.00 a step), 0 graph launches, 1 runs"

# -o: the program names the checkpoint's file (no copy of the weights) and
# runs as any program does; its prefill gives the reference's logits, in
# every dtype (f16, bf16 and f32 norms with bf16 matrices within their tolerances).
check write 0 "$rill" llm "$tmp/m" -o "$tmp/m.vmasm" --batch=3 --max-length=40
grep -qF "weights \"$(cd "$tmp/m" && pwd -P)/model.safetensors\" as w0" "$tmp/m.vmasm" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL -o: no weights statement naming the checkpoint"; }
[ "$(stat -c %s "$tmp/m.vmasm")" -lt 50000 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL -o: the program is as large as its weights"; }
check write-run 0 "$rill" run "$tmp/m.vmasm" --device=cpu --function=generate --input=@"$tmp/ids.npy" --input="$lens" --expected-output=@"$tmp/want.npy"
check write-asm 0 "$rill" asm "$tmp/m.vmasm" -o "$tmp/m.vmbc" --link-weights
check write-vmbc 0 "$rill" run "$tmp/m.vmbc" --device=cpu --function=generate --input=@"$tmp/ids.npy" --input="$lens" --expected-output=@"$tmp/want.npy"
for spec in "llama --dtype f32:1e-4" "llama --dtype f16:1e-2" "gpt2 --dtype f16:1e-2" "qwen2 --dtype bf16:5e-2" "llama --dtype mixed:5e-2"; do
  tol=${spec##*:}; spec=${spec%:*}; name=$(echo "$spec" | tr -d ' -')
  fresh m $spec
  $ref logits "$tmp/m" "$tmp/ids.npy" "$tmp/lens.npy" "$tmp/logits.npy"
  "$rill" llm "$tmp/m" -o "$tmp/p.vmasm" --batch=3 --max-length=40
  check "prefill-$name" 0 "$rill" run "$tmp/p.vmasm" --device=cpu --function=prefill --input=@"$tmp/ids.npy" --input="$lens" \
    --expected-output=@"$tmp/logits.npy" --rtol="$tol" --atol="$tol"
  check "greedy-runs-$name" 0 "$rill" llm "$tmp/m" --device=cpu --prompt-ids=@"$tmp/ids.npy" --prompt-lengths="$lens" -n 8 --output=-
  has "greedy-runs-$name" "result[0]: i64[3,8] = ["
done

# ---- -O1's decode fusions (assembler/decode_fuse.c): each small product takes the rms_norm or gated unit
# before it and the residual add after it (fused_linear), and the rotations of q and k with the cache
# writes become one rotary_update; the cpu computes both to the same bits as the ops they replace:
# @decode at -O1 equals -O0 exactly at several positions (two rows, each its own; GPT-2 within f16's
# rounding, since -O1 also gives its Conv1D products their bias in the epilogue), and `rill dis` shows
# the fused ops and fewer invokes. Counts at -O1 (batch 1, 2 layers): Llama 2 + 7 a layer + 1 (the final
# norm in the head; 15 a layer before these fusions), Qwen2 2 + 8 a layer + 2 (its q/k/v biases keep the
# three products apart), GPT-2 4 + 10 a layer + 2 (its layer norms stay; 12 a layer before).
# (rotary, norm, glu and residual by default; RILL_DECODE_FUSION=1 all five, 0 none, or a list of them.)
export RILL_DECODE_FUSION=1
for spec in "llama:17" "llama --dtype f16:" "qwen2 --dtype bf16:20" "mistral --rope linear --dtype f16:" "gpt2 --dtype f16:27"; do
  want=${spec##*:}; spec=${spec%:*}; name=$(echo "$spec" | tr -d ' -')
  fresh m $spec
  "$rill" llm "$tmp/m" -o "$tmp/d.vmasm" --batch=2 --max-length=40
  for pos in "0 5" "17 39" "3 3"; do
    dec=("$rill" run "$tmp/d.vmasm" --device=cpu --function=decode --input="i64[2]=3 9" --input="i64[2]=$pos")
    check "decode-O0-$name-${pos/ /-}" 0 "${dec[@]}" -O0 --output=@"$tmp/d0.npy"
    exact=(--rtol=0 --atol=0); case $spec in gpt2*) exact=(--rtol=1e-2 --atol=1e-2) ;; esac
    check "decode-O1-$name-${pos/ /-}" 0 "${dec[@]}" --expected-output=@"$tmp/d0.npy" "${exact[@]}"
    case $spec in gpt2*) ;; *) has "decode-O1-$name-${pos/ /-}" "max abs diff 0," ;; esac
  done
  "$rill" llm "$tmp/m" -o "$tmp/d1.vmasm" --batch=1 --max-length=40
  check "dis-O0-$name" 0 "$rill" asm "$tmp/d1.vmasm" -O0 -o "$tmp/d0.vmbc"
  check "dis-O1-$name" 0 "$rill" asm "$tmp/d1.vmasm" -o "$tmp/d1.vmbc"
  n0=$("$rill" dis "$tmp/d0.vmbc" | awk '/^func @decode/,/^}/' | grep -c '^  invoke ')
  "$rill" dis "$tmp/d1.vmbc" > "$tmp/d1.dis"
  n1=$(awk '/^func @decode/,/^}/' "$tmp/d1.dis" | grep -c '^  invoke ')
  grep -q '^op \$[0-9]* = fused_linear(.*{.*residual=true' "$tmp/d1.dis" && [ "$n1" -lt "$n0" ] && { [ -z "$want" ] || [ "$n1" = "$want" ]; } &&
    pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL dis-$name: @decode has $n1 invokes at -O1 (want ${want:-fewer}), $n0 at -O0, or no fused_linear with a residual"; }
  case $spec in gpt2*) ;; *)
    grep -q '^op \$[0-9]* = fused_linear(.*{prologue="rms_norm"' "$tmp/d1.dis" && grep -q '^op \$[0-9]* = fused_linear(.*{prologue="rms_norm", eps=[^,]*, epilogue="swiglu", gate_second=true}' "$tmp/d1.dis" &&
      grep -q '^op \$[0-9]* = rotary_update(' "$tmp/d1.dis" && grep -q '^  invoke \$[0-9]*, (%k0, %v0, .*), (%k0, %v0, ' "$tmp/d1.dis" &&
      pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL dis-$name: no fused_linear with the norm, or with the norm and swiglu's epilogue, or no rotary_update writing the caches"; } ;;
  esac
done
unset RILL_DECODE_FUSION
# decode_invokes DIS OPS: how many invokes of @decode (in `rill dis` output DIS) run an op named OPS (a grep alternation)
decode_invokes() {
  sed -n 's/^op \(\$[0-9]*\) = \('"$2"'\)(.*/\1/p' "$1" | while read -r id; do awk '/^func @decode/,/^}/' "$1" | grep -c "^  invoke \\$id,"; done |
    awk '{s += $1} END {print s + 0}'
}
# one by one (RILL_DECODE_FUSION=rotary,norm,gate,residual): each makes its own and no other
fresh m llama
"$rill" llm "$tmp/m" -o "$tmp/d5.vmasm" --batch=1 --max-length=40
# by default rotary, norm, glu and residual alone (no gated unit as a prologue; no rms_norm left in @decode)
"$rill" asm "$tmp/d5.vmasm" -o "$tmp/d2.vmbc" && "$rill" dis "$tmp/d2.vmbc" > "$tmp/d2.dis"
norms=$(decode_invokes "$tmp/d2.dis" 'rms_norm')
grep -q '^op \$[0-9]* = rotary_update(' "$tmp/d2.dis" && grep -q '= fused_linear(.*residual=true' "$tmp/d2.dis" &&
  grep -q '= fused_linear(.*{prologue="rms_norm", eps=[^,]*, epilogue="swiglu", gate_second=true}' "$tmp/d2.dis" &&
  ! grep -q 'prologue="swiglu"' "$tmp/d2.dis" && [ "$norms" = 0 ] &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL dis-default: want rotary_update, the norm's, the glu's and the residual's fused_linear alone ($norms rms_norm invokes in @decode)"; }
RILL_DECODE_FUSION=0 "$rill" asm "$tmp/d5.vmasm" -o "$tmp/d6.vmbc" && ! "$rill" dis "$tmp/d6.vmbc" | grep -q 'fused_linear\|rotary_update' &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL dis-none: RILL_DECODE_FUSION=0 fused the decode step"; }
RILL_DECODE_FUSION=rotary "$rill" asm "$tmp/d5.vmasm" -o "$tmp/d3.vmbc" && "$rill" dis "$tmp/d3.vmbc" > "$tmp/d3.dis"
grep -q '^op \$[0-9]* = rotary_update(' "$tmp/d3.dis" && ! grep -q '= fused_linear(' "$tmp/d3.dis" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL dis-rotary: RILL_DECODE_FUSION=rotary: no rotary_update, or a fused_linear"; }
RILL_DECODE_FUSION=norm,residual "$rill" asm "$tmp/d5.vmasm" -o "$tmp/d4.vmbc" && "$rill" dis "$tmp/d4.vmbc" > "$tmp/d4.dis"
grep -q '= fused_linear(.*{prologue="rms_norm"' "$tmp/d4.dis" && grep -q '= fused_linear(.*residual=true' "$tmp/d4.dis" &&
  ! grep -q 'prologue="swiglu"\|= rotary_update(' "$tmp/d4.dis" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL dis-norm-residual: RILL_DECODE_FUSION=norm,residual: want the norm's and the residual's fused_linear alone"; }
# glu: the gate and up product's halves through swiglu as its epilogue (no split or swiglu left), the same bits as -O0
RILL_DECODE_FUSION=glu "$rill" asm "$tmp/d5.vmasm" -o "$tmp/d7.vmbc" && "$rill" dis "$tmp/d7.vmbc" > "$tmp/d7.dis"
used=$(decode_invokes "$tmp/d7.dis" 'swiglu\|split')
grep -q '= fused_linear(.*{epilogue="swiglu", gate_second=true}' "$tmp/d7.dis" && [ "${used:-0}" = 0 ] &&
  ! grep -q 'prologue=\|residual=' "$tmp/d7.dis" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL dis-glu: RILL_DECODE_FUSION=glu: want the gated units as products' epilogues alone"; }
dec=("$rill" run "$tmp/d5.vmasm" --device=cpu --function=decode --input="i64[1]=3" --input="i64[1]=7")
check "decode-glu-O0" 0 "${dec[@]}" -O0 --output=@"$tmp/g0.npy"
export RILL_DECODE_FUSION=glu
check "decode-glu-O1" 0 "${dec[@]}" --expected-output=@"$tmp/g0.npy" --rtol=0 --atol=0
has "decode-glu-O1" "max abs diff 0,"
unset RILL_DECODE_FUSION

# ---- tensor parallel (docs/tensor_parallel.md): N cpu ranks give the tokens of one ----
# A vocabulary of 96 divides by 2 and 4 (the head splits); 2 key/value heads
# divide by 2 only (at 4 attention stays whole, the MLP splits). Each rank
# holds only its parts: its weights count is below the whole model's.
ngpu=$(cuda_gpus "$rill")
# (anywhere in a line: the ranks share the terminal, and a line of one may follow another's unended one)
weights_of() { echo "$out" | sed -n "s/.*rill: ${1}weights \([0-9]*\) bytes.*/\1/p" | head -1; }
for spec in "llama" "qwen2 --tie" "gpt2" "mistral --shards 3"; do
  name=$(echo "$spec" | tr -d ' -')
  fresh m $spec --vocab 96
  $ref ids "$tmp/tpids.npy" 3 8 96 1
  $ref greedy "$tmp/m" "$tmp/tpids.npy" "$tmp/lens.npy" 16 "$tmp/want.npy"
  run=("$rill" llm "$tmp/m" --prompt-ids=@"$tmp/tpids.npy" --prompt-lengths="$lens" -n 16 --stats)
  check "tp1-$name" 0 "${run[@]}" --device=cpu --expected-output=@"$tmp/want.npy"; whole=$(weights_of "")
  for n in 2 4; do
    check "tp$n-$name" 0 "$rill" launch -n $n "${run[@]}" --device=cpu --tensor-parallel=$n --expected-output=@"$tmp/want.npy"
    has "tp$n-$name" "result[0]: matches (48 elements, max abs diff 0"
    part=$(weights_of "rank 1: ")
    [ -n "$part" ] && [ "$part" -lt $((whole * 3 / 4)) ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL tp$n-$name: rank 1 holds $part bytes of weights, the whole model $whole"; echo "$out" | tail -8; }
  done
  check "tp2-graph-off-$name" 0 "$rill" launch -n 2 "${run[@]}" --device=cpu --graph=off -O0 --tensor-parallel=2 --expected-output=@"$tmp/want.npy"
  # the device form: one process, a VM of 2 or 4 cpu devices, each keeping its part of the KV cache (docs/tensor_parallel.md)
  for g in on off; do
    check "tpd2-$g-$name" 0 "${run[@]}" --device=cpu:0,cpu:1 --graph=$g --tensor-parallel=2 --expected-output=@"$tmp/want.npy"
    has "tpd2-$g-$name" "result[0]: matches (48 elements, max abs diff 0"
  done
  check "tpd4-$name" 0 "${run[@]}" --device=cpu:0,cpu:1,cpu:2,cpu:3 --tensor-parallel=4 --expected-output=@"$tmp/want.npy"
  check "tpd2-O0-$name" 0 "${run[@]}" --device=cpu:0,cpu:1 -O0 --tensor-parallel=2 --expected-output=@"$tmp/want.npy"
  [ "$ngpu" -ge 2 ] && for g in on off; do
    check "tpd2-cuda-$g-$name" 0 "${run[@]}" --device=cuda:0,cuda:1 --graph=$g --tensor-parallel=2 --expected-output=@"$tmp/want.npy"
  done
  # two GPUs, one a rank
  [ "$ngpu" -ge 2 ] && check "tp2-cuda-$name" 0 "$rill" launch -n 2 sh -c '"$0" "$@" --device=cuda:$LOCAL_RANK' "${run[@]}" --tensor-parallel=2 \
    --expected-output=@"$tmp/want.npy"
done
# written with -o: the program split by rill asm, run as two ranks from its .vmbc
fresh m llama --vocab 96
$ref greedy "$tmp/m" "$tmp/tpids.npy" "$tmp/lens.npy" 16 "$tmp/want.npy"
check tp-write 0 "$rill" llm "$tmp/m" -o "$tmp/tp.vmasm" --batch=3 --max-length=24 -n 16
check tp-asm 0 "$rill" asm "$tmp/tp.vmasm" --tensor-parallel=2 --link-weights -o "$tmp/tp.vmbc"
has tp-asm "note: tensor parallel: attention block split 2 ways (6 column-parallel linears, 2 row-parallel summed by all_reduce)"
has tp-asm "note: tensor parallel: vocabulary-parallel head split 2 ways"
has tp-asm "note: tensor parallel: vocabulary-parallel embedding split 2 ways (each rank's rows, summed by all_reduce)"
check tp-run 0 "$rill" launch -n 2 "$rill" run "$tmp/tp.vmbc" --device=cpu --function=generate --input=@"$tmp/tpids.npy" --input="$lens" \
  --expected-output=@"$tmp/want.npy"
check tpd-asm 0 "$rill" asm "$tmp/tp.vmasm" --tensor-parallel=2 --parallel-form=devices --link-weights -o "$tmp/tpd.vmbc"
check tpd-run 0 "$rill" run "$tmp/tpd.vmbc" --device=cpu:0,cpu:1 --function=generate --input=@"$tmp/tpids.npy" --input="$lens" --expected-output=@"$tmp/want.npy"
check tpd-dis 0 "$rill" dis "$tmp/tpd.vmbc"
has tpd-dis "state %k0.dev1 : f32[3,1,24,16]"
check tpd-one 2 "$rill" run "$tmp/tpd.vmbc" --device=cpu --function=generate --input=@"$tmp/tpids.npy" --input="$lens"
has tpd-one "uses device 1, and the VM has 1 device (cpu): it needs 2, e.g. --device=cpu:0,cpu:1"
check tp-alone 2 "$rill" llm "$tmp/m" --prompt-ids=@"$tmp/tpids.npy" -n 4 --device=cpu --tensor-parallel=2
has tp-alone "the module is split for a job of 2 ranks (--tensor-parallel=2): run it as one"
check tp-larger 2 "$rill" launch -n 4 "$rill" llm "$tmp/m" --prompt-ids=@"$tmp/tpids.npy" -n 4 --device=cpu --tensor-parallel=2
has tp-larger "the module is split for a job of 2 ranks (--tensor-parallel=2), and this job has 4"
# one key/value head: attention stays whole (said by rill asm), the MLP and the head split
fresh m llama --vocab 96 --kv-heads 1
$ref greedy "$tmp/m" "$tmp/tpids.npy" "$tmp/lens.npy" 16 "$tmp/want.npy"
check tp-kv1 0 "$rill" launch -n 2 "$rill" llm "$tmp/m" --prompt-ids=@"$tmp/tpids.npy" --prompt-lengths="$lens" -n 16 --device=cpu --tensor-parallel=2 \
  --expected-output=@"$tmp/want.npy"
check tp-kv1-asm 0 "$rill" llm "$tmp/m" -o "$tmp/tp1.vmasm" --batch=3 --max-length=24 -n 16
check tp-kv1-notes 0 "$rill" asm "$tmp/tp1.vmasm" --tensor-parallel=2 -o "$tmp/tp1.vmbc"
has tp-kv1-notes "this linear stays replicated: a reshape that cuts across the split (heads or sizes not divisible)"
has tp-kv1-notes "note: tensor parallel: MLP block split 2 ways (2 column-parallel linears"

# bench/llm/decode_ab.sh (the decode goal's measure, for the GPU machine) on the cpu device: a tiny model in its
# folder, two variants in turns, a line each with its rounds, median and range; a variant without NAME= refused
fresh ab/tiny.f16 llama
ab_sh="$2/../bench/llm/decode_ab.sh"
decode_ab() { PYTHON=${PYTHON:-/usr/bin/python3} MODEL=tiny MAXLEN=16 CONTEXTS=4 ITERS=2 DEVICE=cpu bash "$ab_sh" "$rill" "$tmp/ab" "$@" 2>&1; }
ab=$(ROUNDS=2 decode_ab none=RILL_DECODE_FUSION=0 default= "bin=RILL_BIN=$rill")
echo "$ab" | grep -q '^none  *context     4: [0-9.]* / [0-9.]* ms; median [0-9.]* ([0-9.]* to [0-9.]*)$' &&
  echo "$ab" | grep -q '^default  *context     4: ' && echo "$ab" | grep -q '^bin  *context     4: [0-9.]* / ' && [ -f "$tmp/ab/none.4.2.json" ] &&
  pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL decode-ab: $ab"; }
# another build that is not there: its rounds fail, its line has no figure, exit 1
ab=$(ROUNDS=1 decode_ab "gone=RILL_BIN=$tmp/no/rill")
[ $? = 1 ] && echo "$ab" | grep -q '^gone  *context     4: no figure$' && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL decode-ab-gone: $ab"; }
decode_ab oops > "$tmp/ab.out"
[ $? = 2 ] && grep -q "a variant is NAME=ASSIGNMENTS, found 'oops'" "$tmp/ab.out" && pass=$((pass + 1)) ||
  { fail=$((fail + 1)); echo "FAIL decode-ab-bad: $(cat "$tmp/ab.out")"; }

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
