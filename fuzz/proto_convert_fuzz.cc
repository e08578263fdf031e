// Fuzzes the proto-to-core conversions (proto/convert.h) with arbitrary messages: the first byte
// picks the message (a MeshSpec, DTensorMeta, RedistributePlan, OpCall, InlineTensor or Program),
// the rest is its wire encoding. FromProto gives a value or an error, never a crash or an
// unbounded allocation; an accepted value survives ToProto and a second FromProto unchanged.
#include <string>

#include "fuzz/fuzz_check.h"
#include "proto/convert.h"

namespace {

using namespace tessera;

// Parses `bytes` as `Message`; false if they are not one.
template <typename Message>
bool Parse(absl::string_view bytes, Message& m) {
  return m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

// FromProto, ToProto, FromProto: the two converted values must print the same.
template <typename Message, typename Print>
void RoundTrip(absl::string_view bytes, Print print) {
  Message m;
  if (!Parse(bytes, m)) return;
  auto value = FromProto(m);
  if (!value.ok()) {
    FUZZ_CHECK(!value.status().message().empty(), "an error says what is wrong");
    return;
  }
  auto back = FromProto(ToProto(*value));
  FUZZ_CHECK(back.ok(), "what ToProto writes FromProto reads");
  FUZZ_CHECK(print(*back) == print(*value), "a value survives ToProto and FromProto");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view bytes = fuzz::Text(data + 1, size - 1);
  switch (data[0] % 6) {
    case 0:
      RoundTrip<v1::MeshSpec>(bytes, [](const DeviceMesh& m) {
        return DTensorSpec{m, {}, {}, DType::kFloat32}.ToString();
      });
      break;
    case 1:
      RoundTrip<v1::DTensorMeta>(bytes, [](const DTensorSpec& s) { return s.ToString(); });
      break;
    case 2: {
      v1::RedistributePlan plan;
      if (!Parse(bytes, plan)) break;
      // The mesh's dims come with the plan on the wire; try the sizes a mesh can have.
      for (int ndim = 1; ndim <= 4; ++ndim) {
        absl::StatusOr<RedistributePlan> p = FromProto(plan, ndim);
        if (!p.ok()) continue;
        absl::StatusOr<RedistributePlan> back = FromProto(ToProto(*p), ndim);
        FUZZ_CHECK(back.ok(), "what ToProto writes FromProto reads");
        FUZZ_CHECK(ToProto(*back).SerializeAsString() == ToProto(*p).SerializeAsString(),
                   "a plan survives ToProto and FromProto");
      }
      break;
    }
    case 3: {
      v1::OpCall call;
      if (!Parse(bytes, call)) break;
      absl::StatusOr<OpCall> op = FromProto(call);
      if (!op.ok()) break;
      absl::StatusOr<OpCall> back = FromProto(ToProto(*op));
      FUZZ_CHECK(back.ok(), "what ToProto writes FromProto reads");
      FUZZ_CHECK(ToProto(*back).SerializeAsString() == ToProto(*op).SerializeAsString(),
                 "an op survives ToProto and FromProto");
      break;
    }
    case 4: {
      v1::InlineTensor tensor;
      if (!Parse(bytes, tensor)) break;
      absl::StatusOr<HostTensor> t = FromProto(tensor);
      if (!t.ok()) break;
      FUZZ_CHECK(t->nbytes() <= bytes.size(), "a tensor is no larger than the message's data");
      absl::StatusOr<HostTensor> back = FromProto(ToProto(*t));
      FUZZ_CHECK(back.ok(), "what ToProto writes FromProto reads");
      FUZZ_CHECK(ToProto(*back).SerializeAsString() == ToProto(*t).SerializeAsString(),
                 "a tensor survives ToProto and FromProto");
      break;
    }
    default: {
      v1::Program program;
      if (!Parse(bytes, program)) break;
      absl::StatusOr<WorkerProgram> p = FromProto(program);
      if (!p.ok()) break;
      absl::StatusOr<WorkerProgram> back = FromProto(ToProto(p->program, p->tensors));
      FUZZ_CHECK(back.ok(), "what ToProto writes FromProto reads");
      FUZZ_CHECK(ToProto(back->program, back->tensors).SerializeAsString() ==
                     ToProto(p->program, p->tensors).SerializeAsString(),
                 "a program survives ToProto and FromProto");
      break;
    }
  }
  return 0;
}
