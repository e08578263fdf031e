// Fuzzes the reader of a torch.export model JSON (import/exported_program.h) and the planner over
// what it reads (import/program_plan.h), past the zip whose checksums stop most mutations before
// the JSON: any bytes are refused with a status, or read as a program whose every value is
// numbered once, which plans on a mesh of two (every value planned) or is refused.
#include "absl/strings/string_view.h"
#include "core/json.h"
#include "fuzz/fuzz_check.h"
#include "import/exported_program.h"
#include "import/program_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<nlohmann::json> j = ParseJson(text);
  if (!j.ok()) return 0;
  absl::StatusOr<import::ExportedProgram> program = import::ParseExportedProgram(*j, "fuzz");
  if (!program.ok()) {
    FUZZ_CHECK(!program.status().message().empty(), "a refusal says why");
    return 0;
  }
  size_t outputs = 0;
  for (const import::ProgramNode& node : program->nodes) outputs += node.outputs.size();
  FUZZ_CHECK(program->value_metas.size() == program->inputs.size() + outputs,
             "every value numbered once");
  FUZZ_CHECK(program->value_names.size() == program->value_metas.size(), "every value named");
  const DeviceMesh mesh = DeviceMesh::Create("cpu", {2}).value();
  ops::ShardingCache cache;
  absl::StatusOr<import::PlannedProgram> planned =
      import::PlanExportedProgram(*program, mesh, {}, cache);
  if (planned.ok()) {
    FUZZ_CHECK(planned->values.size() == program->value_metas.size(), "every value planned");
    for (size_t v = 0; v < planned->values.size(); ++v) {
      FUZZ_CHECK(planned->values[v].shape == program->value_metas[v].shape,
                 "a planned value has the shape torch recorded");
    }
  } else {
    FUZZ_CHECK(!planned.status().message().empty(), "a refusal says why");
  }
  return 0;
}
