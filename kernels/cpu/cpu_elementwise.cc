// The CPU backend's elementwise kernels: Binary, Unary (and so Activate), Where and Cast, on the
// semantics of kernels/elementwise_ops.h.

#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/convert_value.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/host_math.h"
#include "kernels/elementwise_ops.h"
#include "kernels/host_element.h"

namespace tessera::kernels {
namespace {

// Walks a broadcast layout of N inputs line by line: calls line(o, offsets) for each line `o` of
// the output (its last dim; one line of one element for a scalar), offsets[k] being where input
// k's elements for that line start.
template <size_t N, typename Line>
void ForEachLine(const Shape& shape, const std::array<const std::vector<int64_t>*, N>& strides,
                 Line line) {
  const int rank = static_cast<int>(shape.size());
  int64_t outer = 1;
  for (int d = 0; d + 1 < rank; ++d) outer *= shape[d];
  std::vector<int64_t> index(rank > 1 ? rank - 1 : 0, 0);
  std::array<int64_t, N> offsets{};
  for (int64_t o = 0; o < outer; ++o) {
    line(o, offsets);
    for (int d = rank - 2; d >= 0; --d) {
      for (size_t k = 0; k < N; ++k) offsets[k] += (*strides[k])[d];
      if (++index[d] < shape[d]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= (*strides[k])[d] * shape[d];
      index[d] = 0;
    }
  }
}

// The last dim's size and input strides of a layout (1 and 0 for a scalar).
int64_t LineSize(const Shape& shape) { return shape.empty() ? 1 : shape.back(); }
int64_t LineStride(const std::vector<int64_t>& strides) {
  return strides.empty() ? 0 : strides.back();
}

// dst[i] = f(a[i * sa], b[i * sb]) for i < n, with the strides' common cases as plain loops.
template <typename T, typename O, typename F>
void BinaryLine(O* dst, const T* a, const T* b, int64_t n, int64_t sa, int64_t sb, F f) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = f(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    const T vb = b[0];
    for (int64_t i = 0; i < n; ++i) dst[i] = f(a[i], vb);
  } else if (sa == 0 && sb == 1) {
    const T va = a[0];
    for (int64_t i = 0; i < n; ++i) dst[i] = f(va, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = f(a[i * sa], b[i * sb]);
  }
}

// out = f(a, b) over a broadcast layout, line by line.
template <typename T, typename O, typename F>
void ForEachBroadcast(const BroadcastLayout& layout, const T* a, const T* b, O* out, F f) {
  const int64_t inner = LineSize(layout.shape);
  const int64_t sa = LineStride(layout.a_strides), sb = LineStride(layout.b_strides);
  ForEachLine<2>(layout.shape, {&layout.a_strides, &layout.b_strides},
                 [&](int64_t o, const std::array<int64_t, 2>& offsets) {
                   BinaryLine(out + o * inner, a + offsets[0], b + offsets[1], inner, sa, sb, f);
                 });
}

template <typename T, BinaryOp kOp>
void BinaryTyped(const BroadcastLayout& layout, const std::byte* a, const std::byte* b,
                 std::byte* out) {
  using O = std::conditional_t<GivesBool(kOp), bool, T>;
  ForEachBroadcast(layout, reinterpret_cast<const T*>(a), reinterpret_cast<const T*>(b),
                   reinterpret_cast<O*>(out),
                   [](T x, T y) { return Store<O>(ApplyBinary<HostMath, kOp>(Load(x), Load(y))); });
}

template <typename T, UnaryOp kOp>
void UnaryTyped(const std::byte* x, std::byte* out, int64_t n) {
  using O = std::conditional_t<GivesBool(kOp), bool, T>;
  const T* in = reinterpret_cast<const T*>(x);
  O* dst = reinterpret_cast<O*>(out);
  for (int64_t i = 0; i < n; ++i) dst[i] = Store<O>(ApplyUnary<HostMath, kOp>(Load(in[i])));
}

// dst[i] = cond[i * sc] ? a[i * sa] : b[i * sb] for i < n.
template <typename Word>
void WhereLine(Word* dst, const bool* cond, const Word* a, const Word* b, int64_t n, int64_t sc,
               int64_t sa, int64_t sb) {
  for (int64_t i = 0; i < n; ++i) dst[i] = cond[i * sc] ? a[i * sa] : b[i * sb];
}

// out = cond ? a : b over a three-input layout, moving `Word`s (elements of its size).
template <typename Word>
void WhereTyped(const BroadcastLayout3& layout, const bool* cond, const Word* a, const Word* b,
                Word* out) {
  const int64_t inner = LineSize(layout.shape);
  const int64_t sc = LineStride(layout.strides[0]), sa = LineStride(layout.strides[1]),
                sb = LineStride(layout.strides[2]);
  ForEachLine<3>(layout.shape, {&layout.strides[0], &layout.strides[1], &layout.strides[2]},
                 [&](int64_t o, const std::array<int64_t, 3>& offsets) {
                   WhereLine(out + o * inner, cond + offsets[0], a + offsets[1], b + offsets[2],
                             inner, sc, sa, sb);
                 });
}

}  // namespace

absl::Status CpuBackend::DoBinary(BinaryOp op, DType dtype, const std::byte* a, const std::byte* b,
                                  std::byte* out, const BroadcastLayout& layout) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    VisitBinaryOp(op, [&](auto kop) { BinaryTyped<T, decltype(kop)::value>(layout, a, b, out); });
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoUnary(UnaryOp op, DType dtype, const std::byte* x, std::byte* out,
                                 int64_t n) {
  VisitDType(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    VisitUnaryOp(op, [&](auto kop) { UnaryTyped<T, decltype(kop)::value>(x, out, n); });
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::DoWhere(DType dtype, const std::byte* cond, const std::byte* a,
                                 const std::byte* b, std::byte* out,
                                 const BroadcastLayout3& layout) {
  auto where = [&](auto word) {
    using Word = decltype(word);
    WhereTyped(layout, reinterpret_cast<const bool*>(cond), reinterpret_cast<const Word*>(a),
               reinterpret_cast<const Word*>(b), reinterpret_cast<Word*>(out));
  };
  switch (DTypeSize(dtype)) {
    case 1:
      where(uint8_t{});
      break;
    case 2:
      where(uint16_t{});
      break;
    case 4:
      where(uint32_t{});
      break;
    default:
      where(uint64_t{});
      break;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::DoCast(DType from, const std::byte* src, DType to, std::byte* dst,
                                int64_t n) {
  VisitDType(from, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    VisitDType(to, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      const From* in = reinterpret_cast<const From*>(src);
      To* out = reinterpret_cast<To*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        out[i] = Store<To>(ConvertValue<ComputeType<To>>(Load(in[i])));
      }
    });
  });
  return absl::OkStatus();
}

}  // namespace tessera::kernels
