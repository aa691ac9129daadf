/* onnx.h: the ONNX importer.
 *
 * Reads an ONNX model (protobuf, opsets 7 to 17; weights inline or in
 * external-data files beside it) and writes the same computation as .vmasm
 * text plus a safetensors file of its initializers. Names are sanitised and
 * made unique; Constant nodes, Shape and whatever is computed from known
 * values, whatever the op (by the core set's CPU reference kernels, through
 * rill_op_eval), are folded at import; attributes
 * take ONNX's defaults. Anything the core set cannot express exactly is an
 * error (RILL_UNIMPLEMENTED) naming the node, its op type, the opset and
 * what is unsupported; a malformed model is RILL_MALFORMED. Nothing is
 * written unless the whole import succeeds.
 *
 * Symbolic input dimensions (dim_param) that no --shape fixes become shape
 * variables, the sizes computed from them polynomials over the variables
 * (isa/sym.h; onnx_symbolic.c says how).
 *
 * This layer sits above the assembler and uses the public API, and
 * isa/sym.h for sizes over shape variables.
 */
#ifndef RILL_IMPORT_ONNX_H
#define RILL_IMPORT_ONNX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rill.h"

#define ONNX_MAX_SHAPES 32

typedef struct onnx_options {
  /* --shape NAME=N: sizes for symbolic input dimensions (dim_param NAME),
   * or, by input name, NAME=N for an input whose only symbolic dim it is.
   * A symbolic dimension that none names is imported as the shape variable
   * NAME (unbounded); --shape NAME=LO..HI does so with the range [LO, HI]
   * (its value -1, the range in shape_lo and shape_hi). */
  int nshapes;
  const char *shape_names[ONNX_MAX_SHAPES];
  int64_t shape_values[ONNX_MAX_SHAPES];
  int64_t shape_lo[ONNX_MAX_SHAPES], shape_hi[ONNX_MAX_SHAPES];
  /* NAME=[D1,D2,...] (NAME=[] a scalar): a whole shape for the input NAME
   * (or a sequence input's item NAME[i]), where the model gives none or
   * one of the same rank (its numbers must agree): shape_whole its rank
   * plus 1 and shape_dims; 0 in the other forms. A sequence input's
   * length is NAME=K. */
  int shape_whole[ONNX_MAX_SHAPES];
  int64_t shape_dims[ONNX_MAX_SHAPES][8];
  /* The file named by the text's `weights` statement (default "weights.safetensors"). */
  const char *weights_file;
  /* -O0's import: QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger
   * and the QDQ patterns (DequantizeLinear -> Conv or MatMul [->
   * QuantizeLinear]) lowered onto core ops, not made qconv2d and qmatmul
   * (onnx_assemble and onnx_load_module set it for asm options' no_opt). */
  bool unfused_quant;
  /* Where onnx_assemble (and onnx_load_module) put the time the import took, in ms; NULL: nowhere. */
  double *import_ms;
} onnx_options_t;

typedef struct onnx_result {
  char *vmasm;            /* NUL-terminated */
  size_t vmasm_len;
  uint8_t *weights;       /* safetensors bytes (NULL where parts holds them) */
  size_t weights_len;
  int ninputs, noutputs;  /* of @main */
  /* onnx_import_file_parts: the safetensors bytes as pieces where they lie
   * (the model file's mapping, the folded values), written by
   * onnx_result_write_weights without one more copy of the weights */
  struct onnx_parts *parts;
} onnx_result_t;

/* Whether this build has the importer; *out_why says what is missing. */
bool onnx_available(const char **out_why);

/* Imports a model file; external data is looked up beside it. */
rill_status_t onnx_import_file(const char *path, const onnx_options_t *options, onnx_result_t *out);
/* Imports model bytes; external data is looked up in base_dir (NULL: none allowed). */
rill_status_t onnx_import_bytes(const uint8_t *data, size_t size, const char *base_dir,
                                const onnx_options_t *options, onnx_result_t *out);
void onnx_result_free(onnx_result_t *r);
/* onnx_import_file with the weights left as pieces (r->parts): the file is
 * mapped, and the initializers' bytes are read there, not copied. */
rill_status_t onnx_import_file_parts(const char *path, const onnx_options_t *options, onnx_result_t *out);
/* Writes the safetensors bytes (r->weights or r->parts) to f; false on a write error. */
bool onnx_result_write_weights(const onnx_result_t *r, FILE *f);

/* Imports IN.onnx and writes OUT.vmasm and OUT.safetensors beside it, both
 * or neither. */
rill_status_t onnx_import_to_files(const char *in, const char *out_vmasm, const onnx_options_t *options);
/* Imports and assembles in memory: module bytes (freed with free). */
rill_status_t onnx_assemble(const char *in, const onnx_options_t *options, const rill_asm_options_t *asm_options,
                            uint8_t **out_bytes, size_t *out_size);
/* Imports and assembles in memory (the weights pass through a private
 * scratch folder that is removed before returning). */
rill_status_t onnx_load_module(const char *in, const onnx_options_t *options,
                               const rill_asm_options_t *asm_options, rill_module_t **out_module);
/* Parses "NAME=N" or "NAME=LO..HI" into the options; false with a message on a bad spec. */
bool onnx_options_add_shape(onnx_options_t *o, const char *spec, char *why, size_t nwhy);
void onnx_options_free(onnx_options_t *o);

#endif
