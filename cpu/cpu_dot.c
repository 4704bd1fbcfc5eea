#include "cpu_dot.h"

static const cpu_dot dot_table[LLMM_TYPE_COUNT] = {
    [LLMM_TYPE_F32] = {llmm__dot_f32, LLMM_TYPE_F32},
    [LLMM_TYPE_F16] = {llmm__vec_dot_f16, LLMM_TYPE_F16},
    [LLMM_TYPE_BF16] = {llmm__vec_dot_bf16, LLMM_TYPE_BF16},
    [LLMM_TYPE_Q4_0] = {llmm__vec_dot_q4_0_q8_0, LLMM_TYPE_Q8_0},
    [LLMM_TYPE_Q4_1] = {llmm__vec_dot_q4_1_q8_1, LLMM_TYPE_Q8_1},
    [LLMM_TYPE_Q5_0] = {llmm__vec_dot_q5_0_q8_0, LLMM_TYPE_Q8_0},
    [LLMM_TYPE_Q5_1] = {llmm__vec_dot_q5_1_q8_1, LLMM_TYPE_Q8_1},
    [LLMM_TYPE_Q8_0] = {llmm__vec_dot_q8_0_q8_0, LLMM_TYPE_Q8_0},
    [LLMM_TYPE_Q2_K] = {llmm__vec_dot_q2_K_q8_K, LLMM_TYPE_Q8_K},
    [LLMM_TYPE_Q3_K] = {llmm__vec_dot_q3_K_q8_K, LLMM_TYPE_Q8_K},
    [LLMM_TYPE_Q4_K] = {llmm__vec_dot_q4_K_q8_K, LLMM_TYPE_Q8_K},
    [LLMM_TYPE_Q5_K] = {llmm__vec_dot_q5_K_q8_K, LLMM_TYPE_Q8_K},
    [LLMM_TYPE_Q6_K] = {llmm__vec_dot_q6_K_q8_K, LLMM_TYPE_Q8_K},
    [LLMM_TYPE_IQ4_NL] = {llmm__vec_dot_iq4_nl_q8_0, LLMM_TYPE_Q8_0},
    [LLMM_TYPE_IQ4_XS] = {llmm__vec_dot_iq4_xs_q8_K, LLMM_TYPE_Q8_K},
};

const cpu_dot *llmm__cpu_dot_get(uint32_t type) {
    if (type >= LLMM_TYPE_COUNT || !dot_table[type].vec_dot) return NULL;
    return &dot_table[type];
}
