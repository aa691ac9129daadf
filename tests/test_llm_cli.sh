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

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
