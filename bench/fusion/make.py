#!/usr/bin/env python3
"""make.py OUT N: the fusion benchmark's programs over N f32 elements.

copy.vmasm     y = copy(x): the device's copy bandwidth (read N, write N)
sigmoid.vmasm  y = sigmoid(x0 * x1 + x2): read 3N, write N; -O1 fuses it
adam.vmasm     one Adam step (lr 1e-3, betas 0.9 and 0.999, eps 1e-8, step 1,
               bias-corrected as torch.optim.Adam): read p, g, m, v, write p, m, v
"""
import sys

out, n = sys.argv[1], int(sys.argv[2])
t = f"f32[{n}]"
progs = {
    "copy": f"func @main(%x: {t}) -> {t} {{\n  %y = copy(%x)\n  return %y\n}}\n",
    "sigmoid": f"func @main(%x0: {t}, %x1: {t}, %x2: {t}) -> {t} {{\n  %m = mul(%x0, %x1)\n  %s = add(%m, %x2)\n"
               f"  %y = sigmoid(%s)\n  return %y\n}}\n",
}
lr, b1, b2, eps, step = 1e-3, 0.9, 0.999, 1e-8, 1
bc1, bc2 = 1 - b1 ** step, 1 - b2 ** step
progs["adam"] = (
    f"func @main(%p: {t}, %g: {t}, %m: {t}, %v: {t}) -> ({t}, {t}, {t}) {{\n"
    f"  %m1 = mul(%m, {b1!r})\n  %g1 = mul(%g, {1 - b1!r})\n  %m2 = add(%m1, %g1)\n"
    f"  %gg = mul(%g, %g)\n  %v1 = mul(%v, {b2!r})\n  %g2 = mul(%gg, {1 - b2!r})\n  %v2 = add(%v1, %g2)\n"
    f"  %vh = div(%v2, {bc2!r})\n  %sq = sqrt(%vh)\n  %de = add(%sq, {eps!r})\n"
    f"  %up = div(%m2, %de)\n  %st = mul(%up, {lr / bc1!r})\n  %p2 = sub(%p, %st)\n"
    f"  return %p2, %m2, %v2\n}}\n")
for name, src in progs.items():
    with open(f"{out}/{name}.vmasm", "w") as f:
        f.write(src)
