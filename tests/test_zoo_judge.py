#!/usr/bin/env python3
"""The model zoo's judge (bench/models/zoo.py: judge, det_matched), the rule
behind every row of its table, on outputs made here: within and past the
allowance, the floors, PyTorch's non-finite places, onnxruntime's error on
the same file, and detection's matched counts. Skips (77) without numpy."""
import os
import sys

try:
    import numpy as np
except ImportError:
    # another python3 first on PATH: Debian's, where python3-numpy goes
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("numpy not installed: skipped")
    sys.exit(77)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "models"))
import zoo  # noqa: E402  (numpy only at import; torch where a model is built)

fails = 0


def check(name, cond):
    global fails
    if not cond:
        fails += 1
        print("FAIL", name)


rng = np.random.default_rng(5)
ref = rng.uniform(-2, 2, (4, 50))                 # exact; largest |value| near 2
scale = np.abs(ref).max()
torch = ref + scale * 1e-3                        # PyTorch's own error: 1e-3 (relative)
# f16: allowance 5 * 1e-3 + 1e-2 = 1.5e-2
e = zoo.judge(torch, ref, ref + scale * 1.4e-2, None, "f16")
check("within the allowance", e["ok"] and abs(e["torch"] - 1e-3) < 1e-9 and abs(e["rill"] - 1.4e-2) < 1e-9)
check("past the allowance", not zoo.judge(torch, ref, ref + scale * 1.55e-2, None, "f16")["ok"])
# f32: PyTorch exact to 1e-7, allowance 5e-7 + 1e-4
t32 = ref + scale * 1e-7
check("f32 floor", zoo.judge(t32, ref, ref + scale * 9e-5, None, "f32")["ok"])
check("f32 past its floor", not zoo.judge(t32, ref, ref + scale * 2e-4, None, "f32")["ok"])
# one element off is enough to fail
bad = ref.copy()
bad[2, 7] += scale * 0.1
check("one element", not zoo.judge(torch, ref, bad, None, "f16")["ok"])
# Rill not finite where PyTorch is: fails
nan = ref.copy()
nan[0, 0] = np.nan
check("Rill's NaN", not zoo.judge(torch, ref, nan, None, "f16")["ok"])
# PyTorch not finite where the exact answer is: Rill's must be not finite in the same places
tnan = torch.copy()
tnan[1, :] = np.nan
same = ref.copy()
same[1, :] = np.nan
e = zoo.judge(tnan, ref, same, None, "f16")
check("as PyTorch's places", e["ok"] and e.get("same_nonfinite") is True and e.get("torch_nonfinite") == 50)
other = ref.copy()
other[2, :] = np.nan
check("other places", not zoo.judge(tnan, ref, other, None, "f16")["ok"])
check("finite where PyTorch's is not", not zoo.judge(tnan, ref, ref, None, "f16")["ok"])
far = same.copy()
far[3, 3] += scale * 0.5                            # the finite rest still judged
check("the rest judged", not zoo.judge(tnan, ref, far, None, "f16")["ok"])
# the file's other runtime: its error raises the allowance, never lowers it
peer = ref + scale * 5e-3                           # allowance 5 * 5e-3 + 1e-2 = 3.5e-2
check("peer raises", zoo.judge(torch, ref, ref + scale * 3e-2, peer, "f16")["ok"])
check("peer's bound", not zoo.judge(torch, ref, ref + scale * 3.7e-2, peer, "f16")["ok"])
check("peer below PyTorch", not zoo.judge(torch, ref, ref + scale * 1.6e-2, ref, "f16")["ok"])
check("peer of another shape ignored", "peer" not in zoo.judge(torch, ref, ref, ref[:2], "f16"))

# detection: boxes (x1, y1, x2, y2), labels, scores for two images
boxes = np.array([[0, 0, 10, 10], [20, 20, 30, 30], [50, 50, 60, 70]], dtype=np.float64)
labels = np.array([1, 2, 3])
scores = np.array([0.9, 0.8, 0.7])
exact = [boxes, labels, scores, boxes, labels, scores]
moved = boxes.copy()
moved[0] += 8                                      # IoU with its exact box below 0.5
relabeled = labels.copy()
relabeled[1] = 5
swapped = boxes[[2, 1, 0]]                          # the same boxes in another order: all found
got = [moved, relabeled, scores, swapped, labels[[2, 1, 0]], scores]
want = [boxes, labels, scores, boxes + 1, labels, scores]  # shifted by 1: IoU still above 0.5
m = zoo.det_matched(got, want, exact)
check("matched %s" % m, m == [[3, 1, 3], [3, 3, 3]])

print("zoo judge: %d failed" % fails)
sys.exit(1 if fails else 0)
