#include "import/pt2_zip.h"

#include <zip.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tessera::import {
namespace {

struct FileCloser {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

}  // namespace

void Pt2Zip::Closer::operator()(zip_t* z) const { zip_discard(z); }

Pt2Zip::Pt2Zip(std::unique_ptr<zip_t, Closer> zip, std::string name)
    : zip_(std::move(zip)), name_(std::move(name)) {}
Pt2Zip::Pt2Zip(Pt2Zip&&) noexcept = default;
Pt2Zip& Pt2Zip::operator=(Pt2Zip&&) noexcept = default;
Pt2Zip::~Pt2Zip() = default;

absl::StatusOr<Pt2Zip> Pt2Zip::Open(const std::string& path) {
  int error = 0;
  std::unique_ptr<zip_t, Closer> zip(zip_open(path.c_str(), ZIP_RDONLY, &error));
  if (zip == nullptr) {
    zip_error_t e;
    zip_error_init_with_code(&e, error);
    const std::string why = zip_error_strerror(&e);
    zip_error_fini(&e);
    if (error == ZIP_ER_NOENT) return absl::NotFoundError(absl::StrCat(path, ": ", why));
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a torch.export archive (a zip): ", why));
  }
  return Pt2Zip(std::move(zip), path);
}

absl::StatusOr<Pt2Zip> Pt2Zip::FromBytes(std::string_view bytes, const std::string& name) {
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  if (source == nullptr) {
    const std::string why = zip_error_strerror(&error);
    zip_error_fini(&error);
    return absl::InternalError(absl::StrCat(name, ": ", why));
  }
  std::unique_ptr<zip_t, Closer> zip(zip_open_from_source(source, ZIP_RDONLY, &error));
  if (zip == nullptr) {
    zip_source_free(source);
    const std::string why = zip_error_strerror(&error);
    zip_error_fini(&error);
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is not a torch.export archive (a zip): ", why));
  }
  zip_error_fini(&error);
  return Pt2Zip(std::move(zip), name);
}

int64_t Pt2Zip::num_entries() const { return zip_get_num_entries(zip_.get(), 0); }

std::string Pt2Zip::EntryName(int64_t index) const {
  const char* name = zip_get_name(zip_.get(), static_cast<zip_uint64_t>(index), 0);
  return name == nullptr ? std::string() : std::string(name);
}

std::optional<int64_t> Pt2Zip::Find(const std::string& entry) const {
  const zip_int64_t i = zip_name_locate(zip_.get(), entry.c_str(), 0);
  if (i < 0) return std::nullopt;
  return i;
}

absl::StatusOr<std::string> Pt2Zip::Read(int64_t index, int64_t limit) const {
  zip_t* zip = zip_.get();
  const zip_uint64_t i = static_cast<zip_uint64_t>(index);
  std::string entry = EntryName(index);
  if (entry.empty()) entry = absl::StrCat("entry ", index);
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(zip, i, 0, &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": cannot read ", entry, ": ", zip_strerror(zip)));
  }
  if ((st.valid & ZIP_STAT_SIZE) != 0 && st.size > static_cast<zip_uint64_t>(limit)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": ", entry, " is ", st.size, " bytes; at most ", limit, " are read"));
  }
  std::unique_ptr<zip_file_t, FileCloser> f(zip_fopen_index(zip, i, 0));
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": cannot open ", entry, ": ", zip_strerror(zip)));
  }
  std::string bytes;
  char chunk[64 << 10];
  while (true) {
    const zip_int64_t n = zip_fread(f.get(), chunk, sizeof(chunk));
    if (n < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": ", entry, " breaks after ",
                                                     bytes.size(),
                                                     " bytes: ", zip_file_strerror(f.get())));
    }
    if (n == 0) break;
    if (static_cast<int64_t>(bytes.size()) + n > limit) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": ", entry, " holds more than ", limit,
                                                     " bytes, all that are read"));
    }
    bytes.append(chunk, static_cast<size_t>(n));
  }
  return bytes;
}

}  // namespace tessera::import
