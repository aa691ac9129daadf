/* cuda_api.c: loading the CUDA libraries and checking their calls. */
#include "cuda_api.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

static rill_cuda_api_t api;
static const char *api_why;
static char why_buf[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void *open_first(const char *const *names) {
  for (; *names; names++) {
    void *h = dlopen(*names, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
  }
  return NULL;
}

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void load(void) {
  double t0 = rill__now_us();
  static const char *cuda_names[] = {"libcuda.so.1", "libcuda.so", NULL};
  static const char *nvrtc_names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
  static const char *lt_names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", NULL};
  static const char *dnn_names[] = {"libcudnn.so.9", "libcudnn.so", NULL};
  if (!(api.libcuda = open_first(cuda_names))) {
    api_why = "no NVIDIA driver: libcuda.so.1 cannot be loaded";
    return;
  }
  get_proc_fn get_proc = (get_proc_fn)dlsym(api.libcuda, "cuGetProcAddress_v2");
  if (!get_proc) get_proc = (get_proc_fn)dlsym(api.libcuda, "cuGetProcAddress");
  if (!get_proc) {
    api_why = "the NVIDIA driver is too old: it has no cuGetProcAddress";
    return;
  }
#define X(name, args)                                                                                   \
  {                                                                                                     \
    CUdriverProcAddressQueryResult q;                                                                   \
    if (get_proc(#name, (void **)&api.name, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS || \
        !api.name) {                                                                                    \
      snprintf(why_buf, sizeof why_buf, "the NVIDIA driver lacks %s (it is older than CUDA %d.%d)", #name, \
               CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);                                          \
      api_why = why_buf;                                                                                \
      return;                                                                                           \
    }                                                                                                   \
  }
  RILL_CUDA_DRIVER_FUNCS(X)
#undef X
  CUresult r = api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *s = "unknown error";
    api.cuGetErrorString(r, &s);
    snprintf(why_buf, sizeof why_buf, "the NVIDIA driver failed to start (cuInit: %s)", s);
    api_why = why_buf;
    return;
  }
  int count = 0;
  if (api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    api_why = "the NVIDIA driver sees no CUDA device";
    return;
  }
  api.cuDriverGetVersion(&api.driver_version);
  rill__timing_since("cuda libraries/driver", t0);
#define OPEN_LIB(handle, names, what)                                                              \
  if (!(api.handle = open_first(names))) {                                                         \
    snprintf(why_buf, sizeof why_buf, "%s cannot be loaded (%s)", what, names[0]);                 \
    api_why = why_buf;                                                                             \
    return;                                                                                        \
  }
#define X(name, ret, args)                                                                         \
  if (!(api.name = (ret(*) args)dlsym(LIB, #name))) {                                              \
    snprintf(why_buf, sizeof why_buf, "a CUDA library lacks %s (too old?)", #name);                \
    api_why = why_buf;                                                                             \
    return;                                                                                        \
  }
  t0 = rill__now_us();
  OPEN_LIB(libnvrtc, nvrtc_names, "NVRTC")
#define LIB api.libnvrtc
  RILL_NVRTC_FUNCS(X)
#undef LIB
  rill__timing_since("cuda libraries/NVRTC", t0);
  t0 = rill__now_us();
  OPEN_LIB(libcublaslt, lt_names, "cuBLASLt")
#define LIB api.libcublaslt
  RILL_CUBLASLT_FUNCS(X)
#undef LIB
  rill__timing_since("cuda libraries/cuBLASLt", t0);
  t0 = rill__now_us();
  OPEN_LIB(libcudnn, dnn_names, "cuDNN")
#define LIB api.libcudnn
  RILL_CUDNN_FUNCS(X)
#undef LIB
  rill__timing_since("cuda libraries/cuDNN", t0);
#undef X
#undef OPEN_LIB
  api.nvrtcVersion(&api.nvrtc_major, &api.nvrtc_minor);
  api.cublaslt_version = api.cublasLtGetVersion();
  api.cudnn_version = api.cudnnGetVersion();
  api_why = NULL;
}

const rill_cuda_api_t *rill_cuda_api(const char **why) {
  pthread_once(&once, load);
  if (api_why) {
    if (why) *why = api_why;
    return NULL;
  }
  return &api;
}

/* ---- checks and fault injection ---- */
static atomic_long fail_countdown;

void rill_cuda_fail_at(long n) { atomic_store(&fail_countdown, n); }

bool rill__cuda_inject(void) {
  long v = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
  if (v <= 0) return false;
  return atomic_fetch_sub(&fail_countdown, 1) == 1;
}

static const char *base(const char *file) {
  const char *s = strrchr(file, '/');
  return s ? s + 1 : file;
}

rill_status_t rill__cu_check(CUresult r, const char *call, const char *file, int line) {
  if (r == CUDA_SUCCESS) return NULL;
  const char *name = "CUDA_ERROR", *msg = "unknown error";
  if (api.cuGetErrorName) api.cuGetErrorName(r, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(r, &msg);
  rill_code_t code = r == CUDA_ERROR_OUT_OF_MEMORY ? RILL_OUT_OF_MEMORY : RILL_RUNTIME_ERROR;
  return rill__status(code, "%s failed: %s (%s) at %s:%d", call, msg, name, base(file), line);
}

rill_status_t rill__nvrtc_check(nvrtcResult r, const char *call, const char *file, int line) {
  if (r == NVRTC_SUCCESS) return NULL;
  return rill__status(RILL_RUNTIME_ERROR, "%s failed: %s at %s:%d", call,
                      api.nvrtcGetErrorString ? api.nvrtcGetErrorString(r) : "NVRTC error", base(file), line);
}

rill_status_t rill__cublas_check(cublasStatus_t r, const char *call, const char *file, int line) {
  if (r == CUBLAS_STATUS_SUCCESS) return NULL;
  return rill__status(r == CUBLAS_STATUS_ALLOC_FAILED ? RILL_OUT_OF_MEMORY : RILL_RUNTIME_ERROR, "%s failed: %s at %s:%d",
                      call, api.cublasLtGetStatusString ? api.cublasLtGetStatusString(r) : "cuBLAS error", base(file), line);
}

rill_status_t rill__cudnn_check(cudnnStatus_t r, const char *call, const char *file, int line) {
  if (r == CUDNN_STATUS_SUCCESS) return NULL;
  return rill__status(r == CUDNN_STATUS_ALLOC_FAILED ? RILL_OUT_OF_MEMORY : RILL_RUNTIME_ERROR, "%s failed: %s at %s:%d",
                      call, api.cudnnGetErrorString ? api.cudnnGetErrorString(r) : "cuDNN error", base(file), line);
}
