#include "core/sharding/block_runs.h"

#include <algorithm>
#include <cstring>

namespace tessera {

BlockRuns::BlockRuns(std::span<const int64_t> shape, std::span<const int64_t> offset,
                     std::span<const int64_t> sizes) {
  const int n = static_cast<int>(shape.size());
  const std::vector<int64_t> strides = ContiguousStrides(shape);
  for (int d = 0; d < n; ++d) base_ += offset[d] * strides[d];
  if (NumElements(sizes) == 0) return;
  // Merge trailing dims the block covers fully, then the first partial one, into the run.
  int inner = n;
  run_length_ = 1;
  while (inner > 0 && sizes[inner - 1] == shape[inner - 1]) run_length_ *= sizes[--inner];
  if (inner > 0) run_length_ *= sizes[--inner];
  num_runs_ = 1;
  for (int d = 0; d < inner; ++d) {
    outer_sizes_.push_back(sizes[d]);
    outer_strides_.push_back(strides[d]);
    num_runs_ *= sizes[d];
  }
}

int64_t BlockRuns::RunStart(int64_t i) const {
  int64_t start = base_;
  for (int d = static_cast<int>(outer_sizes_.size()) - 1; d >= 0; --d) {
    start += (i % outer_sizes_[d]) * outer_strides_[d];
    i /= outer_sizes_[d];
  }
  return start;
}

void BlockCursor::Take(int64_t begin, int64_t end, const char* window, std::string& out) {
  while (run_ < runs_.num_runs()) {
    const int64_t s = runs_.RunStart(run_) + done_;
    const int64_t e = runs_.RunStart(run_) + runs_.run_length();
    if (s >= end) return;
    const int64_t stop = std::min(e, end);
    const char* from = window + (s - begin) * static_cast<int64_t>(elem_);
    out.append(from, static_cast<size_t>((stop - s) * static_cast<int64_t>(elem_)));
    if (stop == e) {
      ++run_;
      done_ = 0;
    } else {
      done_ += stop - s;
    }
  }
}

void BlockCursor::Skip(int64_t begin, int64_t end) {
  while (run_ < runs_.num_runs()) {
    const int64_t s = std::max(runs_.RunStart(run_) + done_, begin);
    const int64_t e = runs_.RunStart(run_) + runs_.run_length();
    if (s >= end) return;
    if (e <= end) {
      ++run_;
      done_ = 0;
    } else {
      done_ = end - runs_.RunStart(run_);
    }
  }
}

int64_t BlockCursor::BytesIn(int64_t begin, int64_t end) const {
  int64_t bytes = 0;
  int64_t done = done_;
  for (int64_t run = run_; run < runs_.num_runs(); ++run, done = 0) {
    const int64_t s = runs_.RunStart(run) + done;
    const int64_t e = runs_.RunStart(run) + runs_.run_length();
    if (s >= end) break;
    bytes += (std::min(e, end) - std::max(s, begin)) * static_cast<int64_t>(elem_);
    if (e > end) break;
  }
  return bytes;
}

int64_t BlockCursor::Give(int64_t begin, int64_t end, const char* in, char* window) {
  int64_t used = 0;
  while (run_ < runs_.num_runs()) {
    const int64_t s = runs_.RunStart(run_) + done_;
    const int64_t e = runs_.RunStart(run_) + runs_.run_length();
    if (s >= end) break;
    const int64_t stop = std::min(e, end);
    const int64_t bytes = (stop - s) * static_cast<int64_t>(elem_);
    std::memcpy(window + (s - begin) * static_cast<int64_t>(elem_), in + used,
                static_cast<size_t>(bytes));
    used += bytes;
    if (stop == e) {
      ++run_;
      done_ = 0;
    } else {
      done_ += stop - s;
    }
  }
  return used;
}

}  // namespace tessera
