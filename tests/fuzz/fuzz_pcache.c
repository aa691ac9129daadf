/* libFuzzer entry point for fuzz_pcache (targets.c). */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_pcache(data, size);
  return 0;
}
