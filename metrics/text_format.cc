#include "metrics/text_format.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tessera::metrics {

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Whole numbers (counts, bytes) in full while exact in a double: 1073741824, not 1.073741824e+09.
  if (std::abs(value) < 9007199254740992.0 && value == std::trunc(value)) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buffer[64];
  const std::to_chars_result r =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::general);
  return std::string(buffer, r.ptr);
}

std::string EscapeHelp(absl::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatLabels(const LabelPairs& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ",", labels[i].first, "=\"",
                    EscapeLabelValue(labels[i].second), "\"");
  }
  out += "}";
  return out;
}

std::string SampleLine(absl::string_view name, const LabelPairs& labels, double value) {
  return absl::StrCat(name, FormatLabels(labels), " ", FormatValue(value), "\n");
}

SampleSum SumSamples(absl::string_view scrape, absl::string_view name) {
  SampleSum total;
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    if (!absl::ConsumePrefix(&line, name) || line.empty()) continue;
    if (line.front() == '{') {  // skip the labels; a quoted value may hold '}' or '\"'
      bool quoted = false;
      size_t i = 1;
      for (; i < line.size() && (quoted || line[i] != '}'); ++i) {
        if (line[i] == '\\') {
          ++i;
        } else if (line[i] == '"') {
          quoted = !quoted;
        }
      }
      if (i >= line.size()) continue;
      line.remove_prefix(i + 1);
    }
    if (line.empty() || line.front() != ' ') continue;  // a longer name such as NAME_total
    // The value, then an optional timestamp.
    std::vector<absl::string_view> fields =
        absl::StrSplit(absl::StripAsciiWhitespace(line), ' ', absl::SkipEmpty());
    double value = 0;
    if (fields.empty() || !absl::SimpleAtod(fields[0], &value)) continue;
    total.sum += value;
    ++total.samples;
  }
  return total;
}

}  // namespace tessera::metrics
