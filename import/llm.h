/* llm.h: Hugging Face checkpoint folders as generation programs (`rill llm`).
 *
 * A model folder as `transformers` writes it: config.json (and
 * generation_config.json where present, for the end-of-sequence ids), the
 * weights in model.safetensors or in shards listed by
 * model.safetensors.index.json. llm_open reads the config and every
 * safetensors header (the tensors' data stays in the files), checks that
 * each tensor the architecture needs is there with its shape, and
 * llm_program writes the .vmasm program whose `weights` statements point
 * at the checkpoint's own files: nothing is copied.
 *
 * Families: Llama (also Mistral and Qwen2, which add q/k/v biases: one
 * decoder with RMSNorm, rotary embeddings with rope_theta and rope_scaling
 * linear or llama3, grouped-query attention, a SwiGLU MLP) and GPT-2
 * (LayerNorm, learned positions, one fused q/k/v projection, Conv1D
 * weights stored [in, out], a gelu MLP). Weights in f16, bf16 or f32; the
 * program computes in the dtype of the token embeddings, other weights
 * cast to it. A config or checkpoint that is malformed is RILL_MALFORMED,
 * a missing file or tensor RILL_NOT_FOUND, an architecture or setting
 * outside these RILL_UNIMPLEMENTED, each naming what (names escaped).
 *
 * The program (docs/internals.md, "LLM programs"): module state holds the
 * KV cache ([B, KV heads, T, head size] per layer) and the tokens made;
 * @prefill(ids i64[B,S], lens i64[B]) runs the right-padded prompts (row b
 * is lens[b] tokens long) and gives each row's next-token logits [B,V];
 * @decode(tok i64[B], pos i64[B]) runs one token per row at its position;
 * @generate(ids, lens) -> i64[B,N] samples the first token from prefill's
 * logits and loops decode in a `while` until N tokens or every row has
 * made an end-of-sequence token (rows that ended give the pad id).
 *
 * This layer uses the public API only (and cJSON).
 */
#ifndef RILL_IMPORT_LLM_H
#define RILL_IMPORT_LLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill.h"

#define LLM_MAX_EOS 16

typedef enum llm_family { LLM_LLAMA, LLM_GPT2 } llm_family_t;

typedef struct llm_config {
  char model_type[32];          /* llama, mistral, qwen2, gpt2 */
  llm_family_t family;
  int64_t hidden, layers, heads, kv_heads, head_dim, vocab, intermediate, max_positions;
  int64_t rotary_dim;           /* Llama family: head_dim * partial_rotary_factor */
  double eps;                   /* the norms' epsilon */
  double rope_theta;
  char rope_scaling[16];        /* none, linear, llama3 */
  double rope_factor, rope_low, rope_high;
  int64_t rope_original_max;
  bool tie;                     /* lm_head is the token embedding */
  bool qkv_bias, o_bias, mlp_bias;
  char act[16];                 /* silu, gelu, gelu_tanh, relu */
  double attn_scale;            /* attention's scale: 1/sqrt(head_dim), GPT-2's settings applied */
  bool scale_by_layer;          /* GPT-2 scale_attn_by_inverse_layer_idx: layer i divides by i + 1 */
  int64_t sliding_window;       /* 0: none */
  int64_t eos[LLM_MAX_EOS];
  int neos;
  int64_t pad;                  /* what rows that ended give: pad_token_id, else the first eos, else 0 */
} llm_config_t;

typedef struct llm_model llm_model_t;

/* Reads DIR's config and safetensors headers and checks the weights. */
rill_status_t llm_open(const char *dir, llm_model_t **out);
void llm_free(llm_model_t *m);
const llm_config_t *llm_model_config(const llm_model_t *m);
/* The dtype the program computes in (the token embedding's). */
rill_dtype_t llm_model_dtype(const llm_model_t *m);

typedef struct llm_gen_options {
  int64_t batch;                /* B: rows of the prompt ids */
  int64_t max_length;           /* T: the cache's positions; prompt plus new tokens must fit */
  int64_t new_tokens;           /* N */
  double temperature;           /* 0: greedy */
  int64_t top_k;                /* 0: off */
  double top_p;                 /* 1: off */
  uint64_t seed;
  bool ignore_eos;              /* always N tokens (benchmarks): no stop on end-of-sequence ids */
} llm_gen_options_t;

/* The .vmasm text (NUL-terminated, malloc'd) for the model. */
rill_status_t llm_program(const llm_model_t *m, const llm_gen_options_t *o, char **out_text, size_t *out_len);

#endif
