/* cuda_api.h: the CUDA libraries, loaded at run time.
 *
 * The driver (libcuda.so.1, entry points through cuGetProcAddress), NVRTC,
 * cuBLASLt and cuDNN are opened with dlopen, so one binary runs on machines
 * with or without a GPU and says exactly why CUDA is unusable when it is.
 * Every call goes through one checking wrapper (CU, NVRTC, CUBLAS, CUDNN
 * below) that turns a failure into a status carrying the library's own
 * message and the call site. A fault-injection switch fails the Nth call.
 */
#ifndef RILL_KERNELS_CUDA_API_H
#define RILL_KERNELS_CUDA_API_H

#include <cuda.h>
#include <cublasLt.h>
#include <cudnn.h>
#include <nvrtc.h>

#include "../isa/base.h"

#define RILL_CUDA_DRIVER_FUNCS(X)                                                                  \
  X(cuInit, (unsigned))                                                                            \
  X(cuDriverGetVersion, (int *))                                                                   \
  X(cuDeviceGet, (CUdevice *, int))                                                                \
  X(cuDeviceGetCount, (int *))                                                                     \
  X(cuDeviceGetName, (char *, int, CUdevice))                                                      \
  X(cuDeviceGetAttribute, (int *, CUdevice_attribute, CUdevice))                                   \
  X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                             \
  X(cuDevicePrimaryCtxRelease, (CUdevice))                                                         \
  X(cuCtxSetCurrent, (CUcontext))                                                                  \
  X(cuStreamCreate, (CUstream *, unsigned))                                                        \
  X(cuStreamDestroy, (CUstream))                                                                   \
  X(cuStreamSynchronize, (CUstream))                                                               \
  X(cuStreamQuery, (CUstream))                                                                     \
  X(cuStreamWaitEvent, (CUstream, CUevent, unsigned))                                              \
  X(cuMemHostGetDevicePointer, (CUdeviceptr *, void *, unsigned))                                  \
  X(cuEventCreate, (CUevent *, unsigned))                                                          \
  X(cuEventDestroy, (CUevent))                                                                     \
  X(cuEventRecord, (CUevent, CUstream))                                                            \
  X(cuEventSynchronize, (CUevent))                                                                 \
  X(cuEventQuery, (CUevent))                                                                       \
  X(cuEventElapsedTime, (float *, CUevent, CUevent))                                               \
  X(cuDeviceGetDefaultMemPool, (CUmemoryPool *, CUdevice))                                         \
  X(cuMemPoolSetAttribute, (CUmemoryPool, CUmemPool_attribute, void *))                            \
  X(cuMemAllocFromPoolAsync, (CUdeviceptr *, size_t, CUmemoryPool, CUstream))                      \
  X(cuMemFreeAsync, (CUdeviceptr, CUstream))                                                       \
  X(cuMemAlloc, (CUdeviceptr *, size_t))                                                           \
  X(cuMemFree, (CUdeviceptr))                                                                      \
  X(cuMemsetD8, (CUdeviceptr, unsigned char, size_t))                                              \
  X(cuIpcGetMemHandle, (CUipcMemHandle *, CUdeviceptr))                                            \
  X(cuIpcOpenMemHandle, (CUdeviceptr *, CUipcMemHandle, unsigned))                                 \
  X(cuIpcCloseMemHandle, (CUdeviceptr))                                                            \
  X(cuMemHostAlloc, (void **, size_t, unsigned))                                                   \
  X(cuMemFreeHost, (void *))                                                                       \
  X(cuMemcpyHtoDAsync, (CUdeviceptr, const void *, size_t, CUstream))                              \
  X(cuMemcpyDtoHAsync, (void *, CUdeviceptr, size_t, CUstream))                                    \
  X(cuMemcpyDtoDAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                               \
  X(cuMemcpyAsync, (CUdeviceptr, CUdeviceptr, size_t, CUstream))                                    \
  X(cuMemcpyPeerAsync, (CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream))        \
  X(cuMemPoolSetAccess, (CUmemoryPool, const CUmemAccessDesc *, size_t))                            \
  X(cuDeviceCanAccessPeer, (int *, CUdevice, CUdevice))                                            \
  X(cuCtxEnablePeerAccess, (CUcontext, unsigned))                                                  \
  X(cuMemcpyDtoH, (void *, CUdeviceptr, size_t))                                                  \
  X(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))                               \
  X(cuModuleLoadData, (CUmodule *, const void *))                                                  \
  X(cuModuleUnload, (CUmodule))                                                                    \
  X(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))                                   \
  X(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,       \
                     unsigned, CUstream, void **, void **))                                        \
  X(cuStreamBeginCapture, (CUstream, CUstreamCaptureMode))                                         \
  X(cuStreamEndCapture, (CUstream, CUgraph *))                                                     \
  X(cuStreamIsCapturing, (CUstream, CUstreamCaptureStatus *))                                      \
  X(cuGraphInstantiateWithFlags, (CUgraphExec *, CUgraph, unsigned long long))                     \
  X(cuGraphLaunch, (CUgraphExec, CUstream))                                                        \
  X(cuGraphExecUpdate, (CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *))                      \
  X(cuGraphDestroy, (CUgraph))                                                                     \
  X(cuGraphExecDestroy, (CUgraphExec))                                                             \
  X(cuGraphGetNodes, (CUgraph, CUgraphNode *, size_t *))                                           \
  X(cuGraphMemcpyNodeGetParams, (CUgraphNode, CUDA_MEMCPY3D *))                                     \
  X(cuGraphExecMemcpyNodeSetParams, (CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D *, CUcontext))   \
  X(cuGraphNodeSetEnabled, (CUgraphExec, CUgraphNode, unsigned))                                   \
  X(cuPointerGetAttribute, (void *, CUpointer_attribute, CUdeviceptr))                             \
  X(cuStreamGetCaptureInfo, (CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *,            \
                             const CUgraphNode **, const CUgraphEdgeData **, size_t *))              \
  X(cuStreamUpdateCaptureDependencies, (CUstream, CUgraphNode *, const CUgraphEdgeData *, size_t,  \
                                        unsigned))                                                 \
  X(cuStreamBeginCaptureToGraph, (CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, \
                                  size_t, CUstreamCaptureMode))                                    \
  X(cuGraphConditionalHandleCreate, (CUgraphConditionalHandle *, CUgraph, CUcontext, unsigned,     \
                                     unsigned))                                                    \
  X(cuGraphAddNode, (CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,  \
                     CUgraphNodeParams *))                                                         \
  X(cuGetErrorName, (CUresult, const char **))                                                     \
  X(cuGetErrorString, (CUresult, const char **))

#define RILL_NVRTC_FUNCS(X)                                                                        \
  X(nvrtcVersion, nvrtcResult, (int *, int *))                                                     \
  X(nvrtcGetErrorString, const char *, (nvrtcResult))                                              \
  X(nvrtcCreateProgram, nvrtcResult, (nvrtcProgram *, const char *, const char *, int,             \
                                      const char *const *, const char *const *))                   \
  X(nvrtcDestroyProgram, nvrtcResult, (nvrtcProgram *))                                            \
  X(nvrtcCompileProgram, nvrtcResult, (nvrtcProgram, int, const char *const *))                    \
  X(nvrtcGetCUBINSize, nvrtcResult, (nvrtcProgram, size_t *))                                      \
  X(nvrtcGetCUBIN, nvrtcResult, (nvrtcProgram, char *))                                            \
  X(nvrtcGetProgramLogSize, nvrtcResult, (nvrtcProgram, size_t *))                                 \
  X(nvrtcGetProgramLog, nvrtcResult, (nvrtcProgram, char *))

#define RILL_CUBLASLT_FUNCS(X)                                                                     \
  X(cublasLtCreate, cublasStatus_t, (cublasLtHandle_t *))                                          \
  X(cublasLtDestroy, cublasStatus_t, (cublasLtHandle_t))                                           \
  X(cublasLtGetVersion, size_t, (void))                                                            \
  X(cublasLtGetStatusString, const char *, (cublasStatus_t))                                       \
  X(cublasLtMatmulDescCreate, cublasStatus_t, (cublasLtMatmulDesc_t *, cublasComputeType_t,        \
                                               cudaDataType_t))                                    \
  X(cublasLtMatmulDescDestroy, cublasStatus_t, (cublasLtMatmulDesc_t))                             \
  X(cublasLtMatmulDescSetAttribute, cublasStatus_t, (cublasLtMatmulDesc_t,                         \
                                                     cublasLtMatmulDescAttributes_t, const void *, \
                                                     size_t))                                      \
  X(cublasLtMatrixLayoutCreate, cublasStatus_t, (cublasLtMatrixLayout_t *, cudaDataType, uint64_t, \
                                                 uint64_t, int64_t))                               \
  X(cublasLtMatrixLayoutDestroy, cublasStatus_t, (cublasLtMatrixLayout_t))                         \
  X(cublasLtMatrixLayoutSetAttribute, cublasStatus_t, (cublasLtMatrixLayout_t,                     \
                                                       cublasLtMatrixLayoutAttribute_t,            \
                                                       const void *, size_t))                      \
  X(cublasLtMatmulPreferenceCreate, cublasStatus_t, (cublasLtMatmulPreference_t *))                \
  X(cublasLtMatmulPreferenceDestroy, cublasStatus_t, (cublasLtMatmulPreference_t))                 \
  X(cublasLtMatmulPreferenceSetAttribute, cublasStatus_t, (cublasLtMatmulPreference_t,             \
                                                           cublasLtMatmulPreferenceAttributes_t,   \
                                                           const void *, size_t))                  \
  X(cublasLtMatmulAlgoGetHeuristic, cublasStatus_t, (cublasLtHandle_t, cublasLtMatmulDesc_t,       \
                                                     cublasLtMatrixLayout_t,                       \
                                                     cublasLtMatrixLayout_t,                       \
                                                     cublasLtMatrixLayout_t,                       \
                                                     cublasLtMatrixLayout_t,                       \
                                                     cublasLtMatmulPreference_t, int,              \
                                                     cublasLtMatmulHeuristicResult_t *, int *))    \
  X(cublasLtMatmulAlgoCheck, cublasStatus_t, (cublasLtHandle_t, cublasLtMatmulDesc_t,             \
                                               cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,     \
                                               cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,     \
                                               const cublasLtMatmulAlgo_t *,                       \
                                               cublasLtMatmulHeuristicResult_t *))                 \
  X(cublasLtMatmulAlgoConfigGetAttribute, cublasStatus_t, (const cublasLtMatmulAlgo_t *,           \
                                                            cublasLtMatmulAlgoConfigAttributes_t,  \
                                                            void *, size_t, size_t *))             \
  X(cublasLtMatmulAlgoCapGetAttribute, cublasStatus_t, (const cublasLtMatmulAlgo_t *,              \
                                                         cublasLtMatmulAlgoCapAttributes_t, void *, \
                                                         size_t, size_t *))                        \
  X(cublasLtMatmul, cublasStatus_t, (cublasLtHandle_t, cublasLtMatmulDesc_t, const void *,         \
                                     const void *, cublasLtMatrixLayout_t, const void *,           \
                                     cublasLtMatrixLayout_t, const void *, const void *,           \
                                     cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,       \
                                     const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t))

#define RILL_CUDNN_FUNCS(X)                                                                        \
  X(cudnnGetVersion, size_t, (void))                                                               \
  X(cudnnGetErrorString, const char *, (cudnnStatus_t))                                            \
  X(cudnnCreate, cudnnStatus_t, (cudnnHandle_t *))                                                 \
  X(cudnnDestroy, cudnnStatus_t, (cudnnHandle_t))                                                  \
  X(cudnnSetStream, cudnnStatus_t, (cudnnHandle_t, cudaStream_t))                                  \
  X(cudnnCreateTensorDescriptor, cudnnStatus_t, (cudnnTensorDescriptor_t *))                       \
  X(cudnnDestroyTensorDescriptor, cudnnStatus_t, (cudnnTensorDescriptor_t))                        \
  X(cudnnSetTensor4dDescriptor, cudnnStatus_t, (cudnnTensorDescriptor_t, cudnnTensorFormat_t,      \
                                                cudnnDataType_t, int, int, int, int))              \
  X(cudnnCreateFilterDescriptor, cudnnStatus_t, (cudnnFilterDescriptor_t *))                       \
  X(cudnnDestroyFilterDescriptor, cudnnStatus_t, (cudnnFilterDescriptor_t))                        \
  X(cudnnSetFilter4dDescriptor, cudnnStatus_t, (cudnnFilterDescriptor_t, cudnnDataType_t,          \
                                                cudnnTensorFormat_t, int, int, int, int))          \
  X(cudnnCreateConvolutionDescriptor, cudnnStatus_t, (cudnnConvolutionDescriptor_t *))             \
  X(cudnnDestroyConvolutionDescriptor, cudnnStatus_t, (cudnnConvolutionDescriptor_t))              \
  X(cudnnSetConvolution2dDescriptor, cudnnStatus_t, (cudnnConvolutionDescriptor_t, int, int, int,  \
                                                     int, int, int, cudnnConvolutionMode_t,        \
                                                     cudnnDataType_t))                             \
  X(cudnnSetConvolutionGroupCount, cudnnStatus_t, (cudnnConvolutionDescriptor_t, int))             \
  X(cudnnSetConvolutionMathType, cudnnStatus_t, (cudnnConvolutionDescriptor_t, cudnnMathType_t))   \
  X(cudnnGetConvolutionForwardAlgorithm_v7, cudnnStatus_t,                                         \
    (cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnFilterDescriptor_t,                  \
     const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t, const int, int *,          \
     cudnnConvolutionFwdAlgoPerf_t *))                                                             \
  X(cudnnFindConvolutionForwardAlgorithmEx, cudnnStatus_t,                                         \
    (cudnnHandle_t, const cudnnTensorDescriptor_t, const void *, const cudnnFilterDescriptor_t,      \
     const void *, const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t, void *,       \
     const int, int *, cudnnConvolutionFwdAlgoPerf_t *, void *, size_t))                            \
  X(cudnnGetConvolutionForwardWorkspaceSize, cudnnStatus_t,                                        \
    (cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnFilterDescriptor_t,                  \
     const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t, cudnnConvolutionFwdAlgo_t, \
     size_t *))                                                                                    \
  X(cudnnConvolutionForward, cudnnStatus_t,                                                        \
    (cudnnHandle_t, const void *, const cudnnTensorDescriptor_t, const void *,                     \
     const cudnnFilterDescriptor_t, const void *, const cudnnConvolutionDescriptor_t,              \
     cudnnConvolutionFwdAlgo_t, void *, size_t, const void *, const cudnnTensorDescriptor_t,       \
     void *))                                                                                      \
  X(cudnnCreatePoolingDescriptor, cudnnStatus_t, (cudnnPoolingDescriptor_t *))                     \
  X(cudnnDestroyPoolingDescriptor, cudnnStatus_t, (cudnnPoolingDescriptor_t))                      \
  X(cudnnSetPooling2dDescriptor, cudnnStatus_t, (cudnnPoolingDescriptor_t, cudnnPoolingMode_t,     \
                                                 cudnnNanPropagation_t, int, int, int, int, int,   \
                                                 int))                                             \
  X(cudnnPoolingForward, cudnnStatus_t,                                                            \
    (cudnnHandle_t, const cudnnPoolingDescriptor_t, const void *, const cudnnTensorDescriptor_t,   \
     const void *, const void *, const cudnnTensorDescriptor_t, void *))                            \
  X(cudnnBackendCreateDescriptor, cudnnStatus_t, (cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *)) \
  X(cudnnBackendDestroyDescriptor, cudnnStatus_t, (cudnnBackendDescriptor_t))                      \
  X(cudnnBackendFinalize, cudnnStatus_t, (cudnnBackendDescriptor_t))                               \
  X(cudnnBackendSetAttribute, cudnnStatus_t,                                                       \
    (cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t,  \
     const void *))                                                                                \
  X(cudnnBackendGetAttribute, cudnnStatus_t,                                                       \
    (cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,     \
     int64_t, int64_t *, void *))                                                                  \
  X(cudnnBackendExecute, cudnnStatus_t, (cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t))

typedef struct rill_cuda_api {
  void *libcuda, *libnvrtc, *libcublaslt, *libcudnn;
  int driver_version, nvrtc_major, nvrtc_minor;
  size_t cublaslt_version, cudnn_version;
#define X(name, args) CUresult (*name) args;
  RILL_CUDA_DRIVER_FUNCS(X)
#undef X
#define X(name, ret, args) ret (*name) args;
  RILL_NVRTC_FUNCS(X)
  RILL_CUBLASLT_FUNCS(X)
  RILL_CUDNN_FUNCS(X)
#undef X
} rill_cuda_api_t;

/* The process-wide API, loaded once; NULL with *why set when CUDA is unusable
 * (no library, no driver, no device). */
const rill_cuda_api_t *rill_cuda_api(const char **why);

/* Checking wrappers: NULL on success, else a status naming the call, the
 * library's error and the place. */
rill_status_t rill__cu_check(CUresult r, const char *call, const char *file, int line);
rill_status_t rill__nvrtc_check(nvrtcResult r, const char *call, const char *file, int line);
rill_status_t rill__cublas_check(cublasStatus_t r, const char *call, const char *file, int line);
rill_status_t rill__cudnn_check(cudnnStatus_t r, const char *call, const char *file, int line);
/* Fault injection: the Nth checked call from now (1-based) fails; 0 turns it off. */
void rill_cuda_fail_at(long n);
bool rill__cuda_inject(void);

#define CU(api, fn, ...) (rill__cuda_inject() ? rill__cu_check(CUDA_ERROR_UNKNOWN, #fn " (injected)", __FILE__, __LINE__) \
                                               : rill__cu_check((api)->fn(__VA_ARGS__), #fn, __FILE__, __LINE__))
/* The same check without fault injection, for cleanups that must not be skipped. */
#define CU_NOINJECT(api, fn, ...) rill__cu_check((api)->fn(__VA_ARGS__), #fn, __FILE__, __LINE__)
#define NVRTC(api, fn, ...) (rill__cuda_inject() ? rill__nvrtc_check(NVRTC_ERROR_INTERNAL_ERROR, #fn " (injected)", __FILE__, __LINE__) \
                                                 : rill__nvrtc_check((api)->fn(__VA_ARGS__), #fn, __FILE__, __LINE__))
#define CUBLAS(api, fn, ...) (rill__cuda_inject() ? rill__cublas_check(CUBLAS_STATUS_INTERNAL_ERROR, #fn " (injected)", __FILE__, __LINE__) \
                                                  : rill__cublas_check((api)->fn(__VA_ARGS__), #fn, __FILE__, __LINE__))
#define CUDNN(api, fn, ...) (rill__cuda_inject() ? rill__cudnn_check(CUDNN_STATUS_INTERNAL_ERROR, #fn " (injected)", __FILE__, __LINE__) \
                                                 : rill__cudnn_check((api)->fn(__VA_ARGS__), #fn, __FILE__, __LINE__))

#endif
