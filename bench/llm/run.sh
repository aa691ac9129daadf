#!/bin/bash
# run.sh: the LLM benchmark, on the GPU machine (torch, transformers, numpy).
#
#   bash bench/llm/run.sh RILL OUTDIR
#
# For each model (MODELS, "llama1b gpt2" by default: a random-weight
# Llama-shaped model of about 1B parameters and GPT-2 small, built by
# hf.py make in f32 and f16 with the same weights):
#   1. greedy tokens for a 16-token prompt, 64 new: rill llm on the f32 and
#      the f16 checkpoint against Hugging Face generate in f32;
#   2. the f16 program's prefill logits against HF's f32 ones (rill run
#      --expected-output, rtol and atol 2e-2);
#   3. rill bench of the f16 program (--graph=on): @generate (128-token
#      prompt, NEW new tokens, --ignore-eos) and @prefill at batch 1 and 8,
#      decode tokens/s from their difference, beside HF generate eager and
#      with a static cache and torch.compile(mode="reduce-overhead"); and one
#      rill llm --stats run (time to the first token, host round trips,
#      graph launches);
#   4. one @decode step at contexts 128 and 2048 (batch 1), against the
#      bandwidth bound (hf.py copybw measures the copy bandwidth);
#   5. @prefill of 512 tokens beside HF's forward, eager and compiled.
# report.py prints the table with the goals; logs and JSON stay in OUTDIR.
# Environment: MODELS, NEW (new tokens when timing, 128), ITERS (timed runs,
# 10), PYTHON (python3), DEVICE (cuda).
set -u
rill=$1; out=$2
here=$(dirname "$0")
py=${PYTHON:-python3}
hf="$py $here/hf.py"
new=${NEW:-128}; iters=${ITERS:-10}; dev=${DEVICE:-cuda}
mkdir -p "$out"
echo "$new" > "$out/new"
log() { echo "== $*" >&2; }
bench() { # bench JSON VMASM FUNCTION INPUTS...: rill bench --json into JSON
  local j=$1 f=$2 fn=$3; shift 3
  "$rill" bench "$f" --device="$dev" --graph=on --function="$fn" --iterations="$iters" --warmup=2 --json "$@" > "$j" 2> "$j.log" ||
    { echo "rill bench $fn failed: $(tail -1 "$j.log")"; rm -f "$j"; }
}

log copy bandwidth
$hf copybw "$out/copybw.json"
for m in ${MODELS:-llama1b gpt2}; do
  for dt in f32 f16; do
    [ -f "$out/$m.$dt/config.json" ] || { log "$m $dt: making the checkpoint"; $hf make "$out/$m.$dt" "$m" --dtype "$dt"; }
  done
  vocab=$($py -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$out/$m.f32/config.json")
  maxpos=$($py -c 'import json, sys; c = json.load(open(sys.argv[1])); print(c.get("max_position_embeddings", c.get("n_positions")))' "$out/$m.f32/config.json")

  log "$m: greedy tokens against HF generate (f32)"
  $hf ids "$out/$m.ids.npy" 1 16 "$vocab"
  $hf greedy "$out/$m.f32" "$out/$m.ids.npy" 64 "$out/$m.hf.npy"
  for dt in f32 f16; do
    "$rill" llm "$out/$m.$dt" --device="$dev" --prompt-ids=@"$out/$m.ids.npy" -n 64 --output=@"$out/$m.rill_$dt.npy" 2> "$out/$m.rill_$dt.log" ||
      echo "$m $dt: rill llm failed: $(tail -1 "$out/$m.rill_$dt.log")"
  done
  $hf logits "$out/$m.f32" "$out/$m.ids.npy" "$out/$m.hf_logits.npy"
  "$rill" llm "$out/$m.f16" -o "$out/$m.check.vmasm" --batch=1 --max-length=80
  "$rill" run "$out/$m.check.vmasm" --device="$dev" --function=prefill --input=@"$out/$m.ids.npy" --input='i64[1]=16' \
    --expected-output=@"$out/$m.hf_logits.npy" --rtol=2e-2 --atol=2e-2 > "$out/$m.logits.log" 2>&1

  for b in 1 8; do
    log "$m: batch $b, 128-token prompts, $new new tokens"
    "$rill" llm "$out/$m.f16" -o "$out/$m.gen$b.vmasm" --batch=$b --max-length=$((128 + new)) -n "$new" --ignore-eos
    $hf ids "$out/$m.ids$b.npy" $b 128 "$vocab"
    bench "$out/$m.gen$b.json" "$out/$m.gen$b.vmasm" generate --input=@"$out/$m.ids$b.npy" --input="i64[$b]=128"
    bench "$out/$m.prefill$b.json" "$out/$m.gen$b.vmasm" prefill --input=@"$out/$m.ids$b.npy" --input="i64[$b]=128"
    # one rill llm run as a user makes it (graph mode: warm-up, capture, one launch): time to the first token, round trips
    "$rill" llm "$out/$m.f16" --device="$dev" --graph=on --prompt-ids=@"$out/$m.ids$b.npy" -n "$new" --ignore-eos --stats \
      --output=@"$out/$m.llm$b.npy" 2> "$out/$m.stats$b.log" || echo "$m: rill llm --stats failed: $(tail -1 "$out/$m.stats$b.log")"
    $hf time "$out/$m.f16" "$out/$m.hf$b.json" --batch $b --prompt 128 --new "$new" --iters "$iters" 2> "$out/$m.hf$b.log" ||
      echo "$m: hf.py time failed: $(tail -1 "$out/$m.hf$b.log")"
  done

  log "$m: one decode step at contexts 128 and 2048"
  t=$((maxpos < 4096 ? maxpos : 4096))
  "$rill" llm "$out/$m.f16" -o "$out/$m.decode.vmasm" --batch=1 --max-length=$t -n 2 --ignore-eos
  for ctx in 128 2048; do
    [ $ctx -lt $t ] && bench "$out/$m.decode$ctx.json" "$out/$m.decode.vmasm" decode --input='i64[1]=5' --input="i64[1]=$ctx"
  done

  log "$m: prefill of 512 tokens"
  $hf ids "$out/$m.ids512.npy" 1 512 "$vocab"
  "$rill" llm "$out/$m.f16" -o "$out/$m.p512.vmasm" --batch=1 --max-length=513 -n 1 --ignore-eos
  bench "$out/$m.prefill512.json" "$out/$m.p512.vmasm" prefill --input=@"$out/$m.ids512.npy" --input='i64[1]=512'
  $hf prefill "$out/$m.f16" "$out/$m.hfprefill512.json" --prompt 512 --iters "$iters" 2> "$out/$m.hfprefill.log" ||
    echo "$m: hf.py prefill failed: $(tail -1 "$out/$m.hfprefill.log")"
done
$py "$here/report.py" "$out"
