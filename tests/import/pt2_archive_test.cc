// import::ReadPt2Graph on the torch.export archives of transformers' Llama, Qwen2, GPT-2 and BERT
// that tests/fixtures/export/make_pt2.py wrote (torch and transformers as its versions.json
// says): every node's op, counted, equals what torch's own graph listed when it saved the
// archive; the ops the registry does not hold yet are the ones listed here; and archives that are
// not torch.export's, or are broken, are refused naming the file and what is wrong.

#include "import/pt2_archive.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ops/op_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "import/exported_program.h"
#include "nlohmann/json.hpp"
#include "tests/import/write_zip.h"

namespace tessera::import {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kFixtures = TESSERA_EXPORT_FIXTURES;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// The ops of the four graphs the registry does not hold yet, each with the reason; the list
// shrinks as they come (the test fails for one that is registered and still listed).
const std::map<std::string, std::string>& NotRegistered() {
  static const auto* const missing = new std::map<std::string, std::string>{
      // torch.export's training IR keeps these; import answers both itself
      // (import/exported_program.h, ResolvedByImport).
      {"aten::_assert_tensor_metadata", "a check of the traced dtypes, no computation"},
      {"aten::to.device",
       "a required Device argument, which the registry's calls leave at None: run as to.dtype"},
  };
  return *missing;
}

class Pt2GraphTest : public ::testing::TestWithParam<std::string> {};

TEST_P(Pt2GraphTest, OpsAreTheOnesTorchListed) {
  const std::string model = GetParam();
  absl::StatusOr<Pt2Graph> graph = ReadPt2Graph(absl::StrCat(kFixtures, "/", model, ".pt2"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->archive, model);
  EXPECT_EQ(graph->model, absl::StrCat(model, "/models/model.json"));
  EXPECT_FALSE(graph->schema_version.empty());
  const nlohmann::json versions = ReadJson(kFixtures + "/versions.json");
  EXPECT_EQ(graph->torch_version, versions.value("torch", "?"));
  const nlohmann::json listed = ReadJson(absl::StrCat(kFixtures, "/", model, ".ops.json"));
  ASSERT_TRUE(listed.is_object());
  std::map<std::string, int64_t> want;
  for (const auto& [op, count] : listed.items()) want[op] = count.get<int64_t>();
  EXPECT_EQ(CountOps(*graph), want);
}

TEST_P(Pt2GraphTest, EveryOpIsRegisteredButThoseListed) {
  absl::StatusOr<Pt2Graph> graph = ReadPt2Graph(absl::StrCat(kFixtures, "/", GetParam(), ".pt2"));
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::vector<std::string> unexpected;
  for (const auto& [op, count] : CountOps(*graph)) {
    const bool registered = Registered(op);
    if (NotRegistered().contains(op) && ResolvedByImport(op) == nullptr) {
      unexpected.push_back(absl::StrCat(op, " is neither registered nor answered by import"));
    }
    if (registered == NotRegistered().contains(op)) {
      unexpected.push_back(absl::StrCat(
          op, registered ? " is registered now: drop it from the list" : " is not registered"));
    }
  }
  EXPECT_THAT(unexpected, ::testing::IsEmpty()) << absl::StrJoin(unexpected, "; ");
}

INSTANTIATE_TEST_SUITE_P(Transformers, Pt2GraphTest,
                         ::testing::Values("llama", "qwen2", "gpt2", "bert"));

// By the exact overload: torch's var.default is not the registry's var.correction.
TEST(RegisteredTest, ByTheExactOverload) {
  EXPECT_TRUE(Registered("aten::mm"));
  EXPECT_TRUE(Registered("aten::softmax.int"));
  EXPECT_TRUE(Registered("aten::var.correction"));
  EXPECT_FALSE(Registered(RegistryName("torch.ops.aten.var.default")));
  EXPECT_FALSE(Registered("_operator.getitem"));
}

TEST(RegistryNameTest, AtenTargetsAsTheRegistryNamesThem) {
  EXPECT_EQ(RegistryName("torch.ops.aten.softmax.int"), "aten::softmax.int");
  EXPECT_EQ(RegistryName("torch.ops.aten.mm.default"), "aten::mm");
  EXPECT_EQ(RegistryName("_operator.getitem"), "_operator.getitem");
  EXPECT_EQ(RegistryName("torch.ops.higher_order.wrap_with_set_grad_enabled"),
            "torch.ops.higher_order.wrap_with_set_grad_enabled");
}

TEST(ReadPt2GraphTest, RefusesWhatIsNotAnArchiveOfTorchExport) {
  const std::string dir = ::testing::TempDir();
  absl::StatusOr<Pt2Graph> g = ReadPt2Graph(dir + "/no-such.pt2");
  EXPECT_EQ(g.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(g.status().message(), HasSubstr("no-such.pt2"));

  const std::string text = dir + "/text.pt2";
  std::ofstream(text) << "not a zip";
  g = ReadPt2Graph(text);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), AllOf(HasSubstr("text.pt2"), HasSubstr("not a torch.export")));

  const std::string empty = dir + "/empty.pt2";
  ASSERT_NO_FATAL_FAILURE(WriteZip(empty, {{"m/data/weights/weight_0", "1234"}}));
  g = ReadPt2Graph(empty);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("models/*.json"));

  const std::string format = dir + "/format.pt2";
  ASSERT_NO_FATAL_FAILURE(WriteZip(
      format, {{"m/archive_format", "pt3"}, {"m/models/model.json", R"({"graph_module": {}})"}}));
  g = ReadPt2Graph(format);
  EXPECT_THAT(g.status().message(), AllOf(HasSubstr("archive_format"), HasSubstr("pt3")));

  const std::string broken = dir + "/broken.pt2";
  ASSERT_NO_FATAL_FAILURE(WriteZip(broken, {{"m/models/model.json", "{\"graph_module\": "}}));
  g = ReadPt2Graph(broken);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), AllOf(HasSubstr("m/models/model.json"), HasSubstr("not JSON")));

  const std::string no_graph = dir + "/no_graph.pt2";
  ASSERT_NO_FATAL_FAILURE(WriteZip(no_graph, {{"m/models/model.json", R"({"graph_module": {}})"}}));
  g = ReadPt2Graph(no_graph);
  EXPECT_THAT(g.status().message(), HasSubstr("has no 'graph'"));

  const std::string no_target = dir + "/no_target.pt2";
  ASSERT_NO_FATAL_FAILURE(WriteZip(
      no_target,
      {{"m/models/model.json",
        R"({"graph_module": {"graph": {"nodes": [{"target": "torch.ops.aten.mm.default"}, {}]}}})"}}));
  g = ReadPt2Graph(no_target);
  EXPECT_THAT(g.status().message(), AllOf(HasSubstr("node 1"), HasSubstr("no target")));

  const std::string good = dir + "/good.pt2";
  ASSERT_NO_FATAL_FAILURE(WriteZip(
      good, {{"m/archive_format", "pt2"},
             {"m/models/model.json",
              R"({"graph_module": {"graph": {"nodes": [{"target": "torch.ops.aten.mm.default"},
                 {"target": "torch.ops.aten.mm.default"}, {"target": "_operator.getitem"}]}}})"}}));
  g = ReadPt2Graph(good);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(CountOps(*g),
            (std::map<std::string, int64_t>{{"aten::mm", 2}, {"_operator.getitem", 1}}));
}

}  // namespace
}  // namespace tessera::import
