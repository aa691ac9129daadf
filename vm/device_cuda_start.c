/* device_cuda_start.c: a GPU's start-up begun in the background.
 *
 * rill_device_start (rill.h) lets a program load the CUDA libraries and
 * make a GPU's primary context while it does host-only work (the `rill`
 * command: importing and assembling the model), so that rill_vm_create
 * later finds both done. One thread per GPU: it loads the libraries (once
 * per process, kernels/cuda_api.c; a second GPU's thread waits for the
 * first's load) and retains the GPU's primary context. Making the device
 * (vm_device_cuda_create) waits for that thread, retains the context
 * itself (cheap: it exists), and only then lets go of the thread's retain
 * (vm_cuda_start_end), so the context is never destroyed and made again in
 * between. rill_device_usable ends the starts of a device it finds
 * unusable (they hold nothing). A start that nothing ends is joined and
 * released at exit (atexit), so a program may start a GPU and never use it.
 *
 * The thread calls the driver directly, not through CU (cuda_api.h), so
 * that rill_cuda_fail_at's count of checked calls stays the VM's own.
 * Timings: the thread's parts go under "background/" (rill.h, "Start-up
 * timings"); the wait in the VM's creation is "vm/device/wait for the start".
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "../isa/isa.h"
#include "../kernels/cuda_api.h"
#include "device.h"

/* One GPU's start; under mu. */
typedef struct gpu_start {
  bool begun;  /* a thread was started and no VM has taken its start over yet */
  bool done;   /* the thread has finished its work (then joined by the first to wait) */
  bool joined;
  bool held;   /* the thread retained the primary context and nobody has released it */
  CUdevice dev;
  pthread_t thread;
} gpu_start_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static gpu_start_t gpus[ISA_MAX_DEVICES];
/* The process that started threads (0: none yet): a child of fork has none
 * of them, and leaves the table alone. */
static atomic_int owner;

static void *start_main(void *arg) {
  int ord = (int)(intptr_t)arg;
  double t0 = rill__now_us();
  rill__timings_background(true);
  const rill_cuda_api_t *api = rill_cuda_api(NULL);
  CUdevice dev = 0;
  bool held = false;
  if (api) {
    double tc = rill__now_us();
    int count = 0;
    CUcontext ctx;
    held = api->cuDeviceGetCount(&count) == CUDA_SUCCESS && ord < count && api->cuDeviceGet(&dev, ord) == CUDA_SUCCESS &&
           api->cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS;
    rill__timing_since("context", tc);
  }
  rill__timings_background(false);
  rill__timing_since("background", t0);
  pthread_mutex_lock(&mu);
  gpus[ord].dev = dev;
  gpus[ord].held = held;
  gpus[ord].done = true;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  return NULL;
}

/* Waits for GPU ord's thread and joins it; under mu. */
static void join_locked(gpu_start_t *g) {
  while (!g->done) pthread_cond_wait(&cv, &mu);
  if (!g->joined) {
    pthread_join(g->thread, NULL); /* it has only to return */
    g->joined = true;
  }
}

static bool ours(void) {
  int pid = atomic_load(&owner);
  return pid && pid == (int)getpid();
}

/* A start that no VM took over: joined and its retain released. */
static void at_exit(void) {
  if (!ours()) return;
  for (int i = 0; i < ISA_MAX_DEVICES; i++) vm_cuda_start_end(i);
}

void vm_cuda_start(const int *ords, int n) {
  int pid = (int)getpid(), none = 0;
  if (!atomic_compare_exchange_strong(&owner, &none, pid) && none != pid) return; /* (a child of fork: starts nothing) */
  static bool registered;
  pthread_mutex_lock(&mu);
  if (!registered) registered = atexit(at_exit) == 0;
  for (int i = 0; registered && i < n; i++) {
    if (ords[i] < 0 || ords[i] >= ISA_MAX_DEVICES || gpus[ords[i]].begun) continue;
    gpu_start_t *g = &gpus[ords[i]];
    *g = (gpu_start_t){.begun = true};
    /* No thread to spare: the VM's creation does the work, as without a start. */
    if (pthread_create(&g->thread, NULL, start_main, (void *)(intptr_t)ords[i]) != 0) *g = (gpu_start_t){0};
  }
  pthread_mutex_unlock(&mu);
}

void vm_cuda_start_wait(int ordinal) {
  if (ordinal < 0 || ordinal >= ISA_MAX_DEVICES || !ours()) return;
  double t0 = rill__now_us();
  pthread_mutex_lock(&mu);
  bool begun = gpus[ordinal].begun;
  if (begun) join_locked(&gpus[ordinal]);
  pthread_mutex_unlock(&mu);
  if (begun) rill__timing_since("vm/device/wait for the start", t0);
}

void vm_cuda_start_end(int ordinal) {
  if (ordinal < 0 || ordinal >= ISA_MAX_DEVICES || !ours()) return;
  pthread_mutex_lock(&mu);
  gpu_start_t *g = &gpus[ordinal];
  bool release = false;
  CUdevice dev = 0;
  if (g->begun) {
    join_locked(g);
    release = g->held;
    dev = g->dev;
    *g = (gpu_start_t){0}; /* over: a later rill_device_start starts again */
  }
  pthread_mutex_unlock(&mu);
  const rill_cuda_api_t *api = release ? rill_cuda_api(NULL) : NULL;
  if (api) api->cuDevicePrimaryCtxRelease(dev);
}
