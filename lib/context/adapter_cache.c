/* A context's adapter cache: adapters registered by path, loaded at first use, evicted least
 * recently used when their bytes exceed adapter_budget_bytes, never while a sequence runs with
 * one (the cache's reference is then not the only one). A hit is a pointer compare away from
 * llmm_seq_set_adapters: no allocation, no file access. */
#include <string.h>

#include "adapter/adapter.h"
#include "adapter_ctx.h"
#include "context.h"

typedef struct cache_entry {
    char *path;
    llmm_adapter *a;    /* NULL while not loaded; else the cache holds one reference */
    uint64_t last_use;  /* the cache clock at its latest use */
    uint64_t bytes, loads, hits;
    double load_ms, last_load_ms;
} cache_entry;

struct llmm__adapter_cache {
    cache_entry *e;
    size_t n, cap;
    uint64_t clock, bytes, hits, loads, evictions;
    double load_ms;
};

void llmm__adapter_cache_free(llmm_context *ctx) {
    llmm__adapter_cache *c = ctx->acache;
    if (!c) return;
    const llmm_allocator *al = ctx->model->alloc;
    for (size_t i = 0; i < c->n; i++) {
        if (c->e[i].a) llmm__adapter_release(c->e[i].a);
        llmm__mem_free(al, c->e[i].path);
    }
    llmm__mem_free(al, c->e);
    llmm__mem_free(al, c);
    ctx->acache = NULL;
}

LLMM_API llmm_status llmm_adapter_register(llmm_context *ctx, const char *path, int32_t *id) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    if (!path || !id) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_adapter_register: NULL path or id");
    const llmm_allocator *al = ctx->model->alloc;
    if (!ctx->acache && !(ctx->acache = llmm__mem_calloc(al, 1, sizeof *ctx->acache)))
        return llmm__ctx_fail(ctx, LLMM_ERR_NO_MEMORY, "out of memory for the adapter cache");
    llmm__adapter_cache *c = ctx->acache;
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->e[i].path, path) == 0) {
            *id = (int32_t)i;
            return LLMM_OK;
        }
    if (c->n >= INT32_MAX) return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_adapter_register: too many adapters");
    char *copy = llmm__mem_strndup(al, path, strlen(path));
    if (!copy || llmm__mem_reserve(al, (void **)&c->e, &c->cap, c->n + 1, sizeof *c->e)) {
        llmm__mem_free(al, copy);
        return llmm__ctx_fail(ctx, LLMM_ERR_NO_MEMORY, "out of memory registering adapter '%s'", path);
    }
    c->e[c->n] = (cache_entry){.path = copy};
    *id = (int32_t)c->n++;
    return LLMM_OK;
}

static llmm_status load_entry(llmm_context *ctx, cache_entry *e) {
    llmm__adapter_cache *c = ctx->acache;
    const double t0 = llmm__time_now_ms();
    llmm_status st = llmm_adapter_load(ctx->model, e->path, &e->a);
    if (st) {
        char msg[256];
        llmm_model_last_error(ctx->model, msg, sizeof msg);
        return llmm__ctx_fail(ctx, st, "adapter '%s': %s", e->path, msg);
    }
    const double ms = llmm__time_now_ms() - t0;
    e->bytes = e->a->bytes;
    e->loads++;
    e->load_ms += ms;
    e->last_load_ms = ms;
    c->loads++;
    c->load_ms += ms;
    c->bytes += e->bytes;
    return LLMM_OK;
}

static int requested(const int32_t *ids, size_t n, size_t i) {
    for (size_t k = 0; k < n; k++)
        if ((size_t)ids[k] == i) return 1;
    return 0;
}

/* Over budget: drop the least recently used adapters only the cache holds, other than the
 * ones being attached now. */
static void evict_over_budget(llmm_context *ctx, const int32_t *ids, size_t n) {
    llmm__adapter_cache *c = ctx->acache;
    const uint64_t budget = ctx->params.adapter_budget_bytes;
    while (budget && c->bytes > budget) {
        cache_entry *victim = NULL;
        for (size_t i = 0; i < c->n; i++) {
            cache_entry *e = &c->e[i];
            if (!e->a || requested(ids, n, i) || atomic_load(&e->a->refs) != 1) continue;
            if (!victim || e->last_use < victim->last_use) victim = e;
        }
        if (!victim) return; /* the rest is attached: over budget until detached */
        llmm__adapter_release(victim->a);
        victim->a = NULL;
        c->bytes -= victim->bytes;
        c->evictions++;
    }
}

LLMM_API llmm_status llmm_seq_use_adapters(llmm_context *ctx, llmm_seq_id seq, const int32_t *ids, const float *scales,
                                           size_t n) {
    if (!ctx) return LLMM_ERR_INVALID_ARG;
    llmm__adapter_cache *c = ctx->acache;
    if (n > LLMM__MAX_SEQ_ADAPTERS || (n && !ids))
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_use_adapters: bad ids or count %zu", n);
    for (size_t i = 0; i < n; i++)
        if (!c || ids[i] < 0 || (size_t)ids[i] >= c->n)
            return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_seq_use_adapters: id %d is not registered", ids[i]);
    llmm_adapter *ads[LLMM__MAX_SEQ_ADAPTERS] = {0};
    for (size_t i = 0; i < n; i++) {
        cache_entry *e = &c->e[ids[i]];
        if (e->a) {
            e->hits++;
            c->hits++;
        } else {
            llmm_status st = load_entry(ctx, e);
            if (st) return st;
        }
        e->last_use = ++c->clock;
        ads[i] = e->a;
    }
    llmm_status st = llmm_seq_set_adapters(ctx, seq, ads, scales, n);
    if (c) evict_over_budget(ctx, ids, n);
    return st;
}

LLMM_API llmm_status llmm_adapter_cache_get_stats(llmm_context *ctx, llmm_adapter_cache_stats *stats) {
    if (!ctx || !stats) return LLMM_ERR_INVALID_ARG;
    const llmm__adapter_cache *c = ctx->acache;
    llmm_adapter_cache_stats s = {.size = sizeof s, .budget_bytes = ctx->params.adapter_budget_bytes};
    if (c) {
        s.n_registered = (uint32_t)c->n;
        for (size_t i = 0; i < c->n; i++) s.n_loaded += c->e[i].a != NULL;
        s.bytes = c->bytes;
        s.hits = c->hits;
        s.loads = c->loads;
        s.evictions = c->evictions;
        s.load_ms = c->load_ms;
    }
    if (!llmm__struct_export(stats, &s, sizeof s, sizeof s))
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_adapter_cache_get_stats: stats->size too small");
    return LLMM_OK;
}

LLMM_API llmm_status llmm_adapter_cache_get_entry(llmm_context *ctx, int32_t id, llmm_adapter_cache_entry *entry) {
    if (!ctx || !entry) return LLMM_ERR_INVALID_ARG;
    const llmm__adapter_cache *c = ctx->acache;
    if (!c || id < 0 || (size_t)id >= c->n)
        return llmm__ctx_fail(ctx, LLMM_ERR_NOT_FOUND, "llmm_adapter_cache_get_entry: id %d is not registered", id);
    const cache_entry *e = &c->e[id];
    const llmm_adapter_cache_entry out = {.size = sizeof out, .path = e->path, .loaded = e->a != NULL,
                                          .bytes = e->bytes, .loads = e->loads, .hits = e->hits,
                                          .load_ms = e->load_ms, .last_load_ms = e->last_load_ms};
    if (!llmm__struct_export(entry, &out, sizeof out, sizeof out))
        return llmm__ctx_fail(ctx, LLMM_ERR_INVALID_ARG, "llmm_adapter_cache_get_entry: entry->size too small");
    return LLMM_OK;
}
