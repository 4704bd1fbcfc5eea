#ifndef LLMM_QUANTIZE_FILE_H
#define LLMM_QUANTIZE_FILE_H

#include <stdio.h>

#include "format/gguf.h"
#include "format/quant.h"

/* Whole-model conversion (quantize_file.c): rewrite a GGUF model with its weights in another
 * type, as the reference engine's llama_model_quantize does (docs/quantization.md has the
 * rules). Used by tools/llmmini-quantize and the tests; not part of the public ABI. */

/* A named recipe: which type each tensor gets. */
typedef struct llmm_quant_recipe {
    const char *name;       /* command-line name: "q4_0", "q4_k_m", ... */
    uint32_t type;          /* type of the ordinary 2-D weights */
    uint32_t more_bits;     /* mixed recipes: type of output.weight and of attn_v/ffn_down in
                             * the layers the reference gives more bits; 0 (F32) for a pure one */
    uint32_t fused_qkv;     /* mixed recipes: type of a fused attn_qkv weight */
    uint32_t file_type;     /* general.file_type written (the reference's llama_ftype) */
} llmm_quant_recipe;

/* The recipe called name, or NULL. */
const llmm_quant_recipe *llmm__quant_recipe_find(const char *name);
/* Recipe i (0 <= i < count), for listing them. */
size_t llmm__quant_recipe_count(void);
const llmm_quant_recipe *llmm__quant_recipe_at(size_t i);

/* What the conversion decided for one tensor. */
typedef struct llmm_quant_choice {
    uint32_t wanted;     /* the type the recipe asks for */
    uint32_t type;       /* the type written: wanted, or a fallback when rows do not fit it */
    int fell_back;       /* 1 when type != wanted because of the row length */
} llmm_quant_choice;

/* The type recipe r gives tensor t of model f (a pure function of names and shapes). */
llmm_quant_choice llmm__quant_choose(const llmm_quant_recipe *r, const gguf_file *f, const gguf_tensor *t);

/* Progress of a conversion, once per tensor after it is written. */
typedef struct llmm_quant_progress {
    size_t index, count;           /* this is tensor index + 1 of count */
    const gguf_tensor *tensor;     /* in the source file */
    llmm_quant_choice choice;
    uint64_t bytes_in, bytes_out;  /* this tensor's data */
} llmm_quant_progress;
typedef void (*llmm_quant_progress_fn)(void *user, const llmm_quant_progress *p);

typedef struct llmm_quant_params {
    const llmm_quant_recipe *recipe;
    int n_threads;                 /* rows are converted by this many threads (>= 1) */
    llmm_quant_progress_fn progress; /* optional */
    void *user;
} llmm_quant_params;

/* Write `in` converted by params->recipe to out (a GGUF v3 file, alignment 32): metadata
 * copied (general.file_type and general.quantization_version set), tensors in source order.
 * Errors: UNSUPPORTED (a tensor type that cannot be read), IO (a failed write), NO_MEMORY. */
llmm_status llmm__quantize_model(const gguf_file *in, const llmm_quant_params *params, FILE *out, llmm_diag *d);

#endif
