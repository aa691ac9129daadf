/* libFuzzer entry point for fuzz_onnx (targets.c). */
#include "targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_onnx(data, size);
  return 0;
}
