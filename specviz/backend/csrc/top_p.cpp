// specviz::top_p(probs, top_p): rows of probabilities probs [R, V] (float32, each a softmax)
// cut to their nucleus and renormalised, as specviz.sampling.warp's top-p defines it: in order
// of decreasing probability, a token is kept when the mass before it is below top_p. Every
// round cuts the draft's row per drafted token and the target's rows once, so this is on
// the speculative path's critical line between model calls.
//
// The nucleus is found without ranking the vocabulary. The tokens at or below
// tau = (1 - top_p) / (2 V) hold at most (1 - top_p) / 2 of a row's mass together, so the
// tokens above tau hold more than top_p, and the first token after them in decreasing order
// already has top_p before it: the nucleus lies among them (a few hundred tokens at most at
// the defaults, of 49,152). One vectorised pass collects them, they are sorted (decreasing,
// ties by lower id), and the cut is read off their running sums computed as torch's cumsum
// computes them on a CPU (a double accumulator, each running sum rounded to float32; the mass
// before a token is that sum minus the token, in float32, against top_p as float32). So it
// keeps as many tokens, with the same probabilities, as a full sort's cut; where tokens of
// equal probability straddle the cut, it keeps those of lower id, while torch's sort orders
// ties as it happens to (about 1 row in 1,500 random rows keeps another of the tied tokens).
// The kept probabilities are divided by their sum (accumulated in double, rounded to float32).
//
// A row whose nucleus is not shown to end among its candidates (a row of NaNs, or a top_p
// too near 1 for the margin) makes the op return an empty tensor, and the caller cuts the
// rows with torch's operations instead. The op runs on the calling thread:
// a row takes a few microseconds, less than waking another.
#include <ATen/ATen.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace {

// Whether the row p [v] was cut into out [v] (zeros on entry); cand is scratch space.
bool cut_row(const float* p, float* out, int64_t v, float tau, float tp,
             std::vector<std::pair<float, int32_t>>& cand) {
  cand.clear();
  const __m256 t = _mm256_set1_ps(tau);
  int64_t i = 0;
  for (; i + 8 <= v; i += 8) {
    unsigned mask = static_cast<unsigned>(
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(p + i), t, _CMP_GT_OQ)));
    while (mask) {
      const int j = __builtin_ctz(mask);
      cand.emplace_back(p[i + j], static_cast<int32_t>(i + j));
      mask &= mask - 1;
    }
  }
  for (; i < v; ++i)
    if (p[i] > tau) cand.emplace_back(p[i], static_cast<int32_t>(i));
  std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  double running = 0.0, kept_mass = 0.0;
  std::vector<std::pair<float, int32_t>>::size_type n_kept = 0;
  for (const auto& [prob, id] : cand) {
    running += static_cast<double>(prob);
    if (static_cast<float>(running) - prob < tp) {
      kept_mass += static_cast<double>(prob);
      cand[n_kept++] = {prob, id};  // the kept ones, in place, in order
    }
  }
  // A token after the candidates has a probability of at most tau, and the mass before it is
  // a running sum at least theirs, rounded, minus that probability: at least this, in
  // float32 (rounding is monotone). So when this reaches top_p, every later token is
  // dropped; otherwise (no candidates, NaNs, a top_p too near 1 for the margin) the row is
  // not shown to end here.
  if (!(static_cast<float>(running) - tau >= tp)) return false;
  const float sum = static_cast<float>(kept_mass);
  for (std::vector<std::pair<float, int32_t>>::size_type j = 0; j < n_kept; ++j)
    out[cand[j].second] = cand[j].first / sum;
  return true;
}

at::Tensor top_p(const at::Tensor& probs, double top_p) {
  TORCH_CHECK(probs.scalar_type() == at::kFloat && probs.dim() == 2,
              "specviz::top_p: probs is float32 [rows, vocabulary]");
  TORCH_CHECK(top_p > 0.0 && top_p < 1.0, "specviz::top_p: top_p is in (0, 1)");
  const at::Tensor pc = probs.contiguous();
  const int64_t r = pc.size(0), v = pc.size(1);
  TORCH_CHECK(v < (int64_t(1) << 31), "specviz::top_p: a vocabulary below 2**31");
  at::Tensor out = at::zeros_like(pc);
  const float tau = static_cast<float>((1.0 - top_p) / (2.0 * static_cast<double>(v)));
  const float tp = static_cast<float>(top_p);
  std::vector<std::pair<float, int32_t>> cand;
  const float* p = pc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  for (int64_t row = 0; row < r; ++row)
    if (!cut_row(p + row * v, o + row * v, v, tau, tp, cand)) return at::empty({0}, pc.options());
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(specviz, m) { m.def("top_p(Tensor probs, float top_p) -> Tensor"); }

TORCH_LIBRARY_IMPL(specviz, CPU, m) { m.impl("top_p", &top_p); }
