#ifndef TESSERA_CORE_JSON_H_
#define TESSERA_CORE_JSON_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace tessera {

// Parses `text` as exactly one JSON value (surrounding whitespace allowed), without throwing.
// INVALID_ARGUMENT naming the line, column and problem for malformed JSON (invalid UTF-8
// included), and naming the path for a key that appears twice in one object, an integer that
// fits neither int64 nor uint64, or nesting deeper than 64 levels.
absl::StatusOr<nlohmann::json> ParseJson(absl::string_view text);
// ParseJson with each object's members kept in the order the text gives them, for files where
// that order means something (a plan's patterns, first match first).
absl::StatusOr<nlohmann::ordered_json> ParseOrderedJson(absl::string_view text);

// `value` as compact JSON text (no spaces), members in the order they were inserted.
// INVALID_ARGUMENT naming the byte if a string in it is not valid UTF-8; never throws.
absl::StatusOr<std::string> DumpJson(const nlohmann::ordered_json& value);

// The kind of `value` with its article, for messages: "an object", "an array", "a string",
// "an integer", "a floating-point number", "a boolean" or "null".
absl::string_view JsonTypeName(const nlohmann::json& value);

// `value` as an int64; INVALID_ARGUMENT naming what was found if it is not an integer, or
// naming the integer if it does not fit in int64.
absl::StatusOr<int64_t> JsonInt64(const nlohmann::json& value);

}  // namespace tessera

#endif  // TESSERA_CORE_JSON_H_
