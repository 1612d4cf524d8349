#include "dr_kernel/agent/walk.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>
#include <utility>

#include <Eigen/Dense>

#include "dr_kernel/rng.h"

namespace dr_kernel::agent {

namespace {

// Kernel width of the online correction, in encoded units (a space's parameter spans [0, 1]).
constexpr double kBandwidth = 0.25;
// Confidence bonus of a jump target's uncertainty, and weight of its failure risk.
constexpr double kOptimism = 0.5;
constexpr double kFailWeight = 2.0;
// Free moves in a row after which moves onto measured configs are forbidden.
constexpr int kMaxFreeStreak = 3;
// Unmeasured candidates a jump compares after correcting their predictions.
constexpr int kJumpCandidates = 48;
// Scale of the Thompson-style noise on a jump's score, in units of the belief's uncertainty.
constexpr double kThompson = 0.25;
// Draws a random jump makes before it accepts a config the prior expects to fail.
constexpr int kAvoidFailDraws = 16;

double Clip(double v, double lo, double hi) { return std::min(hi, std::max(lo, v)); }

// Ridge penalty of the residuals' linear trend over the encoded parameters (each spans [0, 1]):
// with a handful of measurements the trend stays small; 0.3 was best of 0.1, 0.3 and 1 under
// leave-one-family-out (benchmarks/agent.md). The trend is clipped to +-kTrendClip log units.
constexpr double kTrendRidge = 0.3;
constexpr double kTrendClip = 1.5;
// Pseudo-measurements at the prior's failure probability in a config's failure belief.
constexpr double kFailPseudo = 1.0;
// Candidates a jump draws from the whole untried space besides the prior's first kJumpCandidates.
constexpr int kRandomCandidates = 48;
// Configs GainChance weighs: the prior's first untried ones, and as many spread over the rest.
constexpr size_t kGainCandidates = 256;

// Failure probability of a config that compiled within the device's limits: what fails besides
// (a wrong result, a crash) is rare.
constexpr double kStaticFitsFail = 0.02;

// Shared memory below this counts as this much in AlikeAt (bytes): a few bytes more or less of a
// tiny reduction buffer do not make two configs unlike.
constexpr double kAlikeSmemFloor = 1024;

// Squared distance beyond which a kernel weight counts as 0 (exp(-0.6 / (2 * 0.25^2)) < 0.01):
// most measurements are that far from a config, and skipping their exp() keeps proposals cheap.
constexpr double kFarSquared = 0.6;

double Kernel(const std::vector<double>& a, const std::vector<double>& b) {
  double d2 = 0;
  for (size_t p = 0; p < a.size(); ++p) {
    const double d = a[p] - b[p];
    d2 += d * d;
  }
  return d2 > kFarSquared ? 0.0 : std::exp(-d2 / (2 * kBandwidth * kBandwidth));
}

double JumpScore(double mean, double std, double p_fail) { return mean - kOptimism * std + kFailWeight * p_fail; }

}  // namespace

void Prior::Rank(const Space& space) {
  // Configs the model scores alike (its trees are piecewise constant, so ties are common) are
  // ordered by their values, parameters by name and numbers as numbers, not by their index in the
  // space: the index follows the order the user listed each parameter's values in, and the
  // prediction must not.
  struct Scored {
    double score;
    std::vector<std::pair<double, std::string>> key;
    uint64_t index;
  };
  std::vector<size_t> by_name(space.num_params());
  for (size_t p = 0; p < by_name.size(); ++p) by_name[p] = p;
  std::sort(by_name.begin(), by_name.end(),
            [&](size_t a, size_t b) { return space.params()[a].name < space.params()[b].name; });
  std::vector<Scored> scored;
  space.ForEach([&](const Config& c) {
    const uint64_t i = space.Index(c);
    Scored s{JumpScore(log_ms[i], log_std[i], p_fail[i]), {}, i};
    for (const size_t p : by_name) {
      const Value& v = space.params()[p].values[c[p]];
      if (std::holds_alternative<std::string>(v))
        s.key.emplace_back(0.0, std::get<std::string>(v));
      else
        s.key.emplace_back(ToDouble(v), std::string());
    }
    scored.push_back(std::move(s));
    return true;
  });
  std::sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    if (a.score != b.score) return a.score < b.score;
    return a.key < b.key;
  });
  order.clear();
  for (const auto& s : scored) order.push_back(s.index);
}

Walk::Walk(const Space& space, const Prior& prior, std::vector<double> problem_features, int64_t budget,
                 RewardConfig rewards, uint64_t seed, TrustConfig trust)
    : space_(space), prior_(&prior), problem_features_(std::move(problem_features)), budget_(budget),
      rewards_(rewards), trust_config_(trust), rng_(seed) {
  if (space.num_params() > static_cast<size_t>(kSlots))
    throw SpaceError("the ppo strategy handles spaces of at most " + std::to_string(kSlots) +
                     " parameters; this one has " + std::to_string(space.num_params()) +
                     ": use another strategy (anneal, genetic) or fix some parameters");
  problem_features_.resize(kProblemFeatures, 0.0);
  same_pairs_.assign(space.num_params(), 0);
  differing_pairs_.assign(space.num_params(), 0);
  step_lost_.assign(space.num_params(), {0, 0});
  step_won_.assign(space.num_params(), {0, 0});
}

void Walk::UpdateInert() {
  inert_.assign(space_.num_params(), 0);
  any_inert_ = false;
  for (size_t p = 0; p < inert_.size() && inert_pairs_ > 0; ++p) {
    inert_[p] = same_pairs_[p] >= inert_pairs_ && differing_pairs_[p] == 0;
    any_inert_ |= inert_[p] != 0;
  }
  jump_known_ = false;
}

bool Walk::Inert(size_t param) const { return param < inert_.size() && inert_[param]; }

bool Walk::Covered(const Config& config) const {
  if (!measured_binaries_.empty()) {
    const uint64_t index = space_.Index(config);
    const auto it = binary_of_.find(index);
    if (it != binary_of_.end() && !measured_.count(index) && measured_binaries_.count(it->second)) return true;
  }
  if (!any_inert_) return false;
  for (const Config& m : ok_configs_) {
    bool same = true;
    for (size_t p = 0; p < inert_.size() && same; ++p) same = inert_[p] || m[p] == config[p];
    if (same) return true;
  }
  return false;
}

void Walk::Beliefs(uint64_t index, const std::vector<double>& here, double* mean, double* std, double* p_fail,
                   bool verdict) const {
  const double n = static_cast<double>(residual_.size());
  const double bias = n > 0 ? residual_sum_ / (n + 1.0) : 0.0;
  double trend = 0;
  if (!trend_.empty()) {
    for (size_t p = 0; p < here.size(); ++p) trend += trend_[p] * (here[p] - trend_centre_[p]);
    trend = Clip(trend, -kTrendClip, kTrendClip);
  }
  // One kernel weight per measurement: ok ones correct the time, all of them the failure belief.
  double weight = 0, local = 0, all_weight = 0, failed = 0;
  std::array<double, 3> alike{};
  const bool use_alike = alike_width_ > 0 && AlikeAt(index, &alike);
  const double alike_scale = use_alike ? 1.0 / (2 * alike_width_ * alike_width_) : 0.0;
  for (size_t i = 0; i < outcome_at_.size(); ++i) {
    double w = Kernel(here, outcome_at_[i]);
    if (use_alike && outcome_has_alike_[i]) {
      double d2 = 0;
      for (size_t k = 0; k < alike.size(); ++k) {
        const double d = alike[k] - outcome_alike_[i][k];
        d2 += d * d;
      }
      // Beyond the parameter kernel's cut-off weight, as far counts as nothing here too.
      const double exponent = d2 * alike_scale;
      if (exponent < kFarSquared / (2 * kBandwidth * kBandwidth)) w = std::max(w, std::exp(-exponent));
    }
    if (w == 0) continue;
    all_weight += w;
    if (outcome_failed_[i]) {
      failed += w;
    } else {
      weight += w;
      local += w * outcome_detrended_[i];
    }
  }
  local /= weight + 0.5;
  if (mean) *mean = prior_->log_ms[index] + (n > 0 ? bias + trend + local : 0.0);
  if (std) *std = prior_->log_std[index] / std::sqrt(1.0 + weight);
  if (p_fail) {
    const auto known = verdict ? static_fits_.find(index) : static_fits_.end();
    if (known != static_fits_.end()) {
      *p_fail = known->second ? kStaticFitsFail : 1.0;
    } else {
      const double prior = prior_->p_fail[index];
      *p_fail = (kFailPseudo * prior + failed) / (kFailPseudo + all_weight);
    }
  }
}

bool Walk::AlikeAt(uint64_t index, std::array<double, 3>* at) const {
  if (prior_->estimates.empty()) return false;
  const ConfigEstimate& e = prior_->estimates[index];
  if (!e.known || !(e.regs > 0) || !(e.waves > 0)) return false;
  *at = {std::log2(e.regs), std::log2(std::max(e.smem, kAlikeSmemFloor)), std::log2(e.waves)};
  return true;
}

void Walk::UpdateAlike() {
  outcome_alike_.resize(outcome_index_.size());
  outcome_has_alike_.resize(outcome_index_.size());
  for (size_t i = 0; i < outcome_index_.size(); ++i)
    outcome_has_alike_[i] = AlikeAt(outcome_index_[i], &outcome_alike_[i]) ? 1 : 0;
}

bool Walk::StaticallyFails(uint64_t index) const {
  const auto it = static_fits_.find(index);
  return it != static_fits_.end() && !it->second;
}

void Walk::SetBinary(const Config& config, uint64_t binary) {
  if (binary == 0) return;
  const uint64_t index = space_.Index(config);
  binary_of_[index] = binary;
  if (measured_.count(index)) {
    if (measured_binaries_.insert(binary).second) jump_known_ = false;  // Configs of it are covered now.
  } else if (measured_binaries_.count(binary)) {
    jump_known_ = false;  // This config is covered now.
  }
}

void Walk::SetStaticVerdict(const Config& config, bool compiles) {
  static_fits_[space_.Index(config)] = compiles ? 1 : 0;
  jump_known_ = false;
}

double Walk::Predict(const Config& config, double* std) const {
  double mean = 0;
  Beliefs(space_.Index(config), space_.Encode(config), &mean, std, nullptr);
  return mean;
}

double Walk::PFail(const Config& config) const {
  double p = 0;
  Beliefs(space_.Index(config), space_.Encode(config), nullptr, nullptr, &p);
  return p;
}

void Walk::FitResiduals() {
  trend_.clear();
  const size_t n = residual_.size(), d = space_.num_params();
  const double bias = n > 0 ? residual_sum_ / (n + 1.0) : 0.0;
  if (n >= 3 && d > 0) {
    trend_centre_.assign(d, 0.0);
    for (const auto& x : residual_at_)
      for (size_t p = 0; p < d; ++p) trend_centre_[p] += x[p] / n;
    Eigen::MatrixXd a = Eigen::MatrixXd::Identity(d, d) * kTrendRidge;
    Eigen::VectorXd b = Eigen::VectorXd::Zero(d);
    for (size_t i = 0; i < n; ++i) {
      Eigen::VectorXd x(d);
      for (size_t p = 0; p < d; ++p) x(p) = residual_at_[i][p] - trend_centre_[p];
      a += x * x.transpose();
      b += x * (residual_[i] - bias);
    }
    const Eigen::VectorXd w = a.ldlt().solve(b);
    trend_.assign(w.data(), w.data() + d);
  }
  // What the bias and trend leave of each ok measurement's residual, for the local smoother.
  outcome_detrended_.assign(outcome_at_.size(), 0.0);
  size_t k = 0;
  for (size_t i = 0; i < outcome_at_.size(); ++i) {
    if (outcome_failed_[i]) continue;
    double fitted = 0;
    if (!trend_.empty()) {
      for (size_t p = 0; p < d; ++p) fitted += trend_[p] * (outcome_at_[i][p] - trend_centre_[p]);
      fitted = Clip(fitted, -kTrendClip, kTrendClip);
    }
    outcome_detrended_[i] = residual_[k++] - bias - fitted;
  }
}

double Walk::rank_correlation() const { return rank_correlation_; }

double Walk::trust() const {
  const double prior_trust = Clip(prior_->trust, 0, 1);
  const double n = static_cast<double>(pair_predicted_.size());
  if (static_cast<int>(n) < trust_config_.min_pairs) return prior_trust;
  return (n * std::max(0.0, rank_correlation_) + trust_config_.shrink * prior_trust) / (n + trust_config_.shrink);
}

double Walk::random_jump_probability() const {
  const double doubt = 1 - trust();
  return doubt * doubt;
}

double Walk::GainChance(double gain) const {
  // What the beliefs have not explained so far: the spread of the detrended residuals.
  double sum2 = 0;
  int ok = 0;
  for (size_t i = 0; i < outcome_detrended_.size(); ++i) {
    if (outcome_failed_[i]) continue;
    sum2 += outcome_detrended_[i] * outcome_detrended_[i];
    ++ok;
  }
  if (ok < 3 || !std::isfinite(best_log_)) return 1.0;
  const double unexplained = sum2 / (ok - 1);
  const double target = best_log_ + std::log1p(-gain);
  const auto& order = prior_->order;
  double most = 0;
  auto consider = [&](uint64_t i) {
    if (measured_.count(i)) return;
    const Config c = space_.FromIndex(i);
    if (Covered(c)) return;  // Its time is one measured already.
    double mean = 0, std = 0, p_fail = 0;
    Beliefs(i, space_.Encode(c), &mean, &std, &p_fail);
    const double spread = std::sqrt(std * std + unexplained);
    const double faster = spread > 0 ? 0.5 * std::erfc((mean - target) / (spread * std::sqrt(2.0)))
                                     : (mean < target ? 1.0 : 0.0);
    most = std::max(most, (1 - p_fail) * faster);
  };
  size_t start = order_start_;
  while (start < order.size() && measured_.count(order[start])) ++start;
  const size_t head = std::min(order.size(), start + kGainCandidates);
  for (size_t i = start; i < head; ++i) consider(order[i]);
  // A spread of the rest, every stride-th config in the prior's order.
  if (head < order.size()) {
    const size_t stride = std::max<size_t>(1, (order.size() - head) / kGainCandidates);
    for (size_t i = head; i < order.size(); i += stride) consider(order[i]);
  }
  return most;
}

std::optional<Config> Walk::RidgeStep(const Config& from, size_t param, int delta) const {
  auto moved = space_.Move(from, param, delta);
  if (!moved) return std::nullopt;
  if (space_.IsValid(*moved)) return moved;
  std::optional<Config> best;
  double best_mean = kInf;
  for (size_t q = 0; q < space_.num_params(); ++q) {
    if (q == param) continue;
    for (int e : {-1, 1}) {
      auto repaired = space_.Move(*moved, q, e);
      if (!repaired || !space_.IsValid(*repaired)) continue;
      double mean = 0;
      Beliefs(space_.Index(*repaired), space_.Encode(*repaired), &mean, nullptr, nullptr);
      if (mean < best_mean) {
        best_mean = mean;
        best = std::move(repaired);
      }
    }
  }
  return best;
}

std::vector<Config> Walk::UncheckedNeighbours(double near, size_t top, bool ridge) const {
  double best = kInf;
  for (const auto& [index, result] : measured_)
    if (result.ok) best = std::min(best, result.log_ms);
  if (!std::isfinite(best)) return {};
  // The incumbents, in index order, so that the result does not depend on the map's order.
  std::vector<uint64_t> incumbents;
  for (const auto& [index, result] : measured_)
    if (result.ok && result.log_ms <= best + std::max(0.0, near)) incumbents.push_back(index);
  std::sort(incumbents.begin(), incumbents.end());
  if (near <= 0) incumbents.resize(1);  // All tie with the best: the lowest index alone.
  if (top > 0 && incumbents.size() > top) {
    std::stable_sort(incumbents.begin(), incumbents.end(), [&](uint64_t a, uint64_t b) {
      return measured_.at(a).log_ms < measured_.at(b).log_ms;
    });
    incumbents.resize(top);
    std::sort(incumbents.begin(), incumbents.end());
  }
  return UncheckedFrom(incumbents, ridge);
}

std::vector<Config> Walk::UncheckedNeighboursOf(const std::vector<Config>& from, bool ridge) const {
  std::vector<uint64_t> indices;
  for (const Config& c : from)
    if (MeasuredLogMs(c)) indices.push_back(space_.Index(c));
  return UncheckedFrom(indices, ridge);
}

std::vector<Config> Walk::UncheckedFrom(const std::vector<uint64_t>& incumbents, bool ridge) const {
  std::vector<std::pair<double, Config>> unchecked;
  std::unordered_set<uint64_t> seen;
  for (uint64_t incumbent : incumbents) {
    const Config from = space_.FromIndex(incumbent);
    std::vector<Config> steps;
    if (!ridge) {
      steps = space_.Neighbours(from);
    } else {
      for (size_t p = 0; p < space_.num_params(); ++p)
        for (int delta : {-1, 1})
          if (auto c = RidgeStep(from, p, delta)) steps.push_back(std::move(*c));  // Valid by construction.
    }
    for (Config& c : steps) {
      const uint64_t index = space_.Index(c);
      if (measured_.count(index) || !seen.insert(index).second || Covered(c)) continue;
      double mean = 0, p_fail = 0;
      Beliefs(index, space_.Encode(c), &mean, nullptr, &p_fail);
      if (p_fail > 0.5) continue;
      unchecked.emplace_back(mean, std::move(c));
    }
  }
  std::stable_sort(unchecked.begin(), unchecked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Config> out;
  out.reserve(unchecked.size());
  for (auto& u : unchecked) out.push_back(std::move(u.second));
  return out;
}

std::optional<Config> Walk::JumpTarget() const {
  if (jump_known_) return jump_;
  jump_known_ = true;
  const auto& order = prior_->order;
  while (order_start_ < order.size() && measured_.count(order[order_start_])) ++order_start_;
  jump_.reset();
  jump_kind_ = JumpKind::kBelieved;
  if (order_start_ >= order.size()) return jump_;
  // The first measurement tests the prior's own best guess: one evaluation settles a good prior.
  const bool first = measured_.empty();
  if (first) jump_kind_ = JumpKind::kPriorBest;
  if (!first && rng_.Uniform() < random_jump_probability()) {
    jump_kind_ = JumpKind::kRandom;
    // Random search over the untried configs, avoiding those the prior expects to fail for a while
    // (resource limits carry across families better than times do).
    const uint64_t left = order.size() - order_start_;
    double best_mean = kInf;
    int drawn = 0;
    for (int draw = 0; draw < 4 * kAvoidFailDraws && drawn < random_draws_; ++draw) {
      const uint64_t i = order[order_start_ + rng_.Below(left)];
      if (measured_.count(i) || StaticallyFails(i)) continue;
      Config c = space_.FromIndex(i);
      if ((draw < kAvoidFailDraws && PFail(c) > 0.5) || Covered(c)) continue;
      ++drawn;
      double mean = 0;
      if (random_draws_ > 1) Beliefs(i, space_.Encode(c), &mean, nullptr, nullptr);
      if (!jump_ || mean < best_mean) {
        best_mean = mean;
        jump_ = std::move(c);
      }
    }
    if (jump_) return jump_;
    jump_kind_ = JumpKind::kBelieved;
  }
  std::optional<Config> best;
  double best_score = kInf;
  auto consider = [&](uint64_t i) {
    const Config c = space_.FromIndex(i);
    if (Covered(c) || StaticallyFails(i)) return;
    double mean = 0, std = 0, p_fail = 0;
    Beliefs(i, space_.Encode(c), &mean, &std, &p_fail);
    // A Thompson-style draw: the optimistic score plus a quarter of the belief's uncertainty times N(0, 1).
    const double noise = first ? 0.0 : kThompson * std * rng_.Normal();
    const double score = JumpScore(mean, std, p_fail) + noise;
    if (score < best_score) {
      best_score = score;
      best = c;
    }
  };
  int compared = 0;
  for (size_t i = order_start_; i < order.size() && compared < kJumpCandidates; ++i) {
    if (measured_.count(order[i]) || Covered(space_.FromIndex(order[i]))) continue;
    consider(order[i]);
    ++compared;
  }
  // Besides the prior's most promising, candidates drawn from the whole space: once the
  // measurements have corrected the beliefs, the best of them may lie anywhere in the prior's order.
  if (!first && !residual_.empty()) {
    const uint64_t left = order.size() - order_start_;
    for (int draw = 0; draw < kRandomCandidates; ++draw) {
      const uint64_t i = order[order_start_ + rng_.Below(left)];
      if (!measured_.count(i)) consider(i);
    }
  }
  jump_ = best;
  return best;
}

std::optional<Move> Walk::Resolve(int action) const {
  if (action == kJump) {
    auto target = JumpTarget();
    if (!target) return std::nullopt;
    return Move{*target, true};
  }
  if (!has_position_ || action < 0 || action >= kJump) return std::nullopt;
  const size_t param = static_cast<size_t>(action / 2);
  if (param >= space_.num_params()) return std::nullopt;
  auto target = space_.Move(position_, param, action % 2 ? 1 : -1);
  if (!target || !space_.IsValid(*target)) return std::nullopt;
  const auto it = measured_.find(space_.Index(*target));
  if (it == measured_.end()) {
    if (Covered(*target)) return std::nullopt;  // It would time a binary already timed.
    if (StaticallyFails(space_.Index(*target))) return std::nullopt;  // It would not run.
    return Move{*target, true};
  }
  if (!it->second.ok || free_streak_ >= kMaxFreeStreak) return std::nullopt;
  return Move{*target, false};
}

bool Walk::Losing(size_t param, int direction) const {
  return losing_pairs_ > 0 && param < step_lost_.size() && step_lost_[param][direction] >= losing_pairs_ &&
         step_won_[param][direction] == 0;
}

std::vector<uint8_t> Walk::Mask() const {
  std::vector<uint8_t> mask(kNumActions, 0);
  for (int a = 0; a < kJump; ++a) {
    const auto move = Resolve(a);
    mask[a] = move.has_value();
    if (move && move->measure && Losing(static_cast<size_t>(a / 2), a % 2)) mask[a] = 2;
  }
  mask[kJump] = JumpTarget().has_value();
  // Losing steps are left out unless nothing else is allowed.
  const bool other = std::any_of(mask.begin(), mask.end(), [](uint8_t m) { return m == 1; });
  for (auto& m : mask) m = m == 2 ? (other ? 0 : 1) : m;
  return mask;
}

// Turned into the Pearson scale by sin(pi/2 tau) (exact for Gaussian data), so that trust reads
// like a correlation.
double RankCorrelation(const std::vector<double>& predicted, const std::vector<double>& measured, int min_pairs,
                       int* compared) {
  double concordant = 0, discordant = 0;
  for (size_t i = 0; i < measured.size(); ++i) {
    for (size_t j = i + 1; j < measured.size(); ++j) {
      const double dm = measured[i] - measured[j];
      const double dp = predicted[i] - predicted[j];
      if (std::abs(dm) <= kTieLog || dp == 0) continue;
      (dm * dp > 0 ? concordant : discordant) += 1;
    }
  }
  *compared = static_cast<int>(concordant + discordant);
  if (concordant + discordant < min_pairs) return 0;
  const double tau = (concordant - discordant) / (concordant + discordant);
  return std::sin(1.5707963267948966 * tau);
}

void Walk::Observe(const Config& config, const Measurement& m) {
  const uint64_t index = space_.Index(config);
  const bool ok = m.ok();
  const double log_ms = ok ? std::log(m.ms) : kInf;
  if (ok) {
    // What the walk believed just before measuring: an honest, out-of-sample prediction.
    pair_predicted_.push_back(Predict(config));
    pair_measured_.push_back(log_ms);
    rank_correlation_ = RankCorrelation(pair_predicted_, pair_measured_, trust_config_.min_pairs, &rank_compared_);
  }
  if (ok) {
    // Pairs with the ok configs measured before that differ from this one in one parameter only.
    for (const Config& other : ok_configs_) {
      size_t differs = 0, param = 0;
      for (size_t p = 0; p < config.size() && differs < 2; ++p)
        if (other[p] != config[p]) ++differs, param = p;
      if (differs != 1) continue;
      const double other_log = measured_.at(space_.Index(other)).log_ms;
      (other_log == log_ms ? same_pairs_ : differing_pairs_)[param] += 1;
      if (std::abs(config[param] - other[param]) == 1 && std::abs(log_ms - other_log) > kLoseLog) {
        // The step from `other` to this config goes `up` (or down); the step back the other way.
        const int up = config[param] > other[param] ? 1 : 0;
        const bool slower = log_ms > other_log;
        (slower ? step_lost_ : step_won_)[param][up] += 1;
        (slower ? step_won_ : step_lost_)[param][1 - up] += 1;
      }
    }
    ok_configs_.push_back(config);
    UpdateInert();
  }
  measured_[index] = {ok, log_ms, m.n_regs, m.n_spills, m.shared};
  if (m.binary != 0) binary_of_[index] = m.binary;
  if (const auto it = binary_of_.find(index); it != binary_of_.end()) measured_binaries_.insert(it->second);
  jump_known_ = false;
  outcome_at_.push_back(space_.Encode(config));
  outcome_index_.push_back(index);
  outcome_failed_.push_back(ok ? 0 : 1);
  outcome_alike_.emplace_back();
  outcome_has_alike_.push_back(AlikeAt(index, &outcome_alike_.back()) ? 1 : 0);
  if (ok) {
    const double r = log_ms - prior_->log_ms[index];
    residual_at_.push_back(outcome_at_.back());
    residual_.push_back(r);
    residual_sum_ += r;
  }
  FitResiduals();
}

void Walk::Rebase(const Prior& prior) {
  prior_ = &prior;
  UpdateAlike();
  residual_at_.clear();
  residual_.clear();
  residual_sum_ = 0;
  // In the order measured, as the outcomes are kept.
  for (size_t i = 0; i < outcome_index_.size(); ++i) {
    if (outcome_failed_[i]) continue;
    const double r = measured_.at(outcome_index_[i]).log_ms - prior_->log_ms[outcome_index_[i]];
    residual_at_.push_back(outcome_at_[i]);
    residual_.push_back(r);
    residual_sum_ += r;
  }
  FitResiduals();
  order_start_ = 0;
  jump_known_ = false;
}

void Walk::Record(const Config& config, const Measurement& measurement) {
  if (measured_.count(space_.Index(config))) return;
  Observe(config, measurement);
  ++evals_;
  if (measurement.ok()) {
    const double log_ms = std::log(measurement.ms);
    if (!std::isfinite(first_log_)) first_log_ = log_ms;
    if (log_ms < best_log_) {
      best_log_ = log_ms;
      evals_since_best_ = 0;
    }
  }
}

StepReward Walk::TakeFree(const Move& move) {
  ++step_;
  ++free_streak_;
  position_ = move.config;
  position_log_ = measured_.at(space_.Index(move.config)).log_ms;
  return {-rewards_.free_cost, {}};
}

StepReward Walk::TakeMeasured(const Move& move, const Measurement& m) {
  ++step_;
  ++evals_;
  free_streak_ = 0;
  StepReward out{-rewards_.eval_cost, {}};
  Observe(move.config, m);
  if (!m.ok()) {
    out.reward -= m.status == Status::kCompileTimeout ? rewards_.timeout_cost : rewards_.fail_cost;
    exploring_steps_.push_back(step_);
    ++evals_since_best_;
    return out;
  }
  const double log_ms = std::log(m.ms);
  has_position_ = true;
  position_ = move.config;
  position_log_ = log_ms;
  if (!std::isfinite(best_log_)) {
    first_log_ = best_log_ = log_ms;
    evals_since_best_ = 0;
  } else if (log_ms < best_log_) {
    const double gain = rewards_.gain_scale * (best_log_ - log_ms);
    out.reward += gain;
    // Exploration that led here: the measurements since the last new best share part of the gain.
    double share = rewards_.credit;
    for (int j = 0; j < rewards_.credit_steps && j < static_cast<int>(exploring_steps_.size()); ++j) {
      const int64_t earlier = exploring_steps_[exploring_steps_.size() - 1 - j];
      out.credit_back.emplace_back(static_cast<int>(step_ - earlier), share * gain);
      share *= 0.5;
    }
    exploring_steps_.clear();
    best_log_ = log_ms;
    evals_since_best_ = 0;
  } else {
    exploring_steps_.push_back(step_);
    ++evals_since_best_;
  }
  return out;
}

void Walk::FillDirection(const Config& target, double current_log, double* out) const {
  // [exists, measured, measured delta, measured failed, predicted delta, predicted std, p_fail]
  out[0] = 1;
  const uint64_t index = space_.Index(target);
  const auto it = measured_.find(index);
  if (it != measured_.end()) {
    out[1] = 1;
    out[2] = it->second.ok ? Clip(it->second.log_ms - current_log, -1, 1) : 0;
    out[3] = it->second.ok ? 0 : 1;
  }
  double std = 0;
  const double mean = Predict(target, &std);
  // Predicted differences count as far as the walk trusts its beliefs.
  out[4] = std::isfinite(current_log) ? trust() * Clip(mean - current_log, -1, 1) : 0;
  out[5] = Clip(std, 0, 1);
  out[6] = PFailWithoutVerdict(target);
}

double Walk::PFailWithoutVerdict(const Config& config) const {
  double p = 0;
  Beliefs(space_.Index(config), space_.Encode(config), nullptr, nullptr, &p, /*verdict=*/false);
  return p;
}

std::vector<double> Walk::Observation() const {
  std::vector<double> obs(kObservationSize, 0.0);
  const double budget = static_cast<double>(std::max<int64_t>(budget_, 1));
  const bool any_ok = std::isfinite(best_log_);
  obs[0] = Clip(evals_ / budget, 0, 1);
  obs[1] = 1 - obs[0];
  obs[2] = any_ok ? Clip(best_log_ - first_log_, -2, 0) / 2 : 0;
  obs[3] = has_position_ && any_ok ? Clip(position_log_ - best_log_, 0, 2) / 2 : 0;
  obs[4] = has_position_ && position_log_ <= best_log_ ? 1 : 0;
  obs[5] = Clip(evals_since_best_ / 10.0, 0, 1);
  obs[6] = Clip(free_streak_ / static_cast<double>(kMaxFreeStreak), 0, 1);
  if (auto jump = JumpTarget(); jump && any_ok) {
    double std = 0;
    obs[7] = trust() * Clip(Predict(*jump, &std) - best_log_, -1, 1);
    obs[8] = Clip(std, 0, 1);
  }
  obs[9] = any_ok ? 1 : 0;
  obs[10] = trust();
  obs[11] = Clip(rank_correlation_, -1, 1);
  obs[12] = Clip(prior_->trust, 0, 1);
  for (int i = 0; i < kProblemFeatures; ++i) obs[kGlobalFeatures + i] = problem_features_[i];
  if (!has_position_) return obs;
  const uint64_t here = space_.Index(position_);
  ConfigEstimate estimate = prior_->estimates.empty() ? ConfigEstimate{} : prior_->estimates[here];
  if (const auto it = measured_.find(here); it != measured_.end() && it->second.n_regs >= 0) {
    // The compiled kernel's own figures replace the estimate.
    estimate.known = true;
    estimate.regs = it->second.n_regs;
    estimate.spills = std::max(0, it->second.n_spills);
    if (it->second.shared >= 0) estimate.smem = static_cast<double>(it->second.shared);
  }
  const auto config_features = ConfigFeatures(estimate);
  std::copy(config_features.begin(), config_features.end(), obs.begin() + kGlobalFeatures + kProblemFeatures);
  const auto encoded = space_.Encode(position_);
  for (size_t p = 0; p < space_.num_params(); ++p) {
    double* slot = &obs[kGlobalFeatures + kProblemFeatures + kConfigFeatures + p * kSlotFeatures];
    slot[0] = 1;
    slot[1] = encoded[p];
    for (int dir = 0; dir < 2; ++dir) {
      auto target = space_.Move(position_, p, dir ? 1 : -1);
      if (target && space_.IsValid(*target)) FillDirection(*target, position_log_, slot + 2 + 7 * dir);
    }
  }
  return obs;
}

std::vector<double> ConfigFeatures(const ConfigEstimate& e) {
  std::vector<double> f(kConfigFeatures, 0.0);
  if (!e.known) return f;
  // H200 limits; the estimate came from the cost model's device description.
  constexpr double kSmemPerSm = 233472, kRegsPerSm = 65536, kWarpsPerSm = 64, kBlocksPerSm = 32;
  const double warps = std::max(1.0, e.num_warps);
  double blocks = std::min(kBlocksPerSm, std::floor(kWarpsPerSm / warps));
  if (e.smem > 0) blocks = std::min(blocks, std::floor(kSmemPerSm / e.smem));
  if (e.regs > 0) blocks = std::min(blocks, std::floor(kRegsPerSm / (e.regs * 32 * warps)));
  f[0] = 1;
  f[1] = Clip(std::log2(e.waves + 1) / 6, 0, 1.5);
  f[2] = Clip(e.tail_efficiency, 0, 1);
  f[3] = Clip(std::log2(e.tile_intensity + 1) / 10, 0, 1.5);
  f[4] = Clip(e.regs / 255, 0, 1.5);
  f[5] = Clip(std::log2(e.spills + 1) / 10, 0, 1);
  f[6] = Clip(e.smem / 232448, 0, 1.5);
  f[7] = Clip(blocks * warps / kWarpsPerSm, 0, 1);  // Theoretical occupancy.
  const int bucket = e.waves < 1 ? 0 : e.waves < 2 ? 1 : e.waves < 8 ? 2 : 3;
  f[8 + bucket] = 1;
  return f;
}

std::vector<double> ProblemFeatures(double flops, double bytes, uint64_t space_size) {
  const double intensity = bytes > 0 ? flops / bytes : 0;
  return {Clip(std::log10(flops + 1) / 13, 0, 1.5), Clip(std::log10(bytes + 1) / 11, 0, 1.5),
          Clip(std::log10(intensity + 1) / 3, 0, 1.5),
          Clip(std::log10(static_cast<double>(space_size) + 1) / 6, 0, 1.5)};
}

Prior NoisyPrior(const std::vector<double>& true_log_ms, const std::vector<uint8_t>& ok, double noise, uint64_t seed) {
  Rng rng(seed);
  Prior prior;
  const size_t n = true_log_ms.size();
  prior.log_ms.resize(n);
  prior.log_std.assign(n, noise);
  prior.p_fail.resize(n);
  double worst = -kInf;
  for (size_t i = 0; i < n; ++i)
    if (ok[i]) worst = std::max(worst, true_log_ms[i]);
  // A prior as noisy as a log-time error of 1 is about as good as none.
  prior.trust = Clip(1 - noise, 0, 1);
  for (size_t i = 0; i < n; ++i) {
    prior.log_ms[i] = (ok[i] ? true_log_ms[i] : worst) + noise * rng.Normal();
    prior.p_fail[i] = ok[i] ? 0.05 : 0.8;
  }
  return prior;
}

}  // namespace dr_kernel::agent
