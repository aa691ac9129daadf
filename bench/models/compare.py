#!/usr/bin/env python3
"""Judges Rill's output of a converted model against the exact answer.

    python3 bench/models/compare.py RILL.npy EXPECTED.npy REFERENCE.npy

RILL.npy is Rill's output, EXPECTED.npy PyTorch's in the same dtype, and
REFERENCE.npy the same program in double precision (convert.py writes the
last two). Errors are max |out - reference| / max |reference|. Rill passes
when its error is at most twice PyTorch's own, or below a floor of a few
units in the last place of the dtype (f32 1e-5, f16 2e-3): the dtype's
tolerance for this network is what PyTorch itself achieves with it.
"""
import sys

import numpy as np

got, want, ref = (np.load(p).astype(np.float64) for p in sys.argv[1:4])
if got.shape != ref.shape or want.shape != ref.shape:
    sys.exit(f"compare.py: shapes differ: Rill {got.shape}, PyTorch {want.shape}, reference {ref.shape}")
scale = np.abs(ref).max() or 1.0
err_rill = np.abs(got - ref).max() / scale
err_torch = np.abs(want - ref).max() / scale
floor = 1e-5 if np.load(sys.argv[2]).dtype == np.float32 else 2e-3
ok = bool(np.isfinite(got).all()) and err_rill <= max(2 * err_torch, floor)
top = (got.reshape(got.shape[0], -1).argmax(1) == ref.reshape(ref.shape[0], -1).argmax(1)).all()
print(f"{'ok' if ok else 'FAIL'}: error {err_rill:.2e} (PyTorch {err_torch:.2e}) of max |output| {scale:.4g}, "
      f"max diff to PyTorch {np.abs(got - want).max():.3g}, top-1 {'same' if top else 'differs'}")
sys.exit(0 if ok else 1)
