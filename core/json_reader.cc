#include "core/json_reader.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera {
namespace {

constexpr int kMaxDepth = 64;

// A recursive-descent parser over `text`; `pos_` is the next unread byte.
class JsonParser {
 public:
  explicit JsonParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    absl::StatusOr<JsonValue> value = ParseValue(0);
    if (!value.ok()) return value;
    SkipWhitespace();
    if (pos_ != text_.size()) return Error("unexpected text after the JSON value");
    return value;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    if (pos_ >= text_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("JSON: ", what, " at offset ", pos_, " (end of text)"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("JSON: ", what, " at offset ", pos_, " (found ", Found(), ")"));
  }

  // The text at pos_, quoted and cut short, for error messages.
  std::string Found() const {
    const absl::string_view rest = text_.substr(pos_, 16);
    std::string shown;
    for (char c : rest) {
      if (absl::ascii_isprint(static_cast<unsigned char>(c))) {
        shown += c;
      } else {
        absl::StrAppendFormat(&shown, "\\x%02x", static_cast<unsigned char>(c));
      }
    }
    return absl::StrCat("'", shown, rest.size() < text_.size() - pos_ ? "...'" : "'");
  }

  void SkipWhitespace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  // Consumes `c` after optional whitespace; false (consuming only the whitespace) otherwise.
  bool Consume(char c) {
    SkipWhitespace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  absl::StatusOr<JsonValue> ParseValue(int depth) {
    if (depth > kMaxDepth) return Error(absl::StrCat("nesting deeper than ", kMaxDepth));
    SkipWhitespace();
    if (pos_ >= text_.size()) return Error("expected a value");
    const char c = text_[pos_];
    if (c == '{') return ParseObject(depth);
    if (c == '[') return ParseArray(depth);
    if (c == '"') {
      JsonValue v;
      v.kind = JsonValue::Kind::kString;
      if (absl::Status s = ParseString(v.string); !s.ok()) return s;
      return v;
    }
    if (c == '-' || absl::ascii_isdigit(static_cast<unsigned char>(c))) return ParseInteger();
    return Error("expected an object, array, string or integer");
  }

  absl::StatusOr<JsonValue> ParseObject(int depth) {
    JsonValue v;
    v.kind = JsonValue::Kind::kObject;
    ++pos_;  // '{'
    if (Consume('}')) return v;
    while (true) {
      SkipWhitespace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a string key");
      JsonMember member;
      if (absl::Status s = ParseString(member.key); !s.ok()) return s;
      if (!Consume(':')) return Error(absl::StrCat("expected ':' after key \"", member.key, "\""));
      absl::StatusOr<JsonValue> value = ParseValue(depth + 1);
      if (!value.ok()) return value.status();
      member.value = *std::move(value);
      v.members.push_back(std::move(member));
      if (Consume('}')) return v;
      if (!Consume(',')) return Error("expected ',' or '}' in object");
    }
  }

  absl::StatusOr<JsonValue> ParseArray(int depth) {
    JsonValue v;
    v.kind = JsonValue::Kind::kArray;
    ++pos_;  // '['
    if (Consume(']')) return v;
    while (true) {
      absl::StatusOr<JsonValue> element = ParseValue(depth + 1);
      if (!element.ok()) return element.status();
      v.array.push_back(*std::move(element));
      if (Consume(']')) return v;
      if (!Consume(',')) return Error("expected ',' or ']' in array");
    }
  }

  absl::StatusOr<JsonValue> ParseInteger() {
    const size_t start = pos_;
    const bool negative = text_[pos_] == '-';
    if (negative) ++pos_;
    if (pos_ >= text_.size() || !absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]))) {
      return Error("expected a digit");
    }
    if (text_[pos_] == '0' && pos_ + 1 < text_.size() &&
        absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_ + 1]))) {
      return Error("leading zero in integer");
    }
    // Accumulates the magnitude as uint64 so that INT64_MIN is representable.
    const uint64_t limit = negative ? uint64_t{1} << 63 : std::numeric_limits<int64_t>::max();
    uint64_t magnitude = 0;
    while (pos_ < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]))) {
      const uint64_t digit = static_cast<uint64_t>(text_[pos_] - '0');
      if (magnitude > (limit - digit) / 10) {
        pos_ = start;
        return Error("integer does not fit in int64");
      }
      magnitude = magnitude * 10 + digit;
      ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
      pos_ = start;
      return Error("expected an integer, not a fraction or exponent");
    }
    JsonValue v;
    v.kind = JsonValue::Kind::kInteger;
    v.integer = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
    return v;
  }

  // Reads four hex digits after "\u".
  absl::StatusOr<uint32_t> ParseHex4() {
    if (text_.size() - pos_ < 4) return Error("expected four hex digits after \\u");
    uint32_t code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_];
      uint32_t digit;
      if (c >= '0' && c <= '9') {
        digit = static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        digit = static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        digit = static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return Error("expected a hex digit in \\u escape");
      }
      code = code * 16 + digit;
      ++pos_;
    }
    return code;
  }

  // Decodes a \uXXXX escape (pos_ just past the 'u'), joining surrogate pairs, onto `out`.
  absl::Status ParseUnicodeEscape(std::string& out) {
    absl::StatusOr<uint32_t> code = ParseHex4();
    if (!code.ok()) return code.status();
    uint32_t cp = *code;
    if (cp >= 0xDC00 && cp <= 0xDFFF) return Error("unpaired low surrogate in \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (text_.substr(pos_, 2) != "\\u") return Error("high surrogate without a low surrogate");
      pos_ += 2;
      absl::StatusOr<uint32_t> low = ParseHex4();
      if (!low.ok()) return low.status();
      if (*low < 0xDC00 || *low > 0xDFFF) return Error("high surrogate without a low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (*low - 0xDC00);
    }
    AppendUtf8(cp, out);
    return absl::OkStatus();
  }

  static void AppendUtf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // Reads a string literal starting at the opening quote into `out`.
  absl::Status ParseString(std::string& out) {
    ++pos_;  // '"'
    while (true) {
      if (pos_ >= text_.size()) return Error("unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in string");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= text_.size()) return Error("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u':
          if (absl::Status s = ParseUnicodeEscape(out); !s.ok()) return s;
          break;
        default:
          --pos_;
          return Error("unknown escape");
      }
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

absl::string_view JsonKindName(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::kObject:
      return "object";
    case JsonValue::Kind::kArray:
      return "array";
    case JsonValue::Kind::kString:
      return "string";
    case JsonValue::Kind::kInteger:
      return "integer";
  }
  return "invalid";
}

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) {
  return JsonParser(text).ParseDocument();
}

}  // namespace tessera
