// The single-process yardstick of module_bench: the benched modules computed in the bench process
// with one kernel backend (the calls a worker's program makes, on the whole tensors) in its memory
// space, from the parameters the service holds (Module::StateDict): the CPU backend on however
// many BLAS threads the process has, or one GPU's CUDA backend (cuBLAS). Work may be queued
// (CUDA): Synchronize the backend to time it, Download a result to read it.
#ifndef TESSERA_BENCH_SINGLE_PROCESS_MODULES_H_
#define TESSERA_BENCH_SINGLE_PROCESS_MODULES_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "core/host_tensor.h"
#include "kernels/backend.h"
#include "kernels/device_tensor.h"

namespace tessera::bench {

using kernels::DeviceTensor;

// Parameters by state_dict name ("net1.weight"), float32, in the backend's memory.
using Parameters = std::map<std::string, DeviceTensor>;

// `host` (a state_dict) copied into `k`'s memory.
absl::StatusOr<Parameters> UploadParameters(kernels::KernelBackend& k,
                                            const std::map<std::string, HostTensor>& host);

// y = x @ W^T + b with the Linear at `prefix` ("net1", "attn.attention.q"): LinearProduct with the
// weight as it is (workers' forwards read a packed copy), then BiasAdd.
absl::StatusOr<DeviceTensor> LinearForward(kernels::KernelBackend& k, const Parameters& p,
                                           const std::string& prefix, const DeviceTensor& x);

// The MLP net1 -> ReLU -> net2 on x [batch, in].
absl::StatusOr<DeviceTensor> MlpForward(kernels::KernelBackend& k, const Parameters& p,
                                        const DeviceTensor& x);

// One training step of that MLP as torch takes it: forward, backward of output.sum() (no input
// gradient), then SGD with `lr` on every parameter of `p` in place. Returns the forward's output.
absl::StatusOr<DeviceTensor> MlpStep(kernels::KernelBackend& k, Parameters& p,
                                     const DeviceTensor& x, double lr);

// A pre-norm transformer block on x [batch, seq, dim]: x + attn.attention(attn.norm(x)), then
// that + mlp.net2(gelu_tanh(mlp.net1(mlp.norm(.)))), LayerNorms and `heads`-head attention.
absl::StatusOr<DeviceTensor> BlockForward(kernels::KernelBackend& k, const Parameters& p,
                                          const DeviceTensor& x, int64_t heads, bool causal);

// The largest |a[i] - reference[i]| over the largest |reference[i]|, for two float32 tensors;
// infinity when their shapes differ.
double MaxRelativeDifference(const HostTensor& a, const HostTensor& reference);

}  // namespace tessera::bench

#endif  // TESSERA_BENCH_SINGLE_PROCESS_MODULES_H_
