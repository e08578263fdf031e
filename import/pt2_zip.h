// A torch.export archive as a zip (libzip): its entries by name, each read in bounded chunks.
#ifndef TESSERA_IMPORT_PT2_ZIP_H_
#define TESSERA_IMPORT_PT2_ZIP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

struct zip;

namespace tessera::import {

// An open archive, read-only. Moves; not copyable.
class Pt2Zip {
 public:
  // The archive at `path`: NOT_FOUND where there is no such file, INVALID_ARGUMENT naming it
  // where it is not a zip.
  static absl::StatusOr<Pt2Zip> Open(const std::string& path);
  // The archive in `bytes`, which must outlive it; `name` names it in messages.
  static absl::StatusOr<Pt2Zip> FromBytes(std::string_view bytes, const std::string& name);

  Pt2Zip(Pt2Zip&&) noexcept;
  Pt2Zip& operator=(Pt2Zip&&) noexcept;
  ~Pt2Zip();

  // How messages name the archive (its path).
  const std::string& name() const { return name_; }
  int64_t num_entries() const;
  // Entry `index`'s name, or "" where it has none.
  std::string EntryName(int64_t index) const;
  // The index of the entry named `entry`, if there is one.
  std::optional<int64_t> Find(const std::string& entry) const;
  // The whole entry `index` as bytes, at most `limit` of them: the buffer grows with the bytes
  // that arrive, never to the size the entry's header declares (a hostile archive declares any).
  // INVALID_ARGUMENT naming the archive and the entry where it is larger or does not read.
  absl::StatusOr<std::string> Read(int64_t index, int64_t limit) const;

 private:
  struct Closer {
    void operator()(struct ::zip* z) const;
  };
  Pt2Zip(std::unique_ptr<struct ::zip, Closer> zip, std::string name);

  std::unique_ptr<struct ::zip, Closer> zip_;
  std::string name_;
};

}  // namespace tessera::import

#endif  // TESSERA_IMPORT_PT2_ZIP_H_
