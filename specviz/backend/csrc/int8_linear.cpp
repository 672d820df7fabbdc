// specviz::int8_linear(x, w, scale): x [..., k] (float32, bfloat16 or float16) times the int8
// weights w [n, k] transposed, each output channel r multiplied by scale[r]; the result in
// x's dtype. For a float32 x (and a prefill's many rows) the products and sums are float32,
// as torch._weight_int8pack_mm computes them: AVX2 and FMA, eight weights at a time
// sign-extended to int32 and converted to float, the output channels split over the
// threads. A 16-bit x of a decode call's few rows is multiplied as int16, its sums exact
// (int_rows, below). ATen's own kernel for this op is written for AVX-512; on an AVX2 CPU
// it runs a one-row product at a third of the memory's rate.
// specviz::linear(x, w): float32 x times float32 weights w [n, k] transposed, for the few
// rows of a decode call (a compiled package's 1-position step and its verification over 2 to
// 8 positions of the fp32 target). Built for AVX2, the same streaming loops as int8_linear
// without the widening and the scale; built for AVX-512 (specviz.backend.kernels compiles the
// library with -mavx512f where torch's capability is AVX512), a tile of up to 5 rows by 4 to
// 8 output channels in 16-lane registers, the next tile's weights prefetched. Either way an
// output's sum runs over its input channels in one order, whatever rows or channels are
// computed beside it, so a 1-position call and a 5-position call give the same products.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
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

// Eight weights as float32: int8 widened, float32 loaded.
inline __m256 load8(const int8_t* p) { return widen8(p); }
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

// out[i][r] = scale[r] * sum_j x[i][j] * w[r][j] for M rows of x (float32, row stride k) and
// the output channels r in [b, e), R of them at a time (R * 2 * M independent sums, enough to
// keep both FMA units busy); out rows have stride n. The weights are read as one stream, and
// fetched PREFETCH bytes ahead of their use: without it a layer of a few hundred KB streams
// at a third of the memory's rate on an AMD EPYC.
constexpr int64_t PREFETCH = 4096;
// More rows than this take many_rows (a prefill); fewer stream the weights (a decode call).
// specviz.backend.kernels.STREAMED_ROWS says the same to the package's decomposition.
constexpr int64_t MANY_ROWS = 8;

template <int M, int R, typename T>
void rows(const float* x, const T* w, const float* scale, float* out, int64_t k, int64_t n,
          int64_t b, int64_t e) {
  const int64_t k16 = k & ~int64_t(15);
  // lines prefetched per step of 16 weights: one for int8, four for float32 (a sweep over
  // the R rows at R times the step's pace; for float32 at R = 1 three of the four were
  // already asked for by the step before, kept because the verification was timed so and
  // one line a step measured no faster)
  constexpr int LINES = int(sizeof(T));
  int64_t r = b;
  for (; r + R <= e; r += R) {
    const T* wr = w + r * k;
    __m256 a0[M][R], a1[M][R];
    for (int i = 0; i < M; ++i)
      for (int q = 0; q < R; ++q) a0[i][q] = a1[i][q] = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j < k16; j += 16) {
      const char* ahead = reinterpret_cast<const char*>(wr + R * j) + PREFETCH;
      for (int line = 0; line < LINES; ++line) _mm_prefetch(ahead + 64 * line, _MM_HINT_T0);
      for (int q = 0; q < R; ++q) {
        const __m256 w0 = load8(wr + q * k + j), w1 = load8(wr + q * k + j + 8);
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
        out[i * n + r + q] = scale ? s * scale[r + q] : s;
      }
  }
  // the last few channels one at a time, summed in the same order: an output's value does
  // not depend on how many rows or channels were computed beside it
  if constexpr (R > 1) {
    if (r < e) rows<M, 1>(x, w, scale, out, k, n, r, e);
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

// out [m, n] = x [m, k] times w [n, k] transposed (times scale, where there is one), for a
// decode call's few rows: the output channels split over the threads, each thread's share
// streamed once for every six rows of x.
template <typename T>
void stream(const float* X, int64_t m, const T* W, const float* S, float* o, int64_t k,
            int64_t n) {
  at::parallel_for(0, n, 64, [&](int64_t b, int64_t e) {
    // up to 6 rows in one pass over the weights (a decode call is memory-bound: each pass
    // streams every weight), 2 * rows * channels <= 12 accumulators in registers
    for (int64_t i = 0; i < m; i += 6) {
      const float* xi = X + i * k;
      float* oi = o + i * n;
      switch (std::min<int64_t>(6, m - i)) {
        case 1: rows<1, 4>(xi, W, S, oi, k, n, b, e); break;
        case 2: rows<2, 3>(xi, W, S, oi, k, n, b, e); break;
        case 3: rows<3, 2>(xi, W, S, oi, k, n, b, e); break;
        case 4: rows<4, 1>(xi, W, S, oi, k, n, b, e); break;
        case 5: rows<5, 1>(xi, W, S, oi, k, n, b, e); break;
        default: rows<6, 1>(xi, W, S, oi, k, n, b, e); break;
      }
    }
  });
}

// A 16-bit input (bfloat16 or float16: an int8 draft's activations) is multiplied as 16-bit
// integers: each row scaled so that its largest magnitude is 32767 (15 bits against the
// 8 of a bfloat16 and 11 of a float16 significand), the int8 weights widened to int16 and
// multiplied pairwise into int32 lanes (vpmaddwd), the lanes summed in int64 every
// INT_CHUNK input channels, so every sum is exact; each output is then the sum times the
// row's scale and the channel's. That is one widening and two integer operations per 16
// or 32 weights, where the float32 loop above takes a widening, a conversion and a multiply-
// add per 8: on 2 cores of an Intel Xeon with AVX-512 and AMX the w8-bf16 draft's
// products (211 of them then, before specviz.backend.fusion stacked them into 121) at one
// row took 8.5 ms against 9.8, at two rows 9.5 against 12.0, read from memory. The sums being exact, an output does not depend on the rows
// computed beside it. The weights are prefetched into L2 (_MM_HINT_T1) 8 KB ahead: measured
// against L1 and 4 KB, the stream took 8.7 against 9.0 ms.
constexpr int64_t INT_CHUNK = 2048;  // a lane takes at most INT_CHUNK / 16 sums of 2^23
constexpr int64_t INT_PREFETCH = 8192;

#ifdef __AVX512F__
using ivec = __m512i;
constexpr int64_t LANES16 = 32;  // int16 values a vector holds
inline ivec iwiden(const int8_t* p) {
  return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline ivec iload(const int16_t* p) { return _mm512_loadu_si512(p); }
inline ivec izero() { return _mm512_setzero_si512(); }
inline ivec imadd(ivec acc, ivec a, ivec b) { return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b)); }
inline int64_t isum(ivec v) {
  const __m512i lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v));
  const __m512i hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1));
  return _mm512_reduce_add_epi64(_mm512_add_epi64(lo, hi));
}
#else
using ivec = __m256i;
constexpr int64_t LANES16 = 16;
inline ivec iwiden(const int8_t* p) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline ivec iload(const int16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline ivec izero() { return _mm256_setzero_si256(); }
inline ivec imadd(ivec acc, ivec a, ivec b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
inline int64_t isum(ivec v) {
  const __m256i s = _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(v)),
                                     _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1)));
  const __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  return _mm_cvtsi128_si64(t) + _mm_extract_epi64(t, 1);
}
#endif

// out[i][r] = xs[i] * scale[r] * sum_j x[i][j] * w[r][j] for M rows of int16 x and the output
// channels r in [b, e), R at a time.
template <int M, int R>
void int_rows(const int16_t* x, const float* xs, const int8_t* w, const float* scale, float* out,
              int64_t k, int64_t n, int64_t b, int64_t e) {
  int64_t r = b;
  for (; r + R <= e; r += R) {
    const int8_t* wr = w + r * k;
    int64_t sum[M][R] = {};
    for (int64_t c0 = 0; c0 < k; c0 += INT_CHUNK) {
      const int64_t c1 = std::min(k, c0 + INT_CHUNK);
      const int64_t cv = c0 + (c1 - c0) / LANES16 * LANES16;
      ivec acc[M][R];
      for (int i = 0; i < M; ++i)
        for (int q = 0; q < R; ++q) acc[i][q] = izero();
      int64_t j = c0;
      for (; j < cv; j += LANES16) {
        if ((j & 63) == 0)  // a line a row every 64 weights
          for (int q = 0; q < R; ++q)
            _mm_prefetch(reinterpret_cast<const char*>(wr + q * k + j) + INT_PREFETCH, _MM_HINT_T1);
        ivec xv[M];
        for (int i = 0; i < M; ++i) xv[i] = iload(x + i * k + j);
        for (int q = 0; q < R; ++q) {
          const ivec wv = iwiden(wr + q * k + j);
          for (int i = 0; i < M; ++i) acc[i][q] = imadd(acc[i][q], wv, xv[i]);
        }
      }
      for (int i = 0; i < M; ++i)
        for (int q = 0; q < R; ++q) {
          int64_t s = isum(acc[i][q]);
          for (int64_t t = j; t < c1; ++t) s += int64_t(wr[q * k + t]) * x[i * k + t];
          sum[i][q] += s;
        }
    }
    for (int i = 0; i < M; ++i)
      for (int q = 0; q < R; ++q) out[i * n + r + q] = float(sum[i][q]) * xs[i] * scale[r + q];
  }
  if constexpr (R > 1) {
    if (r < e) int_rows<M, 1>(x, xs, w, scale, out, k, n, r, e);
  }
}

// Each row of the 16-bit x [m, k] as int16 and its scale (its largest magnitude / 32767);
// false when a row holds an infinity or a NaN (the float32 loop then carries it through), or
// when its largest magnitude is below 32767 / FLT_MAX (about 1e-34: its scale would overflow).
template <typename T>
bool to_int16(const T* x, int64_t m, int64_t k, std::vector<int16_t>& q, std::vector<float>& xs) {
  q.resize(m * k);
  xs.resize(m);
  for (int64_t i = 0; i < m; ++i) {
    const T* row = x + i * k;
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const float a = std::fabs(float(row[j]));
      if (!(a <= std::numeric_limits<float>::max())) return false;  // inf or NaN
      amax = std::max(amax, a);
    }
    const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
    if (!(inv <= std::numeric_limits<float>::max())) return false;  // a row of near-zeros
    xs[i] = amax / 32767.0f;
    for (int64_t j = 0; j < k; ++j) q[i * k + j] = int16_t(std::nearbyint(float(row[j]) * inv));
  }
  return true;
}

void int_stream(const int16_t* X, const float* XS, int64_t m, const int8_t* W, const float* S,
                float* o, int64_t k, int64_t n) {
  at::parallel_for(0, n, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = 0; i < m; i += 4) {  // up to 4 rows in one pass over the weights
      const int16_t* xi = X + i * k;
      float* oi = o + i * n;
      switch (std::min<int64_t>(4, m - i)) {
        case 1: int_rows<1, 4>(xi, XS + i, W, S, oi, k, n, b, e); break;
        case 2: int_rows<2, 4>(xi, XS + i, W, S, oi, k, n, b, e); break;
        case 3: int_rows<3, 3>(xi, XS + i, W, S, oi, k, n, b, e); break;
        default: int_rows<4, 2>(xi, XS + i, W, S, oi, k, n, b, e); break;
      }
    }
  });
}

at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& scale) {
  TORCH_CHECK(w.scalar_type() == at::kChar && w.dim() == 2,
              "specviz::int8_linear: w is int8 [out, in]");
  const int64_t n = w.size(0), k = w.size(1);
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == k, "specviz::int8_linear: x's last size is w's in");
  TORCH_CHECK(scale.numel() == n, "specviz::int8_linear: one scale per output channel");
  const int64_t m = k ? x.numel() / k : 0;
  std::vector<float> x_held, scale_held;
  const float* S = as_floats(scale, scale_held);
  const at::Tensor wc = w.contiguous();
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = n;
  if (k == 0) return at::zeros(shape, x.options());  // an empty sum: no loop writes out
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
  std::vector<int16_t> x16;
  std::vector<float> x16_scale;
  const bool ints =
      m <= MANY_ROWS && (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf);
  const at::Tensor xc = ints ? x.contiguous() : x;
  if (ints && (x.scalar_type() == at::kBFloat16
                   ? to_int16(xc.data_ptr<c10::BFloat16>(), m, k, x16, x16_scale)
                   : to_int16(xc.data_ptr<c10::Half>(), m, k, x16, x16_scale))) {
    int_stream(x16.data(), x16_scale.data(), m, W, S, o, k, n);
  } else if (m > MANY_ROWS) {
    const float* X = as_floats(x, x_held);
    at::parallel_for(0, n, 64,
                     [&](int64_t b, int64_t e) { many_rows(X, m, W, S, o, k, n, b, e); });
  } else {
    stream(as_floats(x, x_held), m, W, S, o, k, n);
  }
  if (x.scalar_type() == at::kBFloat16) store<c10::BFloat16>(acc, out);
  if (x.scalar_type() == at::kHalf) store<c10::Half>(acc, out);
  return out;
}

#ifdef __AVX512F__
// out[i][r] = sum_j x[i][j] * w[r][j] for M rows of x (float32, row stride k) and the output
// channels r in [b, e), R at a time: M * R accumulators of 16 lanes (at most 20 of the 32
// registers), R weight vectors and M input vectors loaded for M * R FMAs per 16 input
// channels. The weights of the tile after this one are prefetched while this one is summed:
// without it the loads of a 5-row product wait on memory, and the fp32 target's products
// over 5 rows took 29.4 ms against 20.1 with it (17.0 and 18.5 ms at 1 row; 2 threads of an
// Intel Xeon with AVX-512 and AMX, 538 MB of weights).
template <int M, int R>
void tile16(const float* x, const float* w, float* out, int64_t k, int64_t n, int64_t b,
            int64_t e) {
  const int64_t k16 = k & ~int64_t(15);
  int64_t r = b;
  for (; r + R <= e; r += R) {
    const float* wr = w + r * k;
    const float* next = wr + R * k;  // the next tile's rows (read past e only as a prefetch)
    __m512 acc[M][R];
    for (int i = 0; i < M; ++i)
      for (int q = 0; q < R; ++q) acc[i][q] = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j < k16; j += 16) {
      __m512 wv[R];
      for (int q = 0; q < R; ++q) {
        _mm_prefetch(reinterpret_cast<const char*>(next + q * k + j), _MM_HINT_T0);
        wv[q] = _mm512_loadu_ps(wr + q * k + j);
      }
      for (int i = 0; i < M; ++i) {
        const __m512 xv = _mm512_loadu_ps(x + i * k + j);
        for (int q = 0; q < R; ++q) acc[i][q] = _mm512_fmadd_ps(wv[q], xv, acc[i][q]);
      }
    }
    for (int i = 0; i < M; ++i)
      for (int q = 0; q < R; ++q) {
        float s = _mm512_reduce_add_ps(acc[i][q]);
        for (int64_t t = j; t < k; ++t) s += wr[q * k + t] * x[i * k + t];
        out[i * n + r + q] = s;
      }
  }
  // the last few channels one at a time, summed in the same order
  if constexpr (R > 1) {
    if (r < e) tile16<M, 1>(x, w, out, k, n, r, e);
  }
}

void stream16(const float* X, int64_t m, const float* W, float* o, int64_t k, int64_t n) {
  at::parallel_for(0, n, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = 0; i < m; i += 5) {  // up to 5 rows in one pass over the weights
      const float* xi = X + i * k;
      float* oi = o + i * n;
      switch (std::min<int64_t>(5, m - i)) {
        case 1: tile16<1, 8>(xi, W, oi, k, n, b, e); break;
        case 2: tile16<2, 6>(xi, W, oi, k, n, b, e); break;
        case 3: tile16<3, 6>(xi, W, oi, k, n, b, e); break;
        case 4: tile16<4, 4>(xi, W, oi, k, n, b, e); break;
        default: tile16<5, 4>(xi, W, oi, k, n, b, e); break;
      }
    }
  });
}
#endif

at::Tensor linear(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(w.scalar_type() == at::kFloat && w.dim() == 2,
              "specviz::linear: w is float32 [out, in]");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "specviz::linear: x is float32");
  const int64_t n = w.size(0), k = w.size(1);
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == k, "specviz::linear: x's last size is w's in");
  const int64_t m = k ? x.numel() / k : 0;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = n;
  if (k == 0) return at::zeros(shape, x.options());  // an empty sum: no loop writes out
  if (m > MANY_ROWS) return at::matmul(x, w.t());  // compute-bound: the BLAS product
  const at::Tensor xc = x.contiguous(), wc = w.contiguous();
  at::Tensor out = at::empty(shape, x.options());
#ifdef __AVX512F__
  stream16(xc.data_ptr<float>(), m, wc.data_ptr<float>(), out.data_ptr<float>(), k, n);
#else
  stream(xc.data_ptr<float>(), m, wc.data_ptr<float>(), nullptr, out.data_ptr<float>(), k, n);
#endif
  return out;
}

}  // namespace

TORCH_LIBRARY(specviz, m) {
  m.def("int8_linear(Tensor x, Tensor w, Tensor scale) -> Tensor");
  m.def("linear(Tensor x, Tensor w) -> Tensor");
}

TORCH_LIBRARY_IMPL(specviz, CPU, m) {
  m.impl("int8_linear", &int8_linear);
  m.impl("linear", &linear);
}
