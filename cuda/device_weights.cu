/* Weight sets per model and device (device_weights.h). */
#include <pthread.h>
#include <string.h>

#include "portable.h"

#include "device_weights.h"
#include "host_memory.h"

namespace {

/* A device copy of one weight. */
struct weight_slot {
    void *dev;
    size_t bytes;
};

} // namespace

struct cu_weight_set {
    cu_weight_set *next; /* the share's next device */
    int device;
    uint32_t users;
    size_t n;
    const llmm_allocator *alloc; /* of the context that made it */
    weight_slot slot[1];         /* (n) */
};

namespace {

cu_weight_set *set_new(const llmm_allocator *al, int device, size_t n) {
    cu_weight_set *set =
        (cu_weight_set *)cu_host_calloc(al, 1, sizeof *set + (n ? n - 1 : 0) * sizeof set->slot[0]);
    if (set) {
        set->device = device;
        set->n = n;
        set->alloc = al;
    }
    return set;
}

void set_free(cu_weight_set *set) {
    for (size_t i = 0; i < set->n; i++) cudaFree(set->slot[i].dev);
    cu_host_free(set->alloc, set);
}

} // namespace

llmm_status cu_weights_join(llmm_backend_shared *shared, const llmm_allocator *al, int device, size_t n_weights,
                            cu_weight_set **out) {
    *out = NULL;
    if (!shared) {
        *out = set_new(al, device, n_weights);
        if (*out) (*out)->users = 1;
        return *out ? LLMM_OK : LLMM_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&shared->lock);
    cu_weight_set *set = (cu_weight_set *)shared->data;
    while (set && set->device != device) set = set->next;
    /* a set of another size would be another model's: never expected, refused */
    llmm_status st = set && set->n != n_weights ? LLMM_ERR_INVALID_ARG : LLMM_OK;
    if (!st && !set) {
        if ((set = set_new(al, device, n_weights))) {
            set->next = (cu_weight_set *)shared->data;
            shared->data = set;
        } else {
            st = LLMM_ERR_NO_MEMORY;
        }
    }
    if (!st) {
        set->users++;
        shared->users++;
        *out = set;
    }
    pthread_mutex_unlock(&shared->lock);
    return st;
}

void cu_weights_leave(llmm_backend_shared *shared, cu_weight_set *set) {
    if (!set) return;
    if (!shared) {
        set_free(set);
        return;
    }
    pthread_mutex_lock(&shared->lock);
    shared->users--;
    if (--set->users == 0) {
        cu_weight_set **link = (cu_weight_set **)&shared->data;
        while (*link != set) link = &(*link)->next;
        *link = set->next;
        set_free(set);
    }
    pthread_mutex_unlock(&shared->lock);
}

namespace {

/* bytes at host to dev, through the staging a chunk at a time (each chunk's copy must have
 * read the staging before the next memcpy overwrites it). */
int upload(void *dev, const void *host, size_t bytes, const cu_staging *staging) {
    int err = 0;
    for (size_t off = 0; off < bytes && !err; off += staging->bytes) {
        const size_t n = bytes - off < staging->bytes ? bytes - off : staging->bytes;
        memcpy(staging->pinned, (const uint8_t *)host + off, n);
        err = cudaMemcpyAsync((uint8_t *)dev + off, staging->pinned, n, cudaMemcpyHostToDevice, staging->stream);
        if (!err) err = cudaStreamSynchronize(staging->stream);
    }
    return err;
}

} // namespace

llmm_status cu_weights_get(llmm_backend_shared *shared, cu_weight_set *set, size_t index, const void *host,
                           size_t bytes, const cu_staging *staging, void **dev) {
    if (index >= set->n) return LLMM_ERR_INVALID_ARG;
    weight_slot *slot = &set->slot[index];
    /* under the lock, so that contexts created at the same time upload a weight once */
    if (shared) pthread_mutex_lock(&shared->lock);
    llmm_status st = LLMM_OK;
    if (slot->dev && slot->bytes != bytes) st = LLMM_ERR_INVALID_ARG; /* another weight at this index */
    if (!st && !slot->dev) {
        void *p = NULL;
        /* whole 16-byte units: the GEMV reads the one that holds a row's last byte whole */
        int err = cudaMalloc(&p, bytes ? (bytes + 15) / 16 * 16 : 16);
        if (!err) err = upload(p, host, bytes, staging);
        if (err) {
            cudaFree(p);
            st = err == cudaErrorMemoryAllocation ? LLMM_ERR_NO_MEMORY : LLMM_ERR_BACKEND;
        } else {
            slot->dev = p;
            slot->bytes = bytes;
        }
    }
    if (shared) pthread_mutex_unlock(&shared->lock);
    if (!st) *dev = slot->dev;
    return st;
}
