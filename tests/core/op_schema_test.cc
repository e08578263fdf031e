// Op schemas: real ATen schemas parsed (names, overloads, argument types, optionality, keyword-only
// arguments, defaults, returns), malformed ones rejected at the position they break, and calls
// bound as torch's argument parser binds them, with every kind of error and its exact message.

#include "core/ops/op_schema.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tessera::ops {
namespace {

// One argument as a line: "* int[1]? dim=None" (`*`: keyword-only; `=`: the default).
std::string ArgSummary(const ArgSchema& arg) {
  std::string type(ArgTypeName(arg.type));
  if (arg.type == ArgType::kTensorList && arg.optional_elements) type = "Tensor?[]";
  if (arg.type == ArgType::kIntList && arg.fixed_size > 0) {
    type = absl::StrCat("int[", arg.fixed_size, "]");
  }
  if (arg.type == ArgType::kOther) type = "Other";
  return absl::StrCat(
      arg.kwarg_only ? "* " : "", type, arg.optional ? "? " : " ", arg.name,
      arg.default_value.has_value() ? absl::StrCat("=", OpValueToString(*arg.default_value)) : "");
}

// --- parsing real schemas ------------------------------------------------------------------

struct SchemaCase {
  const char* text;
  const char* name;
  const char* overload;
  std::vector<std::string> args;  // ArgSummary of each
  int num_returns;
};

const SchemaCase kSchemaCases[] = {
    {"add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
     "add",
     "Tensor",
     {"Tensor self", "Tensor other", "* Scalar alpha=1"},
     1},
    {"softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
     "softmax",
     "int",
     {"Tensor self", "int dim", "ScalarType? dtype=None"},
     1},
    {"sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) "
     "-> Tensor",
     "sum",
     "dim_IntList",
     {"Tensor self", "int[1]? dim", "bool keepdim=False", "* ScalarType? dtype=None"},
     1},
    {"view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
     "view",
     "",
     {"Tensor self", "int[] size"},
     1},
    {"cat(Tensor[] tensors, int dim=0) -> Tensor", "cat", "", {"Tensor[] tensors", "int dim=0"}, 1},
    {"index.Tensor(Tensor self, Tensor?[] indices) -> Tensor",
     "index",
     "Tensor",
     {"Tensor self", "Tensor?[] indices"},
     1},
    {"slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt "
     "step=1) -> Tensor(a)",
     "slice",
     "Tensor",
     {"Tensor self", "int dim=0", "int? start=None", "int? end=None", "int step=1"},
     1},
    {"gelu(Tensor self, *, str approximate='none') -> Tensor",
     "gelu",
     "",
     {"Tensor self", "* str approximate='none'"},
     1},
    {"native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, "
     "float eps) -> (Tensor, Tensor, Tensor)",
     "native_layer_norm",
     "",
     {"Tensor input", "int[] normalized_shape", "Tensor? weight", "Tensor? bias", "float eps"},
     3},
    {"arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, "
     "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
     "arange",
     "start_step",
     {"Scalar start", "Scalar end", "Scalar step=1", "* ScalarType? dtype=None",
      "* Other? layout=None", "* Other? device=None", "* bool? pin_memory=None"},
     1},
    {"split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
     "split",
     "Tensor",
     {"Tensor self", "int split_size", "int dim=0"},
     1},
    {"_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
     "bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor",
     "_to_copy",
     "",
     {"Tensor self", "* ScalarType? dtype=None", "* Other? layout=None", "* Other? device=None",
      "* bool? pin_memory=None", "* bool non_blocking=False", "* Other? memory_format=None"},
     1},
    {"native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)",
     "native_dropout",
     "",
     {"Tensor input", "float p", "bool? train"},
     2},
    {"std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool "
     "keepdim=False) -> Tensor",
     "std",
     "correction",
     {"Tensor self", "int[1]? dim=None", "* Scalar? correction=None", "* bool keepdim=False"},
     1},
    {"var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool "
     "keepdim=False) -> Tensor",
     "var",
     "correction",
     {"Tensor self", "int[1]? dim=None", "* Scalar? correction=None", "* bool keepdim=False"},
     1},
    {"full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, "
     "Device? device=None, bool? pin_memory=None) -> Tensor",
     "full",
     "",
     {"int[] size", "Scalar fill_value", "* ScalarType? dtype=None", "* Other? layout=None",
      "* Other? device=None", "* bool? pin_memory=None"},
     1},
    {"clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
     "clamp",
     "",
     {"Tensor self", "Scalar? min=None", "Scalar? max=None"},
     1},
    {"embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool "
     "scale_grad_by_freq=False, bool sparse=False) -> Tensor",
     "embedding",
     "",
     {"Tensor weight", "Tensor indices", "int padding_idx=-1", "bool scale_grad_by_freq=False",
      "bool sparse=False"},
     1},
    {"pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
     "pow",
     "Tensor_Scalar",
     {"Tensor self", "Scalar exponent"},
     1},
    {"rsqrt(Tensor self) -> Tensor", "rsqrt", "", {"Tensor self"}, 1},
    {"amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
     "amax",
     "",
     {"Tensor self", "int[1] dim=[]", "bool keepdim=False"},
     1},
    {"_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
     "_softmax",
     "",
     {"Tensor self", "int dim", "bool half_to_float"},
     1},
    {"new_ones(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? "
     "device=None, bool? pin_memory=None) -> Tensor",
     "new_ones",
     "",
     {"Tensor self", "int[] size", "* ScalarType? dtype=None", "* Other? layout=None",
      "* Other? device=None", "* bool? pin_memory=None"},
     1},
    {"topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor "
     "values, Tensor indices)",
     "topk",
     "",
     {"Tensor self", "int k", "int dim=-1", "bool largest=True", "bool sorted=True"},
     2},
    {"max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
     "max",
     "dim",
     {"Tensor self", "int dim", "bool keepdim=False"},
     2},
    // More of torch's syntax: a namespace, fixed-size lists with an int default, a bare name and
    // a dtype name as defaults, an out argument, no returns, floats written every way.
    {"aten::mul.Tensor(Tensor self, Tensor other) -> Tensor",
     "mul",
     "Tensor",
     {"Tensor self", "Tensor other"},
     1},
    {"max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] "
     "dilation=1, bool ceil_mode=False) -> Tensor",
     "max_pool2d",
     "",
     {"Tensor self", "int[2] kernel_size", "int[2] stride=[]", "int[2] padding=[0, 0]",
      "int[2] dilation=[1, 1]", "bool ceil_mode=False"},
     1},
    {"contiguous(Tensor(a) self, *, MemoryFormat memory_format=contiguous_format) -> Tensor(a)",
     "contiguous",
     "",
     {"Tensor self", "* Other memory_format='contiguous_format'"},
     1},
    {"randint(SymInt high, SymInt[] size, *, ScalarType? dtype=long, Layout? layout=None, Device? "
     "device=None, bool? pin_memory=None) -> Tensor",
     "randint",
     "",
     {"int high", "int[] size", "* ScalarType? dtype=torch.int64", "* Other? layout=None",
      "* Other? device=None", "* bool? pin_memory=None"},
     1},
    {"add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
     "add",
     "out",
     {"Tensor self", "Tensor other", "* Scalar alpha=1", "* Tensor out"},
     1},
    {"_foreach_add_.Scalar(Tensor(a!)[] self, Scalar scalar) -> ()",
     "_foreach_add_",
     "Scalar",
     {"Tensor[] self", "Scalar scalar"},
     0},
    {"unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]",
     "unbind",
     "int",
     {"Tensor self", "int dim=0"},
     1},
    {"layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
     "float eps=1e-05, bool cudnn_enable=True) -> Tensor",
     "layer_norm",
     "",
     {"Tensor input", "int[] normalized_shape", "Tensor? weight=None", "Tensor? bias=None",
      "float eps=1e-05", "bool cudnn_enable=True"},
     1},
    {"bernoulli.p(Tensor self, float p=0.5, *, Generator? generator=None) -> Tensor",
     "bernoulli",
     "p",
     {"Tensor self", "float p=0.5", "* Other? generator=None"},
     1},
    {"pairwise_distance(Tensor x1, Tensor x2, float p=2, float eps=1e-06, bool keepdim=False) -> "
     "Tensor",
     "pairwise_distance",
     "",
     {"Tensor x1", "Tensor x2", "float p=2", "float eps=1e-06", "bool keepdim=False"},
     1},
    {"rot90(Tensor self, int k=1, int[] dims=[0,1]) -> Tensor",
     "rot90",
     "",
     {"Tensor self", "int k=1", "int[] dims=[0, 1]"},
     1},
    {"hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1.0) -> Tensor",
     "hardtanh",
     "",
     {"Tensor self", "Scalar min_val=-1", "Scalar max_val=1."},
     1},
    {"gelu_like(Tensor self, str approximate=\"tanh\", ScalarType dtype=torch.float32) -> Tensor",
     "gelu_like",
     "",
     {"Tensor self", "str approximate='tanh'", "ScalarType dtype=torch.float32"},
     1},
    {"to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, "
     "MemoryFormat? memory_format=None) -> Tensor(a)",
     "to",
     "dtype",
     {"Tensor self", "ScalarType dtype", "bool non_blocking=False", "bool copy=False",
      "Other? memory_format=None"},
     1},
    {"_batch_norm_with_update(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!) "
     "running_mean, Tensor(b!) running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, "
     "Tensor)",
     "_batch_norm_with_update",
     "",
     {"Tensor input", "Tensor? weight", "Tensor? bias", "Tensor running_mean", "Tensor running_var",
      "float momentum", "float eps"},
     4},
    {"  sym_size.int ( Tensor self , int dim ) -> SymInt  ",
     "sym_size",
     "int",
     {"Tensor self", "int dim"},
     1},
};

class ParseSchemaTest : public ::testing::TestWithParam<SchemaCase> {};

TEST_P(ParseSchemaTest, ReadsNameArgumentsDefaultsAndReturns) {
  const SchemaCase& c = GetParam();
  absl::StatusOr<OpSchema> schema = ParseSchema(c.text);
  ASSERT_TRUE(schema.ok()) << schema.status();
  EXPECT_EQ(schema->name, c.name);
  EXPECT_EQ(schema->overload, c.overload);
  EXPECT_EQ(schema->text, c.text);
  std::vector<std::string> args;
  for (const ArgSchema& arg : schema->args) args.push_back(ArgSummary(arg));
  EXPECT_EQ(args, c.args);
  EXPECT_EQ(schema->num_returns, c.num_returns);
}

INSTANTIATE_TEST_SUITE_P(AtenSchemas, ParseSchemaTest, ::testing::ValuesIn(kSchemaCases),
                         [](const auto& info) {
                           std::string name = absl::StrCat(info.param.name, "_",
                                                           info.param.overload, "_", info.index);
                           for (char& c : name) {
                             if (c == '.') c = '_';
                           }
                           return name;
                         });

TEST(ParseSchemaTest, DefaultsKeepTheirKinds) {
  absl::StatusOr<OpSchema> add = ParseSchema(kSchemaCases[0].text);
  ASSERT_TRUE(add.ok()) << add.status();
  EXPECT_EQ(add->args[2].default_value, OpValue(int64_t{1}));  // Scalar 1 is an int
  absl::StatusOr<OpSchema> hardtanh =
      ParseSchema("hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1.0) -> Tensor");
  ASSERT_TRUE(hardtanh.ok()) << hardtanh.status();
  EXPECT_EQ(hardtanh->args[1].default_value, OpValue(int64_t{-1}));
  EXPECT_EQ(hardtanh->args[2].default_value, OpValue(1.0));  // Scalar 1.0 is a float
  absl::StatusOr<OpSchema> distance = ParseSchema(
      "pairwise_distance(Tensor x1, Tensor x2, float p=2, float eps=1e-06, bool keepdim=False) "
      "-> Tensor");
  ASSERT_TRUE(distance.ok()) << distance.status();
  EXPECT_EQ(distance->args[2].default_value, OpValue(int64_t{2}));  // Bind widens it
  EXPECT_EQ(distance->args[3].default_value, OpValue(1e-06));
  absl::StatusOr<OpSchema> randint =
      ParseSchema("randint(SymInt high, SymInt[] size, *, ScalarType? dtype=long) -> Tensor");
  ASSERT_TRUE(randint.ok()) << randint.status();
  EXPECT_EQ(randint->args[2].default_value, OpValue(DType::kInt64));
}

TEST(ParseSchemaTest, DtypeDefaultsTakeTorchsNames) {
  const std::pair<const char*, DType> kNames[] = {
      {"long", DType::kInt64},        {"int", DType::kInt32},    {"float", DType::kFloat32},
      {"double", DType::kFloat64},    {"half", DType::kFloat16}, {"bool", DType::kBool},
      {"bfloat16", DType::kBFloat16}, {"uint8", DType::kUInt8},  {"torch.float32", DType::kFloat32},
      {"torch.int8", DType::kInt8},
  };
  for (const auto& [name, dtype] : kNames) {
    absl::StatusOr<OpSchema> schema =
        ParseSchema(absl::StrCat("f(ScalarType dtype=", name, ") -> Tensor"));
    ASSERT_TRUE(schema.ok()) << schema.status();
    EXPECT_EQ(schema->args[0].default_value, OpValue(dtype)) << name;
  }
}

TEST(OpSchemaTest, QualifiedNameAndArgIndex) {
  absl::StatusOr<OpSchema> softmax = ParseSchema(kSchemaCases[1].text);
  ASSERT_TRUE(softmax.ok()) << softmax.status();
  EXPECT_EQ(softmax->QualifiedName(), "aten::softmax.int");
  EXPECT_EQ(softmax->ArgIndex("self"), 0);
  EXPECT_EQ(softmax->ArgIndex("dtype"), 2);
  EXPECT_EQ(softmax->ArgIndex("axis"), -1);
  absl::StatusOr<OpSchema> rsqrt = ParseSchema("rsqrt(Tensor self) -> Tensor");
  ASSERT_TRUE(rsqrt.ok()) << rsqrt.status();
  EXPECT_EQ(rsqrt->QualifiedName(), "aten::rsqrt");
}

TEST(ArgTypeNameTest, NamesEveryType) {
  EXPECT_EQ(ArgTypeName(ArgType::kTensor), "Tensor");
  EXPECT_EQ(ArgTypeName(ArgType::kTensorList), "Tensor[]");
  EXPECT_EQ(ArgTypeName(ArgType::kInt), "int");
  EXPECT_EQ(ArgTypeName(ArgType::kIntList), "int[]");
  EXPECT_EQ(ArgTypeName(ArgType::kFloat), "float");
  EXPECT_EQ(ArgTypeName(ArgType::kScalar), "Scalar");
  EXPECT_EQ(ArgTypeName(ArgType::kBool), "bool");
  EXPECT_EQ(ArgTypeName(ArgType::kDType), "ScalarType");
  EXPECT_EQ(ArgTypeName(ArgType::kString), "str");
  EXPECT_EQ(ArgTypeName(ArgType::kOther), "Layout/Device/MemoryFormat/Generator");
}

// --- malformed schemas ---------------------------------------------------------------------

struct MalformedCase {
  const char* text;
  const char* error;  // the message after "schema '<text>' at position "
};

const MalformedCase kMalformedCases[] = {
    {"", "0: expected an op name, found the end"},
    {"add.Tensor(Tensor self", "22: expected ')', found the end"},
    {"add(Tensor self) Tensor", "17: expected '->', found 'Tensor'"},
    {"add(Tensr self) -> Tensor", "4: unknown type 'Tensr'"},
    {"add(Tensor self, int dim=1.5) -> Tensor", "25: default 1.5 does not fit 'int dim'"},
    {"add(Tensor self, int dim=None) -> Tensor",
     "25: default None does not fit 'int dim', not optional"},
    {"add(Tensor self, bool keepdim=1) -> Tensor", "30: default 1 does not fit 'bool keepdim'"},
    {"f(Tensor self, int[] x=3) -> Tensor", "23: default 3 does not fit 'int[] x'"},
    {"f(Tensor? self=1) -> Tensor", "15: default 1 does not fit 'Tensor? self'"},
    {"f(ScalarType dtype=longer) -> Tensor", "19: default longer does not fit 'ScalarType dtype'"},
    {"f(int x=contiguous_format) -> Tensor", "8: default contiguous_format does not fit 'int x'"},
    {"f(Tensor self, float[] x) -> Tensor", "15: unsupported type 'float[]'"},
    {"f(int?[] x) -> Tensor", "2: unsupported type 'int?[]'"},
    {"f(Tensor[2] x) -> Tensor", "2: unsupported type 'Tensor[2]'"},
    {"f(int[0] x) -> Tensor", "6: expected a list size from 1, found '0'"},
    {"f(int[][] x) -> Tensor", "7: lists of lists are not supported"},
    {"f(Tensor?? x) -> Tensor", "9: a second '?'"},
    {"f(Tensor self, *, int a, *, int b) -> Tensor", "25: a second '*'"},
    {"f(Tensor self, int self) -> Tensor", "15: a second argument named 'self'"},
    {"f(Tensor self, str s='abc) -> Tensor", "21: a string without its closing quote"},
    {"f(Tensor(a", "8: an alias annotation without ')'"},
    {"f(Tensor self) -> Tensor extra", "25: expected the end of the schema, found 'extra'"},
    {"prims::add(Tensor self) -> Tensor", "0: namespace 'prims' is not aten"},
    {"f(Tensor self) -> (Tensor, ", "27: expected a type, found the end"},
    {"f(int[] x=[1, 2.5]) -> Tensor", "14: '2.5' in a list default is not an integer"},
    {"f(int[] x=[1,]) -> Tensor", "13: expected an integer, found ']'"},
    {"f(int x=) -> Tensor", "8: expected a default value, found ')'"},
    {"f(int x=99999999999999999999) -> Tensor", "8: '99999999999999999999' is not a number"},
    {"f(int x=-) -> Tensor", "8: '-' is not a number"},
    {"f(int 3x) -> Tensor", "6: expected an argument name, found '3x'"},
    {"f.(int x) -> Tensor", "2: expected an overload name, found '('"},
    {"f(int x) -> int(a)", "15: expected the end of the schema, found '('"},
};

class MalformedSchemaTest : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(MalformedSchemaTest, IsInvalidArgumentNamingThePosition) {
  const MalformedCase& c = GetParam();
  absl::StatusOr<OpSchema> schema = ParseSchema(c.text);
  ASSERT_FALSE(schema.ok()) << c.text;
  EXPECT_EQ(schema.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(schema.status().message(), absl::StrCat("schema '", c.text, "' at position ", c.error));
}

INSTANTIATE_TEST_SUITE_P(Malformed, MalformedSchemaTest, ::testing::ValuesIn(kMalformedCases));

// --- binding calls -------------------------------------------------------------------------

// The schema parsed from `text`, which the test knows to be good.
OpSchema Schema(const char* text) {
  absl::StatusOr<OpSchema> schema = ParseSchema(text);
  EXPECT_TRUE(schema.ok()) << schema.status();
  return schema.ok() ? *std::move(schema) : OpSchema{};
}

NamedValue Arg(OpValue value) { return {"", std::move(value)}; }
NamedValue Kwarg(std::string name, OpValue value) { return {std::move(name), std::move(value)}; }
TensorRef T(int index) { return TensorRef{index}; }

constexpr char kSoftmax[] = "softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor";
constexpr char kAdd[] = "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor";
constexpr char kSum[] =
    "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> "
    "Tensor";

TEST(BindTest, FillsDefaultsInSchemaOrder) {
  const OpSchema softmax = Schema(kSoftmax);
  absl::StatusOr<BoundArgs> bound = Bind(softmax, std::vector{Arg(T(0)), Arg(int64_t{-1})}, 1);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ(bound->ToString(), "softmax.int(self=%0, dim=-1, dtype=None)");
  EXPECT_EQ(bound->Tensor("self"), 0);
  EXPECT_EQ(bound->Int("dim"), -1);
  EXPECT_TRUE(bound->IsNone("dtype"));
  EXPECT_FALSE(bound->IsNone("dim"));
  EXPECT_EQ(&bound->schema(), &softmax);
  EXPECT_EQ(bound->values().size(), 3u);
}

TEST(BindTest, TakesKeywordsInAnyOrder) {
  const OpSchema softmax = Schema(kSoftmax);
  absl::StatusOr<BoundArgs> bound = Bind(
      softmax,
      std::vector{Kwarg("dtype", DType::kFloat64), Kwarg("dim", int64_t{1}), Kwarg("self", T(1))},
      2);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ(bound->ToString(), "softmax.int(self=%1, dim=1, dtype=torch.float64)");
  EXPECT_EQ(bound->Dtype("dtype"), DType::kFloat64);
}

TEST(BindTest, KeywordOnlyScalarKeepsItsKind) {
  const OpSchema add = Schema(kAdd);
  absl::StatusOr<BoundArgs> bound =
      Bind(add, std::vector{Arg(T(0)), Arg(T(1)), Kwarg("alpha", 2.5)}, 2);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ(bound->Get("alpha"), OpValue(2.5));
  EXPECT_EQ(bound->Float("alpha"), 2.5);
  absl::StatusOr<BoundArgs> by_default = Bind(add, std::vector{Arg(T(0)), Arg(T(1))}, 2);
  ASSERT_TRUE(by_default.ok()) << by_default.status();
  EXPECT_EQ(by_default->Get("alpha"), OpValue(int64_t{1}));  // a Scalar int stays an int
  EXPECT_EQ(by_default->Int("alpha"), 1);
  EXPECT_EQ(by_default->Float("alpha"), 1.0);
  absl::StatusOr<BoundArgs> boolean =
      Bind(add, std::vector{Arg(T(0)), Arg(T(1)), Kwarg("alpha", true)}, 2);
  ASSERT_TRUE(boolean.ok()) << boolean.status();
  EXPECT_EQ(boolean->Float("alpha"), 1.0);
  EXPECT_EQ(boolean->Int("alpha"), 1);
}

TEST(BindTest, AScalarForATensorIsAWrappedNumber) {
  const OpSchema add = Schema(kAdd);
  for (const OpValue& number : {OpValue(2.5), OpValue(int64_t{2}), OpValue(true)}) {
    absl::StatusOr<BoundArgs> bound = Bind(add, std::vector{Arg(T(0)), Arg(number)}, 1);
    ASSERT_TRUE(bound.ok()) << bound.status();
    EXPECT_EQ(bound->Get("other"), number);
    EXPECT_EQ(bound->Tensor("other"), -1);
  }
}

TEST(BindTest, AnIntForAFloatIsWidened) {
  const OpSchema dropout = Schema(
      "native_dropout(Tensor input, float p, bool? train) -> "
      "(Tensor, Tensor)");
  absl::StatusOr<BoundArgs> bound =
      Bind(dropout, std::vector{Arg(T(0)), Arg(int64_t{1}), Arg(true)}, 1);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ(bound->Get("p"), OpValue(1.0));
  EXPECT_TRUE(bound->Bool("train"));
  const OpSchema distance = Schema(
      "pairwise_distance(Tensor x1, Tensor x2, float p=2, float eps=1e-06, bool keepdim=False) -> "
      "Tensor");
  absl::StatusOr<BoundArgs> defaults = Bind(distance, std::vector{Arg(T(0)), Arg(T(1))}, 2);
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->Get("p"), OpValue(2.0));  // the int default, widened
  EXPECT_EQ(defaults->Float("eps"), 1e-06);
  EXPECT_FALSE(defaults->Bool("keepdim"));
}

TEST(BindTest, FixedSizeIntListsTakeABareInt) {
  const OpSchema sum = Schema(kSum);
  absl::StatusOr<BoundArgs> one = Bind(sum, std::vector{Arg(T(0)), Arg(int64_t{1})}, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->Ints("dim"), (std::vector<int64_t>{1}));
  absl::StatusOr<BoundArgs> two =
      Bind(sum, std::vector{Arg(T(0)), Arg(std::vector<int64_t>{0, 1}), Arg(true)}, 1);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->ToString(), "sum.dim_IntList(self=%0, dim=[0, 1], keepdim=True, dtype=None)");
  absl::StatusOr<BoundArgs> none = Bind(sum, std::vector{Arg(T(0)), Arg(NoneValue{})}, 1);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->IsNone("dim"));
  EXPECT_TRUE(none->Ints("dim").empty());
  const OpSchema pool = Schema(
      "max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] "
      "dilation=1, bool ceil_mode=False) -> Tensor");
  absl::StatusOr<BoundArgs> pooled = Bind(pool, std::vector{Arg(T(0)), Arg(int64_t{3})}, 1);
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  EXPECT_EQ(pooled->ToString(),
            "max_pool2d(self=%0, kernel_size=[3, 3], stride=[], padding=[0, 0], dilation=[1, 1], "
            "ceil_mode=False)");
}

TEST(BindTest, TensorListsAndOptionalTensors) {
  const OpSchema cat = Schema("cat(Tensor[] tensors, int dim=0) -> Tensor");
  absl::StatusOr<BoundArgs> bound = Bind(cat, std::vector{Arg(TensorList{{0, 2, 1}})}, 3);
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ(bound->Tensors("tensors"), (std::vector<int>{0, 2, 1}));
  EXPECT_EQ(bound->ToString(), "cat(tensors=[%0, %2, %1], dim=0)");
  const OpSchema index = Schema("index.Tensor(Tensor self, Tensor?[] indices) -> Tensor");
  absl::StatusOr<BoundArgs> indexed =
      Bind(index, std::vector{Arg(T(0)), Arg(TensorList{{-1, 1}})}, 2);
  ASSERT_TRUE(indexed.ok()) << indexed.status();
  EXPECT_EQ(indexed->Tensors("indices"), (std::vector<int>{-1, 1}));
  EXPECT_EQ(indexed->ToString(), "index.Tensor(self=%0, indices=[None, %1])");
  const OpSchema norm = Schema(
      "native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, "
      "float eps) -> (Tensor, Tensor, Tensor)");
  absl::StatusOr<BoundArgs> normed = Bind(
      norm,
      std::vector{Arg(T(0)), Arg(std::vector<int64_t>{8}), Arg(T(1)), Arg(NoneValue{}), Arg(1e-5)},
      2);
  ASSERT_TRUE(normed.ok()) << normed.status();
  EXPECT_EQ(normed->Tensor("weight"), 1);
  EXPECT_EQ(normed->Tensor("bias"), -1);
  EXPECT_EQ(normed->Ints("normalized_shape"), (std::vector<int64_t>{8}));
}

TEST(BindTest, StringsAndOtherTypesLeftAtNone) {
  const OpSchema gelu = Schema("gelu(Tensor self, *, str approximate='none') -> Tensor");
  absl::StatusOr<BoundArgs> tanh =
      Bind(gelu, std::vector{Arg(T(0)), Kwarg("approximate", std::string("tanh"))}, 1);
  ASSERT_TRUE(tanh.ok()) << tanh.status();
  EXPECT_EQ(tanh->String("approximate"), "tanh");
  EXPECT_EQ(tanh->ToString(), "gelu(self=%0, approximate='tanh')");
  const OpSchema to_copy = Schema(
      "_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
      "bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> "
      "Tensor");
  absl::StatusOr<BoundArgs> copied = Bind(
      to_copy,
      std::vector{Arg(T(0)), Kwarg("dtype", DType::kBFloat16), Kwarg("layout", NoneValue{})}, 1);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_EQ(copied->ToString(),
            "_to_copy(self=%0, dtype=torch.bfloat16, layout=None, device=None, pin_memory=None, "
            "non_blocking=False, memory_format=None)");
  const OpSchema contiguous = Schema(
      "contiguous(Tensor(a) self, *, MemoryFormat memory_format=contiguous_format) -> Tensor(a)");
  absl::StatusOr<BoundArgs> left = Bind(contiguous, std::vector{Arg(T(0))}, 1);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(left->String("memory_format"), "contiguous_format");
  EXPECT_FALSE(
      Bind(contiguous, std::vector{Arg(T(0)), Kwarg("memory_format", std::string("x"))}, 1).ok());
  const OpSchema clamp = Schema("clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor");
  absl::StatusOr<BoundArgs> clamped = Bind(clamp, std::vector{Arg(T(0)), Kwarg("max", 1.5)}, 1);
  ASSERT_TRUE(clamped.ok()) << clamped.status();
  EXPECT_TRUE(clamped->IsNone("min"));
  EXPECT_EQ(clamped->Float("max"), 1.5);
}

// --- binding errors ------------------------------------------------------------------------

struct BindErrorCase {
  const char* label;
  const char* schema;
  std::vector<NamedValue> args;
  int num_tensors;
  const char* error;
};

constexpr char kCat[] = "cat(Tensor[] tensors, int dim=0) -> Tensor";
constexpr char kIndex[] = "index.Tensor(Tensor self, Tensor?[] indices) -> Tensor";
constexpr char kDropout[] =
    "native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)";
constexpr char kToCopy[] =
    "_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None) -> Tensor";

const std::vector<BindErrorCase>& BindErrorCases() {
  static const std::vector<BindErrorCase>* const kCases = new std::vector<BindErrorCase>{
      {"FloatForInt",
       kSoftmax,
       {Arg(T(0)), Arg(1.5)},
       1,
       "aten::softmax.int: argument 'dim' must be int, not float (1.5)"},
      {"BoolForInt",
       kSoftmax,
       {Arg(T(0)), Arg(true)},
       1,
       "aten::softmax.int: argument 'dim' must be int, not bool (True)"},
      {"NoneForInt",
       kSoftmax,
       {Arg(T(0)), Arg(NoneValue{})},
       1,
       "aten::softmax.int: argument 'dim' must be int, not None"},
      {"NoneForTensor",
       kSoftmax,
       {Arg(NoneValue{}), Arg(int64_t{0})},
       1,
       "aten::softmax.int: argument 'self' must be Tensor, not None"},
      {"StringForDtype",
       kSoftmax,
       {Arg(T(0)), Arg(int64_t{0}), Arg(std::string("float32"))},
       1,
       "aten::softmax.int: argument 'dtype' must be ScalarType, not str ('float32')"},
      {"Missing", kSoftmax, {Arg(T(0))}, 1, "aten::softmax.int: missing argument 'dim'"},
      {"Unknown",
       kSoftmax,
       {Arg(T(0)), Kwarg("axis", int64_t{1})},
       1,
       "aten::softmax.int: unknown argument 'axis'"},
      {"TooManyPositional",
       kSoftmax,
       {Arg(T(0)), Arg(int64_t{1}), Arg(DType::kFloat32), Arg(true)},
       1,
       "aten::softmax.int takes 3 positional arguments, got 4"},
      {"KeywordOnlyByPosition",
       kAdd,
       {Arg(T(0)), Arg(T(1)), Arg(int64_t{2})},
       2,
       "aten::add.Tensor takes 2 positional arguments, got 3"},
      {"OnePositional",
       "rsqrt(Tensor self) -> Tensor",
       {Arg(T(0)), Arg(T(0))},
       1,
       "aten::rsqrt takes 1 positional argument, got 2"},
      {"TwiceByPositionAndKeyword",
       kSoftmax,
       {Arg(T(0)), Arg(int64_t{1}), Kwarg("dim", int64_t{2})},
       1,
       "aten::softmax.int: got multiple values for argument 'dim'"},
      {"TwiceByKeyword",
       kSoftmax,
       {Arg(T(0)), Kwarg("dim", int64_t{1}), Kwarg("dim", int64_t{2})},
       1,
       "aten::softmax.int: got multiple values for argument 'dim'"},
      {"PositionalAfterKeyword",
       kSoftmax,
       {Arg(T(0)), Kwarg("dim", int64_t{1}), Arg(NoneValue{})},
       1,
       "aten::softmax.int: positional argument None follows keyword argument 'dim'"},
      {"TensorOutOfRange",
       kAdd,
       {Arg(T(0)), Arg(T(2))},
       2,
       "aten::add.Tensor: argument 'other' (%2) refers to input tensor 2, but the call has 2 "
       "input tensors"},
      {"NegativeTensor",
       kAdd,
       {Arg(T(-1)), Arg(T(0))},
       1,
       "aten::add.Tensor: argument 'self' (%-1) refers to input tensor -1, but the call has 1 "
       "input tensor"},
      {"ListTensorOutOfRange",
       kCat,
       {Arg(TensorList{{0, 3}})},
       2,
       "aten::cat: argument 'tensors' ([%0, %3]) refers to input tensor 3, but the call has 2 "
       "input tensors"},
      {"NoneInTensorList",
       kCat,
       {Arg(TensorList{{0, -1}})},
       2,
       "aten::cat: argument 'tensors' ([%0, None]) holds None, which only a Tensor?[] list may"},
      {"BelowNoneInOptionalList",
       kIndex,
       {Arg(T(0)), Arg(TensorList{{-2}})},
       1,
       "aten::index.Tensor: argument 'indices' ([%-2]) refers to input tensor -2, but the call "
       "has 1 input tensor"},
      {"StringForTensor",
       kAdd,
       {Arg(T(0)), Arg(std::string("x"))},
       1,
       "aten::add.Tensor: argument 'other' must be Tensor, not str ('x')"},
      {"IntListForTensor",
       kAdd,
       {Arg(T(0)), Arg(std::vector<int64_t>{1, 2})},
       1,
       "aten::add.Tensor: argument 'other' must be Tensor, not int[] ([1, 2])"},
      {"TensorListForTensor",
       kAdd,
       {Arg(T(0)), Arg(TensorList{{0}})},
       1,
       "aten::add.Tensor: argument 'other' must be Tensor, not Tensor[] ([%0])"},
      {"DtypeForTensor",
       kAdd,
       {Arg(T(0)), Arg(DType::kInt8)},
       1,
       "aten::add.Tensor: argument 'other' must be Tensor, not ScalarType (torch.int8)"},
      {"TensorForTensorList",
       kCat,
       {Arg(T(0))},
       1,
       "aten::cat: argument 'tensors' must be Tensor[], not Tensor (%0)"},
      {"TensorForOptionalTensorList",
       kIndex,
       {Arg(T(0)), Arg(T(0))},
       1,
       "aten::index.Tensor: argument 'indices' must be Tensor?[], not Tensor (%0)"},
      {"IntForIntList",
       "view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
       {Arg(T(0)), Arg(int64_t{4})},
       1,
       "aten::view: argument 'size' must be int[], not int (4)"},
      {"FloatForFixedIntList",
       kSum,
       {Arg(T(0)), Arg(1.5)},
       1,
       "aten::sum.dim_IntList: argument 'dim' must be int[1], not float (1.5)"},
      {"TensorForScalar",
       "pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
       {Arg(T(0)), Arg(T(0))},
       1,
       "aten::pow.Tensor_Scalar: argument 'exponent' must be Scalar, not Tensor (%0)"},
      {"BoolForFloat",
       kDropout,
       {Arg(T(0)), Arg(true), Arg(true)},
       1,
       "aten::native_dropout: argument 'p' must be float, not bool (True)"},
      {"IntForBool",
       kDropout,
       {Arg(T(0)), Arg(0.5), Arg(int64_t{1})},
       1,
       "aten::native_dropout: argument 'train' must be bool, not int (1)"},
      {"IntForString",
       "gelu(Tensor self, *, str approximate='none') -> Tensor",
       {Arg(T(0)), Kwarg("approximate", int64_t{1})},
       1,
       "aten::gelu: argument 'approximate' must be str, not int (1)"},
      {"NoneForRequiredDevice",
       "to.device(Tensor(a) self, Device device, ScalarType dtype) -> Tensor(a)",
       {Arg(T(0)), Arg(NoneValue{}), Arg(DType::kFloat32)},
       1,
       "aten::to.device: argument 'device' must be Layout/Device/MemoryFormat/Generator, not "
       "None"},
      {"ValueForLayout",
       kToCopy,
       {Arg(T(0)), Kwarg("layout", int64_t{1})},
       1,
       "aten::_to_copy: argument 'layout' must be None, not int (1)"},
  };
  return *kCases;
}

class BindErrorTest : public ::testing::TestWithParam<BindErrorCase> {};

TEST_P(BindErrorTest, IsInvalidArgumentNamingOpArgumentAndValue) {
  const BindErrorCase& c = GetParam();
  const OpSchema schema = Schema(c.schema);
  absl::StatusOr<BoundArgs> bound = Bind(schema, c.args, c.num_tensors);
  ASSERT_FALSE(bound.ok()) << bound->ToString();
  EXPECT_EQ(bound.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(bound.status().message()), c.error);
}

INSTANTIATE_TEST_SUITE_P(Errors, BindErrorTest, ::testing::ValuesIn(BindErrorCases()),
                         [](const auto& info) { return std::string(info.param.label); });

// --- values as text ------------------------------------------------------------------------

TEST(OpValueTest, PrintsAsTorchsSchemaPrinter) {
  EXPECT_EQ(OpValueToString(NoneValue{}), "None");
  EXPECT_EQ(OpValueToString(true), "True");
  EXPECT_EQ(OpValueToString(false), "False");
  EXPECT_EQ(OpValueToString(int64_t{3}), "3");
  EXPECT_EQ(OpValueToString(int64_t{-1}), "-1");
  EXPECT_EQ(OpValueToString(1.5), "1.5");
  EXPECT_EQ(OpValueToString(2.0), "2.");
  EXPECT_EQ(OpValueToString(-0.0), "-0.");
  EXPECT_EQ(OpValueToString(1e-05), "1e-05");
  EXPECT_EQ(OpValueToString(0.1), "0.1");
  EXPECT_EQ(OpValueToString(1e20), "1e+20");
  EXPECT_EQ(OpValueToString(std::vector<int64_t>{0, 1}), "[0, 1]");
  EXPECT_EQ(OpValueToString(std::vector<int64_t>{}), "[]");
  EXPECT_EQ(OpValueToString(DType::kFloat32), "torch.float32");
  EXPECT_EQ(OpValueToString(std::string("tanh")), "'tanh'");
  EXPECT_EQ(OpValueToString(TensorRef{1}), "%1");
  EXPECT_EQ(OpValueToString(TensorList{{0, 2}}), "[%0, %2]");
  EXPECT_EQ(OpValueToString(TensorList{{-1, 2}}), "[None, %2]");
}

TEST(OpValueTest, ScalarsAreBoolsIntsAndFloats) {
  EXPECT_TRUE(IsScalar(true));
  EXPECT_TRUE(IsScalar(int64_t{2}));
  EXPECT_TRUE(IsScalar(2.5));
  EXPECT_FALSE(IsScalar(NoneValue{}));
  EXPECT_FALSE(IsScalar(TensorRef{0}));
  EXPECT_FALSE(IsScalar(std::vector<int64_t>{1}));
  EXPECT_FALSE(IsScalar(DType::kBool));
  EXPECT_EQ(ScalarAsDouble(true), 1.0);
  EXPECT_EQ(ScalarAsDouble(false), 0.0);
  EXPECT_EQ(ScalarAsDouble(int64_t{-3}), -3.0);
  EXPECT_EQ(ScalarAsDouble(2.5), 2.5);
}

}  // namespace
}  // namespace tessera::ops
