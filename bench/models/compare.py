#!/usr/bin/env python3
"""Judges Rill's output of a converted model against the exact answer.

    python3 bench/models/compare.py RILL.npy EXPECTED.npy REFERENCE.npy [PEER.npy]

RILL.npy is Rill's output, EXPECTED.npy PyTorch's in the same dtype, and
REFERENCE.npy the same program in double precision (convert.py writes the
last two). Errors are max |out - reference| / max |reference|. Rill passes
when its error is at most twice PyTorch's own, or below a floor of a few
units in the last place of the dtype (f32 1e-5, f16 2e-3): the dtype's
tolerance for this network is what PyTorch itself achieves with it.

PEER.npy, where given, is another runtime's output for the same model file
(onnxruntime on the .onnx that Rill imported): an exported file carries its
own rounding (torch.onnx.export folds batch norm into the convolutions in
the model's dtype, so an f16 file's weights differ from PyTorch's by a
rounding), and then Rill's allowance is twice the larger of PyTorch's and
the peer's error.
"""
import sys

import numpy as np

got, want, ref = (np.load(p).astype(np.float64) for p in sys.argv[1:4])
peer = np.load(sys.argv[4]).astype(np.float64) if len(sys.argv) > 4 else None
if got.shape != ref.shape or want.shape != ref.shape:
    sys.exit(f"compare.py: shapes differ: Rill {got.shape}, PyTorch {want.shape}, reference {ref.shape}")
scale = np.abs(ref).max() or 1.0
err_rill = np.abs(got - ref).max() / scale
err_torch = np.abs(want - ref).max() / scale
floor = 1e-5 if np.load(sys.argv[2]).dtype == np.float32 else 2e-3
err_peer = np.abs(peer - ref).max() / scale if peer is not None and peer.shape == ref.shape else 0.0
ok = bool(np.isfinite(got).all()) and err_rill <= max(2 * err_torch, 2 * err_peer, floor)
top = (got.reshape(got.shape[0], -1).argmax(1) == ref.reshape(ref.shape[0], -1).argmax(1)).all()
peer_note = f", the file's other runtime {err_peer:.2e}" if peer is not None else ""
print(f"{'ok' if ok else 'FAIL'}: error {err_rill:.2e} (PyTorch {err_torch:.2e}{peer_note}) of max |output| {scale:.4g}, "
      f"max diff to PyTorch {np.abs(got - want).max():.3g}, top-1 {'same' if top else 'differs'}")
sys.exit(0 if ok else 1)
