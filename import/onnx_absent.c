/* onnx_absent.c: the importer where protobuf-c or onnx.proto were missing
 * at build time: every entry point says what to install. */
#include <string.h>

#include "onnx.h"

#define WHY "rill was built without the ONNX importer (missing: " RILL_ONNX_ABSENT "; install protobuf-c-compiler, libprotobuf-c-dev and libonnx-dev, then set up the build again)"

bool onnx_available(const char **out_why) {
  if (out_why) *out_why = WHY;
  return false;
}

rill_status_t onnx_import_bytes(const uint8_t *data, size_t size, const char *base_dir, const onnx_options_t *options,
                                onnx_result_t *out) {
  (void)data; (void)size; (void)base_dir; (void)options;
  memset(out, 0, sizeof *out);
  return rill_status_new(RILL_UNAVAILABLE, "%s", WHY);
}

rill_status_t onnx_import_file(const char *path, const onnx_options_t *options, onnx_result_t *out) {
  (void)path;
  return onnx_import_bytes(NULL, 0, NULL, options, out);
}

void onnx_result_free(onnx_result_t *r) { memset(r, 0, sizeof *r); }

rill_status_t onnx_import_file_parts(const char *path, const onnx_options_t *options, onnx_result_t *out) {
  return onnx_import_file(path, options, out);
}

bool onnx_result_write_weights(const onnx_result_t *r, FILE *f) {
  (void)r; (void)f;
  return false;
}
