#include "dr_kernel/rl/policy.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "binary_io.h"

namespace dr_kernel::rl {

namespace {

constexpr char kMagic[8] = "DRKPAC\0";
constexpr uint32_t kVersion = 1;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

}  // namespace

Eigen::MatrixXd MaskedLogSoftmax(const Eigen::MatrixXd& logits, const MaskMatrix& mask) {
  if (logits.rows() != mask.rows() || logits.cols() != mask.cols()) {
    throw std::invalid_argument("The action mask is " + std::to_string(mask.rows()) + " x " +
                                std::to_string(mask.cols()) + " but the logits are " +
                                std::to_string(logits.rows()) + " x " + std::to_string(logits.cols()) + ".");
  }
  const auto allowed = mask.array() != 0;
  const auto any = allowed.rowwise().any();
  for (Eigen::Index i = 0; i < any.size(); ++i) {
    if (!any(i)) {
      throw std::invalid_argument("Row " + std::to_string(i) +
                                  " of the action mask allows no action; every state needs at least one.");
    }
  }
  const Eigen::ArrayXXd masked = allowed.select(logits.array(), kNegInf);
  const Eigen::ArrayXd max = masked.rowwise().maxCoeff();
  Eigen::ArrayXXd shifted = masked.colwise() - max;
  const Eigen::ArrayXd log_sum = shifted.exp().rowwise().sum().log();
  shifted.colwise() -= log_sum;
  return shifted.matrix();
}

Eigen::VectorXd Entropy(const Eigen::MatrixXd& log_probs) {
  const Eigen::ArrayXXd lp = log_probs.array();
  return lp.isFinite().select(-lp.exp() * lp, 0.0).rowwise().sum().matrix();
}

Eigen::MatrixXd LogProbGradient(const Eigen::MatrixXd& log_probs, const std::vector<int>& actions,
                                const Eigen::VectorXd& action_weights,
                                const Eigen::VectorXd& entropy_weights) {
  const Eigen::Index n = log_probs.rows();
  if (static_cast<Eigen::Index>(actions.size()) != n || action_weights.size() != n ||
      entropy_weights.size() != n) {
    throw std::invalid_argument("LogProbGradient needs one action and weight per row.");
  }
  const Eigen::ArrayXXd lp = log_probs.array();
  const Eigen::ArrayXXd p = lp.exp();
  const Eigen::ArrayXd h = Entropy(log_probs).array();
  // d log p_a / d z_j = [j == a] - p_j;  d H / d z_j = -p_j (log p_j + H).
  Eigen::ArrayXXd inner = lp.colwise() + h;
  inner.colwise() *= entropy_weights.array();
  inner.colwise() += action_weights.array();
  Eigen::MatrixXd grad = lp.isFinite().select(-p * inner, 0.0).matrix();
  for (Eigen::Index i = 0; i < n; ++i) grad(i, actions[i]) += action_weights(i);
  return grad;
}

std::vector<int> SampleActions(const Eigen::MatrixXd& log_probs, Rng& rng) {
  std::vector<int> actions(log_probs.rows());
  for (Eigen::Index i = 0; i < log_probs.rows(); ++i) {
    const double u = rng.Uniform();
    double cumulative = 0;
    int chosen = -1;
    for (Eigen::Index j = 0; j < log_probs.cols(); ++j) {
      const double p = std::exp(log_probs(i, j));
      if (!(p > 0)) continue;  // Masked (or vanishingly unlikely): never drawn.
      chosen = static_cast<int>(j);
      cumulative += p;
      if (u < cumulative) break;
    }
    // When rounding leaves the total a hair below u, `chosen` is the last allowed action.
    if (chosen < 0) throw std::invalid_argument("Cannot sample from a row with no allowed action.");
    actions[i] = chosen;
  }
  return actions;
}

std::vector<int> GreedyActions(const Eigen::MatrixXd& log_probs) {
  std::vector<int> actions(log_probs.rows());
  for (Eigen::Index i = 0; i < log_probs.rows(); ++i) {
    int best = -1;
    for (Eigen::Index j = 0; j < log_probs.cols(); ++j) {
      const double v = log_probs(i, j);
      if (v == kNegInf || std::isnan(v)) continue;
      if (best < 0 || v > log_probs(i, best)) best = static_cast<int>(j);
    }
    if (best < 0) throw std::invalid_argument("Cannot choose from a row with no allowed action.");
    actions[i] = best;
  }
  return actions;
}

ActorCritic::ActorCritic(int obs_size, int num_actions, const std::vector<int>& hidden, Rng& rng) {
  std::vector<int> actor_sizes{obs_size};
  actor_sizes.insert(actor_sizes.end(), hidden.begin(), hidden.end());
  std::vector<int> critic_sizes = actor_sizes;
  actor_sizes.push_back(num_actions);
  critic_sizes.push_back(1);
  actor_ = Mlp(actor_sizes, rng, InitScheme::kOrthogonal, std::sqrt(2.0), 0.01);
  critic_ = Mlp(critic_sizes, rng, InitScheme::kOrthogonal, std::sqrt(2.0), 1.0);
}

ActorCritic::ActorCritic(Mlp actor, Mlp critic) : actor_(std::move(actor)), critic_(std::move(critic)) {
  if (actor_.input_size() != critic_.input_size() || critic_.output_size() != 1) {
    throw std::invalid_argument(
        "An actor-critic needs an actor and a critic of the same input size (got " +
        std::to_string(actor_.input_size()) + " and " + std::to_string(critic_.input_size()) +
        ") and a critic with one output (got " + std::to_string(critic_.output_size()) + ").");
  }
}

Eigen::MatrixXd ActorCritic::LogProbs(const Eigen::MatrixXd& obs, const MaskMatrix& mask) const {
  return MaskedLogSoftmax(actor_.Forward(obs), mask);
}

Eigen::VectorXd ActorCritic::Values(const Eigen::MatrixXd& obs) const { return critic_.Forward(obs).col(0); }

ActResult ActorCritic::Sample(const Eigen::MatrixXd& obs, const MaskMatrix& mask, Rng& rng) const {
  const Eigen::MatrixXd log_probs = LogProbs(obs, mask);
  ActResult result;
  result.actions = SampleActions(log_probs, rng);
  result.log_probs.resize(obs.rows());
  for (Eigen::Index i = 0; i < obs.rows(); ++i) result.log_probs(i) = log_probs(i, result.actions[i]);
  result.values = Values(obs);
  return result;
}

std::vector<int> ActorCritic::Greedy(const Eigen::MatrixXd& obs, const MaskMatrix& mask) const {
  return GreedyActions(LogProbs(obs, mask));
}

void ActorCritic::Save(std::ostream& out) const {
  internal::BinaryWriter w(out, kMagic);
  w.U32(kVersion);
  w.U64(static_cast<uint64_t>(observation_size()));
  w.U64(static_cast<uint64_t>(num_actions()));
  w.Finish();
  actor_.Save(out);
  critic_.Save(out);
}

ActorCritic ActorCritic::Load(std::istream& in) {
  internal::BinaryReader r(in, kMagic, "an actor-critic");
  r.Version(kVersion);
  const uint64_t obs_size = r.U64("the observation size");
  const uint64_t num_actions = r.U64("the number of actions");
  r.Finish();
  Mlp actor = Mlp::Load(in);
  Mlp critic = Mlp::Load(in);
  if (static_cast<uint64_t>(actor.input_size()) != obs_size ||
      static_cast<uint64_t>(actor.output_size()) != num_actions ||
      static_cast<uint64_t>(critic.input_size()) != obs_size || critic.output_size() != 1) {
    r.Fail("its networks do not match its header (observations " + std::to_string(obs_size) + ", actions " +
           std::to_string(num_actions) + "); the file is corrupt");
  }
  return ActorCritic(std::move(actor), std::move(critic));
}

}  // namespace dr_kernel::rl
