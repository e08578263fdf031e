#include "proto/command_label.h"

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// The field of the kind set in `command`, or nullptr.
const google::protobuf::FieldDescriptor* KindField(const v1::Command& command) {
  return v1::Command::descriptor()->FindFieldByNumber(command.kind_case());
}

}  // namespace

std::string CommandKind(const v1::Command& command) {
  const google::protobuf::FieldDescriptor* kind = KindField(command);
  return kind == nullptr ? "empty" : kind->name();
}

std::optional<int64_t> CommandMesh(const v1::Command& command) {
  const google::protobuf::FieldDescriptor* kind = KindField(command);
  if (kind == nullptr) return std::nullopt;
  // Every kind that works on a mesh names it in an int64 field `mesh_id`.
  const google::protobuf::Message& body = command.GetReflection()->GetMessage(command, kind);
  const google::protobuf::FieldDescriptor* mesh = body.GetDescriptor()->FindFieldByName("mesh_id");
  if (mesh == nullptr || mesh->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_INT64) {
    return std::nullopt;
  }
  return body.GetReflection()->GetInt64(body, mesh);
}

std::string CommandLabel(const v1::Command& command) {
  if (KindField(command) == nullptr) {
    return absl::StrCat("empty command (sequence ", command.sequence(), ")");
  }
  const std::optional<int64_t> mesh = CommandMesh(command);
  const std::string on_mesh = mesh.has_value() ? absl::StrCat("mesh ", *mesh, ", ") : "";
  return absl::StrCat(CommandKind(command), " (", on_mesh, "sequence ", command.sequence(), ")");
}

std::string CommandFields(const v1::Command& command) {
  const std::optional<int64_t> mesh = CommandMesh(command);
  return absl::StrCat("kind=", CommandKind(command),
                      " mesh=", mesh.has_value() ? absl::StrCat(*mesh) : "-",
                      " seq=", command.sequence());
}

}  // namespace tessera
