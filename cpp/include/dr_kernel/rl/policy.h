// The actor-critic: a categorical policy over N discrete actions with an action mask, and a state
// value function.
#ifndef DR_KERNEL_RL_POLICY_H_
#define DR_KERNEL_RL_POLICY_H_

#include <Eigen/Dense>
#include <cstdint>
#include <istream>
#include <ostream>
#include <vector>

#include "dr_kernel/rl/mlp.h"
#include "dr_kernel/rng.h"

namespace dr_kernel::rl {

// Which actions are allowed: one row per sample, one column per action, nonzero = allowed.
using MaskMatrix = Eigen::Matrix<uint8_t, Eigen::Dynamic, Eigen::Dynamic>;

// log softmax of each row over its allowed actions; masked entries are -inf (their logits are
// treated as -inf). Throws std::invalid_argument when the shapes differ or a row allows no action.
Eigen::MatrixXd MaskedLogSoftmax(const Eigen::MatrixXd& logits, const MaskMatrix& mask);

// The entropy of each row of MaskedLogSoftmax's result (masked entries contribute nothing).
Eigen::VectorXd Entropy(const Eigen::MatrixXd& log_probs);

// The gradient, with respect to the logits, of
//   sum_i action_weights[i] * log_probs(i, actions[i]) + entropy_weights[i] * entropy_i
// where log_probs = MaskedLogSoftmax(logits, mask). Zero at masked entries. Every loss of the
// policy (PPO's surrogate, behaviour cloning's cross-entropy, entropy bonuses) is of this form.
Eigen::MatrixXd LogProbGradient(const Eigen::MatrixXd& log_probs, const std::vector<int>& actions,
                                const Eigen::VectorXd& action_weights,
                                const Eigen::VectorXd& entropy_weights);

// One action per row drawn from the row's distribution (exp of `log_probs`); an action whose
// probability is zero (a masked one) is never drawn.
std::vector<int> SampleActions(const Eigen::MatrixXd& log_probs, Rng& rng);

// The most probable allowed action of each row (the lowest index among ties).
std::vector<int> GreedyActions(const Eigen::MatrixXd& log_probs);

// What the agent does on a batch of observations during a rollout.
struct ActResult {
  std::vector<int> actions;
  Eigen::VectorXd log_probs;  // log pi(action | observation)
  Eigen::VectorXd values;     // V(observation)
};

// The policy (actor) and value function (critic) as two separate networks. Separate rather than a
// shared trunk: with small inputs the extra cost is modest, the value loss needs no weight against
// the policy loss to keep it from dominating the shared features, and behaviour cloning can train
// the policy without disturbing the critic (or the other way round).
class ActorCritic {
 public:
  ActorCritic() = default;
  // Networks of widths obs_size, hidden..., num_actions (actor) and obs_size, hidden..., 1 (critic),
  // orthogonally initialised with gain sqrt(2) in hidden layers, 0.01 on the actor's output (a
  // near-uniform initial policy) and 1 on the critic's output.
  ActorCritic(int obs_size, int num_actions, const std::vector<int>& hidden, Rng& rng);
  // Takes given networks; throws std::invalid_argument unless their inputs agree and the critic has
  // one output.
  ActorCritic(Mlp actor, Mlp critic);

  int observation_size() const { return actor_.input_size(); }
  int num_actions() const { return actor_.output_size(); }
  const Mlp& actor() const { return actor_; }
  Mlp& actor() { return actor_; }
  const Mlp& critic() const { return critic_; }
  Mlp& critic() { return critic_; }

  // Unmasked logits (batch x num_actions) of a batch of observations (batch x observation_size).
  Eigen::MatrixXd Logits(const Eigen::MatrixXd& obs) const { return actor_.Forward(obs); }
  // Masked log-probabilities of every action (batch x num_actions).
  Eigen::MatrixXd LogProbs(const Eigen::MatrixXd& obs, const MaskMatrix& mask) const;
  // State values (batch).
  Eigen::VectorXd Values(const Eigen::MatrixXd& obs) const;

  // Draws one allowed action per observation and reports its log-probability and the state value.
  ActResult Sample(const Eigen::MatrixXd& obs, const MaskMatrix& mask, Rng& rng) const;
  // The most probable allowed action per observation (for evaluation and deployment).
  std::vector<int> Greedy(const Eigen::MatrixXd& obs, const MaskMatrix& mask) const;

  // Writes both networks (format "DRKPAC", version 1, then each network in Mlp's format).
  void Save(std::ostream& out) const;
  // Reads what Save wrote; throws ModelFormatError for anything else or a truncated stream.
  static ActorCritic Load(std::istream& in);

 private:
  Mlp actor_;
  Mlp critic_;
};

}  // namespace dr_kernel::rl

#endif  // DR_KERNEL_RL_POLICY_H_
