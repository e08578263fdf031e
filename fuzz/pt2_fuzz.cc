// Fuzzes the torch.export archive reader (import/pt2_archive.h): any bytes are refused with a
// status or read as a graph whose every node has a target, counted consistently.
#include <numeric>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "import/pt2_archive.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<import::Pt2Graph> graph = import::ParsePt2Graph(bytes, "fuzz.pt2");
  if (!graph.ok()) {
    FUZZ_CHECK(!graph.status().message().empty(), "a refusal says why");
    return 0;
  }
  FUZZ_CHECK(!graph->model.empty(), "an accepted archive names its model");
  const std::map<std::string, int64_t> counts = import::CountOps(*graph);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0},
                                        [](int64_t n, const auto& c) { return n + c.second; });
  FUZZ_CHECK(total == static_cast<int64_t>(graph->targets.size()), "every node counted once");
  return 0;
}
