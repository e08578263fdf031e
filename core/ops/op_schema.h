#ifndef TESSERA_CORE_OPS_OP_SCHEMA_H_
#define TESSERA_CORE_OPS_OP_SCHEMA_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/ops/op_value.h"

namespace tessera::ops {

// The argument types of ATen schemas that the op set takes. SymInt is int. kOther stands for the
// types a call may only leave at None or at their default (Layout, Device, MemoryFormat,
// Generator).
enum class ArgType {
  kTensor,      // Tensor
  kTensorList,  // Tensor[] (or Tensor?[] when the argument is `optional_elements`)
  kInt,         // int, SymInt
  kIntList,     // int[], int[N], SymInt[]
  kFloat,       // float
  kScalar,      // Scalar: a bool, int or float
  kBool,        // bool
  kDType,       // ScalarType
  kString,      // str
  kOther,       // Layout, Device, MemoryFormat, Generator
};

// "Tensor", "int[]", "ScalarType", ...; "Layout/Device/MemoryFormat/Generator" for kOther.
absl::string_view ArgTypeName(ArgType type);

// One argument of a schema: `int[1]? dim=None` is {name "dim", kIntList, optional, fixed size 1,
// default None}. A default is kept as written, except that an int default of an `int[N]` is N of
// it (`int[2] padding=0` is [0, 0]), a dtype name is the DType, and a bare name of a kOther type
// (`memory_format=contiguous_format`) is that string; an int default of a float stays an int,
// which Bind widens.
struct ArgSchema {
  std::string name;
  ArgType type = ArgType::kTensor;
  bool optional = false;           // `T?`: None is accepted
  bool optional_elements = false;  // `Tensor?[]`
  bool kwarg_only = false;         // after `*`
  int fixed_size = 0;              // `int[2]`: a single int given is repeated to this size
  bool bool_elements = false;      // `bool[3]`: an int list of fixed_size 0s and 1s
  std::optional<OpValue> default_value;
};

// An ATen function schema, parsed from torch's own text:
// "softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor".
struct OpSchema {
  std::string name;      // "softmax"
  std::string overload;  // "int"; empty for the default overload
  std::vector<ArgSchema> args;
  int num_returns = 1;        // Tensor[] returns count as one
  bool returns_list = false;  // `-> Tensor[]` (split, unbind): as many outputs as the call makes
  std::string text;           // the text it was parsed from

  // "aten::softmax.int", or "aten::softmax" without an overload.
  std::string QualifiedName() const;
  // The index of the argument named `name`, or -1.
  int ArgIndex(absl::string_view name) const;
};

// Parses a schema in torch's syntax: a name with an optional overload after a dot, arguments with
// types (`Tensor`, `Tensor(a)`, `Tensor(a!)`, `Tensor?`, `Tensor[]`, `Tensor?[]`, `int`, `SymInt`,
// `int[]`, `int[N]`, `SymInt[]`, `int?`, `float`, `float?`, `Scalar`, `Scalar?`, `bool`, `bool?`,
// `ScalarType?`, `str`, `str?`, `Layout?`, `Device?`, `MemoryFormat?`, `Generator?`), names,
// defaults (None, True, False, integers, floats, `[]`, `[0, 1]`, `"tanh"`, `'none'`, `long` and
// other dtype names for ScalarType, `Mean` and `Sum` of at::Reduction for an int: 1 and 2), the `*`
// that starts keyword-only arguments, and the returns after `->` (one type or a parenthesized list,
// names allowed). A namespace, if written, must be `aten::`. INVALID_ARGUMENT naming the position
// (a 0-based offset) and the text it could not read: "schema 'f(int x=) -> Tensor' at position 8:
// expected a default value, found ')'".
absl::StatusOr<OpSchema> ParseSchema(absl::string_view text);

// One argument of a call as a client gives it: positional (empty name) or by keyword.
struct NamedValue {
  std::string name;
  OpValue value;
};

// A call's arguments bound to a schema: one value per schema argument, in schema order, defaults
// filled in.
class BoundArgs {
 public:
  BoundArgs() = default;
  BoundArgs(const OpSchema* schema, std::vector<OpValue> values)
      : schema_(schema), values_(std::move(values)) {}

  const OpSchema& schema() const { return *schema_; }
  const std::vector<OpValue>& values() const { return values_; }
  // The value of the argument named `name` (which the schema must have; checked in debug builds).
  // The typed accessors below expect a value of their type (checked in debug builds).
  const OpValue& Get(absl::string_view name) const;
  bool IsNone(absl::string_view name) const;
  int64_t Int(absl::string_view name) const;   // an int, or a bool as 0 or 1
  double Float(absl::string_view name) const;  // a float, or an int or bool widened
  bool Bool(absl::string_view name) const;
  const std::vector<int64_t>& Ints(absl::string_view name) const;  // empty for None
  DType Dtype(absl::string_view name) const;
  const std::string& String(absl::string_view name) const;
  // The input index a Tensor argument refers to, or -1 when it is None or a wrapped number.
  int Tensor(absl::string_view name) const;
  const std::vector<int>& Tensors(absl::string_view name) const;  // empty for None

  // "softmax.int(self=%0, dim=-1, dtype=None)".
  std::string ToString() const;

 private:
  const OpSchema* schema_ = nullptr;
  std::vector<OpValue> values_;
};

// Binds `args` (positional first, then keywords) to `schema`, as torch's argument parser does:
// a keyword names an argument, a keyword-only argument cannot be given by position, every
// argument without a default must be given, an int is accepted for a float (kept as a double) or
// Scalar (kept as an int), a bool for an int only where torch accepts it (never), an int for an
// `int[N]` (repeated N times), a scalar for a Tensor (a wrapped number), None only for an optional
// argument, and a kOther argument only left at None or its default. `num_tensors` is the number of
// input tensors the call has; every TensorRef and Tensor[] element must be in [0, num_tensors),
// a Tensor?[] element may also be -1 (None). INVALID_ARGUMENT naming the op, the argument and the
// value: "aten::softmax.int: argument 'dim' must be int, not float (1.5)",
// "aten::softmax.int: argument 'dim' must be int, not None", "aten::softmax.int: missing argument
// 'dim'", "aten::softmax.int: unknown argument 'axis'", "aten::softmax.int: got multiple values
// for argument 'dim'", "aten::softmax.int: positional argument 2 follows keyword argument 'dim'",
// "aten::softmax.int takes 3 positional arguments, got 4", "aten::cat: argument 'tensors'
// ([%0, %3]) refers to input tensor 3, but the call has 2 input tensors", "aten::cat: argument
// 'tensors' ([%0, None]) holds None, which only a Tensor?[] list may".
absl::StatusOr<BoundArgs> Bind(const OpSchema& schema, std::span<const NamedValue> args,
                               int num_tensors);

}  // namespace tessera::ops

#endif  // TESSERA_CORE_OPS_OP_SCHEMA_H_
