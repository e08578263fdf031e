#include "proto/command_label.h"

#include "absl/strings/str_cat.h"

namespace tessera {

std::string CommandLabel(const v1::Command& command) {
  const google::protobuf::FieldDescriptor* kind =
      v1::Command::descriptor()->FindFieldByNumber(command.kind_case());
  if (kind == nullptr) return absl::StrCat("empty command (sequence ", command.sequence(), ")");
  // Every kind that works on a mesh names it in an int64 field `mesh_id`.
  const google::protobuf::Message& body = command.GetReflection()->GetMessage(command, kind);
  const google::protobuf::FieldDescriptor* mesh = body.GetDescriptor()->FindFieldByName("mesh_id");
  const std::string on_mesh =
      mesh != nullptr && mesh->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_INT64
          ? absl::StrCat("mesh ", body.GetReflection()->GetInt64(body, mesh), ", ")
          : "";
  return absl::StrCat(kind->name(), " (", on_mesh, "sequence ", command.sequence(), ")");
}

}  // namespace tessera
