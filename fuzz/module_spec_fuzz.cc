// Fuzzes the module spec parser: any text gives a spec or an error, and an accepted spec printed
// by ModelSpecToJson parses again to the same JSON.
#include "core/modules/module_spec.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  absl::StatusOr<ModelSpec> spec = ParseModelSpec(fuzz::Text(data, size));
  if (!spec.ok()) return 0;
  const std::string json = ModelSpecToJson(*spec);
  absl::StatusOr<ModelSpec> back = ParseModelSpec(json);
  FUZZ_CHECK(back.ok(), "what ModelSpecToJson writes ParseModelSpec reads");
  FUZZ_CHECK(ModelSpecToJson(*back) == json, "printing is stable");
  (void)NamedParameters(spec->root);
  return 0;
}
