#ifndef TESSERA_INCLUDE_TESSERA_TESSERA_H_
#define TESSERA_INCLUDE_TESSERA_TESSERA_H_

// The Tessera C++ client: include this header and link the CMake target tessera::client.
//
//   tessera/session.h      Session: the connection, workers, meshes, local tensors, collectives
//   tessera/mesh.h         InitDeviceMesh, Mesh (mesh["tp"]), MeshInfo, WorkerInfo
//   tessera/collectives.h  AllReduce, Broadcast, ... as requests; Work; CollectiveStream
//   tessera/dtensor.h      DTensor: DistributeTensor, FromLocal, factories, Redistribute, ops
//   tessera/ops.h          Call: any op of the service's registry by its ATen name; OpArg,
//                          Arg; typed ops (View, Softmax, Cat, Linear, ...); OpInfo
//   tessera/module.h       Module: LoadModule, ParallelizeModule, DistributeModule, Forward,
//                          Step, Save, Publish
//   tessera/placement.h    Shard, Replicate, Partial; DType, Shape, HostTensor
//   tessera/core/          the sharding model these types come from (placements, meshes,
//                          layouts, the redistribute planner), usable offline
//
// Each header is one concern over the same Session.

#include "tessera/collectives.h"
#include "tessera/dtensor.h"
#include "tessera/mesh.h"
#include "tessera/module.h"
#include "tessera/ops.h"
#include "tessera/placement.h"
#include "tessera/session.h"

#endif  // TESSERA_INCLUDE_TESSERA_TESSERA_H_
