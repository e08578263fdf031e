#ifndef TESSERA_CORE_SHARDING_VISUALIZE_SHARDING_H_
#define TESSERA_CORE_SHARDING_VISUALIZE_SHARDING_H_

#include <string>

#include "core/sharding/dtensor_spec.h"

namespace tessera {

// visualize_sharding: for a 1-D or 2-D tensor, a table of its blocks (row and column ranges) with
// the ranks that hold each block; ranks of a Partial mesh dim are marked "partial". For any rank, a
// list of every rank's local shape and offset follows.
std::string VisualizeSharding(const DTensorSpec& spec);

}  // namespace tessera

#endif  // TESSERA_CORE_SHARDING_VISUALIZE_SHARDING_H_
