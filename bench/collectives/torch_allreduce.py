"""torch_allreduce.py: all_reduce through torch.distributed (NCCL), the peer of bench_coll.

    python3 torch_allreduce.py NGPUS BYTES [BYTES...]

One process per GPU (torch.multiprocessing, a local TCP rendezvous); f32
tensors of BYTES each; for each size, the median over 20 rounds of the time
per all_reduce of a back-to-back loop (cuda events around it, after warm-up).
Prints one JSON line per size from rank 0, with the bus bandwidth as
nccl-tests defines it: bytes * 2 (n - 1) / n / time.
"""
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, n, sizes, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    try:
        dist.init_process_group("nccl", rank=rank, world_size=n, device_id=torch.device("cuda", rank))
    except TypeError:  # torch before 2.3 has no device_id
        dist.init_process_group("nccl", rank=rank, world_size=n)
    for size in sizes:
        x = torch.zeros(max(size // 4, 1), dtype=torch.float32, device="cuda")
        loops = 10 if size >= (64 << 20) else 200
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            dist.barrier()
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(loops):
                dist.all_reduce(x)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / loops)
        us = statistics.median(times)
        if rank == 0:
            busbw = x.numel() * 4 * 2 * (n - 1) / n / (us * 1e-6) / 1e9
            print(json.dumps({"peer": "pytorch", "gpus": n, "bytes": x.numel() * 4, "us": round(us, 3),
                              "busbw_gbs": round(busbw, 2)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    n = int(sys.argv[1])
    sizes = [int(s) for s in sys.argv[2:]]
    mp.spawn(run, args=(n, sizes, 29500 + os.getpid() % 1000), nprocs=n)
