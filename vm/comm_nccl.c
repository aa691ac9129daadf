#include "comm.h"
rill_status_t vm_comm_nccl_devices(const rill_allocator_t *a, vm_device_t *dev, int n, size_t oneshot_max, vm_comm_t **out) {
  (void)a; (void)dev; (void)n; (void)oneshot_max; (void)out;
  return rill__status(RILL_UNAVAILABLE, "todo");
}
rill_status_t vm_comm_nccl_ranks(const rill_allocator_t *a, vm_device_t *dev, int device, const vm_transport_t *t, double timeout_s, vm_comm_t **out) {
  (void)a; (void)dev; (void)device; (void)t; (void)timeout_s; (void)out;
  return rill__status(RILL_UNAVAILABLE, "todo");
}
