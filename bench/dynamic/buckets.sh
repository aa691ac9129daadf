#!/bin/bash
# buckets.sh: graph mode's size buckets against exact sizes, on the GPU
# machine (PyTorch and torchvision for the conversion and the reference).
#
#   bash bench/dynamic/buckets.sh RILL OUTDIR [MODEL]
#
# MODEL (resnet50 by default) is converted by bench/models/convert.py with
# a symbolic batch (dim B in [1, 32]), $DTYPE, and assembled once. At each
# batch of $BATCHES:
#   1. check: `rill run --graph=on --graph-buckets=B=$BUCKETS` judged by
#      compare.py against the exact answer and PyTorch's error, and the run
#      must have been padded where B is not a bucket (no "not padded" line);
#   2. timing: `rill bench --graph=on` at the exact size and with the
#      buckets, in $REPEATS rounds of separate processes taking turns: the
#      median run time, and the capture plus instantiation time of the
#      graph each made (exact: one per batch size; buckets: one per bucket).
# Prints a table; logs and JSON in OUTDIR; exits 1 on a wrong result or a
# failed run. Environment: DEVICE (cuda), DTYPE (f16), BATCHES ("1 3 5 8 12
# 20 32"), BUCKETS ("1,2,4,8,16,32"), ITERS (100), REPEATS (2), PYTHON.
set -u
rill=$1; out=$2; m=${3:-resnet50}
dev=${DEVICE:-cuda}
dt=${DTYPE:-f16}
batches=${BATCHES:-1 3 5 8 12 20 32}
buckets=${BUCKETS:-1,2,4,8,16,32}
iters=${ITERS:-100}
repeats=${REPEATS:-2}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
models=$here/../models
mkdir -p "$out"
fail=0
ms=$out/${m}_${dt}_dyn
if ! "$py" "$models/convert.py" "$m" -o "$out" --dtype "$dt" --dynamic --range 1,32 ${CNN_SIZE:+--size $CNN_SIZE} \
     --sizes "$(echo $batches | tr ' ' ',')" > "$ms.convert.log" 2>&1; then
  echo "$m: convert.py failed: $(tail -1 "$ms.convert.log")"; exit 1
fi
"$rill" asm "$ms.vmasm" --link-weights -o "$ms.vmbc" > "$ms.asm.log" 2>&1 || { echo "$m: rill asm failed: $(tail -1 "$ms.asm.log")"; exit 1; }
ok=0
for b in $batches; do
  s=$ms.$b
  if "$rill" run "$ms.vmbc" --device=$dev --graph=on --graph-buckets=B=$buckets --input="@$s.input.npy" --output="@$s.bucket.out.npy" > "$s.bucket.run.log" 2>&1 &&
     "$py" "$models/compare.py" "$s.bucket.out.npy" "$s.expected.npy" "$s.reference.npy" > "$s.bucket.compare.log" 2>&1 &&
     ! grep -q "not padded" "$s.bucket.run.log"; then
    ok=$((ok + 1))
  else
    echo "$m B=$b with buckets: FAIL: $(cat "$s.bucket.compare.log" 2>/dev/null | tail -1) $(grep -v '^result\|^ ' "$s.bucket.run.log" | tail -1)"; fail=1
  fi
done
echo "$m $dt: $ok of $(echo $batches | wc -w) batches right with buckets $buckets (padded where B is not one)"
for r in $(seq "$repeats"); do
  for b in $batches; do
    for mode in exact bucket; do
      extra=""; [ $mode = bucket ] && extra=--graph-buckets=B=$buckets
      "$rill" bench "$ms.vmbc" --device=$dev --graph=on $extra --iterations="$iters" --input="@$ms.$b.input.npy" --json \
        > "$ms.$b.$mode.bench.$r.json" 2> "$ms.$b.$mode.bench.log" || { echo "$m B=$b $mode: rill bench failed: $(tail -1 "$ms.$b.$mode.bench.log")"; fail=1; }
    done
  done
done
"$py" - "$ms" "$repeats" "$buckets" $batches <<'EOF' | tee "$out/buckets.txt"
import json, statistics, sys
stem, repeats, buckets, batches = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split(",")], [int(x) for x in sys.argv[4:]]
def load(b, mode):
    rs = []
    for r in range(1, repeats + 1):
        try:
            rs.append(json.load(open("%s.%d.%s.bench.%d.json" % (stem, b, mode, r))))
        except (OSError, ValueError):
            pass
    return rs
def med(rs, f):
    v = [f(x) for x in rs]
    return (statistics.median(v), min(v), max(v)) if v else None
print("%-4s %-6s %-22s %-22s %-8s %-14s %-14s %s" % ("B", "bucket", "exact ms (range)", "bucket ms (range)", "ratio", "exact cap+inst", "bucket cap+inst", "padded runs"))
for b in batches:
    e, k = load(b, "exact"), load(b, "bucket")
    bk = next((x for x in buckets if x >= b), b)
    me, mk = med(e, lambda x: x["median_ms"]), med(k, lambda x: x["median_ms"])
    ce = med(e, lambda x: x["graph"]["capture_ms"] + x["graph"]["instantiate_ms"])
    ck = med(k, lambda x: x["graph"]["capture_ms"] + x["graph"]["instantiate_ms"])
    f = lambda t: "%.3f (%.3f-%.3f)" % t if t else "-"
    print("%-4d %-6d %-22s %-22s %-8s %-14s %-14s %s" % (b, bk, f(me), f(mk), "%.3f" % (mk[0] / me[0]) if me and mk else "-",
          "%.1f ms" % ce[0] if ce else "-", "%.1f ms" % ck[0] if ck else "-", k[0]["graph"].get("padded", "-") if k else "-"))
print("(medians over %d processes of rill bench --graph=on; ratio: bucket/exact; cap+inst: the graph's capture and instantiation)" % repeats)
EOF
[ $fail = 0 ] || echo "FAILED: wrong results or failed runs above"
exit $fail
