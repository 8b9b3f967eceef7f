/*
 * dqplb-net: the NCCL network-plugin ABI, version 9 (looked for first by NCCL 2.24/2.25).
 * Written for this project; field order and types checked against NCCL's plugins/net/example
 * headers. Layout pinned by tests/abi_layout.rs. Shares result codes, logger and the device
 * handle with version 8.
 */
#ifndef DQPLB_NCCL_NET_V9_H
#define DQPLB_NCCL_NET_V9_H
#include "nccl_net_v8.h"

/* irecv: NCCL may pre-set *request to this value: "completion of this receive is optional". */
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
/* Largest maxP2pBytes / maxCollBytes NCCL accepts (1 TiB). */
#define NCCL_MAX_NET_SIZE_BYTES (1ULL << 40)
#define NCCL_NET_MAX_DEVS_PER_NIC_V9 4

typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v9_t;

/* A (virtual) device made of ndevs physical devices. */
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V9];
} ncclNetVDeviceProps_v9_t;

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;      /* 1: NCCL flushes every receive (even on Hopper) */
  int speed;           /* Mbps */
  int port;
  float latency;       /* microseconds */
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;  /* 0 < x <= NCCL_MAX_NET_SIZE_BYTES */
  size_t maxCollBytes; /* 0 < x <= NCCL_MAX_NET_SIZE_BYTES */
} ncclNetProperties_v9_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, void *handle, void **sendComm, ncclNetDeviceHandle_v9_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_v9_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle, void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags, void **mhandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles, void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v9_t *props);
} ncclNet_v9_t;

#endif
