// simt_graph.h: streams, stream capture and CUDA graphs for the emulated build (included by
// simt.h after simt_runtime.h).
//
// A stream is a real object here so that it can capture: between cudaStreamBeginCapture and
// cudaStreamEndCapture, kernel launches, cudaMemcpyAsync and cudaMemsetAsync on it are
// recorded as graph nodes (a launch keeps its converted arguments, a copy reads its source
// when the graph runs) instead of running; cudaGraphLaunch runs the nodes in order. What CUDA
// forbids during a capture in global or thread-local mode (cudaMalloc, cudaMemcpy,
// cudaMemset, cudaStreamSynchronize of the capturing stream, cudaDeviceSynchronize) fails with
// cudaErrorStreamCaptureUnsupported and invalidates the capture, so cudaStreamEndCapture then
// fails with cudaErrorStreamCaptureInvalidated and returns no graph, as on a GPU. The rules
// reach across threads as the runtime documents them: a global-mode capture forbids those calls
// to every thread, a thread-local one to its own thread, a relaxed one to none; while a blocking
// stream (cudaStreamCreate) captures, work on the legacy stream from any thread fails with
// cudaErrorStreamCaptureImplicit and invalidates the capture.
// Not emulated: cross-stream capture through events, node-level graph editing and
// cudaGraphExecUpdate.
#ifndef LLMMINI_SIMT_GRAPH_H
#define LLMMINI_SIMT_GRAPH_H

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <new>
#include <vector>

#include "simt_runtime.h"

enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
};

enum cudaStreamCaptureStatus {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2,
};

struct CUgraph_st {
    std::vector<std::function<void()>> nodes;
};
struct CUgraphExec_st {
    std::vector<std::function<void()>> nodes;
};
typedef CUgraph_st *cudaGraph_t;
typedef CUgraphExec_st *cudaGraphExec_t;

// A stream created by cudaStreamCreate (or with cudaStreamDefault) is blocking: it
// synchronises with the legacy default stream (stream 0), so while it captures, any work on
// the legacy stream, from any thread, would have to join the capture: CUDA fails that call with
// cudaErrorStreamCaptureImplicit and invalidates the capture. cudaStreamNonBlocking streams
// are independent of the legacy stream.
enum { cudaStreamDefault = 0x0, cudaStreamNonBlocking = 0x1 };

struct CUstream_st {
    CUgraph_st *capture = nullptr;          // the graph being captured, or null (owner thread only)
    std::atomic<bool> invalidated{false};   // a forbidden call happened during the capture (any thread)
    bool blocking = true;                   // synchronises with the legacy stream
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    std::thread::id owner;                  // the thread that began the capture
};

namespace simt {
namespace detail {

// Every capture in progress in the process, with its mode and thread: CUDA's capture rules
// reach across threads (a global-mode capture forbids unsafe calls in every thread; a blocking
// stream's capture forbids the legacy stream to every thread).
struct capture_registry {
    std::mutex lock;
    std::vector<CUstream_st *> active;
};
inline capture_registry &captures() {
    static capture_registry registry;
    return registry;
}

inline void capture_forget(CUstream_st *stream) {
    capture_registry &r = captures();
    std::lock_guard<std::mutex> hold(r.lock);
    for (size_t i = 0; i < r.active.size(); i++)
        if (r.active[i] == stream)
            r.active.erase(r.active.begin() + (long)i--);
}

inline bool stream_capturing(cudaStream_t stream) { return stream && stream->capture; }

inline void capture_node(cudaStream_t stream, std::function<void()> node) {
    if (!stream->invalidated)
        stream->capture->nodes.push_back(std::move(node));
}

// A potentially unsafe call (allocation, synchronous copy or memset, device synchronisation,
// pinned allocation) is refused while this thread captures in global or thread-local mode, or
// while any other thread captures in global mode; the captures that refuse it are invalidated.
inline bool capture_forbids(const char *call) {
    (void)call;
    capture_registry &r = captures();
    std::lock_guard<std::mutex> hold(r.lock);
    const std::thread::id self = std::this_thread::get_id();
    bool any = false;
    for (CUstream_st *s : r.active)
        if (s->owner == self ? s->mode != cudaStreamCaptureModeRelaxed : s->mode == cudaStreamCaptureModeGlobal) {
            s->invalidated = true;
            any = true;
        }
    return any;
}

// Work on the legacy stream (stream 0: a launch, an async copy or memset on it, a synchronous
// copy or memset, which run on it) from any thread is refused while any blocking stream
// captures, and invalidates that capture.
inline bool legacy_stream_conflicts(const char *call) {
    (void)call;
    capture_registry &r = captures();
    std::lock_guard<std::mutex> hold(r.lock);
    bool any = false;
    for (CUstream_st *s : r.active)
        if (s->blocking) {
            s->invalidated = true;
            any = true;
        }
    return any;
}

inline void refuse_legacy_launch() { record(cudaErrorStreamCaptureImplicit); }

} // namespace detail
} // namespace simt

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    if (flags & ~(unsigned)cudaStreamNonBlocking)
        return simt::detail::record(cudaErrorInvalidValue);
    *stream = new (std::nothrow) CUstream_st();
    if (*stream)
        (*stream)->blocking = !(flags & cudaStreamNonBlocking);
    return simt::detail::record(*stream ? cudaSuccess : cudaErrorMemoryAllocation);
}

inline cudaError_t cudaStreamCreate(cudaStream_t *stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (!stream)
        return cudaSuccess;
    simt::detail::capture_forget(stream);
    delete stream->capture;
    delete stream;
    return cudaSuccess;
}

inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (simt::detail::stream_capturing(stream)) {
        stream->invalidated = true;
        return simt::detail::record(cudaErrorStreamCaptureUnsupported);
    }
    if (!stream && simt::detail::legacy_stream_conflicts("cudaStreamSynchronize"))
        return simt::detail::record(cudaErrorStreamCaptureImplicit);
    return cudaSuccess;
}

inline cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    if (!stream) // the legacy default stream cannot be captured
        return simt::detail::record(cudaErrorStreamCaptureUnsupported);
    if (stream->capture)
        return simt::detail::record(cudaErrorIllegalState);
    stream->capture = new (std::nothrow) CUgraph_st();
    if (!stream->capture)
        return simt::detail::record(cudaErrorMemoryAllocation);
    stream->invalidated = false;
    stream->mode = mode;
    stream->owner = std::this_thread::get_id();
    simt::detail::capture_registry &r = simt::detail::captures();
    std::lock_guard<std::mutex> hold(r.lock);
    r.active.push_back(stream);
    return cudaSuccess;
}

inline cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    *graph = nullptr;
    if (!stream || !stream->capture)
        return simt::detail::record(cudaErrorIllegalState);
    if (stream->owner != std::this_thread::get_id()) // CUDA: ended by the thread that began it
        return simt::detail::record(cudaErrorStreamCaptureWrongThread);
    // LLMM_SIMT_CAPTURE_HOLD_MS=N keeps every capture open N ms longer: a test of what other
    // threads do during captures then meets them every time, not by the chance of a schedule
    if (const char *hold = std::getenv("LLMM_SIMT_CAPTURE_HOLD_MS"))
        std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(hold)));
    simt::detail::capture_forget(stream);
    CUgraph_st *g = stream->capture;
    stream->capture = nullptr;
    if (stream->invalidated) {
        stream->invalidated = false;
        delete g;
        return simt::detail::record(cudaErrorStreamCaptureInvalidated);
    }
    *graph = g;
    return cudaSuccess;
}

inline cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus *status) {
    *status = !simt::detail::stream_capturing(stream) ? cudaStreamCaptureStatusNone
              : stream->invalidated                    ? cudaStreamCaptureStatusInvalidated
                                                       : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                        unsigned long long flags = 0) {
    (void)flags;
    *exec = nullptr;
    if (!graph)
        return simt::detail::record(cudaErrorInvalidValue);
    *exec = new (std::nothrow) CUgraphExec_st{graph->nodes};
    return simt::detail::record(*exec ? cudaSuccess : cudaErrorMemoryAllocation);
}

inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    if (!exec)
        return simt::detail::record(cudaErrorInvalidValue);
    if (simt::detail::stream_capturing(stream)) { // a graph launched into a capture: its nodes join it
        for (const auto &node : exec->nodes)
            simt::detail::capture_node(stream, node);
        return cudaSuccess;
    }
    for (const auto &node : exec->nodes)
        node();
    return cudaSuccess;
}

inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}

inline cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}

#endif
