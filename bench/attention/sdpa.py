"""torch's scaled_dot_product_attention on the shapes of bench/attention/*.vmasm: one line each, "torch sdpa NAME US us"."""
import torch, torch.nn.functional as F
def t(f, n=200):
    """The median of 5 replays of a CUDA graph of n calls, per call (us): device time, no Python between calls."""
    for _ in range(20): f()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n): f()
    s=torch.cuda.Event(enable_timing=True); e=torch.cuda.Event(enable_timing=True)
    ts=[]
    for r in range(5):
        s.record(); g.replay(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e)/n*1000)
    ts.sort(); return ts[2]
d=torch.device("cuda"); h=torch.float16
def bshd(B,S,H,D): return torch.randn(B,S,H,D,device=d,dtype=h).transpose(1,2)
for name,(q,k,v,m,c) in {
  "vit32": (bshd(32,197,12,64),bshd(32,197,12,64),bshd(32,197,12,64),None,False),
  "vit1": (bshd(1,197,12,64),bshd(1,197,12,64),bshd(1,197,12,64),None,False),
  "bert1": (bshd(1,128,12,64),bshd(1,128,12,64),bshd(1,128,12,64),torch.zeros(1,1,1,128,device=d,dtype=h),False),
  "bert32": (bshd(32,128,12,64),bshd(32,128,12,64),bshd(32,128,12,64),torch.zeros(32,1,1,128,device=d,dtype=h),False),
  "llama": (torch.randn(1,32,1024,128,device=d,dtype=h),torch.randn(1,8,1024,128,device=d,dtype=h).repeat_interleave(4,1),torch.randn(1,8,1024,128,device=d,dtype=h).repeat_interleave(4,1),None,True),
}.items():
    us=t(lambda: F.scaled_dot_product_attention(q,k,v,attn_mask=m,is_causal=c))
    print(f"torch sdpa {name} {us:.1f} us")
