// Placement tuples for the tests that walk every layout.
#ifndef TESSERA_TESTS_PLACEMENT_PRODUCT_H_
#define TESSERA_TESTS_PLACEMENT_PRODUCT_H_

#include <vector>

#include "core/sharding/placement.h"

namespace tessera::testing {

// Every tuple with one of `options` per mesh dim, the last mesh dim varying fastest.
inline std::vector<std::vector<Placement>> PlacementProduct(const std::vector<Placement>& options,
                                                            int mesh_ndim) {
  std::vector<std::vector<Placement>> out = {{}};
  for (int m = 0; m < mesh_ndim; ++m) {
    std::vector<std::vector<Placement>> next;
    for (const auto& prefix : out) {
      for (const Placement& p : options) {
        next.push_back(prefix);
        next.back().push_back(p);
      }
    }
    out = std::move(next);
  }
  return out;
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_PLACEMENT_PRODUCT_H_
