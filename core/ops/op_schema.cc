#include "core/ops/op_schema.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"

namespace tessera::ops {
namespace {

bool IsIdentifierStart(char c) { return absl::ascii_isalpha(c) || c == '_'; }
bool IsIdentifierChar(char c) { return absl::ascii_isalnum(c) || c == '_'; }

// The argument type a base type name of a schema stands for.
std::optional<ArgType> BaseType(absl::string_view name) {
  if (name == "Tensor") return ArgType::kTensor;
  if (name == "int" || name == "SymInt") return ArgType::kInt;
  if (name == "float") return ArgType::kFloat;
  if (name == "Scalar") return ArgType::kScalar;
  if (name == "bool") return ArgType::kBool;
  if (name == "ScalarType") return ArgType::kDType;
  if (name == "str") return ArgType::kString;
  if (name == "Layout" || name == "Device" || name == "MemoryFormat" || name == "Generator") {
    return ArgType::kOther;
  }
  return std::nullopt;
}

// Whether a default literal (not None) is a value of `type`, as the schema writes it.
bool DefaultFits(const ArgSchema& arg, const OpValue& value) {
  switch (arg.type) {
    case ArgType::kBool:
      return std::holds_alternative<bool>(value);
    case ArgType::kInt:
      return std::holds_alternative<int64_t>(value);
    case ArgType::kFloat:  // an int default stays int64; Bind widens it
      return std::holds_alternative<int64_t>(value) || std::holds_alternative<double>(value);
    case ArgType::kScalar:
      return IsScalar(value);
    case ArgType::kIntList:
      return std::holds_alternative<std::vector<int64_t>>(value) ||
             (arg.fixed_size > 0 && std::holds_alternative<int64_t>(value));
    case ArgType::kString:
    case ArgType::kOther:  // Device device="cpu"
      return std::holds_alternative<std::string>(value);
    case ArgType::kDType:  // a dtype is a bare name, read apart
    case ArgType::kTensor:
    case ArgType::kTensorList:
      return false;
  }
  return false;
}

// A default value as written: a literal, or a bare name (`long`, `contiguous_format`).
struct DefaultLiteral {
  OpValue value;
  bool bare_name = false;
};

// Reads torch's schema syntax left to right; every error names the position it stopped at.
class SchemaParser {
 public:
  explicit SchemaParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<OpSchema> Parse();

 private:
  absl::Status ErrorAt(size_t position, absl::string_view message) const;
  // The error that `what` was expected at the current position, naming the token found there.
  absl::Status Expected(absl::string_view what) const;
  void SkipSpaces();
  bool AtEnd() const { return pos_ >= text_.size(); }
  // Whether the next character after spaces is `c` (left unread).
  bool Peek(char c);
  // Reads `token` after spaces if it is next.
  bool Consume(absl::string_view token);
  absl::Status Expect(absl::string_view token);
  absl::StatusOr<std::string> Identifier(absl::string_view what);

  absl::Status Name(OpSchema& schema);
  absl::Status Arguments(OpSchema& schema);
  absl::StatusOr<ArgSchema> Argument(bool kwarg_only);
  absl::StatusOr<ArgSchema> Type();
  absl::Status ListSuffix(size_t start, ArgSchema& arg);
  absl::Status AliasAnnotation();
  absl::StatusOr<DefaultLiteral> Literal();
  absl::StatusOr<OpValue> Number();
  absl::StatusOr<std::vector<int64_t>> IntList();
  absl::StatusOr<std::string> QuotedString();
  absl::StatusOr<OpValue> DefaultFor(const ArgSchema& arg, absl::string_view declaration,
                                     DefaultLiteral literal, size_t start);
  absl::StatusOr<int> Returns(bool& list);

  absl::string_view text_;
  size_t pos_ = 0;
};

absl::StatusOr<OpSchema> SchemaParser::Parse() {
  OpSchema schema;
  schema.text = std::string(text_);
  RETURN_IF_ERROR(Name(schema));
  RETURN_IF_ERROR(Arguments(schema));
  ASSIGN_OR_RETURN(schema.num_returns, Returns(schema.returns_list));
  SkipSpaces();
  if (!AtEnd()) return Expected("the end of the schema");
  return schema;
}

absl::Status SchemaParser::ErrorAt(size_t position, absl::string_view message) const {
  return absl::InvalidArgumentError(
      absl::StrCat("schema '", text_, "' at position ", position, ": ", message));
}

absl::Status SchemaParser::Expected(absl::string_view what) const {
  if (AtEnd()) return ErrorAt(pos_, absl::StrCat("expected ", what, ", found the end"));
  size_t end = pos_;
  while (end < text_.size() && IsIdentifierChar(text_[end])) ++end;
  if (end == pos_) ++end;
  return ErrorAt(pos_,
                 absl::StrCat("expected ", what, ", found '", text_.substr(pos_, end - pos_), "'"));
}

void SchemaParser::SkipSpaces() {
  while (!AtEnd() && absl::ascii_isspace(text_[pos_])) ++pos_;
}

bool SchemaParser::Peek(char c) {
  SkipSpaces();
  return !AtEnd() && text_[pos_] == c;
}

bool SchemaParser::Consume(absl::string_view token) {
  SkipSpaces();
  if (!absl::StartsWith(text_.substr(pos_), token)) return false;
  pos_ += token.size();
  return true;
}

absl::Status SchemaParser::Expect(absl::string_view token) {
  if (Consume(token)) return absl::OkStatus();
  return Expected(absl::StrCat("'", token, "'"));
}

absl::StatusOr<std::string> SchemaParser::Identifier(absl::string_view what) {
  SkipSpaces();
  if (AtEnd() || !IsIdentifierStart(text_[pos_])) return Expected(what);
  const size_t start = pos_;
  while (!AtEnd() && IsIdentifierChar(text_[pos_])) ++pos_;
  return std::string(text_.substr(start, pos_ - start));
}

// name := ["aten::"] identifier ["." overload]
absl::Status SchemaParser::Name(OpSchema& schema) {
  SkipSpaces();
  const size_t start = pos_;
  ASSIGN_OR_RETURN(schema.name, Identifier("an op name"));
  if (Consume("::")) {
    if (schema.name != "aten") {
      return ErrorAt(start, absl::StrCat("namespace '", schema.name, "' is not aten"));
    }
    ASSIGN_OR_RETURN(schema.name, Identifier("an op name"));
  }
  if (!AtEnd() && text_[pos_] == '.') {
    ++pos_;
    ASSIGN_OR_RETURN(schema.overload, Identifier("an overload name"));
  }
  return absl::OkStatus();
}

// arguments := "(" [argument | "*"] ("," (argument | "*"))* ")"
absl::Status SchemaParser::Arguments(OpSchema& schema) {
  RETURN_IF_ERROR(Expect("("));
  if (Consume(")")) return absl::OkStatus();
  bool kwarg_only = false;
  do {
    SkipSpaces();
    const size_t start = pos_;
    if (Consume("*")) {
      if (kwarg_only) return ErrorAt(start, "a second '*'");
      kwarg_only = true;
      continue;
    }
    ASSIGN_OR_RETURN(ArgSchema arg, Argument(kwarg_only));
    if (schema.ArgIndex(arg.name) >= 0) {
      return ErrorAt(start, absl::StrCat("a second argument named '", arg.name, "'"));
    }
    schema.args.push_back(std::move(arg));
  } while (Consume(","));
  return Expect(")");
}

// argument := type name ["=" default]
absl::StatusOr<ArgSchema> SchemaParser::Argument(bool kwarg_only) {
  SkipSpaces();
  const size_t declaration_start = pos_;
  ASSIGN_OR_RETURN(ArgSchema arg, Type());
  ASSIGN_OR_RETURN(arg.name, Identifier("an argument name"));
  arg.kwarg_only = kwarg_only;
  const absl::string_view declaration = text_.substr(declaration_start, pos_ - declaration_start);
  if (Consume("=")) {
    SkipSpaces();
    const size_t start = pos_;
    ASSIGN_OR_RETURN(DefaultLiteral literal, Literal());
    ASSIGN_OR_RETURN(arg.default_value, DefaultFor(arg, declaration, std::move(literal), start));
  }
  return arg;
}

// type := base ["(" alias ")"] ("?" | "[" [N] "]" | "(" alias ")")*
absl::StatusOr<ArgSchema> SchemaParser::Type() {
  SkipSpaces();
  const size_t start = pos_;
  ASSIGN_OR_RETURN(const std::string base, Identifier("a type"));
  const std::optional<ArgType> type = BaseType(base);
  if (!type.has_value()) return ErrorAt(start, absl::StrCat("unknown type '", base, "'"));
  ArgSchema arg;
  arg.type = *type;
  bool list = false;
  while (true) {
    SkipSpaces();
    const size_t at = pos_;
    if (Consume("?")) {
      if (arg.optional) return ErrorAt(at, "a second '?'");
      arg.optional = true;
    } else if (Peek('[')) {
      if (list) return ErrorAt(at, "lists of lists are not supported");
      RETURN_IF_ERROR(ListSuffix(start, arg));
      list = true;
    } else if (Peek('(') && (arg.type == ArgType::kTensor || arg.type == ArgType::kTensorList)) {
      RETURN_IF_ERROR(AliasAnnotation());
    } else {
      return arg;
    }
  }
}

// "[]" or "[N]" after the type from `start`: a Tensor, Tensor? or int list.
absl::Status SchemaParser::ListSuffix(size_t start, ArgSchema& arg) {
  RETURN_IF_ERROR(Expect("["));
  SkipSpaces();
  const size_t size_start = pos_;
  while (!AtEnd() && absl::ascii_isdigit(text_[pos_])) ++pos_;
  int size = 0;
  if (pos_ > size_start &&
      (!absl::SimpleAtoi(text_.substr(size_start, pos_ - size_start), &size) || size <= 0)) {
    pos_ = size_start;
    return Expected("a list size from 1");
  }
  RETURN_IF_ERROR(Expect("]"));
  if (arg.type == ArgType::kTensor && size == 0) {
    arg.type = ArgType::kTensorList;
    arg.optional_elements = arg.optional;
    arg.optional = false;
    return absl::OkStatus();
  }
  if (arg.type == ArgType::kInt && !arg.optional) {
    arg.type = ArgType::kIntList;
    arg.fixed_size = size;
    return absl::OkStatus();
  }
  if (arg.type == ArgType::kBool && !arg.optional && size > 0) {  // bool[3] output_mask
    arg.type = ArgType::kIntList;
    arg.fixed_size = size;
    arg.bool_elements = true;
    return absl::OkStatus();
  }
  return ErrorAt(start, absl::StrCat("unsupported type '", text_.substr(start, pos_ - start), "'"));
}

// "(a)", "(a!)", "(a -> *)": what the argument aliases, which binding does not need.
absl::Status SchemaParser::AliasAnnotation() {
  RETURN_IF_ERROR(Expect("("));
  const size_t start = pos_ - 1;
  while (!AtEnd() && text_[pos_] != ')' && text_[pos_] != '(') ++pos_;
  if (AtEnd() || text_[pos_] == '(') return ErrorAt(start, "an alias annotation without ')'");
  ++pos_;
  return absl::OkStatus();
}

// default := "None" | "True" | "False" | number | "[" ints "]" | quoted string | bare name
absl::StatusOr<DefaultLiteral> SchemaParser::Literal() {
  SkipSpaces();
  if (AtEnd()) return Expected("a default value");
  const char c = text_[pos_];
  if (c == '[') {
    ASSIGN_OR_RETURN(std::vector<int64_t> list, IntList());
    return DefaultLiteral{std::move(list)};
  }
  if (c == '"' || c == '\'') {
    ASSIGN_OR_RETURN(std::string text, QuotedString());
    return DefaultLiteral{std::move(text)};
  }
  if (c == '-' || absl::ascii_isdigit(c)) {
    ASSIGN_OR_RETURN(OpValue number, Number());
    return DefaultLiteral{std::move(number)};
  }
  if (!IsIdentifierStart(c)) return Expected("a default value");
  ASSIGN_OR_RETURN(std::string name, Identifier("a default value"));
  if (name == "None") return DefaultLiteral{NoneValue{}};
  if (name == "True" || name == "False") return DefaultLiteral{name == "True"};
  while (!AtEnd() && text_[pos_] == '.') {  // torch.float32
    ++pos_;
    ASSIGN_OR_RETURN(std::string part, Identifier("a name after '.'"));
    absl::StrAppend(&name, ".", part);
  }
  return DefaultLiteral{std::move(name), /*bare_name=*/true};
}

// An int ("-1") or, with a point or an exponent, a float ("0.5", "1e-05").
absl::StatusOr<OpValue> SchemaParser::Number() {
  const size_t start = pos_;
  size_t end = pos_;
  if (end < text_.size() && text_[end] == '-') ++end;
  bool floating = false;
  for (; end < text_.size(); ++end) {
    const char c = text_[end];
    if (c == '.' || c == 'e' || c == 'E') {
      floating = true;
      const bool signed_exponent =
          c != '.' && end + 1 < text_.size() && (text_[end + 1] == '-' || text_[end + 1] == '+');
      if (signed_exponent) ++end;
    } else if (!absl::ascii_isdigit(c)) {
      break;
    }
  }
  const absl::string_view token = text_.substr(start, end - start);
  if (floating) {
    double value;
    if (absl::SimpleAtod(token, &value)) {
      pos_ = end;
      return value;
    }
  } else if (int64_t value; absl::SimpleAtoi(token, &value)) {
    pos_ = end;
    return value;
  }
  return ErrorAt(start, absl::StrCat("'", token, "' is not a number"));
}

absl::StatusOr<std::vector<int64_t>> SchemaParser::IntList() {
  RETURN_IF_ERROR(Expect("["));
  std::vector<int64_t> values;
  if (Consume("]")) return values;
  do {
    SkipSpaces();
    if (AtEnd() || !(text_[pos_] == '-' || absl::ascii_isdigit(text_[pos_]))) {
      return Expected("an integer");
    }
    const size_t start = pos_;
    ASSIGN_OR_RETURN(OpValue value, Number());
    if (!std::holds_alternative<int64_t>(value)) {
      return ErrorAt(start, absl::StrCat("'", text_.substr(start, pos_ - start),
                                         "' in a list default is not an integer"));
    }
    values.push_back(std::get<int64_t>(value));
  } while (Consume(","));
  RETURN_IF_ERROR(Expect("]"));
  return values;
}

// "tanh" or 'none'; a backslash takes the next character as it is.
absl::StatusOr<std::string> SchemaParser::QuotedString() {
  const size_t start = pos_;
  const char quote = text_[pos_++];
  std::string value;
  while (!AtEnd() && text_[pos_] != quote) {
    if (text_[pos_] == '\\' && pos_ + 1 < text_.size()) ++pos_;
    value.push_back(text_[pos_++]);
  }
  if (AtEnd()) return ErrorAt(start, "a string without its closing quote");
  ++pos_;
  return value;
}

// The default `literal` (read from `start` to here) as a value of `arg`, declared as
// `declaration` ("int[2] stride").
absl::StatusOr<OpValue> SchemaParser::DefaultFor(const ArgSchema& arg,
                                                 absl::string_view declaration,
                                                 DefaultLiteral literal, size_t start) {
  const absl::string_view written = text_.substr(start, pos_ - start);
  const auto mismatch = [&] {
    return ErrorAt(start, absl::StrCat("default ", written, " does not fit '", declaration, "'"));
  };
  OpValue& value = literal.value;
  if (std::holds_alternative<NoneValue>(value)) {
    if (arg.optional) return value;
    return ErrorAt(start,
                   absl::StrCat("default None does not fit '", declaration, "', not optional"));
  }
  if (literal.bare_name) {
    if (arg.type == ArgType::kOther) return value;
    if (arg.type == ArgType::kInt) {  // torch's at::Reduction names: `int reduction=Mean`
      const std::string& name = std::get<std::string>(value);
      if (name == "Mean") return OpValue(int64_t{1});
      if (name == "Sum") return OpValue(int64_t{2});
      return mismatch();
    }
    if (arg.type != ArgType::kDType) return mismatch();
    absl::string_view name = std::get<std::string>(value);
    absl::ConsumePrefix(&name, "torch.");
    absl::StatusOr<DType> dtype = ParseDType(name);
    if (!dtype.ok()) return mismatch();
    return *dtype;
  }
  if (!DefaultFits(arg, value)) return mismatch();
  if (arg.type == ArgType::kIntList && std::holds_alternative<int64_t>(value)) {
    return std::vector<int64_t>(arg.fixed_size, std::get<int64_t>(value));
  }
  return value;
}

// returns := type | "(" [type [name] ("," type [name])*] ")"
absl::StatusOr<int> SchemaParser::Returns(bool& list) {
  RETURN_IF_ERROR(Expect("->"));
  if (!Consume("(")) {
    ASSIGN_OR_RETURN(const ArgSchema type, Type());
    list = type.type == ArgType::kTensorList;
    return 1;
  }
  if (Consume(")")) return 0;
  int count = 0;
  do {
    RETURN_IF_ERROR(Type().status());
    SkipSpaces();
    if (!AtEnd() && IsIdentifierStart(text_[pos_])) {
      RETURN_IF_ERROR(Identifier("a return name").status());
    }
    ++count;
  } while (Consume(","));
  RETURN_IF_ERROR(Expect(")"));
  return count;
}

}  // namespace

absl::string_view ArgTypeName(ArgType type) {
  switch (type) {
    case ArgType::kTensor:
      return "Tensor";
    case ArgType::kTensorList:
      return "Tensor[]";
    case ArgType::kInt:
      return "int";
    case ArgType::kIntList:
      return "int[]";
    case ArgType::kFloat:
      return "float";
    case ArgType::kScalar:
      return "Scalar";
    case ArgType::kBool:
      return "bool";
    case ArgType::kDType:
      return "ScalarType";
    case ArgType::kString:
      return "str";
    case ArgType::kOther:
      return "Layout/Device/MemoryFormat/Generator";
  }
  return "invalid";
}

std::string OpSchema::QualifiedName() const {
  return overload.empty() ? absl::StrCat("aten::", name)
                          : absl::StrCat("aten::", name, ".", overload);
}

int OpSchema::ArgIndex(absl::string_view arg_name) const {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].name == arg_name) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<OpSchema> ParseSchema(absl::string_view text) { return SchemaParser(text).Parse(); }

}  // namespace tessera::ops
