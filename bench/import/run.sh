#!/bin/bash
# Importer start-up: BERT-base and GPT-2 small written as torch.onnx.export
# (opset 17) writes them, random f32 weights (bench_import_gen), timed
# through `rill import`, `rill asm` (import + assembly at -O1 + module write)
# and a first `rill run --device=cpu` on 8 tokens (import, assembly, load,
# VM, one run), each N times (wall clock, median and range), beside the
# 2 s goal of issue 33; then one run of each with --timings (its parts).
# The models stay in OUT (about 950 MB) for reruns.
#
#   bash bench/import/run.sh [BUILD_DIR] [OUT_DIR] [RUNS]
set -eu
B=${1:-build}
OUT=${2:-/tmp/rill-import-bench}
N=${3:-5}
rill=$B/tools/rill
gen=$B/bench/bench_import_gen
[ -x "$rill" ] || { echo "build $rill first (ninja -C $B)" >&2; exit 2; }
mkdir -p "$OUT"
for m in bert gpt2; do
  if [ ! -s "$OUT/$m.onnx" ]; then
    [ -x "$gen" ] || { echo "build $gen first (ninja -C $B)" >&2; exit 2; }
    "$gen" $m "$OUT/$m.onnx"
  fi
done

ids='i64[1,8]=101 2023 2003 1037 3231 1997 1996 102'
ones='i64[1,8]=1 1 1 1 1 1 1 1'
zeros='i64[1,8]=0 0 0 0 0 0 0 0'
cmd_for() { # model, what
  case $1.$2 in
    *.import) echo "$rill import $OUT/$1.onnx -o $OUT/$1.vmasm" ;;
    *.asm) echo "$rill asm $OUT/$1.onnx -o $OUT/$1.vmbc" ;;
    bert.run) echo "$rill run $OUT/bert.onnx --device=cpu --input=$ids --input=$ones --input=$zeros" ;;
    gpt2.run) echo "$rill run $OUT/gpt2.onnx --device=cpu --input=$ids --input=$ones" ;;
  esac
}
# wall and CPU (user + system) seconds of one command, its output dropped
# (an error stops the script). The CPU time is the work the command did:
# on a machine shared with other builds the wall clock also holds the time
# it waited for a core.
wall() {
  local f
  f=$(mktemp)
  /usr/bin/time -f '%e %U %S' -o "$f" "$@" > /dev/null
  awk '{printf "%s %.2f\n", $1, $2 + $3}' "$f"
  rm -f "$f"
}
# median and range of a column of numbers
stats() {
  sort -g | awk '{a[NR]=$1} END {m = NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2; printf "%s %s %s\n", m, a[1], a[NR]}'
}
printf '%s, %s cores (%s)\n' "$(uname -m)" "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
printf 'load average before: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-7s %5s %9s %19s %6s %9s %19s\n' model step runs median range goal 'cpu med' 'cpu range'
for m in bert gpt2; do
  for what in import asm run; do
    c=$(cmd_for $m $what)
    ts=()
    cs=()
    for i in $(seq "$N"); do
      # shellcheck disable=SC2086 # the command's words, inputs without spaces inside
      if [ $what = run ]; then
        case $m in
          bert) t=$(wall "$rill" run "$OUT/bert.onnx" --device=cpu "--input=$ids" "--input=$ones" "--input=$zeros") ;;
          gpt2) t=$(wall "$rill" run "$OUT/gpt2.onnx" --device=cpu "--input=$ids" "--input=$ones") ;;
        esac
      else
        t=$(wall $c)
      fi
      ts+=("${t%% *}")
      cs+=("${t##* }")
    done
    read -r med lo hi < <(printf '%s\n' "${ts[@]}" | stats)
    read -r cmed clo chi < <(printf '%s\n' "${cs[@]}" | stats)
    ok=$(echo "$med < 2" | bc)
    printf '%-6s %-7s %5s %8.2fs %8.2fs - %6.2fs %6s %8.2fs %8.2fs - %6.2fs\n' $m $what "$N" "$med" "$lo" "$hi" "$([ "$ok" = 1 ] && echo '< 2 s' || echo '> 2 s')" \
      "$cmed" "$clo" "$chi"
  done
done
printf 'load average after: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
# where one more run of each goes (--timings: the start-up's parts, stderr)
for m in bert gpt2; do
  echo "$m: rill asm --timings"
  $(cmd_for $m asm) --timings 2>&1 >/dev/null | sed 's/^rill: timings: /  /'
  echo "$m: rill run --timings"
  case $m in
    bert) "$rill" run "$OUT/bert.onnx" --device=cpu "--input=$ids" "--input=$ones" "--input=$zeros" --timings 2>&1 >/dev/null | sed 's/^rill: timings: /  /' ;;
    gpt2) "$rill" run "$OUT/gpt2.onnx" --device=cpu "--input=$ids" "--input=$ones" --timings 2>&1 >/dev/null | sed 's/^rill: timings: /  /' ;;
  esac
done
rm -f "$OUT"/*.vmbc "$OUT"/*.vmasm "$OUT"/*.safetensors
