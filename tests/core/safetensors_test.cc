#include "core/files/safetensors.h"

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/files/file_bytes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::vector<std::byte> Bytes(absl::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

std::string Text(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// The 8-byte little-endian length, `header`, then `data`: a safetensors file built by hand.
std::string SafetensorsBytes(absl::string_view header, absl::string_view data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xFF);
  return absl::StrCat(out, header, data);
}

template <typename T>
std::string RawBytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A tensor whose bytes follow a fixed pattern (0 or 1 for bool, so every value is valid).
HostTensor PatternTensor(DType dtype, const Shape& shape, int seed = 0) {
  HostTensor t = HostTensor::Uninitialized(dtype, shape).value();
  for (size_t i = 0; i < t.nbytes(); ++i) {
    t.data()[i] =
        static_cast<std::byte>(dtype == DType::kBool ? (i + seed) % 2 : (i * 37 + 11 + seed) % 256);
  }
  return t;
}

template <typename T>
std::vector<T> Values(const HostTensor& t) {
  return std::vector<T>(t.data_as<T>(), t.data_as<T>() + t.num_elements());
}

void ExpectSameFile(const SafetensorsFile& a, const SafetensorsFile& b) {
  EXPECT_EQ(a.metadata, b.metadata);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (auto ia = a.tensors.begin(), ib = b.tensors.begin(); ia != a.tensors.end(); ++ia, ++ib) {
    EXPECT_EQ(ia->first, ib->first);
    EXPECT_TRUE(ia->second.BitEqual(ib->second)) << ia->first;
  }
}

std::vector<Shape> TestShapes() { return {{}, {0}, {5}, {2, 3}, {3, 0, 2}, {2, 1, 4, 3}}; }

class SafetensorsRoundTripTest : public ::testing::TestWithParam<std::tuple<DType, Shape>> {};

TEST_P(SafetensorsRoundTripTest, SerializeThenParseGivesTheSameFile) {
  const auto& [dtype, shape] = GetParam();
  SafetensorsFile file;
  file.tensors.emplace("middle", PatternTensor(dtype, shape));
  file.tensors.emplace("a.first", PatternTensor(DType::kFloat32, {3}, 1));
  file.tensors.emplace("z.last", PatternTensor(dtype, shape, 2));
  file.metadata = {{"format", "pt"}, {"step", "100"}};

  absl::StatusOr<std::vector<std::byte>> bytes = SerializeSafetensors(file);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::string text = Text(*bytes);
  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= uint64_t{static_cast<uint8_t>(text[i])} << (8 * i);
  EXPECT_EQ(header_size % 8, 0u);

  // Tensors appear sorted by name with contiguous data offsets that cover the whole buffer.
  const auto header = nlohmann::ordered_json::parse(text.substr(8, header_size));
  ASSERT_EQ(header.size(), 4u);
  EXPECT_EQ(header.begin().key(), "__metadata__");
  int64_t expected_begin = 0;
  std::vector<std::string> names;
  for (auto it = std::next(header.begin()); it != header.end(); ++it) {
    names.push_back(it.key());
    const nlohmann::ordered_json& offsets = it.value().at("data_offsets");
    ASSERT_EQ(offsets.size(), 2u);
    EXPECT_EQ(offsets[0].get<int64_t>(), expected_begin);
    expected_begin = offsets[1].get<int64_t>();
  }
  EXPECT_THAT(names, ElementsAre("a.first", "middle", "z.last"));
  EXPECT_EQ(static_cast<uint64_t>(expected_begin), text.size() - 8 - header_size);

  absl::StatusOr<SafetensorsFile> back = ParseSafetensors(*bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameFile(*back, file);
}

INSTANTIATE_TEST_SUITE_P(AllDTypesAndShapes, SafetensorsRoundTripTest,
                         ::testing::Combine(::testing::ValuesIn(kAllDTypes),
                                            ::testing::ValuesIn(TestShapes())));

TEST(SafetensorsTest, SerializeMatchesHandBuiltBytes) {
  SafetensorsFile file;
  file.tensors.emplace("b", HostTensor::FromValues(DType::kInt32, {2}, std::vector<int32_t>{1, 2}));
  file.tensors.emplace("a", HostTensor::FromValues(DType::kFloat32, {}, std::vector<float>{1.5f}));
  file.metadata["k"] = "v";
  std::string header =
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
      R"("b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}})";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  const std::string expected = SafetensorsBytes(
      header, RawBytes(std::vector<float>{1.5f}) + RawBytes(std::vector<int32_t>{1, 2}));
  EXPECT_EQ(Text(SerializeSafetensors(file).value()), expected);
}

TEST(SafetensorsTest, EmptyFileHasAnEmptyHeader) {
  EXPECT_EQ(Text(SerializeSafetensors({}).value()), SafetensorsBytes("{}      ", ""));
  absl::StatusOr<SafetensorsFile> back = ParseSafetensors(Bytes(SafetensorsBytes("{}", "")));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->tensors.empty());
  EXPECT_TRUE(back->metadata.empty());
}

TEST(SafetensorsTest, ParsesHandBuiltFile) {
  // Unsorted keys, metadata last, whitespace, an unknown field and trailing padding.
  const std::string header = R"( {
    "w": {"shape": [2, 2], "dtype": "BF16", "data_offsets": [8, 16], "extra": [1, {"x": "y"}]},
    "bias": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]},
    "__metadata__": {"format": "pt", "note": "a \"quoted\" \\ value"}
  }    )";
  const std::vector<uint16_t> w = {FloatToBFloat16(1.0f), FloatToBFloat16(-2.0f),
                                   FloatToBFloat16(0.5f), FloatToBFloat16(3.0f)};
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(
      Bytes(SafetensorsBytes(header, RawBytes(std::vector<double>{0.25}) + RawBytes(w))));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(file->metadata,
              ElementsAre(Pair("format", "pt"), Pair("note", R"(a "quoted" \ value)")));
  ASSERT_EQ(file->tensors.size(), 2u);
  const HostTensor& bias = file->tensors.at("bias");
  EXPECT_EQ(bias.dtype(), DType::kFloat64);
  EXPECT_EQ(Values<double>(bias), std::vector<double>({0.25}));
  const HostTensor& wt = file->tensors.at("w");
  EXPECT_EQ(wt.dtype(), DType::kBFloat16);
  EXPECT_EQ(wt.shape(), Shape({2, 2}));
  EXPECT_EQ(Values<uint16_t>(wt), w);
}

TEST(SafetensorsTest, AllowsGapsAndEmptyTensorsAtAnyOffset) {
  const std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                             R"("e1":{"dtype":"F32","shape":[0],"data_offsets":[1,1]},)"
                             R"("e2":{"dtype":"F32","shape":[0, 4],"data_offsets":[1,1]},)"
                             R"("b":{"dtype":"U8","shape":[1],"data_offsets":[5,6]}})";
  absl::StatusOr<SafetensorsFile> file =
      ParseSafetensors(Bytes(SafetensorsBytes(header, "\x01\x02xyz\x03zz")));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(Values<uint8_t>(file->tensors.at("a")), std::vector<uint8_t>({1, 2}));
  EXPECT_EQ(Values<uint8_t>(file->tensors.at("b")), std::vector<uint8_t>({3}));
  EXPECT_EQ(file->tensors.at("e2").shape(), Shape({0, 4}));
}

TEST(SafetensorsTest, NamesAndMetadataWithEscapesRoundTrip) {
  SafetensorsFile file;
  const std::vector<std::string> names = {
      "quote\"d", "back\\slash", "new\nline", "caf\xc3\xa9", std::string("ctrl\x01\x1f", 6),
      "slash/ok"};
  for (size_t i = 0; i < names.size(); ++i) {
    file.tensors.emplace(names[i], PatternTensor(DType::kInt8, {2}, static_cast<int>(i)));
    file.metadata[names[i]] = names[(i + 1) % names.size()];
  }
  absl::StatusOr<SafetensorsFile> back = ParseSafetensors(SerializeSafetensors(file).value());
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameFile(*back, file);
}

TEST(SafetensorsTest, DecodesJsonEscapesInNames) {
  const std::string header =
      R"({"\u00e9\ud83d\ude00\/\t":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})";
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(Bytes(SafetensorsBytes(header, "\x01")));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors.begin()->first, "\xc3\xa9\xf0\x9f\x98\x80/\t");
}

TEST(SafetensorsTest, AcceptsInt64MaxNesting64AndAnyJsonInUnknownFields) {
  // The header object, the entry and 62 arrays in "x" make 64 levels, the deepest allowed.
  const std::string header =
      absl::StrCat(R"({"w":{"dtype":"F32","shape":[0,9223372036854775807],"data_offsets":[0,0],)",
                   R"("y":[1.5,-2e3,true,false,null,{}],"x":)", std::string(62, '['),
                   std::string(62, ']'), "}}");
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(Bytes(SafetensorsBytes(header, "")));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors.at("w").shape(), Shape({0, INT64_MAX}));
}

TEST(SafetensorsTest, RefusesToWriteANameThatIsNotUtf8) {
  for (const bool in_metadata : {false, true}) {
    SafetensorsFile file;
    if (in_metadata) {
      file.metadata["caf\xe9"] = "x";
    } else {
      file.tensors.emplace("caf\xe9", PatternTensor(DType::kUInt8, {1}));
    }
    absl::StatusOr<std::vector<std::byte>> bytes = SerializeSafetensors(file);
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument) << in_metadata;
    EXPECT_THAT(std::string(bytes.status().message()), HasSubstr("UTF-8")) << in_metadata;
  }
}

TEST(SafetensorsTest, RefusesToWriteATensorNamedMetadata) {
  SafetensorsFile file;
  file.tensors.emplace("__metadata__", PatternTensor(DType::kFloat32, {1}));
  absl::StatusOr<std::vector<std::byte>> bytes = SerializeSafetensors(file);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bytes.status().message()), HasSubstr("__metadata__"));
}

TEST(SafetensorsTest, DTypeNamesRoundTrip) {
  for (DType d : kAllDTypes) EXPECT_EQ(ParseSafetensorsDType(SafetensorsDTypeName(d)).value(), d);
}

// A malformed file and the words its error must contain.
struct MalformedCase {
  std::string name;
  std::string bytes;
  std::vector<std::string> message_parts;
};

void PrintTo(const MalformedCase& c, std::ostream* os) { *os << c.name; }

class SafetensorsMalformedTest : public ::testing::TestWithParam<MalformedCase> {};

TEST_P(SafetensorsMalformedTest, IsInvalidArgumentNamingTheProblem) {
  const MalformedCase& c = GetParam();
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(Bytes(c.bytes));
  ASSERT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
  for (const std::string& part : c.message_parts) {
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(part));
  }
}

// A file with one tensor entry `entry` named "w" and `data_size` zero bytes of data.
std::string OneTensor(absl::string_view entry, size_t data_size) {
  return SafetensorsBytes(absl::StrCat(R"({"w":)", entry, "}"), std::string(data_size, '\0'));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SafetensorsMalformedTest,
    ::testing::Values(
        MalformedCase{
            "ShorterThanTheLength", std::string("\x02\x00\x00", 3), {"3 bytes", "too short"}},
        MalformedCase{"HeaderLengthPastTheEnd",
                      SafetensorsBytes("{}", "").replace(0, 2, "\xe8\x03"),
                      {"header length 1000", "2 bytes follow"}},
        MalformedCase{"HugeHeaderLength",
                      std::string(8, '\xff') + "{}",
                      {"header length 18446744073709551615"}},
        MalformedCase{"NotJson", SafetensorsBytes("hello", ""), {"column 1", "invalid literal"}},
        MalformedCase{"HeaderNotAnObject", SafetensorsBytes("[1, 2]", ""), {"array"}},
        MalformedCase{"TruncatedJson",
                      SafetensorsBytes(R"({"w": {"dtype": "F3)", ""),
                      {"column 20", "missing closing quote"}},
        MalformedCase{"TrailingJunk", SafetensorsBytes("{} x", ""), {"expected end of input"}},
        MalformedCase{"FloatInJson",
                      OneTensor(R"({"dtype":"F32","shape":[1.0],"data_offsets":[0,4]})", 4),
                      {"fraction"}},
        MalformedCase{"UnknownDType",
                      OneTensor(R"({"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]})", 1),
                      {"'w'", "F8_E4M3"}},
        MalformedCase{"SizeMismatch",
                      OneTensor(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,20]})", 20),
                      {"'w'", "[2, 3]", "needs 24 bytes", "span 20 bytes"}},
        MalformedCase{"PartialElement",
                      OneTensor(R"({"dtype":"I64","shape":[1],"data_offsets":[0,9]})", 9),
                      {"needs 8 bytes", "span 9 bytes"}},
        MalformedCase{"OffsetsPastTheBuffer",
                      OneTensor(R"({"dtype":"U8","shape":[8],"data_offsets":[4,12]})", 10),
                      {"'w'", "[4, 12]", "10-byte"}},
        MalformedCase{"OffsetsBackwards",
                      OneTensor(R"({"dtype":"U8","shape":[0],"data_offsets":[4,2]})", 10),
                      {"'w'", "[4, 2]"}},
        MalformedCase{"NegativeOffset",
                      OneTensor(R"({"dtype":"U8","shape":[2],"data_offsets":[-2,0]})", 10),
                      {"'w'", "[-2, 0]"}},
        MalformedCase{"ThreeOffsets",
                      OneTensor(R"({"dtype":"U8","shape":[2],"data_offsets":[0,1,2]})", 10),
                      {"'w'", "3 data_offsets"}},
        MalformedCase{"NegativeDim",
                      OneTensor(R"({"dtype":"F32","shape":[2,-1],"data_offsets":[0,0]})", 0),
                      {"'w'", "-1", "dim 1"}},
        MalformedCase{"TooManyElements",
                      OneTensor(R"({"dtype":"F32","shape":[4294967296,4294967296],)"
                                R"("data_offsets":[0,0]})",
                                0),
                      {"'w'", "more elements than fit in int64"}},
        MalformedCase{"ShapeOverflowsBytes",
                      OneTensor(R"({"dtype":"F64","shape":[4611686018427387904],)"
                                R"("data_offsets":[0,8]})",
                                8),
                      {"'w'", "needs more than 18446744073709551615 bytes"}},
        MalformedCase{"IntegerTooLarge",
                      OneTensor(R"({"dtype":"U8","shape":[1],"data_offsets":[0,)"
                                R"(99999999999999999999]})",
                                1),
                      {"does not fit in int64"}},
        MalformedCase{"MissingDType",
                      OneTensor(R"({"shape":[1],"data_offsets":[0,1]})", 1),
                      {"'w'", "no \"dtype\""}},
        MalformedCase{"MissingOffsets",
                      OneTensor(R"({"dtype":"U8","shape":[1]})", 1),
                      {"'w'", "no \"data_offsets\""}},
        MalformedCase{"DTypeNotAString",
                      OneTensor(R"({"dtype":1,"shape":[1],"data_offsets":[0,1]})", 1),
                      {"'w'", "\"dtype\"", "integer"}},
        MalformedCase{"DimNotAnInteger",
                      OneTensor(R"({"dtype":"U8","shape":["1"],"data_offsets":[0,1]})", 1),
                      {"'w'", "in \"shape\"", "expected an integer, found a string"}},
        MalformedCase{
            "FieldTwice",
            OneTensor(R"({"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]})", 1),
            {"\"dtype\" appears twice in the object at /w"}},
        MalformedCase{"EntryNotAnObject", OneTensor(R"("F32")", 0), {"'w'", "string"}},
        MalformedCase{"Overlap",
                      SafetensorsBytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                       std::string(12, '\0')),
                      {"'a' [0, 8]", "'b' [4, 12]", "overlap"}},
        MalformedCase{
            "OverlapInsideALongerTensor",
            SafetensorsBytes(R"({"c":{"dtype":"U8","shape":[1],"data_offsets":[9,10]},)"
                             R"("long":{"dtype":"U8","shape":[10],"data_offsets":[0,10]},)"
                             R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})",
                             std::string(10, '\0')),
            {"'long' [0, 10]", "'b' [2, 4]"}},
        MalformedCase{"DuplicateName",
                      SafetensorsBytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                       R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                       std::string(2, '\0')),
                      {"\"w\" appears twice in the object at the top level"}},
        MalformedCase{"MetadataTwice",
                      SafetensorsBytes(R"({"__metadata__":{},"__metadata__":{}})", ""),
                      {"\"__metadata__\" appears twice"}},
        MalformedCase{"MetadataValueNotAString",
                      SafetensorsBytes(R"({"__metadata__":{"step":100}})", ""),
                      {"'step'", "integer"}},
        MalformedCase{"MetadataNotAnObject",
                      SafetensorsBytes(R"({"__metadata__":"x"})", ""),
                      {"\"__metadata__\" is a string"}},
        MalformedCase{"MetadataKeyTwice",
                      SafetensorsBytes(R"({"__metadata__":{"k":"a","k":"b"}})", ""),
                      {"\"k\" appears twice in the object at /__metadata__"}},
        MalformedCase{
            "KeyTwiceInAnUnknownField",
            OneTensor(R"({"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[{"a":1,"a":2}]})", 1),
            {"\"a\" appears twice in the object at /w/x/0"}},
        MalformedCase{"LeadingZero",
                      OneTensor(R"({"dtype":"U8","shape":[01],"data_offsets":[0,1]})", 1),
                      {"column 30", "unexpected number literal"}},
        MalformedCase{"TrailingComma",
                      OneTensor(R"({"dtype":"U8","shape":[1,],"data_offsets":[0,1]})", 1),
                      {"column 31", "unexpected ']'"}},
        MalformedCase{"LoneSurrogateInName",
                      SafetensorsBytes(R"({"\ud800":{}})", ""),
                      {"column 9", "surrogate"}},
        MalformedCase{"ControlCharacterInName",
                      SafetensorsBytes("{\"a\nb\":{}}", ""),
                      {"line 2", "control character U+000A"}},
        MalformedCase{"InvalidUtf8InName",
                      SafetensorsBytes("{\"caf\xe9\":{}}", ""),
                      {"column 7", "ill-formed UTF-8"}},
        MalformedCase{"ExponentInShape",
                      OneTensor(R"({"dtype":"U8","shape":[1e0],"data_offsets":[0,1]})", 1),
                      {"'w'", "in \"shape\"", "found 1.0", "fraction or exponent"}},
        MalformedCase{"NullInShape",
                      OneTensor(R"({"dtype":"U8","shape":[null],"data_offsets":[0,1]})", 1),
                      {"'w'", "in \"shape\"", "found null"}},
        MalformedCase{"BooleanDType",
                      OneTensor(R"({"dtype":true,"shape":[1],"data_offsets":[0,1]})", 1),
                      {"'w'", "\"dtype\" that is a boolean, expected a string"}},
        MalformedCase{"OffsetsNotAnArray",
                      OneTensor(R"({"dtype":"U8","shape":[1],"data_offsets":{}})", 1),
                      {"'w'", "\"data_offsets\" that is an object, expected an array"}},
        MalformedCase{
            "IntegerTooLargeForInt64",
            OneTensor(R"({"dtype":"U8","shape":[1],)"
                      R"("data_offsets":[0,9223372036854775808]})",
                      1),
            {"'w'", "in \"data_offsets\"", "integer 9223372036854775808 does not fit in int64"}},
        MalformedCase{"IntegerTooSmallForInt64",
                      OneTensor(R"({"dtype":"U8","shape":[-9223372036854775809],)"
                                R"("data_offsets":[0,1]})",
                                1),
                      {"integer -9223372036854775809 at /w/shape/0", "does not fit in int64"}},
        MalformedCase{"SmallestInt64Offset",
                      OneTensor(R"({"dtype":"U8","shape":[0],)"
                                R"("data_offsets":[-9223372036854775808,0]})",
                                0),
                      {"'w'", "[-9223372036854775808, 0]"}},
        MalformedCase{
            "NestingDeeperThan64",
            OneTensor(absl::StrCat(R"({"dtype":"U8","shape":[1],"data_offsets":[0,1],)", R"("x":)",
                                   std::string(63, '['), std::string(63, ']'), "}"),
                      1),
            {"nesting deeper than 64 levels"}}),
    [](const ::testing::TestParamInfo<MalformedCase>& info) { return info.param.name; });

// Gives each test a fresh temporary directory.
class SafetensorsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/safetensors_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_;
};

TEST_F(SafetensorsFileTest, WriteThenReadGivesTheSameFile) {
  const std::string path = dir_ + "/model.safetensors";
  SafetensorsFile file;
  file.tensors.emplace("layer.0.weight", PatternTensor(DType::kBFloat16, {4, 8}));
  file.tensors.emplace("layer.0.bias", PatternTensor(DType::kFloat32, {8}));
  file.metadata["format"] = "pt";
  ASSERT_TRUE(WriteSafetensorsFile(path, file).ok());
  absl::StatusOr<SafetensorsFile> back = ReadSafetensorsFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameFile(*back, file);
}

TEST_F(SafetensorsFileTest, MissingFileIsNotFoundNamingThePath) {
  const std::string path = dir_ + "/missing.safetensors";
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
}

TEST_F(SafetensorsFileTest, MalformedFileErrorNamesThePath) {
  const std::string path = dir_ + "/bad.safetensors";
  {
    FILE* f = fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    fputs("tiny", f);
    fclose(f);
  }
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(file.status().message()), AllOf(HasSubstr(path), HasSubstr("4 bytes")));
}

TEST_F(SafetensorsFileTest, ReadingADirectoryFails) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(dir_);
  EXPECT_FALSE(file.ok());
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(dir_));
}

// The header alone, as a client streaming a file reads it: tensors in the order of their bytes,
// each of whose range holds exactly its bytes.
TEST_F(SafetensorsFileTest, TheHeaderAloneGivesEachTensorsBytesInFileOrder) {
  const std::string path = dir_ + "/model.safetensors";
  SafetensorsFile file;
  file.tensors.emplace("b", PatternTensor(DType::kFloat32, {3, 2}, 1));
  file.tensors.emplace("a", PatternTensor(DType::kInt64, {5}, 2));
  file.tensors.emplace("c.empty", PatternTensor(DType::kFloat16, {0, 4}, 3));
  file.metadata["format"] = "pt";
  ASSERT_TRUE(WriteSafetensorsFile(path, file).ok());
  absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(path);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->metadata, file.metadata);
  ASSERT_EQ(header->tensors.size(), 3u);
  // Written sorted by name: "a" at 0 (40 bytes), "b" at 40 (24), "c.empty" at 64 (none).
  EXPECT_EQ(header->tensors[0].name, "a");
  EXPECT_EQ(header->tensors[1].name, "b");
  EXPECT_EQ(header->tensors[1].begin, 40u);
  EXPECT_EQ(header->tensors[1].end, 64u);
  EXPECT_EQ(header->tensors[2].name, "c.empty");
  for (const SafetensorsEntry& e : header->tensors) {
    const HostTensor& want = file.tensors.at(e.name);
    EXPECT_EQ(e.dtype, want.dtype());
    EXPECT_EQ(e.shape, want.shape());
    absl::StatusOr<std::string> bytes =
        ReadFileRange(path, header->data_offset + e.begin, static_cast<size_t>(e.end - e.begin));
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, std::string(reinterpret_cast<const char*>(want.data()), want.nbytes()))
        << e.name;
  }
}

TEST_F(SafetensorsFileTest, TheHeaderOfABadFileNamesThePathAndTheProblem) {
  const std::string missing = dir_ + "/missing.safetensors";
  absl::StatusOr<SafetensorsHeader> none = ReadSafetensorsHeader(missing);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr(missing));

  // A header that promises more data than the file holds.
  const std::string cut = dir_ + "/cut.safetensors";
  SafetensorsFile file;
  file.tensors.emplace("w", PatternTensor(DType::kFloat32, {8}));
  absl::StatusOr<std::vector<std::byte>> bytes = SerializeSafetensors(file);
  ASSERT_TRUE(bytes.ok());
  bytes->resize(bytes->size() - 4);
  ASSERT_TRUE(WriteFileBytes(cut, *bytes).ok());
  absl::StatusOr<SafetensorsHeader> header = ReadSafetensorsHeader(cut);
  EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(header.status().message()),
              AllOf(HasSubstr(cut), HasSubstr("'w'"), HasSubstr("28-byte data buffer")));

  // A header length past the end of the file.
  const std::string tiny = dir_ + "/tiny.safetensors";
  std::vector<std::byte> length(8, std::byte{0});
  length[0] = std::byte{200};
  ASSERT_TRUE(WriteFileBytes(tiny, length).ok());
  header = ReadSafetensorsHeader(tiny);
  EXPECT_EQ(header.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(header.status().message()),
              AllOf(HasSubstr(tiny), HasSubstr("header length 200")));
}

}  // namespace
}  // namespace tessera
