// CommandLabel names a command's kind, its mesh (for every kind that has one) and its sequence, as
// the daemons' log lines show them; the expected labels are written out by hand.

#include "proto/command_label.h"

#include <functional>
#include <string>

#include "gtest/gtest.h"

namespace tessera {
namespace {

struct LabelCase {
  std::string expected;
  std::function<void(v1::Command&)> fill;  // sets the kind (and its mesh id, 7)
};

class CommandLabelTest : public ::testing::TestWithParam<LabelCase> {};

TEST_P(CommandLabelTest, NamesKindMeshAndSequence) {
  v1::Command command;
  command.set_sequence(12);
  command.set_incarnation(3);
  GetParam().fill(command);
  EXPECT_EQ(CommandLabel(command), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    EveryKind, CommandLabelTest,
    ::testing::Values(LabelCase{"setup_mesh (mesh 7, sequence 12)",
                                [](v1::Command& c) { c.mutable_setup_mesh()->set_mesh_id(7); }},
                      LabelCase{"teardown_mesh (mesh 7, sequence 12)",
                                [](v1::Command& c) { c.mutable_teardown_mesh()->set_mesh_id(7); }},
                      LabelCase{"collective (mesh 7, sequence 12)",
                                [](v1::Command& c) { c.mutable_collective()->set_mesh_id(7); }},
                      LabelCase{"delete_tensors (sequence 12)",
                                [](v1::Command& c) { c.mutable_delete_tensors(); }},
                      LabelCase{"spread_tensor (mesh 7, sequence 12)",
                                [](v1::Command& c) { c.mutable_spread_tensor()->set_mesh_id(7); }},
                      LabelCase{"redistribute (mesh 7, sequence 12)",
                                [](v1::Command& c) { c.mutable_redistribute()->set_mesh_id(7); }},
                      LabelCase{"fill_tensor (mesh 7, sequence 12)",
                                [](v1::Command& c) { c.mutable_fill_tensor()->set_mesh_id(7); }},
                      LabelCase{"run_op (mesh 7, sequence 12)",
                                [](v1::Command& c) { c.mutable_run_op()->set_mesh_id(7); }},
                      LabelCase{"load_program (mesh 7, sequence 12)",
                                [](v1::Command& c) { c.mutable_load_program()->set_mesh_id(7); }},
                      LabelCase{"drop_program (sequence 12)",
                                [](v1::Command& c) { c.mutable_drop_program(); }},
                      LabelCase{"run_program (mesh 7, sequence 12)",
                                [](v1::Command& c) { c.mutable_run_program()->set_mesh_id(7); }},
                      LabelCase{"save_shard (mesh 7, sequence 12)",
                                [](v1::Command& c) { c.mutable_save_shard()->set_mesh_id(7); }},
                      LabelCase{"commit_checkpoint (sequence 12)",
                                [](v1::Command& c) { c.mutable_commit_checkpoint(); }},
                      LabelCase{"read_checkpoint (sequence 12)",
                                [](v1::Command& c) { c.mutable_read_checkpoint(); }},
                      LabelCase{"load_shard (mesh 7, sequence 12)",
                                [](v1::Command& c) { c.mutable_load_shard()->set_mesh_id(7); }},
                      LabelCase{"ping (sequence 12)", [](v1::Command& c) { c.mutable_ping(); }},
                      LabelCase{"load_graph (mesh 7, sequence 12)",
                                [](v1::Command& c) { c.mutable_load_graph()->set_mesh_id(7); }},
                      LabelCase{"run_graph (mesh 7, sequence 12)",
                                [](v1::Command& c) { c.mutable_run_graph()->set_mesh_id(7); }},
                      LabelCase{"empty command (sequence 12)", [](v1::Command&) {}}));

struct FieldsCase {
  std::string expected;
  std::function<void(v1::Command&)> fill;  // sets the kind (and its mesh id, 7)
};

class CommandFieldsTest : public ::testing::TestWithParam<FieldsCase> {};

TEST_P(CommandFieldsTest, KeyValueKindMeshAndSequence) {
  v1::Command command;
  command.set_sequence(12);
  command.set_incarnation(3);
  GetParam().fill(command);
  EXPECT_EQ(CommandFields(command), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, CommandFieldsTest,
    ::testing::Values(FieldsCase{"kind=run_op mesh=7 seq=12",
                                 [](v1::Command& c) { c.mutable_run_op()->set_mesh_id(7); }},
                      FieldsCase{"kind=collective mesh=0 seq=12",
                                 [](v1::Command& c) { c.mutable_collective(); }},
                      FieldsCase{"kind=delete_tensors mesh=- seq=12",
                                 [](v1::Command& c) { c.mutable_delete_tensors(); }},
                      FieldsCase{"kind=empty mesh=- seq=12", [](v1::Command&) {}}));

// Every kind the proto defines has a case above, so a new kind gets a label checked here too.
TEST(CommandLabelTest, EveryKindIsCovered) {
  const google::protobuf::OneofDescriptor* kind =
      v1::Command::descriptor()->FindOneofByName("kind");
  ASSERT_NE(kind, nullptr);
  EXPECT_EQ(kind->field_count(), 18);
}

}  // namespace
}  // namespace tessera
