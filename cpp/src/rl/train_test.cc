#include "dr_kernel/rl/train.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "dr_kernel/rl/grid_env.h"

namespace dr_kernel::rl {
namespace {

// The learning tests' task: a 3-D grid of 6 cells a side, 7 actions, 30 steps at most.
GridWalkOptions LearningGrid() { return GridWalkOptions{3, 6, 30, 0}; }

PpoConfig SmallConfig() {
  PpoConfig config;
  config.hidden = {32, 32};
  config.num_envs = 16;
  config.num_steps = 64;
  config.minibatch_size = 256;
  config.learning_rate = 1e-3;
  return config;
}

// The mean best return over the episodes Evaluate(env, model, episodes, seed) plays: it seeds
// episode i with the i-th draw of Rng(seed).
double MeanOptimalReturn(const GridWalkOptions& options, int episodes, uint64_t seed) {
  GridWalkEnv env(options);
  Rng rng(seed);
  double total = 0;
  for (int i = 0; i < episodes; ++i) {
    env.Reset(rng.Next());
    total += env.OptimalReturn();
  }
  return total / episodes;
}

Eigen::VectorXd AllParams(const ActorCritic& model) {
  Eigen::VectorXd all(model.actor().num_params() + model.critic().num_params());
  all << model.actor().params(), model.critic().params();
  return all;
}

TEST(TrainTest, PpoLearnsTheGridWalk) {
  const GridWalkOptions options = LearningGrid();
  GridWalkEnv env(options);
  const int episodes = 1000;
  const double optimal = MeanOptimalReturn(options, episodes, 99);
  const double penalty = env.step_penalty();

  // Untrained, the greedy policy is far from the optimum (so reaching it below means something).
  Rng init_rng(1);
  const ActorCritic untrained(env.observation_size(), env.num_actions(), {32, 32}, init_rng);
  GridWalkEnv eval_env(options);
  EXPECT_GT(optimal - Evaluate(eval_env, untrained, episodes, 99).mean_return, 5 * penalty);

  // About 30k steps suffice; 100k leave room for unlucky seeds.
  const TrainResult result = Train(env, SmallConfig(), 100000, 1);
  EXPECT_GE(result.steps, 100000);
  const EvalResult eval = Evaluate(eval_env, result.model, episodes, 99);
  // On average within a quarter of a wasted step of the best possible return.
  EXPECT_GT(eval.mean_return, optimal - 0.25 * penalty)
      << "greedy " << eval.mean_return << ", optimal " << optimal;
  // The training returns rose along the way.
  ASSERT_GE(result.log.size(), 2u);
  EXPECT_GT(result.log.back().mean_return, result.log.front().mean_return + 0.2);
}

// Episodes of a constant reward of 1, cut after 5 steps in a state that looks like every other:
// with the cut-off bootstrapped from the critic the value is 1 / (1 - gamma) = 10; a trainer that
// took the cut as terminal would learn about 3.7.
class EndlessEnv : public EpisodeEnv {
 public:
  int observation_size() const override { return 1; }
  int num_actions() const override { return 2; }
  std::vector<double> Reset(uint64_t) override {
    steps_ = 0;
    return {1.0};
  }
  std::vector<uint8_t> Mask() const override { return {1, 0}; }
  EpisodeStep Step(int action) override {
    if (action != 0) throw std::logic_error("a masked action was taken");
    ++steps_;
    EpisodeStep step;
    step.obs = {1.0};
    step.reward = 1.0;
    step.done = step.truncated = steps_ >= 5;
    return step;
  }
  std::unique_ptr<EpisodeEnv> Clone() const override { return std::make_unique<EndlessEnv>(); }

 private:
  int steps_ = 0;
};

TEST(TrainTest, TruncatedEpisodesAreBootstrapped) {
  EndlessEnv env;
  PpoConfig config;
  config.hidden = {8};
  config.gamma = 0.9;
  config.num_envs = 4;
  config.num_steps = 32;
  config.minibatch_size = 64;
  config.learning_rate = 0.01;
  const TrainResult result = Train(env, config, 10000, 3);
  EXPECT_NEAR(result.model.Values(Eigen::MatrixXd::Ones(1, 1))(0), 10.0, 0.01);
}

TEST(TrainTest, SameSeedSameParameters) {
  GridWalkEnv env(LearningGrid());
  PpoConfig config = SmallConfig();
  const TrainResult a = Train(env, config, 4096, 5);
  const TrainResult b = Train(env, config, 4096, 5);
  EXPECT_EQ(AllParams(a.model), AllParams(b.model));
  EXPECT_EQ(a.log.back().mean_return, b.log.back().mean_return);
  // Threads share the work (the gradients' shards and the 16 environments' steps: 3 split them
  // unevenly, 0 is one per core), never change the result.
  for (int threads : {2, 3, 0}) {
    config.threads = threads;
    EXPECT_EQ(AllParams(Train(env, config, 4096, 5).model), AllParams(a.model)) << threads << " threads";
  }
  EXPECT_NE(AllParams(Train(env, SmallConfig(), 4096, 6).model), AllParams(a.model));
}

// Expert transitions of the grid walk: every state along shortest-path episodes, with the
// discounted return that followed as the value target.
Demonstrations ExpertDemonstrations(const GridWalkOptions& options, int episodes, uint64_t seed) {
  GridWalkEnv env(options);
  Rng rng(seed);
  std::vector<std::vector<double>> obs;
  std::vector<std::vector<uint8_t>> masks;
  std::vector<int> actions;
  std::vector<double> targets;
  for (int i = 0; i < episodes; ++i) {
    std::vector<double> o = env.Reset(rng.Next());
    std::vector<double> rewards;
    for (bool done = false; !done;) {
      obs.push_back(o);
      masks.push_back(env.Mask());
      actions.push_back(env.ExpertAction());
      const EpisodeStep step = env.Step(actions.back());
      rewards.push_back(step.reward);
      o = step.obs;
      done = step.done;
    }
    std::vector<double> returns(rewards.size());
    double g = 0;
    for (size_t t = rewards.size(); t-- > 0;) returns[t] = g = rewards[t] + 0.99 * g;
    targets.insert(targets.end(), returns.begin(), returns.end());
  }
  Demonstrations demo;
  const Eigen::Index n = static_cast<Eigen::Index>(obs.size());
  demo.obs.resize(n, env.observation_size());
  demo.mask.resize(n, env.num_actions());
  demo.value_targets.resize(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (int j = 0; j < env.observation_size(); ++j) demo.obs(i, j) = obs[i][j];
    for (int j = 0; j < env.num_actions(); ++j) demo.mask(i, j) = masks[i][j];
    demo.value_targets(i) = targets[i];
  }
  demo.actions = actions;
  return demo;
}

TEST(BehaviourCloningTest, ImitatesAScriptedExpert) {
  const GridWalkOptions options = LearningGrid();
  const Demonstrations train = ExpertDemonstrations(options, 400, 7);
  const Demonstrations held_out = ExpertDemonstrations(options, 200, 8);
  GridWalkEnv env(options);
  Rng rng(9);
  ActorCritic model(env.observation_size(), env.num_actions(), {32, 32}, rng);
  BcConfig config;
  const double before = BcLossAndGradient(model, held_out, config, nullptr, nullptr).accuracy;
  const BcStats stats = BehaviourCloning(&model, train, config, rng);
  EXPECT_EQ(stats.epochs, config.epochs);
  const BcLoss after = BcLossAndGradient(model, held_out, config, nullptr, nullptr);
  EXPECT_LT(before, 0.5);
  EXPECT_GT(stats.final.accuracy, 0.95);
  EXPECT_GT(after.accuracy, 0.95) << "held-out accuracy " << after.accuracy;
  EXPECT_LT(after.value, 0.01);  // The critic learned the expert's returns as well.

  // The cloned policy walks nearly as well as the expert, and PPO can start from it.
  const double optimal = MeanOptimalReturn(options, 500, 99);
  EXPECT_GT(Evaluate(env, model, 500, 99).mean_return, optimal - env.step_penalty());
  const TrainResult tuned = Train(env, SmallConfig(), 2048, 10, &model);
  EXPECT_EQ(tuned.model.observation_size(), env.observation_size());
}

// An environment that breaks its own contract: observations of the wrong length.
class BrokenEnv : public EndlessEnv {
 public:
  int observation_size() const override { return 3; }
  std::unique_ptr<EpisodeEnv> Clone() const override { return std::make_unique<BrokenEnv>(); }
};

// A grid walk whose every instance fails on its fifth step.
class FailingEnv : public GridWalkEnv {
 public:
  FailingEnv() : GridWalkEnv(LearningGrid()) {}
  EpisodeStep Step(int action) override {
    if (++steps_ == 5) throw std::runtime_error("the simulator failed");
    return GridWalkEnv::Step(action);
  }
  std::unique_ptr<EpisodeEnv> Clone() const override { return std::make_unique<FailingEnv>(); }

 private:
  int steps_ = 0;
};

TEST(TrainTest, AnEnvironmentsFailureReachesTheCallerFromAnyThread) {
  for (int threads : {1, 3}) {
    FailingEnv env;
    PpoConfig config = SmallConfig();
    config.threads = threads;
    EXPECT_THROW(Train(env, config, 4096, 1), std::runtime_error) << threads << " threads";
  }
}

TEST(TrainTest, RejectsBadInputs) {
  BrokenEnv broken;
  try {
    Train(broken, SmallConfig(), 100, 1);
    FAIL() << "a wrong observation size was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("observation_size() is 3"), std::string::npos) << e.what();
  }
  GridWalkEnv env(LearningGrid());
  Rng rng(1);
  const ActorCritic wrong(5, 7, {4}, rng);
  EXPECT_THROW(Train(env, SmallConfig(), 100, 1, &wrong), std::invalid_argument);
  // Zero steps: no update, the initial model comes back as it was.
  const ActorCritic start(env.observation_size(), env.num_actions(), {4}, rng);
  const TrainResult none = Train(env, SmallConfig(), 0, 1, &start);
  EXPECT_TRUE(none.log.empty());
  EXPECT_EQ(AllParams(none.model), AllParams(start));
  PpoConfig config = SmallConfig();
  config.num_envs = 0;
  EXPECT_THROW(Train(env, config, 100, 1), std::invalid_argument);
}

}  // namespace
}  // namespace dr_kernel::rl
