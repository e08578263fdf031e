// Fuzzes the parallelize plan parser: any text gives a plan or an error, and an accepted plan
// printed by PlanSpecToJson parses again to the same JSON.
#include "core/modules/parallel_plan.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  absl::StatusOr<PlanSpec> plan = ParsePlanSpec(fuzz::Text(data, size));
  if (!plan.ok()) return 0;
  const std::string json = PlanSpecToJson(*plan);
  absl::StatusOr<PlanSpec> back = ParsePlanSpec(json);
  FUZZ_CHECK(back.ok(), "what PlanSpecToJson writes ParsePlanSpec reads");
  FUZZ_CHECK(PlanSpecToJson(*back) == json, "printing is stable");
  return 0;
}
