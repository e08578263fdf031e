#include "core/sharding/visualize_sharding.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tessera {
namespace {

struct Rect {
  int64_t row0, rows, col0, cols;
};

// The block a shard covers, seen as a 2-D matrix (a 1-D tensor is one row).
Rect AsRect(const DTensorSpec& spec, const LocalShard& s) {
  if (spec.shape.size() == 1) return {0, 1, s.offset[0], s.shape[0]};
  return {s.offset[0], s.shape[0], s.offset[1], s.shape[1]};
}

std::string Range(int64_t begin, int64_t size) { return absl::StrCat(begin, ":", begin + size); }

std::string Grid(const DTensorSpec& spec) {
  std::vector<Rect> rects;
  std::set<int64_t> row_cuts, col_cuts;
  for (int64_t pos = 0; pos < spec.mesh.size(); ++pos) {
    const Rect r = AsRect(spec, LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(pos)));
    rects.push_back(r);
    if (r.rows == 0 || r.cols == 0) continue;
    row_cuts.insert({r.row0, r.row0 + r.rows});
    col_cuts.insert({r.col0, r.col0 + r.cols});
  }
  if (row_cuts.empty()) return "(the tensor has no elements)\n";
  const std::vector<int64_t> rows(row_cuts.begin(), row_cuts.end());
  const std::vector<int64_t> cols(col_cuts.begin(), col_cuts.end());
  std::vector<std::vector<std::string>> cells(rows.size() - 1,
                                              std::vector<std::string>(cols.size() - 1));
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    for (size_t j = 0; j + 1 < cols.size(); ++j) {
      std::vector<std::string> holders;
      for (size_t pos = 0; pos < rects.size(); ++pos) {
        const Rect& r = rects[pos];
        if (r.row0 <= rows[i] && rows[i + 1] <= r.row0 + r.rows && r.col0 <= cols[j] &&
            cols[j + 1] <= r.col0 + r.cols) {
          holders.push_back(absl::StrCat(spec.mesh.ranks()[pos]));
        }
      }
      cells[i][j] = absl::StrCat("rank ", absl::StrJoin(holders, ","));
    }
  }
  size_t width = 0;
  for (const auto& row : cells) {
    for (const std::string& c : row) width = std::max(width, c.size());
  }
  for (size_t j = 0; j + 1 < cols.size(); ++j) {
    width = std::max(width, Range(cols[j], cols[j + 1] - cols[j]).size());
  }
  const int w = static_cast<int>(width);
  std::string out = absl::StrFormat("%-9s", "");
  for (size_t j = 0; j + 1 < cols.size(); ++j) {
    absl::StrAppendFormat(&out, " | %-*s", w, Range(cols[j], cols[j + 1] - cols[j]));
  }
  out += "\n";
  for (size_t i = 0; i + 1 < rows.size(); ++i) {
    absl::StrAppendFormat(&out, "%-9s",
                          spec.shape.size() == 1 ? "" : Range(rows[i], rows[i + 1] - rows[i]));
    for (const std::string& c : cells[i]) absl::StrAppendFormat(&out, " | %-*s", w, c);
    out += "\n";
  }
  return out;
}

}  // namespace

std::string VisualizeSharding(const DTensorSpec& spec) {
  std::string out = absl::StrCat(spec.ToString(), "\n");
  if (HasPartial(spec)) {
    out += "Partial mesh dims: each rank holds a partial value; the tensor is their reduction.\n";
  }
  if (spec.shape.size() == 1 || spec.shape.size() == 2) out += Grid(spec);
  const size_t elem = DTypeSize(spec.dtype);
  for (int64_t pos = 0; pos < spec.mesh.size(); ++pos) {
    const std::vector<int64_t> coord = spec.mesh.CoordinateOfIndex(pos);
    const LocalShard s = LocalShapeAndOffsetAt(spec, coord);
    absl::StrAppendFormat(&out, "rank %-3d coord %-9s local %-12s offset %-12s %d B\n",
                          spec.mesh.ranks()[pos], ShapeToString(coord), ShapeToString(s.shape),
                          ShapeToString(s.offset),
                          NumElements(s.shape) * static_cast<int64_t>(elem));
  }
  return out;
}

}  // namespace tessera
