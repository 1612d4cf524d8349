#include "dr_kernel/rl/ppo.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>

#include "dr_kernel/interrupt.h"

namespace dr_kernel::rl {

namespace {

// Rows per shard of a minibatch. Shards are the unit of parallel work; their number depends only on
// the minibatch size, so that the sum of shard gradients (always taken in shard order) is the same
// with any number of threads. 128 rows keep the matrix products efficient.
constexpr Eigen::Index kShardRows = 128;

// Reusable buffers of one worker: the forward passes' caches.
struct Workspace {
  MlpCache actor;
  MlpCache critic;
};

// PPO's loss terms and gradients over rows [begin, end) of `batch`, each term divided by `count`
// (the minibatch's size) so that shards add up to the minibatch's mean.
PpoLoss PpoShard(const ActorCritic& model, const PpoBatch& batch, Eigen::Index begin, Eigen::Index end,
                 double count, const PpoConfig& config, Workspace* ws, Eigen::VectorXd* actor_grad,
                 Eigen::VectorXd* critic_grad) {
  const Eigen::Index n = end - begin;
  const Eigen::MatrixXd obs = batch.obs.middleRows(begin, n);
  const Eigen::MatrixXd& logits = model.actor().Forward(obs, &ws->actor);
  const Eigen::MatrixXd log_probs = MaskedLogSoftmax(logits, batch.mask.middleRows(begin, n));
  const Eigen::VectorXd entropy = Entropy(log_probs);
  std::vector<int> actions(batch.actions.begin() + begin, batch.actions.begin() + end);

  PpoLoss loss;
  Eigen::VectorXd action_weights(n);
  const double lo = 1.0 - config.clip, hi = 1.0 + config.clip;
  for (Eigen::Index i = 0; i < n; ++i) {
    const Eigen::Index row = begin + i;
    const double log_ratio = log_probs(i, actions[i]) - batch.old_log_probs(row);
    const double ratio = std::exp(log_ratio);
    const double adv = batch.advantages(row);
    const double unclipped = -adv * ratio;
    const double clipped = -adv * std::clamp(ratio, lo, hi);
    // The pessimistic (larger) loss counts; when the clipped one is larger, the ratio is outside the
    // range and the loss is flat in the parameters.
    loss.policy += std::max(unclipped, clipped);
    action_weights(i) = unclipped >= clipped ? -adv * ratio / count : 0.0;
    loss.approx_kl += (ratio - 1.0) - log_ratio;
    loss.clip_fraction += std::abs(ratio - 1.0) > config.clip ? 1.0 : 0.0;
  }
  loss.entropy = entropy.sum();

  const Eigen::VectorXd& values = model.critic().Forward(obs, &ws->critic).col(0);
  Eigen::MatrixXd value_grad(n, 1);
  for (Eigen::Index i = 0; i < n; ++i) {
    const Eigen::Index row = begin + i;
    const double v = values(i), target = batch.returns(row);
    const double error = v - target;
    double half_square = 0.5 * error * error, grad = error;
    if (config.value_clip > 0) {
      const double old = batch.old_values(row);
      const double step = v - old;
      const double clipped_v = old + std::clamp(step, -config.value_clip, config.value_clip);
      const double clipped_error = clipped_v - target;
      const double clipped_half_square = 0.5 * clipped_error * clipped_error;
      if (clipped_half_square > half_square) {
        half_square = clipped_half_square;
        grad = std::abs(step) < config.value_clip ? clipped_error : 0.0;
      }
    }
    loss.value += half_square;
    value_grad(i, 0) = config.value_coef * grad / count;
  }

  loss.policy /= count;
  loss.value /= count;
  loss.entropy /= count;
  loss.approx_kl /= count;
  loss.clip_fraction /= count;
  loss.total = loss.policy + config.value_coef * loss.value - config.entropy_coef * loss.entropy;

  if (actor_grad != nullptr) {
    const Eigen::VectorXd entropy_weights = Eigen::VectorXd::Constant(n, -config.entropy_coef / count);
    model.actor().Backward(ws->actor, LogProbGradient(log_probs, actions, action_weights, entropy_weights),
                           actor_grad);
  }
  if (critic_grad != nullptr) model.critic().Backward(ws->critic, value_grad, critic_grad);
  return loss;
}

void Accumulate(const PpoLoss& part, PpoLoss* sum) {
  sum->total += part.total;
  sum->policy += part.policy;
  sum->value += part.value;
  sum->entropy += part.entropy;
  sum->approx_kl += part.approx_kl;
  sum->clip_fraction += part.clip_fraction;
}

void CheckBatch(const PpoBatch& batch, const ActorCritic& model) {
  const Eigen::Index n = batch.obs.rows();
  if (batch.obs.cols() != model.observation_size() || batch.mask.rows() != n ||
      batch.mask.cols() != model.num_actions() || static_cast<Eigen::Index>(batch.actions.size()) != n ||
      batch.old_log_probs.size() != n || batch.old_values.size() != n || batch.advantages.size() != n ||
      batch.returns.size() != n) {
    throw std::invalid_argument(
        "A PPO batch needs one row of every field per transition, shaped for the model.");
  }
}

// The rows of `rows` picked out by `index`.
template <typename Matrix>
Matrix Gather(const Matrix& rows, const std::vector<Eigen::Index>& index) {
  return rows(index, Eigen::all);
}

Eigen::VectorXd GatherVector(const Eigen::VectorXd& v, const std::vector<Eigen::Index>& index) {
  Eigen::VectorXd out(index.size());
  for (size_t i = 0; i < index.size(); ++i) out(i) = v(index[i]);
  return out;
}

}  // namespace

void ComputeGae(const Eigen::VectorXd& rewards, const Eigen::VectorXd& values,
                const std::vector<uint8_t>& dones, const std::vector<uint8_t>& truncated,
                const Eigen::VectorXd& bootstrap_values, const Eigen::VectorXd& last_values, int num_envs,
                double gamma, double lambda, Eigen::VectorXd* advantages, Eigen::VectorXd* returns) {
  const Eigen::Index n = rewards.size();
  if (num_envs <= 0 || n % num_envs != 0 || values.size() != n ||
      static_cast<Eigen::Index>(dones.size()) != n || static_cast<Eigen::Index>(truncated.size()) != n ||
      bootstrap_values.size() != n || last_values.size() != num_envs) {
    throw std::invalid_argument(
        "ComputeGae needs num_steps * num_envs transitions and num_envs last values.");
  }
  advantages->resize(n);
  const Eigen::Index steps = n / num_envs;
  for (int e = 0; e < num_envs; ++e) {
    double next_advantage = 0;
    double next_value = last_values(e);
    for (Eigen::Index t = steps - 1; t >= 0; --t) {
      const Eigen::Index k = t * num_envs + e;
      if (dones[k]) {
        // The episode ends here: nothing of the next transition (another episode) flows back. A
        // truncated episode's future is the value of where it was cut; a terminal state has none.
        next_value = truncated[k] ? bootstrap_values(k) : 0.0;
        next_advantage = 0;
      }
      const double delta = rewards(k) + gamma * next_value - values(k);
      next_advantage = delta + gamma * lambda * next_advantage;
      (*advantages)(k) = next_advantage;
      next_value = values(k);
    }
  }
  *returns = *advantages + values;
}

RolloutBuffer::RolloutBuffer(int num_steps, int num_envs, int obs_size, int num_actions)
    : num_steps_(num_steps), num_envs_(num_envs) {
  if (num_steps <= 0 || num_envs <= 0 || obs_size <= 0 || num_actions <= 0) {
    throw std::invalid_argument(
        "A rollout buffer needs positive steps, environments, observation size and actions.");
  }
  const Eigen::Index n = size();
  obs_.resize(n, obs_size);
  mask_.resize(n, num_actions);
  actions_.resize(n);
  log_probs_.resize(n);
  values_.resize(n);
  rewards_.resize(n);
  bootstrap_values_.setZero(n);
  dones_.resize(n);
  truncated_.resize(n);
}

void RolloutBuffer::Add(const Eigen::MatrixXd& obs, const MaskMatrix& mask, const std::vector<int>& actions,
                        const Eigen::VectorXd& log_probs, const Eigen::VectorXd& values,
                        const Eigen::VectorXd& rewards, const std::vector<uint8_t>& dones,
                        const std::vector<uint8_t>& truncated, const Eigen::VectorXd& bootstrap_values) {
  if (full()) throw std::logic_error("The rollout buffer is full; compute advantages, update, then Clear().");
  const Eigen::Index e = num_envs_;
  if (obs.rows() != e || obs.cols() != obs_.cols() || mask.rows() != e || mask.cols() != mask_.cols() ||
      static_cast<Eigen::Index>(actions.size()) != e || log_probs.size() != e || values.size() != e ||
      rewards.size() != e || static_cast<Eigen::Index>(dones.size()) != e ||
      static_cast<Eigen::Index>(truncated.size()) != e || bootstrap_values.size() != e) {
    throw std::invalid_argument("RolloutBuffer::Add needs one row per environment in every argument.");
  }
  const Eigen::Index base = static_cast<Eigen::Index>(steps_) * e;
  obs_.middleRows(base, e) = obs;
  mask_.middleRows(base, e) = mask;
  log_probs_.segment(base, e) = log_probs;
  values_.segment(base, e) = values;
  rewards_.segment(base, e) = rewards;
  for (Eigen::Index i = 0; i < e; ++i) {
    actions_[base + i] = actions[i];
    dones_[base + i] = dones[i] ? 1 : 0;
    truncated_[base + i] = dones[i] && truncated[i] ? 1 : 0;
    bootstrap_values_(base + i) = truncated_[base + i] ? bootstrap_values(i) : 0.0;
  }
  ++steps_;
}

void RolloutBuffer::ComputeAdvantages(const Eigen::VectorXd& last_values, double gamma, double lambda) {
  if (!full()) throw std::logic_error("Advantages need a full rollout buffer.");
  ComputeGae(rewards_, values_, dones_, truncated_, bootstrap_values_, last_values, num_envs_, gamma, lambda,
             &advantages_, &returns_);
}

PpoLoss PpoLossAndGradient(const ActorCritic& model, const PpoBatch& batch, const PpoConfig& config,
                           Eigen::VectorXd* actor_grad, Eigen::VectorXd* critic_grad) {
  CheckBatch(batch, model);
  Workspace ws;
  const Eigen::Index n = batch.obs.rows();
  return PpoShard(model, batch, 0, n, static_cast<double>(n), config, &ws, actor_grad, critic_grad);
}

PpoLearner::PpoLearner(ActorCritic* model, const PpoConfig& config)
    : model_(model),
      config_(config),
      actor_optimizer_(model->actor().num_params(),
                       AdamConfig{config.learning_rate, 0.9, 0.999, 1e-5, config.max_grad_norm}),
      critic_optimizer_(model->critic().num_params(),
                        AdamConfig{config.learning_rate, 0.9, 0.999, 1e-5, config.max_grad_norm}) {
  if (config.epochs <= 0 || config.minibatch_size <= 0 || config.clip <= 0 || config.threads < 0) {
    throw std::invalid_argument("PPO needs positive epochs, minibatch_size and clip, and threads >= 0.");
  }
}

void PpoLearner::set_learning_rate(double learning_rate) {
  actor_optimizer_.set_learning_rate(learning_rate);
  critic_optimizer_.set_learning_rate(learning_rate);
}

PpoStats PpoLearner::Update(const RolloutBuffer& buffer, Rng& rng) {
  if (!buffer.full() || buffer.advantages().size() != buffer.size()) {
    throw std::logic_error("PPO updates on a full rollout buffer whose advantages are computed.");
  }
  const Eigen::Index n = buffer.size();
  PpoStats stats;
  {
    const Eigen::ArrayXd returns = buffer.returns().array();
    const double var_returns = (returns - returns.mean()).square().mean();
    const Eigen::ArrayXd residual = returns - buffer.values().array();
    const double var_residual = (residual - residual.mean()).square().mean();
    stats.explained_variance = var_returns > 0 ? 1.0 - var_residual / var_returns : 0.0;
  }
  Eigen::VectorXd advantages = buffer.advantages();
  if (config_.normalize_advantages && n > 1) {
    const double mean = advantages.mean();
    const double std = std::sqrt((advantages.array() - mean).square().mean());
    advantages = (advantages.array() - mean) / (std + 1e-8);
  }

  std::vector<Eigen::Index> order(n);
  std::iota(order.begin(), order.end(), 0);
  const Eigen::Index minibatch = std::min<Eigen::Index>(config_.minibatch_size, n);
  const Mlp& actor = model_->actor();
  const Mlp& critic = model_->critic();
  const Eigen::Index max_shards = (minibatch + kShardRows - 1) / kShardRows;
  const Eigen::Index threads =
      config_.threads > 0 ? config_.threads : std::max<Eigen::Index>(1, std::thread::hardware_concurrency());
  std::vector<Workspace> workspaces(static_cast<size_t>(std::min<Eigen::Index>(threads, max_shards)));
  std::vector<Eigen::VectorXd> actor_grads(max_shards), critic_grads(max_shards);
  std::vector<PpoLoss> shard_losses(max_shards);
  Eigen::VectorXd actor_grad(actor.num_params()), critic_grad(critic.num_params());
  PpoLoss sum;
  int computed = 0;

  for (int epoch = 0; epoch < config_.epochs && !stats.stopped_early; ++epoch) {
    ++stats.epochs;
    rng.Shuffle(order);
    for (Eigen::Index start = 0; start < n; start += minibatch) {
      const Eigen::Index count = std::min(minibatch, n - start);
      const std::vector<Eigen::Index> index(order.begin() + start, order.begin() + start + count);
      PpoBatch batch;
      batch.obs = Gather(buffer.obs(), index);
      batch.mask = Gather(buffer.mask(), index);
      batch.actions.resize(count);
      for (Eigen::Index i = 0; i < count; ++i) batch.actions[i] = buffer.actions()[index[i]];
      batch.old_log_probs = GatherVector(buffer.log_probs(), index);
      batch.old_values = GatherVector(buffer.values(), index);
      batch.advantages = GatherVector(advantages, index);
      batch.returns = GatherVector(buffer.returns(), index);

      const Eigen::Index shards = (count + kShardRows - 1) / kShardRows;
      const size_t workers = std::min<size_t>(workspaces.size(), static_cast<size_t>(shards));
      auto work = [&](size_t worker) {
        for (Eigen::Index s = static_cast<Eigen::Index>(worker); s < shards;
             s += static_cast<Eigen::Index>(workers)) {
          actor_grads[s].setZero(actor.num_params());
          critic_grads[s].setZero(critic.num_params());
          const Eigen::Index begin = s * kShardRows, end = std::min(count, begin + kShardRows);
          shard_losses[s] = PpoShard(*model_, batch, begin, end, static_cast<double>(count), config_,
                                     &workspaces[worker], &actor_grads[s], &critic_grads[s]);
        }
      };
      std::vector<std::thread> threads;
      for (size_t w = 1; w < workers; ++w) threads.emplace_back(work, w);
      work(0);
      for (auto& t : threads) t.join();

      PpoLoss loss;
      actor_grad.setZero();
      critic_grad.setZero();
      for (Eigen::Index s = 0; s < shards; ++s) {
        Accumulate(shard_losses[s], &loss);
        actor_grad += actor_grads[s];
        critic_grad += critic_grads[s];
      }
      Accumulate(loss, &sum);
      ++computed;
      // The minibatch's KL is measured before its step: a policy already too far from the rollout's
      // takes no further step.
      if (config_.target_kl > 0 && loss.approx_kl > config_.target_kl) {
        stats.stopped_early = true;
        break;
      }
      actor_optimizer_.Step(actor_grad, &model_->actor().mutable_params());
      critic_optimizer_.Step(critic_grad, &model_->critic().mutable_params());
      ++stats.minibatches;
    }
  }
  stats.policy_loss = sum.policy / computed;
  stats.value_loss = sum.value / computed;
  stats.entropy = sum.entropy / computed;
  stats.approx_kl = sum.approx_kl / computed;
  stats.clip_fraction = sum.clip_fraction / computed;
  return stats;
}

BcLoss BcLossAndGradient(const ActorCritic& model, const Demonstrations& batch, const BcConfig& config,
                         Eigen::VectorXd* actor_grad, Eigen::VectorXd* critic_grad) {
  const Eigen::Index n = batch.obs.rows();
  if (n == 0 || batch.obs.cols() != model.observation_size() || batch.mask.rows() != n ||
      batch.mask.cols() != model.num_actions() || static_cast<Eigen::Index>(batch.actions.size()) != n ||
      (batch.value_targets.size() != 0 && batch.value_targets.size() != n)) {
    throw std::invalid_argument(
        "Demonstrations need at least one row and, per row, an observation, a mask and an action shaped for "
        "the model (and a value target for every row or for none).");
  }
  const double count = static_cast<double>(n);
  MlpCache actor_cache;
  const Eigen::MatrixXd log_probs =
      MaskedLogSoftmax(model.actor().Forward(batch.obs, &actor_cache), batch.mask);
  const Eigen::VectorXd entropy = Entropy(log_probs);
  const std::vector<int> greedy = GreedyActions(log_probs);
  BcLoss loss;
  for (Eigen::Index i = 0; i < n; ++i) {
    const int a = batch.actions[i];
    if (a < 0 || a >= model.num_actions() || batch.mask(i, a) == 0) {
      throw std::invalid_argument("Demonstration row " + std::to_string(i) + " has action " +
                                  std::to_string(a) +
                                  ", which is out of range or masked out; fix the recorded history.");
    }
    loss.cross_entropy -= log_probs(i, a);
    loss.accuracy += greedy[i] == a ? 1.0 : 0.0;
  }
  loss.cross_entropy /= count;
  loss.accuracy /= count;
  loss.entropy = entropy.mean();
  if (actor_grad != nullptr) {
    model.actor().Backward(
        actor_cache,
        LogProbGradient(log_probs, batch.actions, Eigen::VectorXd::Constant(n, -1.0 / count),
                        Eigen::VectorXd::Constant(n, -config.entropy_coef / count)),
        actor_grad);
  }
  if (batch.value_targets.size() == n) {
    MlpCache critic_cache;
    const Eigen::VectorXd errors =
        model.critic().Forward(batch.obs, &critic_cache).col(0) - batch.value_targets;
    loss.value = 0.5 * errors.squaredNorm() / count;
    if (critic_grad != nullptr) {
      model.critic().Backward(critic_cache, (config.value_coef / count) * errors, critic_grad);
    }
  }
  loss.total = loss.cross_entropy + config.value_coef * loss.value - config.entropy_coef * loss.entropy;
  return loss;
}

BcStats BehaviourCloning(ActorCritic* model, const Demonstrations& data, const BcConfig& config, Rng& rng) {
  if (config.epochs < 0 || config.minibatch_size <= 0) {
    throw std::invalid_argument("Behaviour cloning needs epochs >= 0 and a positive minibatch_size.");
  }
  const Eigen::Index n = data.obs.rows();
  const bool has_values = data.value_targets.size() != 0;
  Adam actor_optimizer(model->actor().num_params(),
                       AdamConfig{config.learning_rate, 0.9, 0.999, 1e-8, config.max_grad_norm});
  Adam critic_optimizer(model->critic().num_params(),
                        AdamConfig{config.learning_rate, 0.9, 0.999, 1e-8, config.max_grad_norm});
  std::vector<Eigen::Index> order(n);
  std::iota(order.begin(), order.end(), 0);
  Eigen::VectorXd actor_grad(model->actor().num_params()), critic_grad(model->critic().num_params());
  BcStats stats;
  for (int epoch = 0; epoch < config.epochs; ++epoch) {
    PollInterrupt();
    rng.Shuffle(order);
    for (Eigen::Index start = 0; start < n; start += config.minibatch_size) {
      const Eigen::Index count = std::min<Eigen::Index>(config.minibatch_size, n - start);
      const std::vector<Eigen::Index> index(order.begin() + start, order.begin() + start + count);
      Demonstrations batch;
      batch.obs = Gather(data.obs, index);
      batch.mask = Gather(data.mask, index);
      batch.actions.resize(count);
      for (Eigen::Index i = 0; i < count; ++i) batch.actions[i] = data.actions[index[i]];
      if (has_values) batch.value_targets = GatherVector(data.value_targets, index);
      actor_grad.setZero();
      critic_grad.setZero();
      BcLossAndGradient(*model, batch, config, &actor_grad, &critic_grad);
      actor_optimizer.Step(actor_grad, &model->actor().mutable_params());
      if (has_values) critic_optimizer.Step(critic_grad, &model->critic().mutable_params());
      ++stats.minibatches;
    }
    ++stats.epochs;
  }
  stats.final = BcLossAndGradient(*model, data, config, nullptr, nullptr);
  return stats;
}

}  // namespace dr_kernel::rl
