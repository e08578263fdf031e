// Fuzzes the safetensors reader: the whole-file parser and the header-only parser agree on what
// they accept, and an accepted file survives SerializeSafetensors and a second parse.
#include <cstring>

#include "core/files/safetensors.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::span<const std::byte> bytes = fuzz::Bytes(data, size);
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(bytes);
  absl::StatusOr<SafetensorsHeader> header = ParseSafetensorsHeader(bytes, size);
  FUZZ_CHECK(file.ok() == header.ok(), "the header parser accepts what the file parser does");
  if (!file.ok()) return 0;
  FUZZ_CHECK(header->tensors.size() == file->tensors.size(), "as many tensors in the header");
  FUZZ_CHECK(header->data_offset <= size, "the data starts inside the file");
  absl::StatusOr<std::vector<std::byte>> again = SerializeSafetensors(*file);
  FUZZ_CHECK(again.ok(), "an accepted file can be written");
  absl::StatusOr<SafetensorsFile> back = ParseSafetensors(*again);
  FUZZ_CHECK(back.ok(), "what SerializeSafetensors writes ParseSafetensors reads");
  FUZZ_CHECK(back->metadata == file->metadata, "metadata kept");
  FUZZ_CHECK(back->tensors.size() == file->tensors.size(), "every tensor kept");
  for (const auto& [name, t] : file->tensors) {
    auto it = back->tensors.find(name);
    FUZZ_CHECK(it != back->tensors.end(), "tensor names kept");
    const HostTensor& b = it->second;
    FUZZ_CHECK(b.dtype() == t.dtype() && b.shape() == t.shape(), "dtype and shape kept");
    FUZZ_CHECK(t.nbytes() == 0 || std::memcmp(b.data(), t.data(), t.nbytes()) == 0, "bytes kept");
  }
  return 0;
}
