/* llm_int.h: what llm_read.c (config, safetensors headers, the weights'
 * names and shapes) and llm_program.c (the program text) share. */
#ifndef RILL_IMPORT_LLM_INT_H
#define RILL_IMPORT_LLM_INT_H

#include "llm.h"

typedef struct llm_tensor {
  char *name;
  rill_type_t type;
  int file;                      /* index into llm_model_t.files */
} llm_tensor_t;

struct llm_model {
  llm_config_t cfg;
  char **files;                  /* the safetensors files, as absolute paths */
  int nfiles;
  llm_tensor_t *tensors;         /* every tensor of every file's header */
  size_t ntensors;
  const char *prefix;            /* GPT-2: "transformer." or "" (the names as saved) */
  rill_dtype_t dtype;            /* the compute dtype: the token embedding's */
};

/* The weights an architecture reads: the model's (layer -1) and each
 * layer's. */
typedef enum llm_weight {
  LW_EMBED, LW_POSITIONS, LW_NORM, LW_NORM_BIAS, LW_HEAD,
  LW_LN1, LW_LN1_BIAS, LW_Q, LW_Q_BIAS, LW_K, LW_K_BIAS, LW_V, LW_V_BIAS,
  LW_QKV, LW_QKV_BIAS, LW_O, LW_O_BIAS, LW_LN2, LW_LN2_BIAS,
  LW_GATE, LW_GATE_BIAS, LW_UP, LW_UP_BIAS, LW_DOWN, LW_DOWN_BIAS,
  LW_COUNT
} llm_weight_t;
#define LW_FIRST_LAYER LW_LN1

/* Whether the model has weight w (of `layer`, for a layer's): its name as
 * transformers saves it and the shape it must have. */
bool llm_weight_info(const llm_model_t *m, llm_weight_t w, int64_t layer, char *name, size_t size, rill_type_t *type);
const llm_tensor_t *llm_find(const llm_model_t *m, const char *name);

#endif
