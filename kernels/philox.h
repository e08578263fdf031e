#ifndef TESSERA_KERNELS_PHILOX_H_
#define TESSERA_KERNELS_PHILOX_H_

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and the maps
// from its output to uniform and normal values. One implementation for host and device code, so the
// CPU and CUDA backends draw the same bits.
//
// Tessera's random fill keys Philox by the seed and uses the element's global linear index in the
// full tensor as the counter: element i of a tensor filled with seed s is a function of (s, i)
// only, so any shard holds exactly the matching slice of the full random tensor, whatever the mesh.

#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace tessera::kernels {

struct Philox4x32 {
  uint32_t v[4];
};

// The Philox4x32-10 block: 10 rounds over `counter` with the 64-bit `key`.
TESSERA_HOST_DEVICE inline Philox4x32 Philox4x32_10(Philox4x32 counter, uint32_t key0,
                                                    uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t* c = counter.v;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t next[4] = {hi1 ^ c[1] ^ key0, lo1, hi0 ^ c[3] ^ key1, lo0};
    for (int i = 0; i < 4; ++i) c[i] = next[i];
    key0 += kW0;
    key1 += kW1;
  }
  return counter;
}

// The block for element `index` of a tensor filled with `seed`.
TESSERA_HOST_DEVICE inline Philox4x32 PhiloxForElement(uint64_t seed, uint64_t index) {
  Philox4x32 counter = {{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u}};
  return Philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Uniform values in [0, 1) on the grid of the target type's significand, so each is exact in that
// type (no rounding can reach 1.0): 2^-24 steps for float32, 2^-53 for float64, 2^-11 for float16,
// 2^-8 for bfloat16. The 16-bit ones are returned as float and are exact when narrowed.
TESSERA_HOST_DEVICE inline float UniformFloat32(const Philox4x32& r) {
  return static_cast<float>(r.v[0] >> 8) * (1.0f / 16777216.0f);
}
TESSERA_HOST_DEVICE inline double UniformFloat64(const Philox4x32& r) {
  const uint64_t bits = ((static_cast<uint64_t>(r.v[0]) << 32) | r.v[1]) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);
}
TESSERA_HOST_DEVICE inline float UniformFloat16(const Philox4x32& r) {
  return static_cast<float>(r.v[0] >> 21) * (1.0f / 2048.0f);
}
TESSERA_HOST_DEVICE inline float UniformBFloat16(const Philox4x32& r) {
  return static_cast<float>(r.v[0] >> 24) * (1.0f / 256.0f);
}

// A standard normal value by Box-Muller from the block's words, computed in double: u1 in (0, 1]
// so log(u1) is finite. Host and device may differ in the last bit of their log and cos.
TESSERA_HOST_DEVICE inline double NormalFromWords(uint32_t a0, uint32_t a1, uint32_t b0,
                                                  uint32_t b1) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  constexpr double k2Pow53 = 9007199254740992.0;
  const uint64_t ua = ((static_cast<uint64_t>(a0) << 32) | a1) >> 11;
  const uint64_t ub = ((static_cast<uint64_t>(b0) << 32) | b1) >> 11;
  const double u1 = (static_cast<double>(ua) + 1.0) / k2Pow53;
  const double u2 = static_cast<double>(ub) / k2Pow53;
  return sqrt(-2.0 * log(u1)) * cos(kTwoPi * u2);
}
TESSERA_HOST_DEVICE inline double NormalValue(const Philox4x32& r) {
  return NormalFromWords(r.v[0], r.v[1], r.v[2], r.v[3]);
}

}  // namespace tessera::kernels

#endif  // TESSERA_KERNELS_PHILOX_H_
