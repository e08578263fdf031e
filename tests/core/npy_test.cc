#include "core/files/npy.h"

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<std::byte> Bytes(absl::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

std::string Text(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// A tensor whose bytes follow a fixed pattern (0 or 1 for bool, so every value is valid).
HostTensor PatternTensor(DType dtype, const Shape& shape) {
  HostTensor t = HostTensor::Uninitialized(dtype, shape).value();
  for (size_t i = 0; i < t.nbytes(); ++i) {
    t.data()[i] = static_cast<std::byte>(dtype == DType::kBool ? i % 2 : (i * 37 + 11) % 256);
  }
  return t;
}

// An npy file as numpy lays it out: magic, version, header length, `dict` padded with spaces
// and '\n' to `header_size` bytes, then `data`.
std::string NpyFile(int major, absl::string_view dict, size_t header_size, absl::string_view data) {
  std::string out =
      absl::StrCat("\x93NUMPY", std::string(1, static_cast<char>(major)), std::string(1, '\0'));
  const size_t length_size = major == 1 ? 2 : 4;
  for (size_t i = 0; i < length_size; ++i)
    out += static_cast<char>((header_size >> (8 * i)) & 0xFF);
  std::string header(dict);
  header.resize(header_size - 1, ' ');
  return absl::StrCat(out, header, "\n", data);
}

// Values of a parsed tensor, as T.
template <typename T>
std::vector<T> Values(const HostTensor& t) {
  return std::vector<T>(t.data_as<T>(), t.data_as<T>() + t.num_elements());
}

std::vector<Shape> TestShapes() { return {{}, {0}, {5}, {2, 3}, {3, 0, 2}, {2, 1, 4, 3}}; }

std::vector<DType> NpyDTypes() {
  std::vector<DType> out;
  for (DType d : kAllDTypes) {
    if (d != DType::kBFloat16) out.push_back(d);
  }
  return out;
}

class NpyRoundTripTest : public ::testing::TestWithParam<std::tuple<DType, Shape>> {};

TEST_P(NpyRoundTripTest, SerializeThenParseGivesTheSameTensor) {
  const auto& [dtype, shape] = GetParam();
  const HostTensor t = PatternTensor(dtype, shape);
  absl::StatusOr<std::vector<std::byte>> bytes = SerializeNpy(t);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string text = Text(*bytes);
  ASSERT_GE(text.size(), 10u);
  EXPECT_EQ(text.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_size = static_cast<uint8_t>(text[8]) | static_cast<uint8_t>(text[9]) << 8;
  const size_t data_start = 10 + header_size;
  EXPECT_EQ(data_start % 64, 0u);
  EXPECT_EQ(text[data_start - 1], '\n');
  EXPECT_EQ(text.size(), data_start + t.nbytes());
  EXPECT_THAT(text.substr(10, header_size),
              HasSubstr(absl::StrCat("'descr': '", NpyDescr(dtype).value(), "'")));

  absl::StatusOr<HostTensor> back = ParseNpy(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->BitEqual(t));
}

INSTANTIATE_TEST_SUITE_P(AllDTypesAndShapes, NpyRoundTripTest,
                         ::testing::Combine(::testing::ValuesIn(NpyDTypes()),
                                            ::testing::ValuesIn(TestShapes())));

TEST(NpyTest, SerializeMatchesNumpyByteForByte) {
  // np.save(f, np.arange(6, dtype=np.float32).reshape(2, 3)) writes a 118-byte header ('v\0'):
  // the dict, 20 spaces of growth room for shape[0], padding spaces and '\n'.
  const std::vector<float> values = {0, 1, 2, 3, 4, 5};
  const HostTensor t = HostTensor::FromValues(DType::kFloat32, {2, 3}, values);
  const std::string data(reinterpret_cast<const char*>(values.data()), 24);
  const std::string expected =
      NpyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 118, data);
  ASSERT_EQ(expected.substr(8, 2), std::string("v\0", 2));
  EXPECT_EQ(Text(SerializeNpy(t).value()), expected);
}

TEST(NpyTest, SerializeWritesNumpyShapeTuples) {
  EXPECT_THAT(Text(SerializeNpy(PatternTensor(DType::kFloat64, {})).value()),
              HasSubstr("{'descr': '<f8', 'fortran_order': False, 'shape': (), }"));
  EXPECT_THAT(Text(SerializeNpy(PatternTensor(DType::kBool, {3})).value()),
              HasSubstr("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }"));
  EXPECT_THAT(Text(SerializeNpy(PatternTensor(DType::kInt8, {1000, 0, 7})).value()),
              HasSubstr("'shape': (1000, 0, 7), }"));
}

TEST(NpyTest, ParsesHandWrittenFile) {
  const int32_t values[] = {7, -1, 1 << 30};
  const std::string file =
      NpyFile(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", 118,
              std::string(reinterpret_cast<const char*>(values), sizeof(values)));
  absl::StatusOr<HostTensor> t = ParseNpy(Bytes(file));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), DType::kInt32);
  EXPECT_EQ(t->shape(), Shape({3}));
  EXPECT_EQ(Values<int32_t>(*t), std::vector<int32_t>({7, -1, 1 << 30}));
}

TEST(NpyTest, ParsesVersions2And3) {
  for (int major : {2, 3}) {
    const uint8_t values[] = {1, 2, 3, 4};
    const std::string file =
        NpyFile(major, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }", 116,
                std::string(reinterpret_cast<const char*>(values), sizeof(values)));
    absl::StatusOr<HostTensor> t = ParseNpy(Bytes(file));
    ASSERT_TRUE(t.ok()) << "version " << major << ": " << t.status();
    EXPECT_EQ(t->shape(), Shape({2, 2}));
    EXPECT_EQ(Values<uint8_t>(*t), std::vector<uint8_t>({1, 2, 3, 4}));
  }
}

TEST(NpyTest, WritesVersion2WhenTheHeaderExceeds65535Bytes) {
  const HostTensor t = PatternTensor(DType::kInt64, Shape(25000, 1));
  const std::string text = Text(SerializeNpy(t).value());
  EXPECT_EQ(text.substr(0, 8), std::string("\x93NUMPY\x02\x00", 8));
  size_t header_size = 0;
  for (int i = 0; i < 4; ++i) header_size |= size_t{static_cast<uint8_t>(text[8 + i])} << (8 * i);
  EXPECT_GT(header_size, 65535u);
  EXPECT_EQ((12 + header_size) % 64, 0u);
  EXPECT_EQ(text[12 + header_size - 1], '\n');
  absl::StatusOr<HostTensor> back = ParseNpy(Bytes(text));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->BitEqual(t));
}

TEST(NpyTest, RefusesToWriteBFloat16) {
  absl::StatusOr<std::vector<std::byte>> bytes = SerializeNpy(PatternTensor(DType::kBFloat16, {2}));
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bytes.status().message()),
              AllOf(HasSubstr("bfloat16"), HasSubstr("safetensors")));
}

// A header dict numpy (or another writer) might produce, and what it means.
struct HeaderCase {
  std::string name;
  std::string dict;
  DType dtype;
  Shape shape;
};

void PrintTo(const HeaderCase& c, std::ostream* os) { *os << c.dict; }

class NpyHeaderTest : public ::testing::TestWithParam<HeaderCase> {};

TEST_P(NpyHeaderTest, Parses) {
  const HeaderCase& c = GetParam();
  const HostTensor expected = PatternTensor(c.dtype, c.shape);
  const std::string data(reinterpret_cast<const char*>(expected.data()), expected.nbytes());
  absl::StatusOr<HostTensor> t = ParseNpy(Bytes(NpyFile(1, c.dict, c.dict.size() + 7, data)));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->BitEqual(expected));
}

INSTANTIATE_TEST_SUITE_P(
    Variants, NpyHeaderTest,
    ::testing::Values(
        HeaderCase{"KeysInAnyOrder",
                   "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f8'}",
                   DType::kFloat64,
                   {2, 3}},
        HeaderCase{"DoubleQuotes",
                   R"({"descr": "<f2", "fortran_order": False, "shape": (4,)})",
                   DType::kFloat16,
                   {4}},
        HeaderCase{"NoSpaces",
                   "{'descr':'<i8','fortran_order':False,'shape':(2,2),}",
                   DType::kInt64,
                   {2, 2}},
        HeaderCase{"ExtraSpaces",
                   "{ 'descr' : '|i1' ,  'fortran_order' : False , 'shape' : ( 3 , 1 , ) , }",
                   DType::kInt8,
                   {3, 1}},
        HeaderCase{
            "Scalar", "{'descr': '<f4', 'fortran_order': False, 'shape': ()}", DType::kFloat32, {}},
        HeaderCase{"ZeroSizeDim",
                   "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5)}",
                   DType::kFloat32,
                   {0, 5}},
        HeaderCase{"PythonTwoLongs",
                   "{'descr': '<i4', 'fortran_order': False, 'shape': (2L, 3L), }",
                   DType::kInt32,
                   {2, 3}},
        HeaderCase{"NativeOrder",
                   "{'descr': '=i4', 'fortran_order': False, 'shape': (2,)}",
                   DType::kInt32,
                   {2}},
        HeaderCase{"NoOrderOneByte",
                   "{'descr': '|u1', 'fortran_order': False, 'shape': (2,)}",
                   DType::kUInt8,
                   {2}},
        HeaderCase{"LittleOrderOneByte",
                   "{'descr': '<b1', 'fortran_order': False, 'shape': (2,)}",
                   DType::kBool,
                   {2}}),
    [](const ::testing::TestParamInfo<HeaderCase>& info) { return info.param.name; });

// A malformed file and the words its error must contain.
struct MalformedCase {
  std::string name;
  std::string bytes;
  std::vector<std::string> message_parts;
};

void PrintTo(const MalformedCase& c, std::ostream* os) { *os << c.name; }

class NpyMalformedTest : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(NpyMalformedTest, IsInvalidArgumentNamingTheProblem) {
  const MalformedCase& c = GetParam();
  absl::StatusOr<HostTensor> t = ParseNpy(Bytes(c.bytes));
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  for (const std::string& part : c.message_parts) {
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(part));
  }
}

std::string WithDict(absl::string_view dict, absl::string_view data = "") {
  return NpyFile(1, dict, 118, data);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, NpyMalformedTest,
    ::testing::Values(
        MalformedCase{"BadMagic", "\x93NUMPZ\x01\x00", {"bad magic", "NUMPZ"}},
        MalformedCase{"Empty", "", {"bad magic"}},
        MalformedCase{"NoVersion", "\x93NUMPY", {"too short"}},
        MalformedCase{
            "TruncatedLength", std::string("\x93NUMPY\x01\x00\x05", 9), {"too short", "9 bytes"}},
        MalformedCase{"UnknownVersion", WithDict("{}").replace(6, 1, "\x04"), {"version 4.0"}},
        MalformedCase{"UnknownMinorVersion", WithDict("{}").replace(7, 1, "\x01"), {"version 1.1"}},
        MalformedCase{"HeaderLengthPastTheEnd",
                      std::string("\x93NUMPY\x01\x00\xf4\x01{'descr': '<f4'}", 26),
                      {"header length 500", "16 bytes"}},
        MalformedCase{"UnknownDescr",
                      WithDict("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }"),
                      {"'<c8'"}},
        MalformedCase{"BigEndian",
                      WithDict("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }"),
                      {"big-endian", "'>f4'"}},
        MalformedCase{"NoByteOrderForMultiByte",
                      WithDict("{'descr': '|i4', 'fortran_order': False, 'shape': (1,), }"),
                      {"'|i4'", "byte order"}},
        MalformedCase{"StructuredDescr",
                      WithDict("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': ()}"),
                      {"structured"}},
        MalformedCase{"FortranOrder",
                      WithDict("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
                               std::string(16, '\0')),
                      {"fortran_order True"}},
        MalformedCase{"DataTooShort",
                      WithDict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                               std::string(20, '\0')),
                      {"[2, 3]", "needs 24 bytes", "has 20 bytes"}},
        MalformedCase{"DataTooLong",
                      WithDict("{'descr': '<i8', 'fortran_order': False, 'shape': (), }",
                               std::string(9, '\0')),
                      {"needs 8 bytes", "has 9 bytes"}},
        MalformedCase{"NegativeDim",
                      WithDict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }"),
                      {"-3", "dim 1"}},
        MalformedCase{
            "MissingShape", WithDict("{'descr': '<f4', 'fortran_order': False}"), {"no 'shape'"}},
        MalformedCase{"UnexpectedKey",
                      WithDict("{'descr': '<f4', 'fortran_order': False, 'shape': (), "
                               "'strides': (4,)}"),
                      {"'strides'"}},
        MalformedCase{"DuplicateKey",
                      WithDict("{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, "
                               "'shape': ()}"),
                      {"'descr' twice"}},
        MalformedCase{"ShapeNotATuple",
                      WithDict("{'descr': '<f4', 'fortran_order': False, 'shape': [2]}"),
                      {"tuple", "[2]"}},
        MalformedCase{"DimNotAnInteger",
                      WithDict("{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,)}"),
                      {"'shape'", "'2.5'"}},
        MalformedCase{"EmptyDim",
                      WithDict("{'descr': '<f4', 'fortran_order': False, 'shape': (2, , 3)}"),
                      {"'shape'", "''"}},
        MalformedCase{"DimTooLarge",
                      WithDict("{'descr': '<f4', 'fortran_order': False, "
                               "'shape': (99999999999999999999,)}"),
                      {"'99999999999999999999'"}},
        MalformedCase{"TooManyElements",
                      WithDict("{'descr': '<f4', 'fortran_order': False, "
                               "'shape': (9999999999, 9999999999)}"),
                      {"more elements than fit in int64"}},
        MalformedCase{"FortranOrderNotABool",
                      WithDict("{'descr': '<f4', 'fortran_order': 0, 'shape': ()}"),
                      {"True or False"}},
        MalformedCase{"UnclosedDict",
                      WithDict("{'descr': '<f4', 'fortran_order': False, 'shape': ()"),
                      {"expected ',' or '}'"}},
        MalformedCase{"NotADict", WithDict("descr"), {"expected '{'"}}),
    [](const ::testing::TestParamInfo<MalformedCase>& info) { return info.param.name; });

// Gives each test a fresh temporary directory.
class NpyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/npy_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
};

TEST_F(NpyFileTest, WriteThenReadGivesTheSameTensor) {
  const std::string path = dir_ + "/x.npy";
  const HostTensor t = PatternTensor(DType::kFloat32, {3, 4});
  ASSERT_TRUE(WriteNpyFile(path, t).ok());
  absl::StatusOr<HostTensor> back = ReadNpyFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->BitEqual(t));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_F(NpyFileTest, WriteReplacesAnExistingFile) {
  const std::string path = dir_ + "/x.npy";
  ASSERT_TRUE(WriteNpyFile(path, PatternTensor(DType::kInt64, {100})).ok());
  const HostTensor t = PatternTensor(DType::kInt8, {2});
  ASSERT_TRUE(WriteNpyFile(path, t).ok());
  EXPECT_TRUE(ReadNpyFile(path).value().BitEqual(t));
}

TEST_F(NpyFileTest, MissingFileIsNotFoundNamingThePath) {
  const std::string path = dir_ + "/missing.npy";
  absl::StatusOr<HostTensor> t = ReadNpyFile(path);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr(path));
}

TEST_F(NpyFileTest, MalformedFileErrorNamesThePath) {
  const std::string path = dir_ + "/bad.npy";
  const std::vector<std::byte> bad = Bytes("not an npy file");
  {
    FILE* f = fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    fwrite(bad.data(), 1, bad.size(), f);
    fclose(f);
  }
  absl::StatusOr<HostTensor> t = ReadNpyFile(path);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), AllOf(HasSubstr(path), HasSubstr("bad magic")));
}

TEST_F(NpyFileTest, WriteIntoAMissingDirectoryFailsNamingThePath) {
  const std::string path = dir_ + "/no/such/dir/x.npy";
  absl::Status s = WriteNpyFile(path, PatternTensor(DType::kFloat32, {1}));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(path));
}

TEST_F(NpyFileTest, WriteOfBFloat16LeavesNoFile) {
  const std::string path = dir_ + "/bf16.npy";
  EXPECT_EQ(WriteNpyFile(path, PatternTensor(DType::kBFloat16, {2})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace tessera
