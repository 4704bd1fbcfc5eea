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
// fails with cudaErrorStreamCaptureInvalidated and returns no graph, as on a GPU.
// Not emulated: relaxed mode's permissions (treated as thread-local), cross-stream capture
// through events, node-level graph editing and cudaGraphExecUpdate.
#ifndef LLMMINI_SIMT_GRAPH_H
#define LLMMINI_SIMT_GRAPH_H

#include <functional>
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

struct CUstream_st {
    CUgraph_st *capture = nullptr; // the graph being captured, or null
    bool invalidated = false;      // a forbidden call happened during the capture
};

namespace simt {
namespace detail {

// The streams this thread is capturing (a capture belongs to the thread that began it).
inline std::vector<CUstream_st *> &capturing_streams() {
    static thread_local std::vector<CUstream_st *> streams;
    return streams;
}

inline bool stream_capturing(cudaStream_t stream) { return stream && stream->capture; }

inline void capture_node(cudaStream_t stream, std::function<void()> node) {
    if (!stream->invalidated)
        stream->capture->nodes.push_back(std::move(node));
}

inline bool capture_forbids(const char *call) {
    (void)call;
    bool any = false;
    for (CUstream_st *s : capturing_streams()) {
        s->invalidated = true;
        any = true;
    }
    return any;
}

} // namespace detail
} // namespace simt

inline cudaError_t cudaStreamCreate(cudaStream_t *stream) {
    *stream = new (std::nothrow) CUstream_st();
    return simt::detail::record(*stream ? cudaSuccess : cudaErrorMemoryAllocation);
}

inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (!stream)
        return cudaSuccess;
    auto &cap = simt::detail::capturing_streams();
    for (size_t i = 0; i < cap.size(); i++)
        if (cap[i] == stream)
            cap.erase(cap.begin() + (long)i);
    delete stream->capture;
    delete stream;
    return cudaSuccess;
}

inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (simt::detail::stream_capturing(stream)) {
        stream->invalidated = true;
        return simt::detail::record(cudaErrorStreamCaptureUnsupported);
    }
    return cudaSuccess;
}

inline cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
    (void)mode;
    if (!stream) // the legacy default stream cannot be captured
        return simt::detail::record(cudaErrorStreamCaptureUnsupported);
    if (stream->capture)
        return simt::detail::record(cudaErrorIllegalState);
    stream->capture = new (std::nothrow) CUgraph_st();
    if (!stream->capture)
        return simt::detail::record(cudaErrorMemoryAllocation);
    stream->invalidated = false;
    simt::detail::capturing_streams().push_back(stream);
    return cudaSuccess;
}

inline cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    *graph = nullptr;
    if (!stream || !stream->capture)
        return simt::detail::record(cudaErrorIllegalState);
    auto &cap = simt::detail::capturing_streams();
    for (size_t i = 0; i < cap.size(); i++)
        if (cap[i] == stream)
            cap.erase(cap.begin() + (long)i);
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
