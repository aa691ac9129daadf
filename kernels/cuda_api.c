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

/* The driver's entry points and cuInit; NULL, or why CUDA is unusable. */
static const char *load_driver(void) {
  get_proc_fn get_proc = (get_proc_fn)dlsym(api.libcuda, "cuGetProcAddress_v2");
  if (!get_proc) get_proc = (get_proc_fn)dlsym(api.libcuda, "cuGetProcAddress");
  if (!get_proc) return "the NVIDIA driver is too old: it has no cuGetProcAddress";
#define X(name, args)                                                                                   \
  {                                                                                                     \
    CUdriverProcAddressQueryResult q;                                                                   \
    if (get_proc(#name, (void **)&api.name, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS || \
        !api.name) {                                                                                    \
      snprintf(why_buf, sizeof why_buf, "the NVIDIA driver lacks %s (it is older than CUDA %d.%d)", #name, \
               CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);                                          \
      return why_buf;                                                                                   \
    }                                                                                                   \
  }
  RILL_CUDA_DRIVER_FUNCS(X)
#undef X
  CUresult r = api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char *s = "unknown error";
    api.cuGetErrorString(r, &s);
    snprintf(why_buf, sizeof why_buf, "the NVIDIA driver failed to start (cuInit: %s)", s);
    return why_buf;
  }
  int count = 0;
  if (api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) return "the NVIDIA driver sees no CUDA device";
  api.cuDriverGetVersion(&api.driver_version);
  return NULL;
}

/* NVRTC, cuBLASLt and cuDNN, which do not need the driver started: opened
 * on a thread of their own while cuInit runs. Each library's time, and why
 * one could not be loaded (the first that could not; the later ones are
 * not tried). */
typedef struct libs {
  double ms[3]; /* NVRTC, cuBLASLt, cuDNN; < 0: not loaded */
  const char *why;
  char buf[512];
} libs_t;

static void *load_libs(void *arg) {
  libs_t *l = arg;
  static const char *nvrtc_names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL};
  static const char *lt_names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", NULL};
  static const char *dnn_names[] = {"libcudnn.so.9", "libcudnn.so", NULL};
  for (int i = 0; i < 3; i++) l->ms[i] = -1;
#define OPEN_LIB(handle, names, what)                                                              \
  if (!(api.handle = open_first(names))) {                                                         \
    snprintf(l->buf, sizeof l->buf, "%s cannot be loaded (%s)", what, names[0]);                   \
    l->why = l->buf;                                                                               \
    return NULL;                                                                                   \
  }
#define X(name, ret, args)                                                                         \
  if (!(api.name = (ret(*) args)dlsym(LIB, #name))) {                                              \
    snprintf(l->buf, sizeof l->buf, "a CUDA library lacks %s (too old?)", #name);                  \
    l->why = l->buf;                                                                               \
    return NULL;                                                                                   \
  }
  double t0 = rill__now_us();
  OPEN_LIB(libnvrtc, nvrtc_names, "NVRTC")
#define LIB api.libnvrtc
  RILL_NVRTC_FUNCS(X)
#undef LIB
  l->ms[0] = (rill__now_us() - t0) * 1e-3;
  t0 = rill__now_us();
  OPEN_LIB(libcublaslt, lt_names, "cuBLASLt")
#define LIB api.libcublaslt
  RILL_CUBLASLT_FUNCS(X)
#undef LIB
  l->ms[1] = (rill__now_us() - t0) * 1e-3;
  t0 = rill__now_us();
  OPEN_LIB(libcudnn, dnn_names, "cuDNN")
#define LIB api.libcudnn
  RILL_CUDNN_FUNCS(X)
#undef LIB
  l->ms[2] = (rill__now_us() - t0) * 1e-3;
#undef X
#undef OPEN_LIB
  return NULL;
}

/* The timings' parts: "cuda libraries/driver" (libcuda opened, its entry
 * points, cuInit), and, loaded beside it on another thread,
 * "cuda libraries/NVRTC", ".../cuBLASLt", ".../cuDNN"; "cuda
 * libraries/wait for the libs" is the time the driver's thread then
 * waited for them. So driver + wait is the whole, and the three libraries
 * overlap the driver. Where CUDA is unusable for several reasons, the
 * driver's is said first, then the libraries' in that order, as when they
 * were loaded one after another. */
static void load_all(void) {
  double t0 = rill__now_us();
  static const char *cuda_names[] = {"libcuda.so.1", "libcuda.so", NULL};
  if (!(api.libcuda = open_first(cuda_names))) {
    api_why = "no NVIDIA driver: libcuda.so.1 cannot be loaded"; /* (and the libraries not tried: no GPU here) */
    return;
  }
  libs_t libs = {0};
  pthread_t th;
  bool beside = pthread_create(&th, NULL, load_libs, &libs) == 0;
  const char *why = load_driver();
  if (!why) rill__timing_since("cuda libraries/driver", t0);
  if (beside) {
    double tw = rill__now_us();
    pthread_join(th, NULL);
    rill__timing_since("cuda libraries/wait for the libs", tw);
  } else if (!why) {
    load_libs(&libs); /* no thread to spare: one after the other */
  }
  if (why) {
    api_why = why;
    return;
  }
  static const char *const names[3] = {"cuda libraries/NVRTC", "cuda libraries/cuBLASLt", "cuda libraries/cuDNN"};
  for (int i = 0; i < 3; i++)
    if (libs.ms[i] >= 0) rill__timing_add(names[i], libs.ms[i]);
  if (libs.why) {
    snprintf(why_buf, sizeof why_buf, "%s", libs.why);
    api_why = why_buf;
    return;
  }
  api.nvrtcVersion(&api.nvrtc_major, &api.nvrtc_minor);
  api.cublaslt_version = api.cublasLtGetVersion();
  api.cudnn_version = api.cudnnGetVersion();
  api_why = NULL;
}

/* Runs once, on the thread that first asks for the libraries:
 * "cuda libraries" of the start-up (under "background/" where that thread
 * is a device's background start, vm/device_cuda_start.c). */
static _Thread_local bool loaded_here;
static atomic_bool loaded;

static void load(void) {
  double t0 = rill__now_us();
  loaded_here = true;
  load_all();
  rill__timing_since("cuda libraries", t0);
  atomic_store_explicit(&loaded, true, memory_order_release);
}

/* A thread that finds another loading the libraries waits for it: "wait
 * for the cuda libraries" of the start-up (a foreground thread's, where a
 * background start loads them). */
const rill_cuda_api_t *rill_cuda_api(const char **why) {
  if (!atomic_load_explicit(&loaded, memory_order_acquire)) {
    double t0 = rill__now_us();
    pthread_once(&once, load);
    if (!loaded_here) rill__timing_since("wait for the cuda libraries", t0);
  }
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
