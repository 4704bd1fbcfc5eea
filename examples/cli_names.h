/* The names the example programs accept for backends and KV cache types (--backend,
 * --kv-type), shared so that every tool spells them the same. */
#ifndef LLMM_EXAMPLES_CLI_NAMES_H
#define LLMM_EXAMPLES_CLI_NAMES_H

#include <string.h>

#include "llmmini.h"

/* --backend's names, by llmm_backend_kind */
static const struct {
    const char *name;
    llmm_backend_kind kind;
} cli_backend_names[] = {{"auto", LLMM_BACKEND_AUTO}, {"cpu", LLMM_BACKEND_CPU}, {"cuda", LLMM_BACKEND_CUDA}};

/* --kv-type's names, by llmm_kv_type */
static const struct {
    const char *name;
    llmm_kv_type type;
} cli_kv_type_names[] = {{"f16", LLMM_KV_F16}, {"q8", LLMM_KV_Q8}, {"f32", LLMM_KV_F32}};

#define CLI_COUNT(a) (sizeof(a) / sizeof *(a))

static inline int parse_backend(const char *s, llmm_backend_kind *out) {
    for (size_t i = 0; i < CLI_COUNT(cli_backend_names); i++)
        if (!strcmp(s, cli_backend_names[i].name)) {
            *out = cli_backend_names[i].kind;
            return 1;
        }
    return 0;
}

static inline const char *backend_name(llmm_backend_kind kind) {
    for (size_t i = 0; i < CLI_COUNT(cli_backend_names); i++)
        if (cli_backend_names[i].kind == kind) return cli_backend_names[i].name;
    return "?";
}

static inline int parse_kv_type(const char *s, llmm_kv_type *out) {
    for (size_t i = 0; i < CLI_COUNT(cli_kv_type_names); i++)
        if (!strcmp(s, cli_kv_type_names[i].name)) {
            *out = cli_kv_type_names[i].type;
            return 1;
        }
    return 0;
}

static inline const char *kv_type_name(llmm_kv_type type) {
    for (size_t i = 0; i < CLI_COUNT(cli_kv_type_names); i++)
        if (cli_kv_type_names[i].type == type) return cli_kv_type_names[i].name;
    return "?";
}

#endif
