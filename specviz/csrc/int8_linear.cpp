// specviz::int8_linear(x, w, scale): x [..., k] (float32, bfloat16 or float16) times the int8
// weights w [n, k] transposed, each output channel r multiplied by scale[r]; the result in
// x's dtype. The products and sums are float32, as torch._weight_int8pack_mm computes them:
// AVX2 and FMA, eight weights at a time sign-extended to int32 and converted to float, the
// output channels split over the threads. ATen's own kernel for this op is written for
// AVX-512; on an AVX2 CPU it runs a one-row product at a third of the memory's rate.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256 widen8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// out[i][r] = scale[r] * sum_j x[i][j] * w[r][j] for M rows of x (float32, row stride k) and
// the output channels r in [b, e), R of them at a time (R * 2 * M independent sums, enough to
// keep both FMA units busy); out rows have stride n. The weights are read as one stream, and
// fetched PREFETCH bytes ahead of their use: without it a layer of a few hundred KB streams
// at a third of the memory's rate on an AMD EPYC.
constexpr int64_t PREFETCH = 4096;
// More rows than this take many_rows (a prefill); fewer stream the weights (a decode call).
constexpr int64_t MANY_ROWS = 8;

template <int M, int R>
void rows(const float* x, const int8_t* w, const float* scale, float* out, int64_t k, int64_t n,
          int64_t b, int64_t e) {
  const int64_t k16 = k & ~int64_t(15);
  int64_t r = b;
  for (; r + R <= e; r += R) {
    const int8_t* wr = w + r * k;
    __m256 a0[M][R], a1[M][R];
    for (int i = 0; i < M; ++i)
      for (int q = 0; q < R; ++q) a0[i][q] = a1[i][q] = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j < k16; j += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(wr + R * j + PREFETCH), _MM_HINT_T0);
      for (int q = 0; q < R; ++q) {
        const __m256 w0 = widen8(wr + q * k + j), w1 = widen8(wr + q * k + j + 8);
        for (int i = 0; i < M; ++i) {
          a0[i][q] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + i * k + j), a0[i][q]);
          a1[i][q] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + i * k + j + 8), a1[i][q]);
        }
      }
    }
    for (int q = 0; q < R; ++q)
      for (int i = 0; i < M; ++i) {
        float s = hsum(_mm256_add_ps(a0[i][q], a1[i][q]));
        for (int64_t t = j; t < k; ++t) s += float(wr[q * k + t]) * x[i * k + t];
        out[i * n + r + q] = s * scale[r + q];
      }
  }
  for (; r < e; ++r) {  // the last few channels, one at a time
    const int8_t* wr = w + r * k;
    for (int i = 0; i < M; ++i) {
      float s = 0.f;
      for (int64_t t = 0; t < k; ++t) s += float(wr[t]) * x[i * k + t];
      out[i * n + r] = s * scale[r];
    }
  }
}

// Many rows of x (a prompt's prefill) make the product compute-bound, not memory-bound: the
// output channels [b, e) BLOCK at a time, their weights widened to float32 once into a buffer
// that stays in L2, then multiplied by all of x with ATen's float32 matrix product (one
// thread's share of the channels, so the product runs on that thread). Each channel's sum
// is then multiplied by its scale, as on the streaming path.
constexpr int64_t BLOCK = 64;

void many_rows(const float* x, int64_t m, const int8_t* w, const float* scale, float* out,
               int64_t k, int64_t n, int64_t b, int64_t e) {
  std::vector<float> wf(BLOCK * k), part(m * BLOCK);
  const at::Tensor xs = at::from_blob(const_cast<float*>(x), {m, k}, at::kFloat);
  const int64_t k8 = k & ~int64_t(7);
  for (int64_t r = b; r < e; r += BLOCK) {
    const int64_t here = std::min<int64_t>(BLOCK, e - r);
    for (int64_t q = 0; q < here; ++q) {
      const int8_t* src = w + (r + q) * k;
      float* dst = wf.data() + q * k;
      int64_t j = 0;
      for (; j < k8; j += 8) _mm256_storeu_ps(dst + j, widen8(src + j));
      for (; j < k; ++j) dst[j] = float(src[j]);
    }
    at::Tensor sums = at::from_blob(part.data(), {m, here}, at::kFloat);
    at::mm_out(sums, xs, at::from_blob(wf.data(), {here, k}, at::kFloat).t());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t q = 0; q < here; ++q) out[i * n + r + q] = part[i * here + q] * scale[r + q];
  }
}

// t's values as float32: its own memory where it is float32 and contiguous (a decode call's
// usual case: no copy), else converted into `held`.
const float* as_floats(const at::Tensor& t, std::vector<float>& held) {
  if (t.scalar_type() == at::kFloat && t.is_contiguous()) return t.data_ptr<float>();
  const at::Tensor c = t.contiguous();
  held.resize(c.numel());
  switch (c.scalar_type()) {
    case at::kFloat: std::copy_n(c.data_ptr<float>(), c.numel(), held.begin()); break;
    case at::kBFloat16: std::copy_n(c.data_ptr<c10::BFloat16>(), c.numel(), held.begin()); break;
    case at::kHalf: std::copy_n(c.data_ptr<c10::Half>(), c.numel(), held.begin()); break;
    default: TORCH_CHECK(false, "specviz::int8_linear: x and scale are float32, bfloat16 or float16");
  }
  return held.data();
}

template <typename T>
void store(const std::vector<float>& src, at::Tensor& dst) {
  T* p = dst.data_ptr<T>();
  for (size_t i = 0; i < src.size(); ++i) p[i] = T(src[i]);
}

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scale) {
  TORCH_CHECK(w.scalar_type() == at::kChar && w.dim() == 2,
              "specviz::int8_linear: w is int8 [out, in]");
  const int64_t n = w.size(0), k = w.size(1);
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == k, "specviz::int8_linear: x's last size is w's in");
  TORCH_CHECK(scale.numel() == n, "specviz::int8_linear: one scale per output channel");
  const int64_t m = k ? x.numel() / k : 0;
  std::vector<float> x_held, scale_held;
  const float* X = as_floats(x, x_held);
  const float* S = as_floats(scale, scale_held);
  const at::Tensor wc = w.contiguous();
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = n;
  at::Tensor out = at::empty(shape, x.options());
  std::vector<float> acc;
  float* o = nullptr;
  if (x.scalar_type() == at::kFloat) {
    o = out.data_ptr<float>();
  } else {
    acc.resize(m * n);
    o = acc.data();
  }
  const int8_t* W = wc.data_ptr<int8_t>();
  at::parallel_for(0, n, 64, [&](int64_t b, int64_t e) {
    if (m > MANY_ROWS) {
      many_rows(X, m, W, S, o, k, n, b, e);
      return;
    }
    for (int64_t i = 0; i < m; i += 4) {
      const float* xi = X + i * k;
      float* oi = o + i * n;
      switch (std::min<int64_t>(4, m - i)) {
        case 1: rows<1, 4>(xi, W, S, oi, k, n, b, e); break;
        case 2: rows<2, 2>(xi, W, S, oi, k, n, b, e); break;
        case 3: rows<3, 1>(xi, W, S, oi, k, n, b, e); break;
        default: rows<4, 1>(xi, W, S, oi, k, n, b, e); break;
      }
    }
  });
  if (x.scalar_type() == at::kBFloat16) store<c10::BFloat16>(acc, out);
  if (x.scalar_type() == at::kHalf) store<c10::Half>(acc, out);
  return out;
}

}  // namespace

TORCH_LIBRARY(specviz, m) { m.def("int8_linear(Tensor x, Tensor w, Tensor scale) -> Tensor"); }

TORCH_LIBRARY_IMPL(specviz, CPU, m) { m.impl("int8_linear", &int8_linear); }
