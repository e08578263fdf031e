// Fuzzes the .npy reader: any bytes give a tensor or an error, and a tensor it accepts survives
// SerializeNpy and a second ParseNpy byte for byte.
#include <cstring>

#include "core/files/npy.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  absl::StatusOr<HostTensor> t = ParseNpy(fuzz::Bytes(data, size));
  if (!t.ok()) {
    FUZZ_CHECK(!t.status().message().empty(), "an error says what is wrong");
    return 0;
  }
  absl::StatusOr<std::vector<std::byte>> again = SerializeNpy(*t);
  FUZZ_CHECK(again.ok(), "an accepted tensor can be written");
  absl::StatusOr<HostTensor> back = ParseNpy(*again);
  FUZZ_CHECK(back.ok(), "what SerializeNpy writes ParseNpy reads");
  FUZZ_CHECK(back->dtype() == t->dtype() && back->shape() == t->shape(), "dtype and shape kept");
  FUZZ_CHECK(back->nbytes() == t->nbytes() &&
                 (t->nbytes() == 0 || std::memcmp(back->data(), t->data(), t->nbytes()) == 0),
             "bytes kept");
  return 0;
}
