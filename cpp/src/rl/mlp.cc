#include "dr_kernel/rl/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "binary_io.h"

namespace dr_kernel::rl {

namespace {

constexpr char kMagic[8] = "DRKMLP\0";
constexpr uint32_t kVersion = 1;
// Refuse absurd headers before allocating for them (a corrupt file, not a real network).
constexpr uint32_t kMaxLayers = 1024;
constexpr uint64_t kMaxWidth = 1u << 24;
constexpr uint64_t kMaxParams = 1u << 28;  // 2 GiB of doubles.

// tanh(x) = sign(x) * -expm1(-2|x|) / (2 + expm1(-2|x|)), with expm1 computed as 2^k (1 + p(r)) - 1
// after reducing -2|x| / ln 2 to k + r / ln 2, |r| <= ln(2) / 2, and p a degree-12 Taylor
// polynomial (truncation error below 2e-16 on that interval). |x| is capped at 20, where tanh is 1
// in double precision. The vector and scalar paths perform the same IEEE operations in the same
// order, so they agree bit for bit.
constexpr double kCap = 20.0;
constexpr double kMinusTwoOverLn2 = -2.8853900817779268;  // -2 / ln 2
constexpr double kLn2 = 0.6931471805599453;
constexpr double kRoundMagic = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer.
constexpr double kTaylor[13] = {1.0 / 479001600.0,
                                1.0 / 39916800.0,
                                1.0 / 3628800.0,
                                1.0 / 362880.0,
                                1.0 / 40320.0,
                                1.0 / 5040.0,
                                1.0 / 720.0,
                                1.0 / 120.0,
                                1.0 / 24.0,
                                1.0 / 6.0,
                                0.5,
                                1.0,
                                1.0};

double ScalarTanh(double x) {
  uint64_t xbits;
  std::memcpy(&xbits, &x, 8);
  const uint64_t sign = xbits & 0x8000000000000000ULL;
  const uint64_t abs_bits = xbits & 0x7fffffffffffffffULL;
  double a;
  std::memcpy(&a, &abs_bits, 8);
  a = kCap < a ? kCap : a;  // Same as minpd(kCap, a): a NaN stays NaN.
  const double y = a * kMinusTwoOverLn2;
  const double shifted = y + kRoundMagic;
  const double k = shifted - kRoundMagic;
  const double r = (y - k) * kLn2;
  double p = kTaylor[0];
  for (int i = 1; i < 12; ++i) p = p * r + kTaylor[i];
  const double em1 = p * r;  // expm1(r)
  uint64_t shifted_bits, magic_bits;
  std::memcpy(&shifted_bits, &shifted, 8);
  std::memcpy(&magic_bits, &kRoundMagic, 8);
  const uint64_t scale_bits = (shifted_bits - magic_bits + 1023) << 52;
  double scale;
  std::memcpy(&scale, &scale_bits, 8);
  const double e = scale * em1 + (scale - 1.0);  // expm1(-2|x|), in (-1, 0]
  const double t = -e / (2.0 + e);
  uint64_t tbits;
  std::memcpy(&tbits, &t, 8);
  tbits |= sign;
  double out;
  std::memcpy(&out, &tbits, 8);
  return out;
}

}  // namespace

void TanhInPlace(double* values, Eigen::Index count) {
  Eigen::Index i = 0;
#if defined(__SSE2__)
  const __m128d abs_mask = _mm_castsi128_pd(_mm_set1_epi64x(0x7fffffffffffffffLL));
  const __m128d cap = _mm_set1_pd(kCap);
  const __m128d minus_two_over_ln2 = _mm_set1_pd(kMinusTwoOverLn2);
  const __m128d ln2 = _mm_set1_pd(kLn2);
  const __m128d magic = _mm_set1_pd(kRoundMagic);
  const __m128i magic_bits = _mm_castpd_si128(magic);
  const __m128i bias = _mm_set1_epi64x(1023);
  const __m128d one = _mm_set1_pd(1.0);
  const __m128d two = _mm_set1_pd(2.0);
  const __m128d zero = _mm_setzero_pd();
  for (; i + 2 <= count; i += 2) {
    const __m128d x = _mm_loadu_pd(values + i);
    const __m128d sign = _mm_andnot_pd(abs_mask, x);
    const __m128d a = _mm_min_pd(cap, _mm_and_pd(x, abs_mask));
    const __m128d y = _mm_mul_pd(a, minus_two_over_ln2);
    const __m128d shifted = _mm_add_pd(y, magic);
    const __m128d k = _mm_sub_pd(shifted, magic);
    const __m128d r = _mm_mul_pd(_mm_sub_pd(y, k), ln2);
    __m128d p = _mm_set1_pd(kTaylor[0]);
    for (int j = 1; j < 12; ++j) p = _mm_add_pd(_mm_mul_pd(p, r), _mm_set1_pd(kTaylor[j]));
    const __m128d em1 = _mm_mul_pd(p, r);
    const __m128i scale_bits =
        _mm_slli_epi64(_mm_add_epi64(_mm_sub_epi64(_mm_castpd_si128(shifted), magic_bits), bias), 52);
    const __m128d scale = _mm_castsi128_pd(scale_bits);
    const __m128d e = _mm_add_pd(_mm_mul_pd(scale, em1), _mm_sub_pd(scale, one));
    const __m128d t = _mm_div_pd(_mm_sub_pd(zero, e), _mm_add_pd(two, e));
    _mm_storeu_pd(values + i, _mm_or_pd(t, sign));
  }
#endif
  for (; i < count; ++i) values[i] = ScalarTanh(values[i]);
}

Mlp::Mlp(std::vector<int> sizes) : sizes_(std::move(sizes)) {
  if (sizes_.size() < 2) {
    throw std::invalid_argument("An MLP needs at least an input and an output size; got " +
                                std::to_string(sizes_.size()) + " sizes.");
  }
  for (int s : sizes_) {
    if (s <= 0) {
      throw std::invalid_argument("Every layer size of an MLP must be positive; got " + std::to_string(s) +
                                  ".");
    }
  }
  Layout();
  params_.setZero();
}

Mlp::Mlp(std::vector<int> sizes, Rng& rng, InitScheme scheme, double hidden_gain, double output_gain)
    : Mlp(std::move(sizes)) {
  Initialize(rng, scheme, hidden_gain, output_gain);
}

void Mlp::Layout() {
  offsets_.clear();
  Eigen::Index n = 0;
  for (int l = 0; l < num_layers(); ++l) {
    offsets_.push_back(n);
    n += static_cast<Eigen::Index>(sizes_[l] + 1) * sizes_[l + 1];
  }
  params_.resize(n);
}

void Mlp::Initialize(Rng& rng, InitScheme scheme, double hidden_gain, double output_gain) {
  for (int l = 0; l < num_layers(); ++l) {
    const int in = sizes_[l], out = sizes_[l + 1];
    const double gain = l + 1 == num_layers() ? output_gain : hidden_gain;
    Eigen::Map<Eigen::MatrixXd> w(params_.data() + offsets_[l], in, out);
    if (scheme == InitScheme::kScaledNormal) {
      const double scale = gain / std::sqrt(static_cast<double>(in));
      for (Eigen::Index j = 0; j < w.size(); ++j) w.data()[j] = scale * rng.Normal();
    } else {
      // Q of the QR decomposition of a tall normal matrix has orthonormal columns; fixing the signs
      // by R's diagonal makes its distribution uniform (Haar).
      const int tall = std::max(in, out), wide = std::min(in, out);
      Eigen::MatrixXd g(tall, wide);
      for (Eigen::Index j = 0; j < g.size(); ++j) g.data()[j] = rng.Normal();
      Eigen::HouseholderQR<Eigen::MatrixXd> qr(g);
      Eigen::MatrixXd q = qr.householderQ() * Eigen::MatrixXd::Identity(tall, wide);
      for (int j = 0; j < wide; ++j) {
        if (qr.matrixQR()(j, j) < 0) q.col(j) = -q.col(j);
      }
      if (in >= out) {
        w = gain * q;
      } else {
        w = gain * q.transpose();
      }
    }
    Eigen::Map<Eigen::VectorXd>(params_.data() + offsets_[l] + static_cast<Eigen::Index>(in) * out, out)
        .setZero();
  }
}

void Mlp::set_params(const Eigen::VectorXd& params) {
  if (params.size() != params_.size()) {
    throw std::invalid_argument("Cannot set " + std::to_string(params.size()) +
                                " parameters on an MLP that has " + std::to_string(params_.size()) + ".");
  }
  params_ = params;
}

Eigen::Map<const Eigen::MatrixXd> Mlp::weights(int layer) const {
  return Eigen::Map<const Eigen::MatrixXd>(params_.data() + offsets_[layer], sizes_[layer],
                                           sizes_[layer + 1]);
}

Eigen::Map<const Eigen::VectorXd> Mlp::bias(int layer) const {
  return Eigen::Map<const Eigen::VectorXd>(
      params_.data() + offsets_[layer] + static_cast<Eigen::Index>(sizes_[layer]) * sizes_[layer + 1],
      sizes_[layer + 1]);
}

Eigen::MatrixXd Mlp::Forward(const Eigen::MatrixXd& x) const {
  if (x.cols() != input_size()) {
    throw std::invalid_argument("MLP input has " + std::to_string(x.cols()) + " columns; the network takes " +
                                std::to_string(input_size()) + ".");
  }
  Eigen::MatrixXd h = x, z;
  for (int l = 0; l < num_layers(); ++l) {
    z.noalias() = h * weights(l);
    z.rowwise() += bias(l).transpose();
    if (l + 1 < num_layers()) TanhInPlace(z.data(), z.size());
    std::swap(h, z);
  }
  return h;
}

const Eigen::MatrixXd& Mlp::Forward(const Eigen::MatrixXd& x, MlpCache* cache) const {
  if (x.cols() != input_size()) {
    throw std::invalid_argument("MLP input has " + std::to_string(x.cols()) + " columns; the network takes " +
                                std::to_string(input_size()) + ".");
  }
  cache->inputs.resize(num_layers());
  cache->inputs[0] = x;
  for (int l = 0; l < num_layers(); ++l) {
    Eigen::MatrixXd& z = l + 1 < num_layers() ? cache->inputs[l + 1] : cache->output;
    z.noalias() = cache->inputs[l] * weights(l);
    z.rowwise() += bias(l).transpose();
    if (l + 1 < num_layers()) TanhInPlace(z.data(), z.size());
  }
  return cache->output;
}

void Mlp::Backward(const MlpCache& cache, const Eigen::MatrixXd& grad_output, Eigen::VectorXd* grad_params,
                   Eigen::MatrixXd* grad_input) const {
  if (grad_params->size() != params_.size()) {
    throw std::invalid_argument("The gradient vector has " + std::to_string(grad_params->size()) +
                                " entries; the MLP has " + std::to_string(params_.size()) + " parameters.");
  }
  if (static_cast<int>(cache.inputs.size()) != num_layers() || grad_output.rows() != cache.output.rows() ||
      grad_output.cols() != output_size()) {
    throw std::invalid_argument("The output gradient's shape does not match the cached forward pass.");
  }
  Eigen::MatrixXd dz = grad_output, da;
  for (int l = num_layers() - 1; l >= 0; --l) {
    const Eigen::MatrixXd& a = cache.inputs[l];
    const int in = sizes_[l], out = sizes_[l + 1];
    Eigen::Map<Eigen::MatrixXd> dw(grad_params->data() + offsets_[l], in, out);
    Eigen::Map<Eigen::VectorXd> db(grad_params->data() + offsets_[l] + static_cast<Eigen::Index>(in) * out,
                                   out);
    dw.noalias() += a.transpose() * dz;
    db.noalias() += dz.colwise().sum().transpose();
    if (l == 0 && grad_input == nullptr) break;
    da.noalias() = dz * weights(l).transpose();
    if (l == 0) {
      *grad_input = std::move(da);
    } else {
      // The input of layer l is tanh of the previous layer's pre-activation: d tanh = 1 - tanh^2.
      dz = da.array() * (1.0 - a.array().square());
    }
  }
}

void Mlp::Save(std::ostream& out) const {
  internal::BinaryWriter w(out, kMagic);
  w.U32(kVersion);
  w.U32(static_cast<uint32_t>(sizes_.size()));
  for (int s : sizes_) w.U64(static_cast<uint64_t>(s));
  w.U64(static_cast<uint64_t>(params_.size()));
  for (Eigen::Index i = 0; i < params_.size(); ++i) w.F64(params_[i]);
  w.Finish();
}

Mlp Mlp::Load(std::istream& in) {
  internal::BinaryReader r(in, kMagic, "an MLP");
  r.Version(kVersion);
  const uint32_t num_sizes = r.U32("the number of layers");
  if (num_sizes < 2 || num_sizes > kMaxLayers) {
    r.Fail("the header claims " + std::to_string(num_sizes) + " layer sizes; the file is corrupt");
  }
  std::vector<int> sizes;
  for (uint32_t i = 0; i < num_sizes; ++i) {
    const uint64_t s = r.U64("the layer sizes");
    if (s == 0 || s > kMaxWidth) {
      r.Fail("the header claims a layer of width " + std::to_string(s) + "; the file is corrupt");
    }
    sizes.push_back(static_cast<int>(s));
  }
  const uint64_t n = r.U64("the number of parameters");
  uint64_t needed = 0;  // At most 1023 * (2^24 + 1) * 2^24: no overflow.
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    needed += (static_cast<uint64_t>(sizes[l]) + 1) * static_cast<uint64_t>(sizes[l + 1]);
  }
  if (n != needed) {
    r.Fail("the header claims " + std::to_string(n) + " parameters but the layer sizes need " +
           std::to_string(needed) + "; the file is corrupt");
  }
  if (n > kMaxParams) {
    r.Fail("the header claims " + std::to_string(n) + " parameters, more than the " +
           std::to_string(kMaxParams) + " this reader accepts; the file is corrupt");
  }
  Mlp mlp(std::move(sizes));
  for (Eigen::Index i = 0; i < mlp.params_.size(); ++i) mlp.params_[i] = r.F64("the parameters");
  r.Finish();
  return mlp;
}

}  // namespace dr_kernel::rl
