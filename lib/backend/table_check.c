/* The checks every backend table passes before the core uses it, built-in or loaded. */
#include "backend.h"

int llmm__backend_table_ok(const llmm_backend_ops *be) {
    if (be->api_version != LLMM_BACKEND_API_VERSION || !(be->kv_layouts & LLMM_KV_LAYOUT_HEAD_REGIONS)) return 0;
    if ((unsigned)be->kind >= LLMM_BACKEND_KINDS || be->kind == LLMM_BACKEND_AUTO) return 0;
    /* the table of resident adapters is one capability: a table with part of it is broken */
    const int lora_table = (be->lora_table_reserve != NULL) + (be->lora_table_set != NULL) + (be->lora_rows != NULL);
    if (lora_table != 0 && lora_table != 3) return 0;
    return be->available && be->supports_type && be->init && be->shutdown && be->buffer_alloc && be->buffer_free &&
           be->upload && be->download && be->prepare_weight && be->release_weight && be->step_begin &&
           be->step_end && be->embed && be->rms_norm && be->matmul && be->rope && be->glu && be->add &&
           be->add_rows && be->scale && be->softcap && be->kv_write && be->attention && be->copy;
}
