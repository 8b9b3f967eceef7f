/* Host-only CUDA stub: the function-pointer types of the two driver calls the peer resolves
 * through cudaGetDriverEntryPoint. Our own code; not NVIDIA's header. */
#ifndef DQPLB_CUDA_STUB_CUDATYPEDEFS_H
#define DQPLB_CUDA_STUB_CUDATYPEDEFS_H

#include <cuda.h>

typedef CUresult (*PFN_cuCtxGetDevice)(CUdevice *device);
typedef CUresult (*PFN_cuDeviceGetAttribute)(int *value, CUdevice_attribute attrib, CUdevice dev);

#endif
