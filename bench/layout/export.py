"""A torchvision model at batch B in f16 as ONNX, with its input, for run.sh.

    python3 bench/layout/export.py MODEL OUTDIR [--batch 32] [--seed 0]

MODEL is a torchvision classification model (convnext_tiny, densenet121,
...): random weights (seeded), batch-norm statistics and affine parameters
randomised (so that no batch norm is the identity and none folds away by
accident), eval mode, f16 on the GPU, exported by torch.onnx.export (opset
17, the batch fixed) to OUTDIR/MODEL.onnx, and a random input to
OUTDIR/MODEL.input.npy.
"""
import argparse
import os

import numpy as np
import torch
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    model = getattr(torchvision.models, a.model)()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    model = model.eval().half().cuda()
    x = torch.rand(a.batch, 3, a.size, a.size, device="cuda", dtype=torch.float16) * 2 - 1
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"{a.model}.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (x,), path, opset_version=17, input_names=["x"], output_names=["y"], dynamo=False)
    np.save(os.path.join(a.out, f"{a.model}.input.npy"), x.cpu().numpy())
    print(path)


if __name__ == "__main__":
    main()
