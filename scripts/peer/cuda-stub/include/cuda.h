/* Host-only CUDA stub for building a peer NCCL net plugin without a GPU toolkit: the driver-API
 * types and constants the peer names, nothing more. Our own code; not NVIDIA's header. */
#ifndef DQPLB_CUDA_STUB_CUDA_H
#define DQPLB_CUDA_STUB_CUDA_H

/* Below 11030 / 11070 on purpose: the peer then compiles out GDR flush and DMA-BUF support,
 * which have no meaning for host memory. */
#define CUDA_VERSION 11020

typedef int CUdevice;

typedef enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_NOT_SUPPORTED = 801
} CUresult;

/* Only the attributes the peer queries; the stub answers 0 for every one. */
typedef enum {
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED = 116,
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS = 117,
    CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124
} CUdevice_attribute;

#define CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST 1

#endif
