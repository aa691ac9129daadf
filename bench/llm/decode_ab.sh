#!/bin/bash
# decode_ab.sh: variants of one decode step, timed in turns, against the
# bandwidth bound (the measure of the decode goal), on the GPU machine.
#
#   bash bench/llm/decode_ab.sh RILL OUTDIR [NAME=ASSIGNMENTS ...]
#
# A variant is a name and the environment its processes run with, e.g.
#   base=RILL_DECODE_CLUSTER=0 default= "fused=RILL_DECODE_FUSION=1 RILL_DECODE_XRED=0"
# (none: the default alone); RILL_BIN=PATH among them runs that rill instead
# (another build: "branch=RILL_BIN=/tmp/b/build/tools/rill"). The model: hf.py make MODEL (llama1b) in f16,
# random weights; the program: rill llm -o decode.vmasm --batch=1
# --max-length=MAXLEN (4096). Each figure is one process's `rill bench
# --graph=on --function=decode` median (ITERS runs, 200, after 20), the
# variants taking turns ROUNDS times (3) at each context of CONTEXTS ("128
# 2048"). Printed, a line a variant and context: each round's figure, their
# median and range, and the bound over the median (report.py's bytes of
# weights and cache a token over hf.py copybw's copy bandwidth). Exits 1
# where a run failed (its line says "no figure" where none ran).
# Environment: MODEL, MAXLEN, CONTEXTS, ROUNDS, ITERS, PYTHON, DEVICE (cuda).
set -u
[ $# -ge 2 ] || { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
rill=$1; out=$2; shift 2
here=$(dirname "$0")
py=${PYTHON:-python3}
model=${MODEL:-llama1b}; maxlen=${MAXLEN:-4096}; ctxs=${CONTEXTS:-128 2048}; rounds=${ROUNDS:-3}; iters=${ITERS:-200}; dev=${DEVICE:-cuda}
[ $# -gt 0 ] || set -- default=
for v in "$@"; do
  case $v in *=*) ;; *) echo "decode_ab.sh: a variant is NAME=ASSIGNMENTS, found '$v'" >&2; exit 2 ;; esac
done
mkdir -p "$out"
failed=0
m=$out/$model.f16
[ -f "$m/config.json" ] || $py "$here/hf.py" make "$m" "$model" --dtype f16 > "$out/make.log" 2>&1 || { tail -3 "$out/make.log"; exit 1; }
"$rill" llm "$m" -o "$out/decode.vmasm" --batch=1 --max-length="$maxlen" -n 2 --ignore-eos > "$out/llm.log" 2>&1 || { tail -3 "$out/llm.log"; exit 1; }
[ "$dev" = cuda ] && { [ -f "$out/copybw.json" ] || $py "$here/hf.py" copybw "$out/copybw.json"; }
for r in $(seq "$rounds"); do
  for v in "$@"; do
    name=${v%%=*}; assigns=${v#*=}
    bin=$(env $assigns sh -c 'printf %s "${RILL_BIN:-}"'); bin=${bin:-$rill}
    for ctx in $ctxs; do
      f="$out/$name.$ctx.$r.json"
      env $assigns "$bin" bench "$out/decode.vmasm" --device="$dev" --graph=on --function=decode --iterations="$iters" --warmup=20 --json \
        --input='i64[1]=5' --input="i64[1]=$ctx" > "$f" 2> "$out/$name.$ctx.$r.log" || { echo "$name at $ctx, round $r: failed"; tail -2 "$out/$name.$ctx.$r.log"; failed=1; }
    done
  done
done
names=""
for v in "$@"; do names="$names ${v%%=*}"; done
$py - "$here" "$out" "$m" "$rounds" "$ctxs" $names <<'PY'
import os, statistics, sys
here, out, m, rounds, ctxs, names = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), [int(c) for c in sys.argv[5].split()], sys.argv[6:]
sys.path.insert(0, here)
from report import cache_bytes, js, med, weight_bytes
bw = (js(os.path.join(out, "copybw.json")) or {}).get("copy_GBps")
wb, cfg = weight_bytes(m)
for ctx in ctxs:
    for n in names:
        v = [t for t in (med(os.path.join(out, "%s.%d.%d.json" % (n, ctx, r))) for r in range(1, rounds + 1)) if t is not None]
        if not v:
            print("%-12s context %5d: no figure" % (n, ctx))
            continue
        md = statistics.median(v)
        bound = (wb + cache_bytes(cfg, ctx, 2)) / (bw * 1e9) * 1e3 if bw else None
        print("%-12s context %5d: %s ms; median %.4f (%.4f to %.4f)%s" % (
            n, ctx, " / ".join("%.4f" % x for x in v), md, min(v), max(v),
            "; bound %.3f ms = %.0f%% of it (goal >= 85%%)" % (bound, bound / md * 100) if bound else ""))
PY
exit $failed
