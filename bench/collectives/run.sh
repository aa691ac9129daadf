#!/bin/bash
# run.sh: all_reduce on the GPUs of one machine, Rill against PyTorch (NCCL).
#
#   bash bench/collectives/run.sh BUILD_DIR OUT_DIR
#
# On NGPUS GPUs (2 by default): bus bandwidth at 1 GiB and latency at 8 KiB
# and 256 KiB, for Rill's all_reduce over the VM's GPUs through NCCL
# (one-shot off) and one-shot (where every pair has P2P), and for
# torch.distributed's all_reduce (NCCL) in the same call; the ratios against
# the goals of issue 29 (bandwidth within 5% of PyTorch's, latency at most
# 0.6x). NVLink multicast stays off (NCCL_NVLS_ENABLE=0). JSON lines and
# logs in OUT_DIR; a summary on stdout. Environment: NGPUS, PYTHON.
set -u
build=$1; out=$2
here=$(dirname "$0")
py=${PYTHON:-python3}
n=${NGPUS:-2}
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
devs=$(seq -s, -f "cuda:%g" 0 $((n - 1)))
gib=$((1 << 30)); k8=8192; k256=262144
rill() { # rill NAME BYTES ONESHOT: one line of bench_coll's JSON into OUT/NAME.json
  "$build/bench/bench_coll" "$devs" "$2" "$3" 20 > "$out/$1.json" 2> "$out/$1.log" || { echo "bench_coll $1 failed: $(tail -1 "$out/$1.log")"; echo '{}' > "$out/$1.json"; }
}
rill nccl_1g $gib 0
rill nccl_8k $k8 0
rill nccl_256k $k256 0
rill oneshot_8k $k8 $((1 << 20))
rill oneshot_256k $k256 $((1 << 20))
NCCL_NVLS_ENABLE=0 $py "$here/torch_allreduce.py" "$n" $gib $k8 $k256 > "$out/torch.json" 2> "$out/torch.log" || echo "torch_allreduce.py failed: $(tail -1 "$out/torch.log")"
$py - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def one(name):
    try:
        return json.load(open(os.path.join(out, name + ".json")))
    except Exception:
        return {}
torch = {}
for line in open(os.path.join(out, "torch.json")) if os.path.exists(os.path.join(out, "torch.json")) else []:
    try:
        j = json.loads(line); torch[j["bytes"]] = j
    except Exception:
        pass
def ratio(a, b):
    return "%.3f" % (a / b) if a and b else "-"
t1g, t8, t256 = torch.get(1 << 30, {}), torch.get(8192, {}), torch.get(262144, {})
r = one("nccl_1g")
print("all_reduce bus bandwidth at 1 GiB: rill (NCCL) %s GB/s, pytorch %s GB/s, ratio %s (goal >= 0.95)"
      % (r.get("busbw_gbs", "-"), t1g.get("busbw_gbs", "-"), ratio(r.get("busbw_gbs"), t1g.get("busbw_gbs"))))
for size, t in ((8192, t8), (262144, t256)):
    tag = "8k" if size == 8192 else "256k"
    nc, os_ = one("nccl_" + tag), one("oneshot_" + tag)
    print("all_reduce latency at %s: rill NCCL %s us, rill one-shot %s us, pytorch %s us; ratios NCCL %s, one-shot %s (goal <= 0.6)"
          % (tag, nc.get("us", "-"), os_.get("us", "-"), t.get("us", "-"), ratio(nc.get("us"), t.get("us")), ratio(os_.get("us"), t.get("us"))))
PY
