// Fuzzes the torch.export archive readers (import/): any bytes are refused with a status or read
// as a graph whose every node has a target, counted consistently; an archive whose model reads as
// a program plans on a mesh of two or is refused, every value numbered once, and its stored
// tensors read or are refused.
#include <numeric>
#include <string_view>

#include "fuzz/fuzz_check.h"
#include "import/archive_tensors.h"
#include "import/exported_program.h"
#include "import/program_plan.h"
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

  absl::StatusOr<import::Pt2Zip> zip = import::Pt2Zip::FromBytes(bytes, "fuzz.pt2");
  FUZZ_CHECK(zip.ok(), "an archive read once opens again");
  absl::StatusOr<import::ArchiveModel> model = import::ReadArchiveModel(*zip);
  FUZZ_CHECK(model.ok(), "an archive whose graph read has a model");
  absl::StatusOr<import::ExportedProgram> program =
      import::ParseExportedProgram(model->json, "fuzz.pt2");
  if (program.ok()) {
    size_t outputs = 0;
    for (const import::ProgramNode& node : program->nodes) outputs += node.outputs.size();
    FUZZ_CHECK(program->value_metas.size() == program->inputs.size() + outputs,
               "every value numbered once");
    const DeviceMesh mesh = DeviceMesh::Create("cpu", {2}).value();
    ops::ShardingCache cache;
    absl::StatusOr<import::PlannedProgram> planned =
        import::PlanExportedProgram(*program, mesh, {}, cache);
    if (planned.ok()) {
      FUZZ_CHECK(planned->values.size() == program->value_metas.size(), "every value planned");
    } else {
      FUZZ_CHECK(!planned.status().message().empty(), "a refusal says why");
    }
  } else {
    FUZZ_CHECK(!program.status().message().empty(), "a refusal says why");
  }
  absl::StatusOr<std::vector<import::ArchiveTensor>> tensors =
      import::ListArchiveTensors(*zip, model->archive);
  if (tensors.ok()) {
    for (const import::ArchiveTensor& t : *tensors) {
      absl::StatusOr<HostTensor> value = import::ReadArchiveTensor(*zip, t);
      FUZZ_CHECK(value.ok() || !value.status().message().empty(), "a refusal says why");
    }
  }
  return 0;
}
