// The file readers read regular files only: a device, FIFO or directory is refused at once with
// INVALID_ARGUMENT naming the path (a FIFO with no writer is not waited on, /dev/zero is not read
// until memory runs out), and regular files still read back byte for byte.

#include "core/files/file_bytes.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/files/npy.h"
#include "core/files/safetensors.h"
#include "core/host_tensor.h"
#include "gtest/gtest.h"
#include "kernels/testing/reference.h"

namespace tessera {
namespace {

// A reader under test: reads `path` and returns its status.
struct Reader {
  std::string name;
  std::function<absl::Status(const std::string&)> read;
};

// A path that is not a regular file, made by `make` in `dir` (empty: none to make), and what the
// message calls it.
struct NotRegular {
  std::string name;
  std::function<std::string(const std::string& dir)> make;
  std::string kind;
};

std::vector<Reader> Readers() {
  return {
      {"ReadFileBytes", [](const std::string& p) { return ReadFileBytes(p).status(); }},
      {"FileSize", [](const std::string& p) { return FileSize(p).status(); }},
      {"ReadFileRange", [](const std::string& p) { return ReadFileRange(p, 0, 8).status(); }},
      {"ReadNpyFile", [](const std::string& p) { return ReadNpyFile(p).status(); }},
      {"ReadSafetensorsFile", [](const std::string& p) { return ReadSafetensorsFile(p).status(); }},
      {"ReadSafetensorsHeader",
       [](const std::string& p) { return ReadSafetensorsHeader(p).status(); }},
  };
}

std::vector<NotRegular> NotRegulars() {
  return {
      {"dev_zero", [](const std::string&) { return std::string("/dev/zero"); },
       "a character device"},
      {"fifo",
       [](const std::string& dir) {
         const std::string path = dir + "/fifo.npy";
         EXPECT_EQ(mkfifo(path.c_str(), 0600), 0);
         return path;
       },
       "a FIFO"},
      {"directory",
       [](const std::string& dir) {
         const std::string path = dir + "/dir.safetensors";
         std::filesystem::create_directory(path);
         return path;
       },
       "a directory"},
  };
}

class NotRegularFileTest : public ::testing::TestWithParam<std::tuple<Reader, NotRegular>> {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/file_bytes_test_" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
};

TEST_P(NotRegularFileTest, IsRefusedAtOnceNamingThePath) {
  const auto& [reader, target] = GetParam();
  const std::string path = target.make(dir_);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status s = reader.read(path);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(absl::StrCat("'", path, "'")), std::string::npos) << s;
  EXPECT_NE(s.message().find(target.kind), std::string::npos) << s;
}

INSTANTIATE_TEST_SUITE_P(Cases, NotRegularFileTest,
                         ::testing::Combine(::testing::ValuesIn(Readers()),
                                            ::testing::ValuesIn(NotRegulars())),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + std::get<1>(info.param).name;
                         });

class FileBytesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/file_bytes_regular_" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
};

TEST_F(FileBytesTest, RegularFilesReadBackByteForByte) {
  const HostTensor t = kernels::testing::RandomTensor(DType::kFloat32, {3, 5}, 7);
  const std::string path = dir_ + "/t.npy";
  ASSERT_TRUE(WriteNpyFile(path, t).ok());
  absl::StatusOr<HostTensor> back = ReadNpyFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->shape(), t.shape());
  EXPECT_EQ(std::memcmp(back->data(), t.data(), t.nbytes()), 0);
  absl::StatusOr<std::vector<std::byte>> bytes = ReadFileBytes(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(bytes->size(), *FileSize(path));
  absl::StatusOr<std::vector<std::byte>> serialized = SerializeNpy(t);
  ASSERT_TRUE(serialized.ok());
  EXPECT_EQ(*bytes, *serialized);
}

// An npy file whose header declares more data than the file holds is refused from its header
// and size, naming both.
TEST_F(FileBytesTest, NpyHeaderIsCheckedAgainstTheFileSize) {
  const HostTensor t = kernels::testing::RandomTensor(DType::kFloat32, {4, 4}, 3);
  absl::StatusOr<std::vector<std::byte>> bytes = SerializeNpy(t);
  ASSERT_TRUE(bytes.ok());
  bytes->resize(bytes->size() - 12);  // three elements short
  const std::string path = dir_ + "/short.npy";
  ASSERT_TRUE(WriteFileBytes(path, *bytes).ok());
  const absl::Status s = ReadNpyFile(path).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  EXPECT_NE(s.message().find("needs 64 bytes, but the file has 52"), std::string::npos) << s;
}

TEST_F(FileBytesTest, RangePastTheEndIsOutOfRangeWithoutReading) {
  const std::string path = dir_ + "/small";
  const std::vector<std::byte> ten(10, std::byte{1});
  ASSERT_TRUE(WriteFileBytes(path, ten).ok());
  EXPECT_EQ(ReadFileRange(path, 4, size_t{1} << 40).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(ReadFileRange(path, 4, 6)->size(), 6u);
}

}  // namespace
}  // namespace tessera
