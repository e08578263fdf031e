#ifndef TESSERA_CORE_SHARDING_BLOCK_RUNS_H_
#define TESSERA_CORE_SHARDING_BLOCK_RUNS_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/shape.h"

namespace tessera {

// A block of a row-major tensor (a rank's shard) seen as the runs of consecutive elements it
// occupies in the tensor's flat order. The block's own row-major order is the order of its runs, so
// a stream of the whole tensor's bytes splits into every block's bytes run by run, without holding
// either whole. Trailing dims the block covers fully are merged into longer runs.
class BlockRuns {
 public:
  BlockRuns(std::span<const int64_t> shape, std::span<const int64_t> offset,
            std::span<const int64_t> sizes);

  // Elements per run (0 for an empty block, which has no runs).
  int64_t run_length() const { return run_length_; }
  int64_t num_runs() const { return num_runs_; }
  // Flat index in the tensor of run `i`'s first element, 0 <= i < num_runs().
  int64_t RunStart(int64_t i) const;

 private:
  int64_t run_length_ = 0;
  int64_t num_runs_ = 0;
  int64_t base_ = 0;                    // flat index of the block's first element
  std::vector<int64_t> outer_sizes_;    // block sizes of the dims that index runs, outermost first
  std::vector<int64_t> outer_strides_;  // their strides in the tensor, in elements
};

// Moves bytes between the flat order of a whole tensor and one block's own order, a window at a
// time: the window [begin, end) of flat elements must advance in order over calls.
class BlockCursor {
 public:
  BlockCursor(const BlockRuns& runs, size_t element_size) : runs_(runs), elem_(element_size) {}

  // Bytes of the block inside flat elements [begin, end) (`window` holds those elements):
  // appended to `out` (whole tensor -> block).
  void Take(int64_t begin, int64_t end, const char* window, std::string& out);
  // Consumes the block's bytes inside flat elements [begin, end) without copying them (the caller
  // moved them whole).
  void Skip(int64_t begin, int64_t end);
  // How many bytes of the block fall inside flat elements [begin, end), without consuming them.
  int64_t BytesIn(int64_t begin, int64_t end) const;
  // Writes the block's next bytes from `in` into `window` (flat elements [begin, end)), returning
  // how many bytes of `in` it used (block -> whole tensor).
  int64_t Give(int64_t begin, int64_t end, const char* in, char* window);
  bool done() const { return run_ >= runs_.num_runs(); }

 private:
  const BlockRuns& runs_;
  const size_t elem_;
  int64_t run_ = 0;   // current run
  int64_t done_ = 0;  // elements of the current run already moved
};

}  // namespace tessera

#endif  // TESSERA_CORE_SHARDING_BLOCK_RUNS_H_
