/* Host-only CUDA stub: the runtime-API declarations the peer calls, implemented for host memory
 * only by cudart_stub.c (libcudart.so). Our own code; not NVIDIA's header. */
#ifndef DQPLB_CUDA_STUB_CUDA_RUNTIME_API_H
#define DQPLB_CUDA_STUB_CUDA_RUNTIME_API_H

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorNoDevice = 100
} cudaError_t;

enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3
};

struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};

enum cudaDriverEntryPointQueryResult {
    cudaDriverEntryPointSuccess = 0,
    cudaDriverEntryPointSymbolNotFound = 1,
    cudaDriverEntryPointVersionNotSufficent = 2
};

#define cudaEnableDefault 0x0

cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attrs, const void *ptr);
cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult *status);

#ifdef __cplusplus
}
#endif

#endif
