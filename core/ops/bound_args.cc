// Bind and BoundArgs of op_schema.h: a call's arguments bound to an op's schema.
#include <algorithm>
#include <cassert>
#include <iterator>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops/op_schema.h"
#include "core/status_macros.h"

namespace tessera::ops {
namespace {

// The type a value of `arg` must have, as the messages name it: "int", "int[1]", "Tensor?[]";
// "None" for the optional types a call may only leave at None.
std::string ExpectedType(const ArgSchema& arg) {
  if (arg.type == ArgType::kOther && arg.optional) return "None";
  if (arg.type == ArgType::kTensorList && arg.optional_elements) return "Tensor?[]";
  if (arg.type == ArgType::kIntList && arg.fixed_size > 0) {
    return absl::StrCat(arg.bool_elements ? "bool[" : "int[", arg.fixed_size, "]");
  }
  return std::string(ArgTypeName(arg.type));
}

// The kind of a value in the schema's words: "int", "float", "Tensor", "Tensor[]", ...
absl::string_view ValueKind(const OpValue& value) {
  static constexpr absl::string_view kKinds[] = {"None",       "bool", "int",    "float",   "int[]",
                                                 "ScalarType", "str",  "Tensor", "Tensor[]"};
  static_assert(std::size(kKinds) == std::variant_size_v<OpValue>);
  return kKinds[value.index()];
}

absl::Status BindError(const OpSchema& schema, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(schema.QualifiedName(), ": ", message));
}

absl::Status TypeError(const OpSchema& schema, const ArgSchema& arg, const OpValue& value) {
  const std::string found = std::holds_alternative<NoneValue>(value)
                                ? "None"
                                : absl::StrCat(ValueKind(value), " (", OpValueToString(value), ")");
  return BindError(schema, absl::StrCat("argument '", arg.name, "' must be ", ExpectedType(arg),
                                        ", not ", found));
}

// Whether `value`, not None, is of a kind `arg` takes.
bool Accepts(const ArgSchema& arg, const OpValue& value) {
  switch (arg.type) {
    case ArgType::kTensor:  // a scalar is a wrapped number
      return std::holds_alternative<TensorRef>(value) || IsScalar(value);
    case ArgType::kTensorList:
      return std::holds_alternative<TensorList>(value);
    case ArgType::kInt:
      return std::holds_alternative<int64_t>(value);
    case ArgType::kIntList:
      if (arg.bool_elements) {  // bool[N]: N of 0 and 1, or one bool for all
        if (std::holds_alternative<bool>(value)) return true;
        const auto* list = std::get_if<std::vector<int64_t>>(&value);
        return list != nullptr && static_cast<int>(list->size()) == arg.fixed_size &&
               std::all_of(list->begin(), list->end(), [](int64_t b) { return b == 0 || b == 1; });
      }
      return std::holds_alternative<std::vector<int64_t>>(value) ||
             (arg.fixed_size > 0 && std::holds_alternative<int64_t>(value));
    case ArgType::kFloat:
      return std::holds_alternative<double>(value) || std::holds_alternative<int64_t>(value);
    case ArgType::kScalar:
      return IsScalar(value);
    case ArgType::kBool:
      return std::holds_alternative<bool>(value);
    case ArgType::kDType:
      return std::holds_alternative<DType>(value);
    case ArgType::kString:
      return std::holds_alternative<std::string>(value);
    case ArgType::kOther:
      return false;
  }
  return false;
}

// Every input tensor `value` names is one of the call's `num_tensors`; None only in a Tensor?[].
absl::Status CheckTensorIndices(const OpSchema& schema, const ArgSchema& arg, const OpValue& value,
                                int num_tensors) {
  std::vector<int> indices;
  if (const TensorRef* ref = std::get_if<TensorRef>(&value)) indices.push_back(ref->index);
  if (const TensorList* list = std::get_if<TensorList>(&value)) indices = list->indices;
  for (int index : indices) {
    if (index == -1 && arg.optional_elements) continue;
    if (index == -1 && arg.type == ArgType::kTensorList) {
      return BindError(schema, absl::StrCat("argument '", arg.name, "' (", OpValueToString(value),
                                            ") holds None, which only a Tensor?[] list may"));
    }
    if (index < 0 || index >= num_tensors) {
      return BindError(
          schema, absl::StrCat("argument '", arg.name, "' (", OpValueToString(value),
                               ") refers to input tensor ", index, ", but the call has ",
                               num_tensors, num_tensors == 1 ? " input tensor" : " input tensors"));
    }
  }
  return absl::OkStatus();
}

// `value` in the form `arg` keeps: an int for a float as a double, an int for an `int[N]` as N of
// it.
OpValue Widened(const ArgSchema& arg, OpValue value) {
  const int64_t* i = std::get_if<int64_t>(&value);
  if (const bool* b = std::get_if<bool>(&value); b != nullptr && arg.type == ArgType::kIntList) {
    return std::vector<int64_t>(arg.fixed_size, *b ? 1 : 0);
  }
  if (i != nullptr && arg.type == ArgType::kFloat) return static_cast<double>(*i);
  if (i != nullptr && arg.type == ArgType::kIntList) {
    return std::vector<int64_t>(arg.fixed_size, *i);
  }
  return value;
}

absl::StatusOr<OpValue> CheckValue(const OpSchema& schema, const ArgSchema& arg,
                                   const OpValue& value, int num_tensors) {
  if (std::holds_alternative<NoneValue>(value)) {
    if (!arg.optional) return TypeError(schema, arg, value);
    return value;
  }
  if (!Accepts(arg, value)) return TypeError(schema, arg, value);
  RETURN_IF_ERROR(CheckTensorIndices(schema, arg, value, num_tensors));
  return Widened(arg, value);
}

// The value given for each schema argument (nullptr where none is), positional then keywords.
absl::StatusOr<std::vector<const OpValue*>> AssignArguments(const OpSchema& schema,
                                                            std::span<const NamedValue> args) {
  size_t num_positional = 0;
  while (num_positional < args.size() && args[num_positional].name.empty()) ++num_positional;
  size_t capacity = 0;
  while (capacity < schema.args.size() && !schema.args[capacity].kwarg_only) ++capacity;
  if (num_positional > capacity) {
    return absl::InvalidArgumentError(absl::StrCat(schema.QualifiedName(), " takes ", capacity,
                                                   " positional argument", capacity == 1 ? "" : "s",
                                                   ", got ", num_positional));
  }
  std::vector<const OpValue*> given(schema.args.size(), nullptr);
  for (size_t i = 0; i < num_positional; ++i) given[i] = &args[i].value;
  for (size_t i = num_positional; i < args.size(); ++i) {
    const NamedValue& arg = args[i];
    if (arg.name.empty()) {
      return BindError(schema,
                       absl::StrCat("positional argument ", OpValueToString(arg.value),
                                    " follows keyword argument '", args[num_positional].name, "'"));
    }
    const int index = schema.ArgIndex(arg.name);
    if (index < 0) return BindError(schema, absl::StrCat("unknown argument '", arg.name, "'"));
    if (given[index] != nullptr) {
      return BindError(schema, absl::StrCat("got multiple values for argument '", arg.name, "'"));
    }
    given[index] = &arg.value;
  }
  return given;
}

// A default-constructed T that lives as long as the program, never destroyed, in static storage
// rather than on the heap: what an accessor returns for None or, in a release build, a misuse.
template <typename T>
const T& EmptyValue() {
  alignas(T) static unsigned char storage[sizeof(T)];
  static const T* const value = new (storage) T();
  return *value;
}

// The value of `name` in `bound`, or nullptr where it is not of type T.
template <typename T>
const T* GetIf(const BoundArgs& bound, absl::string_view name) {
  return std::get_if<T>(&bound.Get(name));
}

}  // namespace

absl::StatusOr<BoundArgs> Bind(const OpSchema& schema, std::span<const NamedValue> args,
                               int num_tensors) {
  ASSIGN_OR_RETURN(const std::vector<const OpValue*> given, AssignArguments(schema, args));
  std::vector<OpValue> values;
  values.reserve(schema.args.size());
  for (size_t i = 0; i < schema.args.size(); ++i) {
    const ArgSchema& arg = schema.args[i];
    if (given[i] != nullptr) {
      ASSIGN_OR_RETURN(OpValue value, CheckValue(schema, arg, *given[i], num_tensors));
      values.push_back(std::move(value));
    } else if (arg.default_value.has_value()) {
      values.push_back(Widened(arg, *arg.default_value));
    } else {
      return BindError(schema, absl::StrCat("missing argument '", arg.name, "'"));
    }
  }
  return BoundArgs(&schema, std::move(values));
}

const OpValue& BoundArgs::Get(absl::string_view name) const {
  const int index = schema_ == nullptr ? -1 : schema_->ArgIndex(name);
  assert(index >= 0 && "BoundArgs::Get of an argument the schema does not have");
  return index < 0 ? EmptyValue<OpValue>() : values_[index];
}

bool BoundArgs::IsNone(absl::string_view name) const {
  return std::holds_alternative<NoneValue>(Get(name));
}

int64_t BoundArgs::Int(absl::string_view name) const {
  if (const int64_t* i = GetIf<int64_t>(*this, name)) return *i;
  if (const bool* b = GetIf<bool>(*this, name)) return *b ? 1 : 0;
  assert(false && "BoundArgs::Int of an argument that is not an int");
  return 0;
}

double BoundArgs::Float(absl::string_view name) const {
  const OpValue& value = Get(name);
  assert(IsScalar(value) && "BoundArgs::Float of an argument that is not a number");
  return IsScalar(value) ? ScalarAsDouble(value) : 0.0;
}

bool BoundArgs::Bool(absl::string_view name) const {
  const bool* b = GetIf<bool>(*this, name);
  assert(b != nullptr && "BoundArgs::Bool of an argument that is not a bool");
  return b != nullptr && *b;
}

const std::vector<int64_t>& BoundArgs::Ints(absl::string_view name) const {
  const OpValue& value = Get(name);
  const auto* ints = std::get_if<std::vector<int64_t>>(&value);
  assert((ints != nullptr || std::holds_alternative<NoneValue>(value)) &&
         "BoundArgs::Ints of an argument that is not an int list");
  return ints != nullptr ? *ints : EmptyValue<std::vector<int64_t>>();
}

DType BoundArgs::Dtype(absl::string_view name) const {
  const DType* dtype = GetIf<DType>(*this, name);
  assert(dtype != nullptr && "BoundArgs::Dtype of an argument that is not a dtype");
  return dtype != nullptr ? *dtype : DType::kFloat32;
}

const std::string& BoundArgs::String(absl::string_view name) const {
  const std::string* text = GetIf<std::string>(*this, name);
  assert(text != nullptr && "BoundArgs::String of an argument that is not a string");
  return text != nullptr ? *text : EmptyValue<std::string>();
}

int BoundArgs::Tensor(absl::string_view name) const {
  const TensorRef* ref = GetIf<TensorRef>(*this, name);
  return ref != nullptr ? ref->index : -1;
}

const std::vector<int>& BoundArgs::Tensors(absl::string_view name) const {
  const OpValue& value = Get(name);
  const TensorList* list = std::get_if<TensorList>(&value);
  assert((list != nullptr || std::holds_alternative<NoneValue>(value)) &&
         "BoundArgs::Tensors of an argument that is not a tensor list");
  return list != nullptr ? list->indices : EmptyValue<std::vector<int>>();
}

std::string BoundArgs::ToString() const {
  if (schema_ == nullptr) return "()";
  std::vector<std::string> parts;
  for (size_t i = 0; i < values_.size(); ++i) {
    parts.push_back(absl::StrCat(schema_->args[i].name, "=", OpValueToString(values_[i])));
  }
  const std::string name = schema_->overload.empty()
                               ? schema_->name
                               : absl::StrCat(schema_->name, ".", schema_->overload);
  return absl::StrCat(name, "(", absl::StrJoin(parts, ", "), ")");
}

}  // namespace tessera::ops
