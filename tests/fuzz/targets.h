/* targets.h: the bodies of the fuzz targets, shared by the libFuzzer
 * entry points and the regression test that replays saved inputs. Each
 * must return normally for any input: no crash, leak or hang. */
#ifndef RILL_FUZZ_TARGETS_H
#define RILL_FUZZ_TARGETS_H
#include <stddef.h>
#include <stdint.h>

void fuzz_asm(const uint8_t *data, size_t size);
void fuzz_module(const uint8_t *data, size_t size);
void fuzz_safetensors(const uint8_t *data, size_t size);
void fuzz_npy(const uint8_t *data, size_t size);
/* `rill asm --profile`: the bytes as a profile (op timings, a best
 * schedule, kernel choice trees) for a program with a shape variable and one
 * scheduled by ios; what assembles must load and reassemble from its
 * disassembly to the same bytes */
void fuzz_profile(const uint8_t *data, size_t size);
/* the plan cache's file format (kernels/pcache.h), as read and as resealed
 * with a good checksum (so its structure is reached): what parses
 * serialises to bytes that parse back to the same entries and bytes */
void fuzz_pcache(const uint8_t *data, size_t size);
/* the ONNX importer (protobuf bytes); a no-op where it was left out */
void fuzz_onnx(const uint8_t *data, size_t size);

#endif
