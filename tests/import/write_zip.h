// Writes zip archives for the import tests: broken or edited copies of torch.export's.
#ifndef TESSERA_TESTS_IMPORT_WRITE_ZIP_H_
#define TESSERA_TESTS_IMPORT_WRITE_ZIP_H_

#include <zip.h>

#include <filesystem>
#include <map>
#include <string>

#include "gtest/gtest.h"

namespace tessera::import {

// A zip at `path` holding exactly `entries` (name to bytes).
inline void WriteZip(const std::string& path, const std::map<std::string, std::string>& entries) {
  std::filesystem::remove(path);
  int error = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  ASSERT_NE(z, nullptr) << error;
  for (const auto& [name, bytes] : entries) {
    zip_source_t* src = zip_source_buffer(z, bytes.data(), bytes.size(), 0);
    ASSERT_NE(src, nullptr);
    ASSERT_GE(zip_file_add(z, name.c_str(), src, ZIP_FL_OVERWRITE), 0) << zip_strerror(z);
  }
  ASSERT_EQ(zip_close(z), 0);
}

// Every entry of the zip at `path`, name to bytes.
inline void ReadZip(const std::string& path, std::map<std::string, std::string>& entries) {
  int error = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &error);
  ASSERT_NE(z, nullptr) << path << ": " << error;
  for (zip_int64_t i = 0; i < zip_get_num_entries(z, 0); ++i) {
    zip_stat_t st;
    ASSERT_EQ(zip_stat_index(z, i, 0, &st), 0);
    std::string bytes(st.size, '\0');
    zip_file_t* f = zip_fopen_index(z, i, 0);
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(zip_fread(f, bytes.data(), st.size), static_cast<zip_int64_t>(st.size));
    zip_fclose(f);
    entries[st.name] = std::move(bytes);
  }
  zip_discard(z);
}

}  // namespace tessera::import

#endif  // TESSERA_TESTS_IMPORT_WRITE_ZIP_H_
