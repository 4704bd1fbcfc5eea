#include "arch.h"

#include <string.h>

static const llmm_arch arch_table[] = {
    {.name = "llama", .rope = LLMM_ROPE_ADJACENT, .act = LLMM_ACT_SILU},
};

const llmm_arch *arch_find(const char *name) {
    for (size_t i = 0; i < sizeof arch_table / sizeof *arch_table; i++)
        if (strcmp(arch_table[i].name, name) == 0) return &arch_table[i];
    return NULL;
}

const char *arch_supported_list(void) { return "llama"; }
