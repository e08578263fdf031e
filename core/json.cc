#include "core/json.h"

#include <limits>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

constexpr size_t kMaxDepth = 64;

// nlohmann's exception text without its "[json.exception.parse_error.101] " prefix.
std::string ExceptionMessage(const nlohmann::json::exception& e) {
  const absl::string_view what = e.what();
  const size_t end_of_id = what.find("] ");
  return std::string(end_of_id == absl::string_view::npos ? what : what.substr(end_of_id + 2));
}

// A SAX pass over the text that stops at the first problem ParseJson refuses, recording it in
// `error`; nlohmann's own DOM parser keeps the last of repeated keys and turns integers too large
// for 64 bits into doubles, so this pass is what makes both an error.
class JsonChecker final : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string error;  // empty while the text is acceptable

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t& text) override {
    if (text.find_first_of(".eE") == string_t::npos) {
      return Fail(absl::StrCat("integer ", text, " at ", Path(frames_.size()),
                               " does not fit in int64 or uint64"));
    }
    return Value();
  }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Open(/*object=*/true); }
  bool key(string_t& key) override {
    Frame& frame = frames_.back();
    if (!frame.keys.insert(key).second) {
      return Fail(absl::StrCat("key \"", key, "\" appears twice in the object at ",
                               Path(frames_.size() - 1)));
    }
    frame.last_key = key;
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(/*object=*/false); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) override {
    return Fail(ExceptionMessage(e));
  }

 private:
  // An object or array being read.
  struct Frame {
    bool object = false;
    std::set<std::string> keys;  // objects: the keys read so far
    std::string last_key;        // objects: the key of the value being read
    size_t next_index = 0;       // arrays: the index of the value being read
  };

  bool Fail(std::string message) {
    error = std::move(message);
    return false;
  }

  bool Open(bool object) {
    if (frames_.size() >= kMaxDepth) {
      return Fail(absl::StrCat("nesting deeper than ", kMaxDepth, " levels"));
    }
    frames_.emplace_back();
    frames_.back().object = object;
    return true;
  }

  bool Close() {
    frames_.pop_back();
    return Value();
  }

  // Counts a finished value in the enclosing array.
  bool Value() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().next_index;
    return true;
  }

  // The JSON pointer to the value being read inside the first `depth` open containers, or
  // "the top level".
  std::string Path(size_t depth) const {
    nlohmann::json::json_pointer pointer;
    for (size_t i = 0; i < depth; ++i) {
      const Frame& f = frames_[i];
      pointer /= f.object ? f.last_key : std::to_string(f.next_index);
    }
    return pointer.empty() ? "the top level" : pointer.to_string();
  }

  std::vector<Frame> frames_;
};

// Parses `text` into a `Json` (nlohmann::json or ordered_json) after the checking pass.
template <typename Json>
absl::StatusOr<Json> CheckAndParse(absl::string_view text) {
  JsonChecker checker;
  if (!nlohmann::json::sax_parse(text.begin(), text.end(), &checker) || !checker.error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("JSON: ", checker.error));
  }
  Json value = Json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    return absl::InternalError("JSON: the parser refused text its checking pass accepted");
  }
  return value;
}

}  // namespace

absl::StatusOr<nlohmann::json> ParseJson(absl::string_view text) {
  return CheckAndParse<nlohmann::json>(text);
}

absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(absl::string_view text) {
  return CheckAndParse<nlohmann::ordered_json>(text);
}

absl::StatusOr<std::string> DumpJson(const nlohmann::ordered_json& value) {
  try {
    return value.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false,
                      nlohmann::ordered_json::error_handler_t::strict);
  } catch (const nlohmann::ordered_json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("JSON: ", ExceptionMessage(e)));
  }
}

absl::string_view JsonTypeName(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "an integer";
    case nlohmann::json::value_t::number_float:
      return "a floating-point number";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::binary:
      return "binary data";
    case nlohmann::json::value_t::discarded:
      return "a discarded value";
  }
  return "an unknown value";
}

absl::StatusOr<int64_t> JsonInt64(const nlohmann::json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat("integer ", u, " does not fit in int64"));
    }
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    return absl::InvalidArgumentError(absl::StrCat("expected an integer, found ", value.dump(),
                                                   " (a number with a fraction or exponent)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("expected an integer, found ", JsonTypeName(value)));
}

}  // namespace tessera
