#ifndef TESSERA_KERNELS_OPS_H_
#define TESSERA_KERNELS_OPS_H_

// The operation enums of KernelBackend, in a header that device code (C++17) can include.

namespace tessera::kernels {

// Elementwise binary operations. kAdd and kMul on bool are logical or / and; kSub needs a non-bool
// dtype and kDiv a floating one (true division, as torch.div). Integers wrap on overflow.
enum class BinaryOp : int { kAdd, kSub, kMul, kDiv };

// Elementwise activations. kGelu is PyTorch's default, x * Phi(x) with the exact erf;
// kGeluTanh is gelu(approximate="tanh"); kSilu is x * sigmoid(x). kRelu takes any non-bool dtype,
// the others floating ones.
enum class Activation : int { kRelu, kGelu, kGeluTanh, kTanh, kSilu };

// Distributions of RandomFill.
enum class Distribution : int { kUniform, kNormal };

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_OPS_H_
