#include "server/tables/served_models.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "server/tables/dynamic_batcher.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::tessera::testing::StatusIs;

// Answers its input unchanged.
class Identity final : public ModelRunner {
 public:
  absl::StatusOr<HostTensor> Run(const HostTensor& input, absl::Time) override {
    return input.Clone();
  }
};

ServedModel Model(std::string name, std::string version, int64_t max_batch_size = 0) {
  ServedModel m;
  m.name = std::move(name);
  m.version = std::move(version);
  m.inputs = {{"x", DType::kFloat32, {-1, 4}}};
  m.outputs = {{"y", DType::kFloat32, {-1, 4}}};
  m.batching.max_batch_size = max_batch_size;
  m.runner = std::make_shared<Identity>();
  return m;
}

// (name, version) of every listed model, in order.
std::vector<std::pair<std::string, std::string>> Listed(const ServedModels& models) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& m : models.List()) out.emplace_back(m->name, m->version);
  return out;
}

TEST(ServedModelsTest, ListsByNameThenVersionNumerically) {
  ServedModels models;
  for (const auto& [name, version] : std::vector<std::pair<std::string, std::string>>{
           {"mlp", "10"}, {"bert", "1"}, {"mlp", "2"}, {"mlp", "1"}, {"mlp", "beta"}}) {
    ASSERT_TRUE(models.Publish(Model(name, version)).ok()) << name << " " << version;
  }
  const std::vector<std::pair<std::string, std::string>> want = {
      {"bert", "1"}, {"mlp", "beta"}, {"mlp", "1"}, {"mlp", "2"}, {"mlp", "10"}};
  EXPECT_EQ(Listed(models), want);
}

TEST(ServedModelsTest, FindsAVersionOrTheHighest) {
  ServedModels models;
  for (const char* version : {"9", "10", "2"})
    ASSERT_TRUE(models.Publish(Model("m", version)).ok());
  auto highest = models.Find("m", "");
  ASSERT_TRUE(highest.ok()) << highest.status();
  EXPECT_EQ((*highest)->version, "10");
  auto nine = models.Find("m", "9");
  ASSERT_TRUE(nine.ok()) << nine.status();
  EXPECT_EQ((*nine)->version, "9");
  EXPECT_TRUE(StatusIs(models.Find("m", "3").status(), absl::StatusCode::kNotFound,
                       {"'m'", "3", "2, 9, 10"}));
  EXPECT_TRUE(StatusIs(models.Find("other", "").status(), absl::StatusCode::kNotFound, {"other"}));
}

TEST(ServedModelsTest, RefusesTheSameNameAndVersionTwice) {
  ServedModels models;
  ASSERT_TRUE(models.Publish(Model("m", "1")).ok());
  EXPECT_TRUE(
      StatusIs(models.Publish(Model("m", "1")), absl::StatusCode::kAlreadyExists, {"'m'", "1"}));
  EXPECT_TRUE(models.Publish(Model("m", "2")).ok());
  EXPECT_EQ(models.List().size(), 2u);
}

TEST(ServedModelsTest, RefusesAModelWithoutNameVersionOrRunner) {
  ServedModels models;
  EXPECT_TRUE(StatusIs(models.Publish(Model("", "1")), absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(
      StatusIs(models.Publish(Model("m", "")), absl::StatusCode::kInvalidArgument, {"version"}));
  ServedModel no_runner = Model("m", "1");
  no_runner.runner = nullptr;
  EXPECT_TRUE(StatusIs(models.Publish(std::move(no_runner)), absl::StatusCode::kInvalidArgument,
                       {"runner"}));
  EXPECT_TRUE(StatusIs(models.Publish(Model("m", "1", -2)), absl::StatusCode::kInvalidArgument,
                       {"max_batch_size -2"}));
  EXPECT_TRUE(models.List().empty());
}

TEST(ServedModelsTest, UnpublishesOneVersionOrAll) {
  ServedModels models;
  for (const char* version : {"1", "2", "3"}) ASSERT_TRUE(models.Publish(Model("m", version)).ok());
  ASSERT_TRUE(models.Publish(Model("n", "1")).ok());
  ASSERT_TRUE(models.Unpublish("m", "2").ok());
  const std::vector<std::pair<std::string, std::string>> after_one = {
      {"m", "1"}, {"m", "3"}, {"n", "1"}};
  EXPECT_EQ(Listed(models), after_one);
  EXPECT_TRUE(StatusIs(models.Unpublish("m", "2"), absl::StatusCode::kNotFound, {"'m'", "2"}));
  ASSERT_TRUE(models.Unpublish("m").ok());
  const std::vector<std::pair<std::string, std::string>> after_all = {{"n", "1"}};
  EXPECT_EQ(Listed(models), after_all);
  EXPECT_TRUE(StatusIs(models.Unpublish("m"), absl::StatusCode::kNotFound, {"'m'"}));
}

TEST(ServedModelsTest, AModelWithBatchingIsServedThroughADynamicBatcher) {
  ServedModels models;
  ASSERT_TRUE(models.Publish(Model("plain", "1")).ok());
  ASSERT_TRUE(models.Publish(Model("batched", "1", 8)).ok());
  auto plain = models.Find("plain", "1");
  auto batched = models.Find("batched", "1");
  ASSERT_TRUE(plain.ok() && batched.ok());
  EXPECT_EQ(dynamic_cast<const DynamicBatcher*>((*plain)->runner.get()), nullptr);
  EXPECT_NE(dynamic_cast<const DynamicBatcher*>((*batched)->runner.get()), nullptr);
  // It answers as its runner does.
  HostTensor x = HostTensor::FromValues<float>(DType::kFloat32, {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  auto y = (*batched)->runner->Run(x, absl::InfiniteFuture());
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(y->BitEqual(x));
}

}  // namespace
}  // namespace tessera
