// sample_kernels.cu: the nvcc build of sample_kernels.cuh (`make CUDA=1`), which proves that
// what test_simt runs under the emulation is also valid CUDA.
#include "simt.h"
#include "sample_kernels.cuh"

// Emits the host glue as well, so that nvcc checks the launches and runtime calls too.
int sample_kernels_host_glue(const unsigned *in, unsigned *out, int *filled) {
    return sample_block_sums(in, 64, 32, out) + sample_fill_seven(filled, 32) +
           sample_big_shared(in, out, true);
}
