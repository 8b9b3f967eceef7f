/* Host-only CUDA runtime stub (built as libcudart.so): one pretend device 0, every pointer is
 * unregistered host memory, the two driver calls the peer resolves answer "no GPU features". */
#include <string.h>
#include <cuda_runtime_api.h>

cudaError_t cudaDriverGetVersion(int *version)
{
    *version = CUDA_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version)
{
    *version = CUDA_VERSION;
    return cudaSuccess;
}

/* One device, so that a plugin which sizes tables by the GPU count has a non-zero count. */
cudaError_t cudaGetDeviceCount(int *count)
{
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = 0;
    return cudaSuccess;
}

/* Host-only: no pointer is device memory (the peer then refuses NCCL_PTR_CUDA buffers). */
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attrs, const void *ptr)
{
    memset(attrs, 0, sizeof(*attrs));
    attrs->type = cudaMemoryTypeUnregistered;
    attrs->device = -1;
    attrs->hostPointer = (void *)ptr;
    return cudaSuccess;
}

static CUresult stub_ctx_get_device(CUdevice *device)
{
    *device = 0;
    return CUDA_SUCCESS;
}

/* Every attribute the peer asks about (GPUDirect RDMA, its flush options, DMA-BUF) is 0. */
static CUresult stub_device_get_attribute(int *value, CUdevice_attribute attrib, CUdevice dev)
{
    (void)attrib;
    (void)dev;
    *value = 0;
    return CUDA_SUCCESS;
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult *status)
{
    (void)flags;
    *fn = NULL;
    if (strcmp(symbol, "cuCtxGetDevice") == 0) {
        *fn = (void *)stub_ctx_get_device;
    } else if (strcmp(symbol, "cuDeviceGetAttribute") == 0) {
        *fn = (void *)stub_device_get_attribute;
    }
    if (status != NULL) {
        *status = *fn != NULL ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    }
    return *fn != NULL ? cudaSuccess : cudaErrorInvalidValue;
}
