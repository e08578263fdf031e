#ifndef TESSERA_KERNELS_OPS_H_
#define TESSERA_KERNELS_OPS_H_

// The operation enums of KernelBackend and what each op takes and gives, in a header that device
// code (C++17) can include.

#include "kernels/host_device.h"

namespace tessera::kernels {

// Elementwise binary operations (torch's names without the k). kAdd and kMul on bool are logical
// or / and; kSub needs a non-bool dtype and kDiv a floating one (true division, as torch.div).
// Integers wrap on overflow. Comparisons and logical ops give bool (GivesBool).
enum class BinaryOp : int {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMaximum,
  kMinimum,
  kRemainder,
  kFloorDivide,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kLogicalAnd,
  kLogicalOr,
  kLogicalXor,
  kBitwiseAnd,
  kBitwiseOr,
  kBitwiseXor
};
inline constexpr int kNumBinaryOps = static_cast<int>(BinaryOp::kBitwiseXor) + 1;

// Elementwise unary operations (torch's names without the k; kGeluTanh is
// gelu(approximate="tanh")).
enum class UnaryOp : int {
  kNeg,
  kAbs,
  kSign,
  kExp,
  kExpm1,
  kLog,
  kLog1p,
  kLog2,
  kSqrt,
  kRsqrt,
  kReciprocal,
  kSin,
  kCos,
  kTanh,
  kSigmoid,
  kSilu,
  kRelu,
  kGelu,
  kGeluTanh,
  kErf,
  kFloor,
  kCeil,
  kRound,
  kTrunc,
  kSquare,
  kLogicalNot,
  kIsNan,
  kIsInf,
  kIsFinite,
  kBitwiseNot
};
inline constexpr int kNumUnaryOps = static_cast<int>(UnaryOp::kBitwiseNot) + 1;

// softmax, log_softmax and torch's _safe_softmax (0 where a whole row is -inf) along a dim.
enum class SoftmaxKind : int { kSoftmax, kLogSoftmax, kSafeSoftmax };

// Elementwise activations of module programs, each the UnaryOp of its name. kGelu is PyTorch's
// default, x * Phi(x) with the exact erf; kGeluTanh is gelu(approximate="tanh"); kSilu is
// x * sigmoid(x). kRelu takes any non-bool dtype, the others floating ones.
enum class Activation : int { kRelu, kGelu, kGeluTanh, kTanh, kSilu };

// Distributions of RandomFill.
enum class Distribution : int { kUniform, kNormal };

// How ScatterInto combines a source element with the destination's: kNone writes it (torch's
// scatter with a src), kSum adds it (scatter_add; logical or on bool).
enum class ScatterReduce : int { kNone, kSum };

// True for the ops whose output is bool: comparisons and logical ops.
TESSERA_HOST_DEVICE constexpr bool GivesBool(BinaryOp op) {
  return op >= BinaryOp::kEq && op <= BinaryOp::kLogicalXor;
}

// True for logical_not, isnan, isinf and isfinite.
TESSERA_HOST_DEVICE constexpr bool GivesBool(UnaryOp op) {
  return op >= UnaryOp::kLogicalNot && op <= UnaryOp::kIsFinite;
}

// True for the ops that take floating dtypes only: exp through sigmoid, silu, gelu, gelu_tanh, erf.
TESSERA_HOST_DEVICE constexpr bool NeedsFloating(UnaryOp op) {
  return (op >= UnaryOp::kExp && op <= UnaryOp::kSilu) ||
         (op >= UnaryOp::kGelu && op <= UnaryOp::kErf);
}

// The UnaryOp that computes activation `f`.
TESSERA_HOST_DEVICE constexpr UnaryOp UnaryOpOf(Activation f) {
  switch (f) {
    case Activation::kRelu:
      return UnaryOp::kRelu;
    case Activation::kGelu:
      return UnaryOp::kGelu;
    case Activation::kGeluTanh:
      return UnaryOp::kGeluTanh;
    case Activation::kTanh:
      return UnaryOp::kTanh;
    case Activation::kSilu:
      return UnaryOp::kSilu;
  }
  return UnaryOp::kRelu;
}

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_OPS_H_
