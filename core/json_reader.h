#ifndef TESSERA_CORE_JSON_READER_H_
#define TESSERA_CORE_JSON_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

struct JsonMember;

// A value from the JSON subset that file headers use: objects, arrays, strings and integers.
struct JsonValue {
  enum class Kind { kObject, kArray, kString, kInteger };

  Kind kind = Kind::kInteger;
  int64_t integer = 0;              // kInteger
  std::string string;               // kString, decoded to UTF-8
  std::vector<JsonValue> array;     // kArray
  std::vector<JsonMember> members;  // kObject, in document order; duplicate keys are kept
};

// One "key": value pair of an object.
struct JsonMember {
  std::string key;
  JsonValue value;
};

// "object", "array", "string" or "integer".
absl::string_view JsonKindName(JsonValue::Kind kind);

// Parses one value filling `text` (surrounding whitespace allowed). INVALID_ARGUMENT names the
// byte offset and what was found there; floats, true, false and null are refused; integers must
// fit in int64; nesting is limited to 64 levels.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

}  // namespace tessera

#endif  // TESSERA_CORE_JSON_READER_H_
