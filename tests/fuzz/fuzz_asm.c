/* libFuzzer entry point for fuzz_asm (targets.c). */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_asm(data, size);
  return 0;
}
