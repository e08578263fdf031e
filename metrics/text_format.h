#ifndef TESSERA_METRICS_TEXT_FORMAT_H_
#define TESSERA_METRICS_TEXT_FORMAT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace tessera::metrics {

// Label names and values of one sample, in the order they are written.
using LabelPairs = std::vector<std::pair<std::string, std::string>>;

// A sample value as Prometheus text format 0.0.4 writes it: a whole number below 2^53 in full
// ("1073741824"), otherwise the shortest decimal that reads back as `value` in %g style ("0.25",
// "0.0001", "1e+21"); "+Inf", "-Inf" or "NaN".
std::string FormatValue(double value);

// A HELP text with backslash and line feed escaped (\\ and \n).
std::string EscapeHelp(absl::string_view help);

// A label value with backslash, double quote and line feed escaped (\\, \" and \n).
std::string EscapeLabelValue(absl::string_view value);

// `{a="x",b="y"}`, or "" without labels.
std::string FormatLabels(const LabelPairs& labels);

// One sample line: `name{labels} value\n`.
std::string SampleLine(absl::string_view name, const LabelPairs& labels, double value);

// The sum of every sample of metric `name` (any labels) in a text-format scrape, and how many
// there were; a histogram's series are `NAME_bucket`, `NAME_sum` and `NAME_count`.
struct SampleSum {
  double sum = 0;
  int samples = 0;
};
SampleSum SumSamples(absl::string_view scrape, absl::string_view name);

}  // namespace tessera::metrics

#endif  // TESSERA_METRICS_TEXT_FORMAT_H_
