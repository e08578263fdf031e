#include "kernels/cpu/onednn_linear.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace tessera::kernels {
namespace {

using Tag = dnnl::memory::format_tag;
// A product's m, n, k and the threads its primitive was made for (oneDNN splits the work then).
using Dims = std::tuple<int, int, int, int>;

// The distinct shapes whose primitives a backend keeps; past it, they are made anew.
constexpr size_t kMaxKeptShapes = 64;

dnnl::engine& Engine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// Bounds the calling thread's OpenMP threads (oneDNN's) to OpenBLAS's thread count, and returns
// it. oneDNN sizes a primitive's work split by it when making the primitive.
int BoundThreads() {
  const int threads = std::max(1, openblas_get_num_threads());
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  return threads;
}

dnnl::memory::desc Matrix(int rows, int cols, Tag tag) {
  return dnnl::memory::desc({rows, cols}, dnnl::memory::data_type::f32, tag);
}

// The matmul of x [m, k] by w^T [k, n] into y [m, n]; `weights` is w^T's layout: w row-major
// (Tag::ba of [k, n]) or Tag::any, oneDNN's pick.
dnnl::matmul::primitive_desc MatmulDesc(int m, int n, int k, Tag weights) {
  const dnnl::matmul::desc desc(Matrix(m, k, Tag::ab), Matrix(k, n, weights),
                                Matrix(m, n, Tag::ab));
  return dnnl::matmul::primitive_desc(desc, Engine());
}

absl::Status OnednnError(absl::string_view what, int m, int n, int k, const dnnl::error& e) {
  return absl::InternalError(absl::StrCat("oneDNN ", what, " of [", m, ", ", k, "] x [", n, ", ", k,
                                          "]^T failed: ", e.what()));
}

// A weight [n, k] packed in the layout oneDNN's matmul picked for it.
struct PackedLinearWeight : PreparedWeight {
  int64_t nbytes() const override { return static_cast<int64_t>(weights.get_desc().get_size()); }
  int n = 0, k = 0;
  dnnl::memory weights;  // owns the packed copy
};

// The matmul oneDNN prefers for a shape and the weights layout it reads.
struct PreferredMatmul {
  dnnl::matmul matmul;
  dnnl::memory::desc weights;
};

// `map[dims]`, made by `make` when absent (the map is emptied first when it is full).
template <typename T, typename Make>
const T& Kept(std::map<Dims, T>& map, const Dims& dims, Make make) {
  auto it = map.find(dims);
  if (it != map.end()) return it->second;
  if (map.size() >= kMaxKeptShapes) map.clear();
  return map.emplace(dims, make()).first->second;
}

}  // namespace

struct OnednnLinear::Primitives {
  dnnl::stream stream{Engine()};
  std::map<Dims, dnnl::matmul> unpacked;      // weights read in place
  std::map<Dims, PreferredMatmul> preferred;  // weights in oneDNN's layout
};

OnednnLinear::OnednnLinear() = default;
OnednnLinear::~OnednnLinear() = default;

absl::Status OnednnLinear::Product(const float* x, const float* w, const PreparedWeight* prepared,
                                   float* y, int m, int n, int k) {
  const int threads = BoundThreads();
  try {
    if (primitives_ == nullptr) primitives_ = std::make_unique<Primitives>();
    const Dims dims{m, n, k, threads};
    // oneDNN takes buffers as void*; it only reads the source and the weights.
    dnnl::memory src(Matrix(m, k, Tag::ab), Engine(), const_cast<float*>(x));
    dnnl::memory dst(Matrix(m, n, Tag::ab), Engine(), y);
    // The packed copy where the matmul oneDNN prefers for m rows reads its layout (with the
    // brgemm kernels the layout does not depend on m); else the weight as it is.
    const auto* packed = dynamic_cast<const PackedLinearWeight*>(prepared);
    const PreferredMatmul* preferred = nullptr;
    if (packed != nullptr && packed->n == n && packed->k == k) {
      preferred = &Kept(primitives_->preferred, dims, [&] {
        const dnnl::matmul::primitive_desc desc = MatmulDesc(m, n, k, Tag::any);
        return PreferredMatmul{dnnl::matmul(desc), desc.weights_desc()};
      });
    }
    if (preferred != nullptr && preferred->weights == packed->weights.get_desc()) {
      preferred->matmul.execute(
          primitives_->stream,
          {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, packed->weights}, {DNNL_ARG_DST, dst}});
    } else {
      const dnnl::matmul& matmul = Kept(primitives_->unpacked, dims,
                                        [&] { return dnnl::matmul(MatmulDesc(m, n, k, Tag::ba)); });
      dnnl::memory weights(Matrix(k, n, Tag::ba), Engine(), const_cast<float*>(w));
      matmul.execute(primitives_->stream,
                     {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    }
    primitives_->stream.wait();
  } catch (const dnnl::error& e) {
    return OnednnError("matmul", m, n, k, e);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const PreparedWeight>> OnednnLinear::Pack(const float* w, int m,
                                                                         int n, int k) {
  BoundThreads();
  try {
    const dnnl::matmul::primitive_desc desc = MatmulDesc(m, n, k, Tag::any);
    auto packed = std::make_shared<PackedLinearWeight>();
    packed->n = n;
    packed->k = k;
    packed->weights = dnnl::memory(desc.weights_desc(), Engine());
    dnnl::memory user(Matrix(k, n, Tag::ba), Engine(), const_cast<float*>(w));
    dnnl::stream stream(Engine());
    dnnl::reorder(user, packed->weights).execute(stream, user, packed->weights);
    stream.wait();
    return std::shared_ptr<const PreparedWeight>(std::move(packed));
  } catch (const dnnl::error& e) {
    return OnednnError("weight packing", m, n, k, e);
  }
}

}  // namespace tessera::kernels
