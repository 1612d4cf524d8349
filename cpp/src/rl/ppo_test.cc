#include "dr_kernel/rl/ppo.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "test_util.h"

namespace dr_kernel::rl {
namespace {

using testing::NumericGradient;
using testing::RandomAllowedActions;
using testing::RandomMask;
using testing::RandomMatrix;
using testing::RelativeError;

// Two environments over three steps, interleaved as transition t * 2 + e. gamma = 0.9 and
// lambda = 0.8, so gamma * lambda = 0.72.
//
// Environment 0: rewards 1, 2, 3; values 0.5, 1.0, 1.5; its episode is truncated after step 1 with
// the cut-off observation worth 4.0; after step 2 the next observation is worth 2.0.
//   t = 2: delta = 3 + 0.9 * 2.0 - 1.5 = 3.3                         A = 3.3
//   t = 1: delta = 2 + 0.9 * 4.0 - 1.0 = 4.6 (bootstrap, chain cut)  A = 4.6
//   t = 0: delta = 1 + 0.9 * 1.0 - 0.5 = 1.4                         A = 1.4 + 0.72 * 4.6 = 4.712
// Environment 1: rewards 0, 0, 1; values 0.2, 0.4, 0.6; its episode terminates after step 2, so the
// value 9.0 of its next observation (a new episode) must not count.
//   t = 2: delta = 1 - 0.6 = 0.4                                      A = 0.4
//   t = 1: delta = 0.9 * 0.6 - 0.4 = 0.14                             A = 0.14 + 0.72 * 0.4 = 0.428
//   t = 0: delta = 0.9 * 0.4 - 0.2 = 0.16                             A = 0.16 + 0.72 * 0.428 = 0.46816
TEST(GaeTest, HandComputedExample) {
  const Eigen::VectorXd rewards = (Eigen::VectorXd(6) << 1, 0, 2, 0, 3, 1).finished();
  const Eigen::VectorXd values = (Eigen::VectorXd(6) << 0.5, 0.2, 1.0, 0.4, 1.5, 0.6).finished();
  const std::vector<uint8_t> dones = {0, 0, 1, 0, 0, 1};
  const std::vector<uint8_t> truncated = {0, 0, 1, 0, 0, 0};
  const Eigen::VectorXd bootstrap = (Eigen::VectorXd(6) << 0, 0, 4.0, 0, 0, 0).finished();
  const Eigen::VectorXd last = (Eigen::VectorXd(2) << 2.0, 9.0).finished();
  const Eigen::VectorXd expected = (Eigen::VectorXd(6) << 4.712, 0.46816, 4.6, 0.428, 3.3, 0.4).finished();

  Eigen::VectorXd advantages, returns;
  ComputeGae(rewards, values, dones, truncated, bootstrap, last, 2, 0.9, 0.8, &advantages, &returns);
  EXPECT_LT((advantages - expected).cwiseAbs().maxCoeff(), 1e-12) << advantages.transpose();
  EXPECT_LT((returns - (expected + values)).cwiseAbs().maxCoeff(), 1e-12);

  // The same through the rollout buffer, one lockstep step at a time.
  RolloutBuffer buffer(3, 2, 1, 2);
  for (int t = 0; t < 3; ++t) {
    buffer.Add(Eigen::MatrixXd::Constant(2, 1, t), MaskMatrix::Ones(2, 2), {0, 1}, Eigen::VectorXd::Zero(2),
               values.segment(2 * t, 2), rewards.segment(2 * t, 2), {dones[2 * t], dones[2 * t + 1]},
               {truncated[2 * t], truncated[2 * t + 1]}, bootstrap.segment(2 * t, 2));
  }
  EXPECT_TRUE(buffer.full());
  EXPECT_THROW(buffer.Add(Eigen::MatrixXd::Zero(2, 1), MaskMatrix::Ones(2, 2), {0, 0},
                          Eigen::VectorXd::Zero(2), Eigen::VectorXd::Zero(2), Eigen::VectorXd::Zero(2),
                          {0, 0}, {0, 0}, Eigen::VectorXd::Zero(2)),
               std::logic_error);
  buffer.ComputeAdvantages(last, 0.9, 0.8);
  EXPECT_LT((buffer.advantages() - expected).cwiseAbs().maxCoeff(), 1e-12);
}

// With gamma = lambda = 1 and a terminal end, advantages are Monte-Carlo returns minus values.
TEST(GaeTest, MonteCarloLimit) {
  const Eigen::VectorXd rewards = (Eigen::VectorXd(4) << 1, 2, 3, 4).finished();
  const Eigen::VectorXd values = (Eigen::VectorXd(4) << 0.1, 0.2, 0.3, 0.4).finished();
  Eigen::VectorXd advantages, returns;
  ComputeGae(rewards, values, {0, 0, 0, 1}, {0, 0, 0, 0}, Eigen::VectorXd::Zero(4),
             Eigen::VectorXd::Constant(1, 7), 1, 1.0, 1.0, &advantages, &returns);
  EXPECT_LT((returns - (Eigen::VectorXd(4) << 10, 9, 7, 4).finished()).cwiseAbs().maxCoeff(), 1e-12);
}

// A random PPO minibatch whose recorded log-probabilities and values are perturbed so that some
// ratios and values fall outside their clipping ranges and some inside.
struct PpoFixture {
  ActorCritic model;
  PpoBatch batch;
  PpoConfig config;
};

PpoFixture MakePpoFixture(uint64_t seed) {
  Rng rng(seed);
  PpoFixture f;
  f.model = ActorCritic(6, 5, {8, 7}, rng);
  // Larger output weights than the initial 0.01 gain, so the policy is far from uniform.
  Eigen::VectorXd p = f.model.actor().params();
  for (Eigen::Index i = 0; i < p.size(); ++i) p(i) += 0.3 * rng.Normal();
  f.model.actor().set_params(p);
  const Eigen::Index n = 24;
  f.batch.obs = RandomMatrix(n, 6, rng);
  f.batch.mask = RandomMask(n, 5, 0.6, rng);
  f.batch.actions = RandomAllowedActions(f.batch.mask, rng);
  const Eigen::MatrixXd lp = f.model.LogProbs(f.batch.obs, f.batch.mask);
  const Eigen::VectorXd v = f.model.Values(f.batch.obs);
  f.batch.old_log_probs.resize(n);
  f.batch.old_values.resize(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    f.batch.old_log_probs(i) = lp(i, f.batch.actions[i]) + 0.3 * rng.Normal();
    f.batch.old_values(i) = v(i) + 0.3 * rng.Normal();
  }
  f.batch.advantages = RandomMatrix(n, 1, rng).col(0);
  f.batch.returns = RandomMatrix(n, 1, rng).col(0);
  f.config.clip = 0.2;
  f.config.value_clip = 0.2;
  f.config.value_coef = 0.7;
  f.config.entropy_coef = 0.05;
  return f;
}

// Finite differences need each sample away from the kinks of the clipped terms.
bool AwayFromKinks(const PpoFixture& f, double margin) {
  const Eigen::MatrixXd lp = f.model.LogProbs(f.batch.obs, f.batch.mask);
  const Eigen::VectorXd v = f.model.Values(f.batch.obs);
  for (Eigen::Index i = 0; i < f.batch.obs.rows(); ++i) {
    const double r = std::exp(lp(i, f.batch.actions[i]) - f.batch.old_log_probs(i));
    if (std::abs(r - (1 - f.config.clip)) < margin || std::abs(r - (1 + f.config.clip)) < margin)
      return false;
    const double step = v(i) - f.batch.old_values(i);
    if (std::abs(std::abs(step) - f.config.value_clip) < margin) return false;
    const double clipped =
        f.batch.old_values(i) + std::clamp(step, -f.config.value_clip, f.config.value_clip);
    if (std::abs(std::abs(v(i) - f.batch.returns(i)) - std::abs(clipped - f.batch.returns(i))) < margin &&
        std::abs(step) > f.config.value_clip) {
      return false;
    }
  }
  return true;
}

// Which network of an actor-critic a numeric gradient is taken in.
enum class Net { kActor, kCritic };

// The gradient of loss(model) in the parameters of one of its networks, by central differences.
Eigen::VectorXd NumericGradientIn(const ActorCritic& model, Net net,
                                  const std::function<double(const ActorCritic&)>& loss) {
  const auto& params = net == Net::kActor ? model.actor().params() : model.critic().params();
  return NumericGradient(
      [&](const Eigen::VectorXd& p) {
        ActorCritic m = model;
        (net == Net::kActor ? m.actor() : m.critic()).set_params(p);
        return loss(m);
      },
      params);
}

TEST(PpoLossTest, GradientMatchesFiniteDifferences) {
  uint64_t seed = 21;
  PpoFixture f = MakePpoFixture(seed);
  while (!AwayFromKinks(f, 1e-3)) f = MakePpoFixture(++seed);

  Eigen::VectorXd actor_grad = Eigen::VectorXd::Zero(f.model.actor().num_params());
  Eigen::VectorXd critic_grad = Eigen::VectorXd::Zero(f.model.critic().num_params());
  const PpoLoss loss = PpoLossAndGradient(f.model, f.batch, f.config, &actor_grad, &critic_grad);
  // Both branches of both clipped terms are exercised.
  EXPECT_GT(loss.clip_fraction, 0.1);
  EXPECT_LT(loss.clip_fraction, 0.9);
  EXPECT_GT(loss.approx_kl, 0.0);
  EXPECT_NEAR(loss.total, loss.policy + 0.7 * loss.value - 0.05 * loss.entropy, 1e-12);

  // Reads f.config when called: the value-clip change below applies to it.
  const auto ppo_loss = [&](const ActorCritic& m) {
    return PpoLossAndGradient(m, f.batch, f.config, nullptr, nullptr).total;
  };
  const Eigen::VectorXd numeric_actor = NumericGradientIn(f.model, Net::kActor, ppo_loss);
  EXPECT_LT(RelativeError(actor_grad, numeric_actor), 1e-6);
  const Eigen::VectorXd numeric_critic = NumericGradientIn(f.model, Net::kCritic, ppo_loss);
  EXPECT_LT(RelativeError(critic_grad, numeric_critic), 1e-6);

  // Without value clipping, too; the clipped value loss is the larger (pessimistic) one.
  f.config.value_clip = 0;
  critic_grad.setZero();
  const PpoLoss plain = PpoLossAndGradient(f.model, f.batch, f.config, nullptr, &critic_grad);
  EXPECT_GT(loss.value, plain.value);
  EXPECT_EQ(loss.policy, plain.policy);
  const Eigen::VectorXd numeric_plain = NumericGradientIn(f.model, Net::kCritic, ppo_loss);
  EXPECT_LT(RelativeError(critic_grad, numeric_plain), 1e-6);
}

TEST(PpoLossTest, OnPolicyBatchHasNoClippingAndNoDivergence) {
  PpoFixture f = MakePpoFixture(22);
  const Eigen::MatrixXd lp = f.model.LogProbs(f.batch.obs, f.batch.mask);
  for (Eigen::Index i = 0; i < lp.rows(); ++i) f.batch.old_log_probs(i) = lp(i, f.batch.actions[i]);
  const PpoLoss loss = PpoLossAndGradient(f.model, f.batch, f.config, nullptr, nullptr);
  EXPECT_EQ(loss.clip_fraction, 0.0);
  EXPECT_NEAR(loss.approx_kl, 0.0, 1e-15);
  EXPECT_NEAR(loss.policy, -f.batch.advantages.mean(), 1e-12);  // Every ratio is 1.
}

TEST(BcLossTest, GradientMatchesFiniteDifferences) {
  PpoFixture f = MakePpoFixture(23);
  Demonstrations demo;
  demo.obs = f.batch.obs;
  demo.mask = f.batch.mask;
  demo.actions = f.batch.actions;
  demo.value_targets = f.batch.returns;
  BcConfig config;
  config.value_coef = 0.8;
  config.entropy_coef = 0.1;
  Eigen::VectorXd actor_grad = Eigen::VectorXd::Zero(f.model.actor().num_params());
  Eigen::VectorXd critic_grad = Eigen::VectorXd::Zero(f.model.critic().num_params());
  const BcLoss loss = BcLossAndGradient(f.model, demo, config, &actor_grad, &critic_grad);
  EXPECT_GT(loss.cross_entropy, 0.0);
  EXPECT_GT(loss.value, 0.0);
  const auto bc_loss = [&](const ActorCritic& m) { return BcLossAndGradient(m, demo, config, nullptr, nullptr).total; };
  const Eigen::VectorXd numeric_actor = NumericGradientIn(f.model, Net::kActor, bc_loss);
  EXPECT_LT(RelativeError(actor_grad, numeric_actor), 1e-6);
  const Eigen::VectorXd numeric_critic = NumericGradientIn(f.model, Net::kCritic, bc_loss);
  EXPECT_LT(RelativeError(critic_grad, numeric_critic), 1e-6);

  // An expert action the mask forbids is a data error.
  demo.mask(3, demo.actions[3]) = 0;
  demo.mask(3, (demo.actions[3] + 1) % 5) = 1;
  EXPECT_THROW(BcLossAndGradient(f.model, demo, config, nullptr, nullptr), std::invalid_argument);
}

// A full buffer of random transitions for update tests.
RolloutBuffer RandomBuffer(const ActorCritic& model, int steps, int envs, Rng& rng) {
  RolloutBuffer buffer(steps, envs, model.observation_size(), model.num_actions());
  for (int t = 0; t < steps; ++t) {
    const Eigen::MatrixXd obs = RandomMatrix(envs, model.observation_size(), rng);
    const MaskMatrix mask = RandomMask(envs, model.num_actions(), 0.7, rng);
    const ActResult act = model.Sample(obs, mask, rng);
    std::vector<uint8_t> dones(envs), truncated(envs, 0);
    for (int e = 0; e < envs; ++e) dones[e] = rng.Uniform() < 0.1;
    buffer.Add(obs, mask, act.actions, act.log_probs, act.values, RandomMatrix(envs, 1, rng).col(0), dones,
               truncated, Eigen::VectorXd::Zero(envs));
  }
  buffer.ComputeAdvantages(Eigen::VectorXd::Zero(envs), 0.99, 0.95);
  return buffer;
}

TEST(PpoUpdateTest, ResultsDoNotDependOnTheThreadCount) {
  Rng rng(24);
  const ActorCritic start(6, 5, {16, 16}, rng);
  const RolloutBuffer buffer = RandomBuffer(start, 64, 8, rng);  // 512 transitions.
  PpoConfig config;
  config.minibatch_size = 300;  // Shards of 128, 128 and 44, and a last minibatch of 212.
  config.epochs = 3;
  std::vector<Eigen::VectorXd> results;
  for (int threads : {1, 2, 3, 0}) {  // 0: one per core.
    config.threads = threads;
    ActorCritic model = start;
    PpoLearner learner(&model, config);
    Rng update_rng(25);
    const PpoStats stats = learner.Update(buffer, update_rng);
    EXPECT_EQ(stats.minibatches, 6);
    EXPECT_EQ(stats.epochs, 3);
    Eigen::VectorXd all(model.actor().num_params() + model.critic().num_params());
    all << model.actor().params(), model.critic().params();
    results.push_back(all);
  }
  EXPECT_NE(
      results[0],
      (Eigen::VectorXd(results[0].size()) << start.actor().params(), start.critic().params()).finished());
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
  EXPECT_EQ(results[0], results[3]);
}

TEST(PpoUpdateTest, StopsEarlyOnLargeDivergence) {
  Rng rng(26);
  ActorCritic model(6, 5, {16, 16}, rng);
  const RolloutBuffer buffer = RandomBuffer(model, 32, 8, rng);
  PpoConfig config;
  config.minibatch_size = 32;
  config.epochs = 10;
  config.learning_rate = 0.05;
  config.target_kl = 0.01;
  PpoLearner learner(&model, config);
  const PpoStats stats = learner.Update(buffer, rng);
  EXPECT_TRUE(stats.stopped_early);
  EXPECT_LT(stats.minibatches, 10 * 8);
  EXPECT_GT(stats.minibatches, 0);  // The first minibatch is on-policy: its KL is zero.
}

TEST(PpoUpdateTest, RejectsAnUnfinishedBuffer) {
  Rng rng(27);
  ActorCritic model(3, 2, {4}, rng);
  RolloutBuffer buffer(4, 2, 3, 2);
  PpoLearner learner(&model, PpoConfig{});
  EXPECT_THROW(learner.Update(buffer, rng), std::logic_error);
}

}  // namespace
}  // namespace dr_kernel::rl
