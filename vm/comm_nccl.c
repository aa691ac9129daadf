/* comm_nccl.c: communicators over GPUs (comm.h), through NCCL.
 *
 * NCCL is opened with dlopen("libnccl.so.2") the first time a VM runs a
 * collective over GPUs, as cuDNN is (kernels/cuda_api.c): a machine without
 * it gets a status saying so. nccl.h gives the types only.
 *
 * The VM's GPUs: ncclCommInitAll over their ordinals; a collective is one
 * NCCL call per GPU between ncclGroupStart and ncclGroupEnd, each on its
 * participant's stream (stream-ordered, and capturable). All-reduces of at
 * most `oneshot_max` bytes per GPU, where every pair of GPUs has P2P access,
 * run one-shot instead: one kernel per GPU writes its operand into its own
 * slot of every GPU's receive buffer (16 bytes a store where sizes and
 * pointers allow, through peer mappings), tells every peer (a flag per
 * block in the peer's memory), waits for theirs, and reduces the slots, now
 * all in its own memory, in participant order 0, 1, ... (the cpu devices'
 * order, bit for bit for sum, max and min): one trip over the link each
 * way, no reads from a peer. The flags hold the
 * launch's number (a count in device memory that the last block of each
 * launch advances), so repeated launches and graph replays need nothing
 * from the host; receive buffers alternate by the number's parity, so a GPU
 * that is a launch ahead never overwrites what a peer still reads (it
 * waited for a flag of the launch between from every peer, which a peer
 * sets only once its previous launch has ended, whatever the grid sizes). One-shot launches of a communicator must be
 * ordered among themselves on each GPU (the VM issues a program's
 * collectives in order).
 *
 * The job's ranks have the same one-shot path where all ranks are on one
 * host and every rank can map every other's buffers: each rank's staging
 * buffer and flags go to the others as CUDA IPC handles (through the
 * transport's allgather; ranks that are threads of one process take the
 * pointers themselves, over peer access), each rank launches its own
 * kernel with the same peers table, and a second allgather makes every rank
 * agree to use it (or all to go through NCCL). Unlike NCCL's, its kernels
 * are plain kernel nodes, which a graph's conditional WHILE body can hold.
 *
 * The job's ranks: rank 0's ncclUniqueId goes to every rank through the
 * transport's allgather, then ncclCommInitRankConfig with a non-blocking
 * config, polled with ncclCommGetAsyncError until the timeout; a
 * collective's enqueue is polled the same way. A watchdog thread follows
 * the collectives issued outside captures (an event after each): an
 * asynchronous error, or one not done within the timeout, aborts the
 * communicator (ncclCommAbort, which ends its kernels) and the job
 * (transport->abort): a status, never a hang.
 *
 * Sends and recvs over the job's ranks: an exchange (the consecutive sends
 * and recvs of a program) is ncclSend/ncclRecv calls between ncclGroupStart
 * and ncclGroupEnd on the first part's stream (the others' streams joined
 * by events), so a ring meets; captured into graphs like the collectives.
 * Each part's type goes to its peer over the transport when it is issued
 * (each send's header first, then each recv's is awaited and checked): a
 * type mismatch is a status on the receiver, not bytes read as another
 * type. Graph replays issue nothing on the host, so they check nothing.
 */
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../kernels/cuda_api.h"
#include "comm.h"

/* ---- NCCL, loaded once ---- */
#define NCCL_FNS(X)                                                                                                     \
  X(ncclGetVersion, (int *))                                                                                            \
  X(ncclGetUniqueId, (ncclUniqueId *))                                                                                  \
  X(ncclCommInitAll, (ncclComm_t *, int, const int *))                                                                  \
  X(ncclCommInitRankConfig, (ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *))                                    \
  X(ncclCommGetAsyncError, (ncclComm_t, ncclResult_t *))                                                                \
  X(ncclCommAbort, (ncclComm_t))                                                                                        \
  X(ncclCommDestroy, (ncclComm_t))                                                                                      \
  X(ncclGroupStart, (void))                                                                                             \
  X(ncclGroupEnd, (void))                                                                                               \
  X(ncclAllReduce, (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))               \
  X(ncclAllGather, (const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))                            \
  X(ncclReduceScatter, (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))           \
  X(ncclBroadcast, (const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                       \
  X(ncclSend, (const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                                    \
  X(ncclRecv, (void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))

typedef struct nccl_api {
  void *lib;
  int version;
  const char *(*ncclGetErrorString)(ncclResult_t);
#define X(name, args) ncclResult_t (*name) args;
  NCCL_FNS(X)
#undef X
} nccl_api_t;

static nccl_api_t N;
static const char *n_why;
static char n_why_buf[256];
static pthread_once_t n_once = PTHREAD_ONCE_INIT;

static void n_load(void) {
  static const char *names[] = {"libnccl.so.2", "libnccl.so", NULL};
  for (const char **p = names; *p && !N.lib; p++) N.lib = dlopen(*p, RTLD_NOW | RTLD_LOCAL);
  if (!N.lib) {
    n_why = "NCCL is not installed: libnccl.so.2 cannot be loaded";
    return;
  }
#define X(name, args)                                                                              \
  if (!(*(void **)&N.name = dlsym(N.lib, #name))) {                                                \
    snprintf(n_why_buf, sizeof n_why_buf, "libnccl.so.2 has no %s (NCCL 2.18 or later is needed)", #name); \
    n_why = n_why_buf;                                                                             \
    return;                                                                                        \
  }
  NCCL_FNS(X)
  X(ncclGetErrorString, (ncclResult_t))
#undef X
  if (N.ncclGetVersion(&N.version) != ncclSuccess || N.version < 21800) {
    snprintf(n_why_buf, sizeof n_why_buf, "NCCL %d is too old (2.18 or later is needed)", N.version);
    n_why = n_why_buf;
  }
}

static const char *n_err(ncclResult_t r) { return N.ncclGetErrorString(r); }

static rill_status_t n_check(ncclResult_t r, const char *call) {
  if (r == ncclSuccess || r == ncclInProgress) return NULL;
  return rill__status(RILL_RUNTIME_ERROR, "%s: %s", call, n_err(r));
}
#define NC(call, ...) n_check(N.call(__VA_ARGS__), #call)

static rill_status_t n_ready(void) {
  pthread_once(&n_once, n_load);
  return n_why ? rill__status(RILL_UNAVAILABLE, "collectives over GPUs: %s", n_why) : NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- types ---- */
static rill_status_t n_type(rill_dtype_t d, ncclDataType_t *out) {
  switch (d) {
    case RILL_F16: *out = ncclFloat16; return NULL;
    case RILL_BF16: *out = ncclBfloat16; return NULL;
    case RILL_F32: *out = ncclFloat32; return NULL;
    case RILL_F64: *out = ncclFloat64; return NULL;
    case RILL_I8: *out = ncclInt8; return NULL;
    case RILL_U8: case RILL_BOOL: *out = ncclUint8; return NULL;
    case RILL_I32: *out = ncclInt32; return NULL;
    case RILL_I64: *out = ncclInt64; return NULL;
    default: return rill__status(RILL_UNIMPLEMENTED, "collectives over GPUs: no NCCL type for %s", rill_dtype_name(d));
  }
}

static ncclRedOp_t n_op(const vm_coll_t *op) {
  if (op->dtype == RILL_BOOL) return op->red == OPS_RED_MIN ? ncclMin : ncclMax; /* 0/1: or, and */
  switch (op->red) {
    case OPS_RED_MAX: return ncclMax;
    case OPS_RED_MIN: return ncclMin;
    case OPS_RED_AVG: return ncclAvg;
    default: return ncclSum;
  }
}

/* ---- one-shot all-reduce over peer memory ---- */
#define OS_MAX_PEERS 8
#define OS_MAX_ROWS 1024 /* all_gather and reduce_scatter along an axis: NCCL calls in one group */
#define OS_MAX_BLOCKS 32
#define OS_THREADS 512

static const char OS_SRC_HEAD[] =
    "typedef unsigned long long u64;\n"
    "typedef unsigned short u16;\n"
    "typedef unsigned char u8;\n"
    "struct os_peers { const char *buf[8]; u64 *flags[8]; };\n"
    "__device__ __forceinline__ float h2f(u16 h) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n"
    "__device__ __forceinline__ u16 f2h(float f) { u16 h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
    "__device__ __forceinline__ float b2f(u16 h) { return __uint_as_float(((unsigned)h) << 16); }\n"
    "__device__ __forceinline__ u16 f2b(float f) { u16 h; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
    "__device__ __forceinline__ u64 ld_acq(const u64 *p) { u64 v; asm volatile(\"ld.acquire.sys.global.u64 %0, [%1];\" : \"=l\"(v) : \"l\"(p) : \"memory\"); return v; }\n"
    "__device__ __forceinline__ void st_rel(u64 *p, u64 v) { asm volatile(\"st.release.sys.global.u64 [%0], %1;\" :: \"l\"(p), \"l\"(v) : \"memory\"); }\n"
    "__device__ __forceinline__ u64 gtime(void) { u64 t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); return t; }\n";

/* T: the element type; LD(x): to the accumulator; ST(a): back; RED(a, b): one step (rounded as ST does); FIN(a, n): avg's division. */
static const char OS_SRC_BODY[] =
    /* Both kernels push: block b writes its chunk of the operand into slot `me` of every participant's receive
     * buffer (the half for the launch's parity; self included), fences, tells every peer, waits for every peer's
     * block b, then reads its chunk of every slot from its own memory. Chunks are 16-byte units where the sizes
     * and pointers allow (OS_VEC: the gather's row too), else elements. */
    "#define OS_ARRIVE(VEC_EXTRA)                                                                             \\\n"
    "  __shared__ u64 epoch;                                                                                  \\\n"
    "  int b = blockIdx.x;                                                                                    \\\n"
    "  if (threadIdx.x == 0) epoch = counter[0] + 1;        /* this launch's number, the same for every block */\\\n"
    "  __syncthreads();                                                                                       \\\n"
    "  u64 e = epoch, par = (e & 1) * (u64)np * half;                                                         \\\n"
    "  bool vec = !((n * sizeof(T)) & 15) && !((((u64)in) | ((u64)out) | (u64)(VEC_EXTRA)) & 15);             \\\n"
    "  u64 units = vec ? n * sizeof(T) / 16 : n;                                                              \\\n"
    "  u64 chunk = (units + gridDim.x - 1) / gridDim.x, lo = (u64)b * chunk, hi = lo + chunk < units ? lo + chunk : units; \\\n"
    "  const char *dst[8];                                                                                    \\\n"
    "  for (int j = 0; j < 8; j++) dst[j] = j < np ? p.buf[j] + par + (u64)me * half : 0;                     \\\n"
    "  if (vec)                                                                                               \\\n"
    "    for (u64 u = lo + threadIdx.x; u < hi; u += blockDim.x) {                                            \\\n"
    "      uint4 v = ((const uint4 *)in)[u];                                                                  \\\n"
    "      for (int j = 0; j < np; j++) ((uint4 *)dst[j])[u] = v;                                             \\\n"
    "    }                                                                                                    \\\n"
    "  else                                                                                                   \\\n"
    "    for (u64 u = lo + threadIdx.x; u < hi; u += blockDim.x) {                                            \\\n"
    "      T v = in[u];                                                                                       \\\n"
    "      for (int j = 0; j < np; j++) ((T *)dst[j])[u] = v;                                                 \\\n"
    "    }                                                                                                    \\\n"
    "  __threadfence_system();                              /* the pushed bytes before any flag */            \\\n"
    "  __syncthreads();                                                                                       \\\n"
    "  if (threadIdx.x < np) {                                                                                \\\n"
    "    st_rel(p.flags[threadIdx.x] + b * 8 + me, e);      /* block b of `me` reached launch e */            \\\n"
    "    const u64 *f = p.flags[me] + b * 8 + threadIdx.x;                                                    \\\n"
    "    u64 t0 = gtime();                                  /* and peer threadIdx.x's block b too, */         \\\n"
    "    while (ld_acq(f) < e)                              /* or the kernel traps after the timeout: a peer */ \\\n"
    "      if (gtime() - t0 > timeout) __trap();            /* that never comes is an error, not a hang */     \\\n"
    "  }                                                                                                      \\\n"
    "  __syncthreads();                                                                                       \\\n"
    "  const char *slots = mine + par;                      /* slot j at slots + j * half */\n"
    "#define OS_LEAVE                                                                                         \\\n"
    "  if (threadIdx.x == 0 && atomicAdd(&counter[1], 1ull) == gridDim.x - 1) { /* the last block out advances the count */ \\\n"
    "    counter[1] = 0;                                                                                      \\\n"
    "    counter[0] = e;                                                                                      \\\n"
    "  }\n"
    "#define VE (16 / sizeof(T))\n"
    "union os_vec { uint4 q; T e[VE]; };\n"
    "extern \"C\" __global__ void __launch_bounds__(512) rill_oneshot(const T *in, T *out, u64 n, struct os_peers p, int me, int np,\n"
    "                                                                  u64 *counter, const char *mine, u64 half, u64 timeout) {\n"
    "  OS_ARRIVE(0)\n"
    "  if (vec)\n"
    "    for (u64 u = lo + threadIdx.x; u < hi; u += blockDim.x) {\n"
    "      union os_vec v[8], r;\n"
    "#pragma unroll\n"
    "      for (int j = 0; j < 8; j++)\n"
    "        if (j < np) v[j].q = ((const uint4 *)(slots + j * half))[u];  /* every slot's load issued before any is used */\n"
    "#pragma unroll\n"
    "      for (int k = 0; k < (int)VE; k++) {\n"
    "        ACC a = LD(v[0].e[k]);\n"
    "#pragma unroll\n"
    "        for (int j = 1; j < 8; j++)\n"
    "          if (j < np) a = RED(a, LD(v[j].e[k]));\n"
    "        r.e[k] = ST(FIN(a, np));\n"
    "      }\n"
    "      ((uint4 *)out)[u] = r.q;\n"
    "    }\n"
    "  else\n"
    "    for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) {\n"
    "      ACC a = LD(((const T *)slots)[i]);\n"
    "      for (int j = 1; j < np; j++) a = RED(a, LD(((const T *)(slots + j * half))[i]));\n"
    "      out[i] = ST(FIN(a, np));\n"
    "    }\n"
    "  OS_LEAVE\n"
    "}\n"
    /* all_gather along an axis: the operand is [outer][block], the result [outer][np][block]. */
    "extern \"C\" __global__ void __launch_bounds__(512) rill_oneshot_gather(const T *in, T *out, u64 n, struct os_peers p, int me, int np,\n"
    "                                                                         u64 *counter, const char *mine, u64 half, u64 timeout, u64 block) {\n"
    "  OS_ARRIVE(block * sizeof(T))\n"
    "  if (vec) {\n"
    "    u64 ub = block * sizeof(T) / 16;\n"
    "    for (int j = 0; j < np; j++)\n"
    "      for (u64 u = lo + threadIdx.x; u < hi; u += blockDim.x)\n"
    "        ((uint4 *)out)[(u / ub * np + j) * ub + u % ub] = ((const uint4 *)(slots + j * half))[u];\n"
    "  } else\n"
    "    for (int j = 0; j < np; j++)\n"
    "      for (u64 i = lo + threadIdx.x; i < hi; i += blockDim.x) out[((i / block) * np + j) * block + i % block] = ((const T *)(slots + j * half))[i];\n"
    "  OS_LEAVE\n"
    "}\n";

/* The macros for dtype d and reduction red (per-step rounding as the cpu devices do). */
static void os_macros(rill_dtype_t d, int red, char *buf, size_t n) {
  const char *T = "float", *ACC = "float", *LD = "(x)", *ST = "(a)";
  bool isint = false;
  switch (d) {
    case RILL_F16: T = "u16"; LD = "h2f(x)"; ST = "f2h(a)"; break;
    case RILL_BF16: T = "u16"; LD = "b2f(x)"; ST = "f2b(a)"; break;
    case RILL_F32: break;
    case RILL_F64: T = ACC = "double"; break;
    case RILL_I8: T = "signed char"; ACC = "int"; LD = "((int)(x))"; ST = "((signed char)(a))"; isint = true; break;
    case RILL_U8: case RILL_BOOL: T = "u8"; ACC = "unsigned"; LD = "((unsigned)(x))"; ST = "((u8)(a))"; isint = true; break;
    case RILL_I32: T = ACC = "int"; isint = true; break;
    case RILL_I64: T = ACC = "long long"; isint = true; break;
    default: break;
  }
  const char *step;
  if (d == RILL_BOOL) step = red == OPS_RED_MIN ? "((a) && (b) ? 1u : 0u)" : "((a) || (b) ? 1u : 0u)";
  else if (red == OPS_RED_MAX) step = "((a) != (a) || (a) > (b) ? (a) : (b))";
  else if (red == OPS_RED_MIN) step = "((a) != (a) || (a) < (b) ? (a) : (b))";
  else if (isint) step = d == RILL_I64 ? "((long long)((u64)(a) + (u64)(b)))" : "((ACC)((unsigned)(a) + (unsigned)(b)))";
  else step = "((a) + (b))";
  /* f16, bf16 and the narrow integers round (wrap) each step to the dtype, as the cpu devices. */
  bool narrow = d == RILL_F16 || d == RILL_BF16 || d == RILL_I8 || d == RILL_U8;
  snprintf(buf, n,
           "#define T %s\n#define ACC %s\n#define LD(x) %s\n#define ST(a) %s\n#define STEP(a, b) %s\n"
           "#define RED(a, b) (%s)\n#define FIN(a, n) (%s)\n",
           T, ACC, LD, ST, step, narrow ? (d == RILL_F16 ? "h2f(f2h(STEP(a, b)))" : d == RILL_BF16 ? "b2f(f2b(STEP(a, b)))" : "LD(ST(STEP(a, b)))") : "STEP(a, b)",
           red == OPS_RED_AVG ? (isint ? "(ACC)((a) / (ACC)(n))" : "((a) / (ACC)(n))") : "(a)");
}

rill_status_t vm_oneshot_source(rill_dtype_t d, int red, char *buf, size_t n) {
  char mac[1024];
  os_macros(d, red, mac, sizeof mac);
  int k = snprintf(buf, n, "%s%s%s", OS_SRC_HEAD, mac, OS_SRC_BODY);
  return k < 0 || (size_t)k >= n ? rill__status(RILL_INTERNAL, "one-shot source too long") : NULL;
}

typedef struct oneshot {
  int n;                       /* participants */
  size_t max;                  /* bytes per GPU */
  /* this process's participants' memory: n of them (devices), or one (ranks: index 0) */
  CUdeviceptr stage[OS_MAX_PEERS], flags[OS_MAX_PEERS], counter[OS_MAX_PEERS];
  /* every participant's staging buffer and flags as this process addresses them */
  CUdeviceptr peer_stage[OS_MAX_PEERS], peer_flags[OS_MAX_PEERS];
  bool opened[OS_MAX_PEERS];   /* ranks: peer_* from cuIpcOpenMemHandle (closed at the end) */
  struct {
    rill_dtype_t d;
    int red;
    void *fn[OS_MAX_PEERS];
  } fns[16];
  int nfns;
} oneshot_t;

/* A participant's receive buffer: a slot of `max` bytes per participant, twice (by the launch's parity). */
static size_t os_stage_bytes(const oneshot_t *o) { return 2 * (size_t)o->n * o->max; }

/* ---- the communicator ---- */
typedef struct pending {
  CUevent ev;
  double t0;
} pending_t;

typedef struct nccl_comm {
  vm_comm_t base;
  const rill_allocator_t *a;
  const rill_cuda_api_t *api;
  ncclComm_t comm[ISA_MAX_DEVICES];
  int ncomm;
  int device;                  /* ranks: the object's device this process's participant is on */
  vm_transport_t t;            /* ranks: the job */
  bool ranks;
  double timeout_s;
  oneshot_t *os;               /* devices: where every pair has P2P (NULL otherwise) */
  /* ranks: the watchdog */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t wd;
  bool wd_on, stop;
  pending_t pend[256];
  int phead, plen;
  char dead[256];              /* why the communicator was aborted ("" while it is not) */
  vm_event_t *pev[OPS_P2P_GROUP_MAX]; /* ranks: an exchange's streams joined */
} nccl_comm_t;

static void os_free(nccl_comm_t *c);

static rill_status_t wait_comm(nccl_comm_t *c, ncclComm_t comm, const char *what) {
  double t0 = now_s();
  for (;;) {
    ncclResult_t r = ncclSuccess;
    rill_status_t st = NC(ncclCommGetAsyncError, comm, &r);
    if (st) return st;
    if (r == ncclSuccess) return NULL;
    if (r != ncclInProgress) return rill__status(RILL_RUNTIME_ERROR, "%s: %s", what, n_err(r));
    if (now_s() - t0 > c->timeout_s)
      return rill__status(RILL_RUNTIME_ERROR, "%s did not complete within %g s (a rank that did not arrive, or did not answer)", what, c->timeout_s);
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

/* Aborts the communicator and the job (the watchdog, or a failed call). */
static void kill_comm(nccl_comm_t *c, const char *why) {
  pthread_mutex_lock(&c->mu);
  bool first = !c->dead[0];
  if (first) snprintf(c->dead, sizeof c->dead, "%s", why);
  pthread_mutex_unlock(&c->mu);
  if (!first) return;
  for (int i = 0; i < c->ncomm; i++)
    if (c->comm[i]) N.ncclCommAbort(c->comm[i]);
  if (c->ranks && c->t.abort) c->t.abort(c->t.ctx, why);
}

static void *watchdog(void *arg) {
  nccl_comm_t *c = arg;
  int ord;
  void *unused;
  rill_status_free(c->base.dev->ops->native_device(c->base.dev, c->device, &ord, NULL, NULL, &unused));
  pthread_mutex_lock(&c->mu);
  while (!c->stop) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += 5000000;
    if (dl.tv_nsec >= 1000000000) dl.tv_sec++, dl.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&c->cv, &c->mu, &dl);
    if (c->stop || c->dead[0]) continue;
    char why[256] = "";
    while (c->plen) {
      pending_t *p = &c->pend[c->phead];
      CUresult q = c->api->cuEventQuery(p->ev);
      if (q == CUDA_ERROR_NOT_READY) {
        if (now_s() - p->t0 > c->timeout_s)
          snprintf(why, sizeof why, "rank %d: a collective did not complete within %g s (a rank died or stopped answering)", c->t.rank, c->timeout_s);
        break;
      }
      c->api->cuEventDestroy(p->ev);
      c->phead = (c->phead + 1) % (int)RILL_ARRAY_LEN(c->pend);
      c->plen--;
    }
    ncclResult_t r = ncclSuccess;
    if (!why[0] && N.ncclCommGetAsyncError(c->comm[0], &r) == ncclSuccess && r != ncclSuccess && r != ncclInProgress)
      snprintf(why, sizeof why, "rank %d: NCCL: %s", c->t.rank, n_err(r));
    if (why[0]) {
      pthread_mutex_unlock(&c->mu);
      kill_comm(c, why);
      pthread_mutex_lock(&c->mu);
    }
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* Ranks: an event after the collective on stream s (not while capturing) for the watchdog. */
static rill_status_t watch(nccl_comm_t *c, CUstream s) {
  CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
  RILL_TRY(CU(c->api, cuStreamIsCapturing, s, &cs));
  if (cs != CU_STREAM_CAPTURE_STATUS_NONE) return NULL;
  CUevent ev;
  RILL_TRY(CU(c->api, cuEventCreate, &ev, CU_EVENT_DISABLE_TIMING));
  rill_status_t st = CU(c->api, cuEventRecord, ev, s);
  pthread_mutex_lock(&c->mu);
  if (!st && c->plen == (int)RILL_ARRAY_LEN(c->pend)) { /* the oldest is past watching: drop it */
    c->api->cuEventDestroy(c->pend[c->phead].ev);
    c->phead = (c->phead + 1) % (int)RILL_ARRAY_LEN(c->pend);
    c->plen--;
  }
  if (!st) {
    c->pend[(c->phead + c->plen) % (int)RILL_ARRAY_LEN(c->pend)] = (pending_t){ev, now_s()};
    c->plen++;
  } else {
    c->api->cuEventDestroy(ev);
  }
  pthread_mutex_unlock(&c->mu);
  return st;
}

static rill_status_t one_call(nccl_comm_t *c, ncclComm_t comm, const vm_coll_t *op, const void *in, void *out, CUstream s) {
  ncclDataType_t t = ncclUint8;
  RILL_TRY(n_type(op->dtype, &t));
  int n = c->base.nranks * c->base.nlocal;
  size_t es = rill__dtypes[op->dtype].size, blk = op->block * es;
  const uint8_t *x = in;
  uint8_t *y = out;
  switch (op->kind) {
    case OPS_COLL_ALL_REDUCE: return NC(ncclAllReduce, in, out, op->count, t, n_op(op), comm, s);
    case OPS_COLL_BROADCAST: return NC(ncclBroadcast, in, out, op->count, t, op->root, comm, s);
    /* Along an axis: one call per row of the dims before it (outer), where
     * the participants' blocks are contiguous, all in the caller's group. */
    case OPS_COLL_ALL_GATHER:
      for (size_t o = 0; o < op->outer; o++) RILL_TRY(NC(ncclAllGather, x + o * blk, y + o * (size_t)n * blk, op->block, t, comm, s));
      return NULL;
    case OPS_COLL_REDUCE_SCATTER:
      for (size_t o = 0; o < op->outer; o++)
        RILL_TRY(NC(ncclReduceScatter, x + o * (size_t)n * blk, y + o * blk, op->block, t, n_op(op), comm, s));
      return NULL;
    default: return rill__status(RILL_INTERNAL, "collective kind %d", op->kind);
  }
}

static rill_status_t check_op(const vm_coll_t *op) {
  if ((op->kind == OPS_COLL_ALL_GATHER || op->kind == OPS_COLL_REDUCE_SCATTER) && op->outer > OS_MAX_ROWS)
    return rill__status(RILL_UNIMPLEMENTED,
                        "%s over GPUs along an axis with %zu rows before it: one NCCL call a row, at most %d; transpose the axis forward first",
                        op->kind == OPS_COLL_ALL_GATHER ? "all_gather" : "reduce_scatter", op->outer, OS_MAX_ROWS);
  if (op->dtype == RILL_BOOL && op->red == OPS_RED_AVG) return rill__status(RILL_INVALID_ARGUMENT, "avg of bool");
  return NULL;
}

/* The participants this process launches (every GPU of a device communicator; a rank's one), and local participant k's device. */
static int os_local(const nccl_comm_t *c) { return c->ranks ? 1 : c->os->n; }
static int os_device(const nccl_comm_t *c, int k) { return c->ranks ? c->device : k; }

/* The kernels for dtype d: the all-reduce by red, or (red -1) the all-gather. */
static rill_status_t os_fn(nccl_comm_t *c, rill_dtype_t d, int red, void **fns) {
  oneshot_t *o = c->os;
  for (int i = 0; i < o->nfns; i++)
    if (o->fns[i].d == d && o->fns[i].red == red) {
      memcpy(fns, o->fns[i].fn, sizeof(void *) * (size_t)o->n);
      return NULL;
    }
  char src[8192];
  RILL_TRY(vm_oneshot_source(d, red < 0 ? OPS_RED_SUM : red, src, sizeof src));
  for (int k = 0; k < os_local(c); k++) {
    int ord;
    RILL_TRY(c->base.dev->ops->native_device(c->base.dev, os_device(c, k), &ord, src, red < 0 ? "rill_oneshot_gather" : "rill_oneshot", &fns[k]));
  }
  if (o->nfns < (int)RILL_ARRAY_LEN(o->fns)) {
    o->fns[o->nfns].d = d;
    o->fns[o->nfns].red = red;
    memcpy(o->fns[o->nfns].fn, fns, sizeof(void *) * (size_t)o->n);
    o->nfns++;
  }
  return NULL;
}

static rill_status_t os_run(nccl_comm_t *c, const vm_coll_t *op, void *const *in, void *const *out, CUstream *s) {
  oneshot_t *o = c->os;
  void *fns[OS_MAX_PEERS];
  bool gather = op->kind == OPS_COLL_ALL_GATHER;
  RILL_TRY(os_fn(c, op->dtype, gather ? -1 : op->red, fns));
  struct {
    const char *buf[8];
    unsigned long long *flags[8];
  } peers;
  memset(&peers, 0, sizeof peers);
  for (int k = 0; k < o->n; k++) {
    peers.buf[k] = (const char *)(uintptr_t)o->peer_stage[k];
    peers.flags[k] = (unsigned long long *)(uintptr_t)o->peer_flags[k];
  }
  unsigned long long n = op->count, half = o->max, block = op->block, timeout = (unsigned long long)(c->timeout_s * 1e9);
  size_t es = rill__dtypes[op->dtype].size;
  unsigned blocks = (unsigned)((n * es + 8191) / 8192);
  if (blocks < 1) blocks = 1;
  if (blocks > OS_MAX_BLOCKS) blocks = OS_MAX_BLOCKS;
  int np = o->n;
  for (int k = 0; k < os_local(c); k++) {
    int ord;
    void *unused;
    RILL_TRY(c->base.dev->ops->native_device(c->base.dev, os_device(c, k), &ord, NULL, NULL, &unused));
    const void *inp = in[k];
    void *outp = out[k];
    unsigned long long *counter = (unsigned long long *)(uintptr_t)o->counter[k];
    char *mine = (char *)(uintptr_t)o->stage[k];
    int me = c->ranks ? c->base.rank : k;
    void *args[] = {&inp, &outp, &n, &peers, &me, &np, &counter, &mine, &half, &timeout, &block}; /* (block: the gather's only) */
    RILL_TRY(CU(c->api, cuLaunchKernel, (CUfunction)fns[k], blocks, 1, 1, OS_THREADS, 1, 1, 0, s[k], args, NULL));
  }
  return NULL;
}

/* A status once the communicator was aborted. */
static rill_status_t dead_status(nccl_comm_t *c) {
  pthread_mutex_lock(&c->mu);
  rill_status_t st = c->dead[0] ? rill__status(RILL_RUNTIME_ERROR, "the communicator was aborted: %s", c->dead) : NULL;
  pthread_mutex_unlock(&c->mu);
  return st;
}

static rill_status_t n_run(vm_comm_t *cm, const vm_coll_t *op, void *const *in, void *const *out, const int *streams, vm_obj_t *const *keep,
                           uint32_t nkeep) {
  nccl_comm_t *c = (nccl_comm_t *)cm;
  for (uint32_t i = 0; i < nkeep; i++) cm->dev->release(keep[i]); /* (the cuda device's VM keeps operands until the run's end) */
  RILL_TRY(check_op(op));
  RILL_TRY(dead_status(c));
  CUstream s[ISA_MAX_DEVICES];
  for (int i = 0; i < cm->nlocal; i++) {
    int k;
    s[i] = cm->dev->ops->native_stream(cm->dev, streams[i], &k);
    if (!c->ranks && k != i)
      return rill__status(RILL_INTERNAL, "collective part %d on a stream of device %d", i, k);
  }
  if (c->os && (op->kind == OPS_COLL_ALL_REDUCE || op->kind == OPS_COLL_ALL_GATHER) && vm_coll_in_bytes(op) <= c->os->max) {
    rill_status_t st = os_run(c, op, in, out, s);
    if (!st && c->ranks) st = watch(c, s[0]); /* a rank that never arrives: the watchdog's timeout ends the job */
    if (st && c->ranks) kill_comm(c, rill_status_message(st));
    return st;
  }
  rill_status_t st = NC(ncclGroupStart);
  for (int i = 0; !st && i < c->ncomm; i++) st = one_call(c, c->comm[i], op, in[i], out[i], s[i]);
  rill_status_t st2 = NC(ncclGroupEnd);
  if (!st) st = st2;
  else rill_status_free(st2);
  if (!st && c->ranks) st = wait_comm(c, c->comm[0], "enqueueing a collective");
  if (!st && c->ranks) st = watch(c, s[0]);
  if (st && c->ranks) kill_comm(c, rill_status_message(st));
  return st;
}

/* Ranks: one exchange of sends and recvs (comm.h). */
static rill_status_t n_p2p(vm_comm_t *cm, const vm_coll_t *ops, int n, void *const *bufs, const int *streams, vm_obj_t *const *keep,
                           uint32_t nkeep) {
  nccl_comm_t *c = (nccl_comm_t *)cm;
  vm_device_t *d = cm->dev;
  const vm_device_ops_t *D = d->ops;
  for (uint32_t i = 0; i < nkeep; i++) d->release(keep[i]); /* (the cuda device's VM keeps operands until the run's end) */
  if (!c->ranks) return rill__status(RILL_INTERNAL, "send/recv on the communicator of a VM's GPUs");
  if (!c->t.send || !c->t.recv) return rill__status(RILL_UNAVAILABLE, "send/recv: the job's transport has no point-to-point calls");
  RILL_TRY(dead_status(c));
  /* The types: every send's header, then every recv's awaited (the sends
   * do not wait, so a ring's headers meet). */
  rill_status_t st = NULL;
  uint8_t hdr[VM_P2P_HDR];
  for (int i = 0; !st && i < n; i++) {
    if (ops[i].kind != OPS_COLL_SEND) continue;
    vm_p2p_header(&ops[i], c->t.rank, hdr);
    st = c->t.send(c->t.ctx, ops[i].peer, hdr, sizeof hdr);
    if (st) st = rill__status_prefix(st, "send from rank %d to rank %d: ", c->t.rank, ops[i].peer);
  }
  for (int i = 0; !st && i < n; i++) {
    if (ops[i].kind != OPS_COLL_RECV) continue;
    size_t got = 0;
    st = c->t.recv(c->t.ctx, ops[i].peer, hdr, sizeof hdr, &got);
    if (st) st = rill__status_prefix(st, "recv on rank %d from rank %d: ", c->t.rank, ops[i].peer);
    else st = vm_p2p_check(&ops[i], c->t.rank, hdr, got, false);
  }
  if (st) {
    kill_comm(c, rill_status_message(st));
    return st;
  }
  for (int i = 0; !st && i < n; i++)
    if (!c->pev[i]) st = D->event_create(d, &c->pev[i]);
  bool joined = false;
  for (int i = 1; !st && i < n; i++) {
    bool seen = streams[i] == streams[0];
    for (int k = 1; k < i && !seen; k++) seen = streams[k] == streams[i];
    if (seen) continue;
    joined = true;
    st = D->event_record(d, c->pev[i], streams[i]);
    if (!st) st = D->stream_wait(d, streams[0], c->pev[i]);
  }
  int k;
  CUstream s0 = st ? NULL : D->native_stream(d, streams[0], &k);
  bool grouped = false;
  if (!st) st = NC(ncclGroupStart);
  grouped = !st;
  for (int i = 0; !st && i < n; i++) {
    ncclDataType_t t = ncclUint8;
    st = n_type(ops[i].dtype, &t);
    if (!st && ops[i].kind == OPS_COLL_SEND) st = NC(ncclSend, bufs[i], ops[i].count, t, ops[i].peer, c->comm[0], s0);
    else if (!st) st = NC(ncclRecv, bufs[i], ops[i].count, t, ops[i].peer, c->comm[0], s0);
  }
  if (grouped) {
    rill_status_t st2 = NC(ncclGroupEnd);
    if (!st) st = st2;
    else rill_status_free(st2);
  }
  if (!st) st = wait_comm(c, c->comm[0], "enqueueing sends and recvs");
  if (!st) st = watch(c, s0);
  if (!st && joined) st = D->event_record(d, c->pev[0], streams[0]);
  for (int i = 1; !st && joined && i < n; i++) {
    bool seen = streams[i] == streams[0];
    for (int q = 1; q < i && !seen; q++) seen = streams[q] == streams[i];
    if (!seen) st = D->stream_wait(d, streams[i], c->pev[0]);
  }
  if (st) kill_comm(c, rill_status_message(st));
  return st;
}

static void n_abort(vm_comm_t *cm, const char *why) { kill_comm((nccl_comm_t *)cm, why); }

static void n_destroy(vm_comm_t *cm) {
  nccl_comm_t *c = (nccl_comm_t *)cm;
  if (c->wd_on) {
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->wd, NULL);
  }
  for (int i = 0; i < c->plen; i++) c->api->cuEventDestroy(c->pend[(c->phead + i) % (int)RILL_ARRAY_LEN(c->pend)].ev);
  for (int i = 0; i < OPS_P2P_GROUP_MAX; i++)
    if (c->pev[i]) cm->dev->ops->event_destroy(cm->dev, c->pev[i]);
  /* a dead communicator's comms were aborted (and freed) by kill_comm: a second abort was a double free */
  for (int i = 0; i < c->ncomm && !c->dead[0]; i++)
    if (c->comm[i]) N.ncclCommDestroy(c->comm[i]);
  if (c->os) os_free(c);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  rill__free(c->a, c);
}

static void os_free(nccl_comm_t *c) {
  vm_comm_t *cm = &c->base;
  if (c->os) {
    for (int k = 0; k < c->os->n; k++)
      if (c->os->opened[k]) {
        int ord;
        void *unused;
        rill_status_free(cm->dev->ops->native_device(cm->dev, os_device(c, 0), &ord, NULL, NULL, &unused));
        c->api->cuIpcCloseMemHandle(c->os->peer_stage[k]);
        c->api->cuIpcCloseMemHandle(c->os->peer_flags[k]);
      }
    for (int k = 0; k < os_local(c); k++) {
      int ord;
      void *unused;
      rill_status_free(cm->dev->ops->native_device(cm->dev, os_device(c, k), &ord, NULL, NULL, &unused));
      if (c->os->stage[k]) c->api->cuMemFree(c->os->stage[k]);
      if (c->os->flags[k]) c->api->cuMemFree(c->os->flags[k]);
      if (c->os->counter[k]) c->api->cuMemFree(c->os->counter[k]);
    }
    rill__free(c->a, c->os);
    c->os = NULL;
  }
}

static const vm_comm_ops_t NCCL_OPS = {n_run, n_abort, n_destroy, n_p2p};

static rill_status_t n_new(const rill_allocator_t *a, vm_device_t *dev, nccl_comm_t **out) {
  RILL_TRY(n_ready());
  const char *why = NULL;
  const rill_cuda_api_t *api = rill_cuda_api(&why);
  if (!api) return rill__status(RILL_UNAVAILABLE, "collectives over GPUs: %s", why);
  if (!dev->ops->native_stream || !dev->ops->native_device) return rill__status(RILL_UNAVAILABLE, "collectives: the %s device has no GPU streams", dev->ops->name);
  nccl_comm_t *c = rill__calloc(a, 1, sizeof *c);
  if (!c) return rill__oom();
  c->a = a;
  c->api = api;
  c->base.ops = &NCCL_OPS;
  c->base.dev = dev;
  c->base.nlocal = 1;
  c->base.nranks = 1;
  c->timeout_s = 300;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  *out = c;
  return NULL;
}

/* One-shot's buffers where every pair of the n GPUs has P2P access (else c->os stays NULL). */
static rill_status_t os_setup(nccl_comm_t *c, const int *ord, int n, size_t max) {
  const rill_cuda_api_t *api = c->api;
  vm_device_t *dev = c->base.dev;
  if (max == 0 || n < 2 || n > OS_MAX_PEERS) return NULL;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      int can = 0;
      CUdevice di, dj;
      if (i == j) continue;
      if (api->cuDeviceGet(&di, ord[i]) || api->cuDeviceGet(&dj, ord[j]) || api->cuDeviceCanAccessPeer(&can, di, dj) || !can) return NULL;
    }
  CUcontext ctx[OS_MAX_PEERS];
  for (int i = 0; i < n; i++) {
    CUdevice di;
    RILL_TRY(CU(api, cuDeviceGet, &di, ord[i]));
    RILL_TRY(CU(api, cuDevicePrimaryCtxRetain, &ctx[i], di));
    api->cuDevicePrimaryCtxRelease(di); /* the VM's device holds it too */
  }
  for (int i = 0; i < n; i++) {
    RILL_TRY(CU(api, cuCtxSetCurrent, ctx[i]));
    for (int j = 0; j < n; j++) {
      if (i == j) continue;
      CUresult r = api->cuCtxEnablePeerAccess(ctx[j], 0);
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) return NULL;
    }
  }
  oneshot_t *o = rill__calloc(c->a, 1, sizeof *o);
  if (!o) return rill__oom();
  o->n = n;
  o->max = (max + 255) & ~(size_t)255;
  c->os = o;
  for (int k = 0; k < n; k++) {
    int unused_ord;
    void *unused;
    RILL_TRY(dev->ops->native_device(dev, k, &unused_ord, NULL, NULL, &unused));
    RILL_TRY(CU(api, cuMemAlloc, &o->stage[k], os_stage_bytes(o)));
    RILL_TRY(CU(api, cuMemAlloc, &o->flags[k], sizeof(uint64_t) * OS_MAX_BLOCKS * 8));
    RILL_TRY(CU(api, cuMemAlloc, &o->counter[k], sizeof(uint64_t) * OS_MAX_BLOCKS));
    RILL_TRY(CU(api, cuMemsetD8, o->flags[k], 0, sizeof(uint64_t) * OS_MAX_BLOCKS * 8));
    RILL_TRY(CU(api, cuMemsetD8, o->counter[k], 0, sizeof(uint64_t) * OS_MAX_BLOCKS));
    o->peer_stage[k] = o->stage[k];
    o->peer_flags[k] = o->flags[k];
  }
  return NULL;
}

rill_status_t vm_comm_nccl_devices(const rill_allocator_t *a, vm_device_t *dev, int n, size_t oneshot_max, vm_comm_t **out) {
  if (n < 1 || n > dev->ndevices) return rill__status(RILL_INVALID_ARGUMENT, "a collective over %d devices in a VM of %d", n, dev->ndevices);
  nccl_comm_t *c;
  RILL_TRY(n_new(a, dev, &c));
  c->base.nlocal = n;
  c->ncomm = n;
  int ord[ISA_MAX_DEVICES];
  rill_status_t st = NULL;
  for (int k = 0; !st && k < n; k++) {
    void *unused;
    st = dev->ops->native_device(dev, k, &ord[k], NULL, NULL, &unused);
  }
  if (!st) st = NC(ncclCommInitAll, c->comm, n, ord);
  if (!st) st = os_setup(c, ord, n, oneshot_max);
  if (!st && c->os) {
    /* Every GPU's one-shot memory is set before any kernel reads a peer's. */
    for (int k = 0; !st && k < n; k++) {
      int o;
      void *unused;
      st = dev->ops->native_device(dev, k, &o, NULL, NULL, &unused);
      if (!st) st = CU(c->api, cuStreamSynchronize, (CUstream)0); /* (cuMemsetD8 runs on the legacy stream) */
    }
  }
  if (st) {
    n_destroy(&c->base);
    return rill__status_prefix(st, "a communicator over %d GPUs: ", n);
  }
  *out = &c->base;
  return NULL;
}

/* What each rank tells the others of its one-shot memory. */
typedef struct os_card {
  char host[64];
  int64_t pid;
  int32_t ordinal, ok;
  uint64_t stage, flags;       /* the pointers, for ranks in the same process */
  CUipcMemHandle hstage, hflags;
} os_card_t;

/* One-shot over the job's ranks (see the head of the file): c->os is set
 * only where every rank can use it. A failure that every rank meets alike
 * (no P2P, another host) leaves NCCL to do the work; a transport failure
 * is a status. */
static rill_status_t os_setup_ranks(nccl_comm_t *c, size_t max) {
  const rill_cuda_api_t *api = c->api;
  vm_transport_t *t = &c->t;
  int n = t->nranks;
  if (max == 0 || n < 2 || n > OS_MAX_PEERS) return NULL;
  oneshot_t *o = rill__calloc(c->a, 1, sizeof *o);
  os_card_t *cards = rill__calloc(c->a, (size_t)n, sizeof *cards);
  if (!o || !cards) {
    rill__free(c->a, o);
    rill__free(c->a, cards);
    return rill__oom();
  }
  o->n = n;
  o->max = (max + 255) & ~(size_t)255;
  c->os = o;
  os_card_t me;
  memset(&me, 0, sizeof me);
  if (gethostname(me.host, sizeof me.host - 1)) me.host[0] = 0;
  me.pid = (int64_t)getpid();
  void *unused;
  int ord = -1;
  rill_status_t st = c->base.dev->ops->native_device(c->base.dev, c->device, &ord, NULL, NULL, &unused);
  me.ordinal = ord;
  /* Quiet calls: a machine where this cannot work is not an error. */
  bool ok = !st && !api->cuMemAlloc(&o->stage[0], os_stage_bytes(o)) && !api->cuMemAlloc(&o->flags[0], sizeof(uint64_t) * OS_MAX_BLOCKS * 8) &&
            !api->cuMemAlloc(&o->counter[0], sizeof(uint64_t) * OS_MAX_BLOCKS) &&
            !api->cuMemsetD8(o->flags[0], 0, sizeof(uint64_t) * OS_MAX_BLOCKS * 8) &&
            !api->cuMemsetD8(o->counter[0], 0, sizeof(uint64_t) * OS_MAX_BLOCKS) && !api->cuStreamSynchronize((CUstream)0) &&
            !api->cuIpcGetMemHandle(&me.hstage, o->stage[0]) && !api->cuIpcGetMemHandle(&me.hflags, o->flags[0]);
  rill_status_free(st);
  me.ok = ok;
  me.stage = o->stage[0];
  me.flags = o->flags[0];
  st = t->allgather(t->ctx, &me, sizeof me, cards);
  for (int r = 0; !st && ok && r < n; r++) {
    ok = cards[r].ok && !strcmp(cards[r].host, me.host);
    if (!ok) break;
    if (r == t->rank) {
      o->peer_stage[r] = o->stage[0];
      o->peer_flags[r] = o->flags[0];
    } else if (cards[r].pid == me.pid) { /* ranks that are threads of this process: peer access */
      CUdevice d;
      CUcontext ctx;
      ok = !api->cuDeviceGet(&d, cards[r].ordinal) && !api->cuDevicePrimaryCtxRetain(&ctx, d);
      if (ok) {
        CUresult e = api->cuCtxEnablePeerAccess(ctx, 0);
        ok = e == CUDA_SUCCESS || e == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
        api->cuDevicePrimaryCtxRelease(d);
      }
      o->peer_stage[r] = cards[r].stage;
      o->peer_flags[r] = cards[r].flags;
    } else {
      ok = !api->cuIpcOpenMemHandle(&o->peer_stage[r], cards[r].hstage, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      if (ok && api->cuIpcOpenMemHandle(&o->peer_flags[r], cards[r].hflags, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) {
        api->cuIpcCloseMemHandle(o->peer_stage[r]);
        ok = false;
      }
      o->opened[r] = ok;
    }
  }
  /* Every rank agrees, or none uses it; this gather also orders every
   * rank's zeroed flags before any peer's first write into them. */
  int32_t mine = !st && ok, *all = rill__calloc(c->a, (size_t)n, sizeof *all);
  if (!st && !all) st = rill__oom();
  if (!st) st = t->allgather(t->ctx, &mine, sizeof mine, all);
  for (int r = 0; !st && r < n; r++) ok = ok && all[r];
  rill__free(c->a, all);
  rill__free(c->a, cards);
  if (st || !ok) os_free(c);
  return st;
}

rill_status_t vm_comm_nccl_ranks(const rill_allocator_t *a, vm_device_t *dev, int device, const vm_transport_t *t, double timeout_s,
                                 size_t oneshot_max, vm_comm_t **out) {
  nccl_comm_t *c;
  RILL_TRY(n_new(a, dev, &c));
  c->ranks = true;
  c->t = *t;
  c->device = device;
  c->timeout_s = timeout_s;
  c->base.rank = t->rank;
  c->base.nranks = t->nranks;
  c->ncomm = 1;
  ncclUniqueId id, *all = rill__alloc(a, sizeof(ncclUniqueId) * (size_t)t->nranks);
  rill_status_t st = all ? NULL : rill__oom();
  memset(&id, 0, sizeof id);
  if (!st && t->rank == 0) st = NC(ncclGetUniqueId, &id);
  /* Every rank gives its id (rank 0's is the one used): one allgather, the transport's timeout. */
  if (!st) st = t->allgather(t->ctx, &id, sizeof id, all);
  int ord;
  void *unused;
  if (!st) st = dev->ops->native_device(dev, device, &ord, NULL, NULL, &unused);
  if (!st) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    st = NC(ncclCommInitRankConfig, &c->comm[0], t->nranks, all[0], t->rank, &cfg);
    if (!st) st = wait_comm(c, c->comm[0], "setting up NCCL over the job's ranks");
  }
  rill__free(a, all);
  if (!st) st = os_setup_ranks(c, oneshot_max);
  if (!st) {
    c->wd_on = pthread_create(&c->wd, NULL, watchdog, c) == 0;
    if (!c->wd_on) st = rill__status(RILL_RUNTIME_ERROR, "cannot start the collectives' watchdog thread");
  }
  if (st) {
    snprintf(c->dead, sizeof c->dead, "%s", rill_status_message(st));
    if (c->comm[0]) N.ncclCommAbort(c->comm[0]); /* (a set-up in progress ends; n_destroy leaves a dead one's comms) */
    n_destroy(&c->base);
    return rill__status_prefix(st, "rank %d of %d: ", t->rank, t->nranks);
  }
  *out = &c->base;
  return NULL;
}
