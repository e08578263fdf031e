#ifndef TESSERA_SERVER_PROGRAM_PROTO_H_
#define TESSERA_SERVER_PROGRAM_PROTO_H_

// A compiled module program in its wire form (tessera/v1/program.proto), for LoadProgram. It
// stands in for the Program conversion of proto/convert.h until that lands; drop it then.

#include "core/module_program.h"
#include "tessera/v1/program.pb.h"

namespace tessera {

// `program` as the workers receive it; the parameters' worker-side tensor names (tensor, grad,
// momentum) are left empty for the caller.
v1::Program ProgramToProto(const Program& program);

}  // namespace tessera

#endif  // TESSERA_SERVER_PROGRAM_PROTO_H_
