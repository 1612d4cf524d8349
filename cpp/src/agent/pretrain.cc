#include "dr_kernel/agent/pretrain.h"

#include <chrono>

#include "dr_kernel/interrupt.h"

namespace dr_kernel::agent {

rl::PpoConfig PretrainOptions::DefaultPpo() {
  rl::PpoConfig c;
  c.hidden = {64, 64};
  c.num_envs = 16;
  c.num_steps = 128;
  c.gamma = 0.98;
  c.gae_lambda = 0.95;
  c.epochs = 3;
  c.minibatch_size = 512;
  c.entropy_coef = 0.005;
  c.learning_rate = 1e-4;  // Fine-tuning a cloned policy: small steps keep what cloning taught.
  c.target_kl = 0.03;
  c.threads = 0;  // One per core: the same policy, sooner (rl::PpoConfig::threads).
  return c;
}

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

rl::Demonstrations Record(std::shared_ptr<const std::vector<Task>> tasks, const PretrainOptions& options, Rng& rng) {
  TuningEpisodeEnv env(tasks, options.episodes);
  std::vector<std::vector<double>> obs;
  std::vector<std::vector<uint8_t>> masks;
  std::vector<int> actions;
  for (int e = 0; e < options.bc_episodes; ++e) {
    PollInterrupt();
    auto o = env.Reset(rng.Next());
    for (;;) {
      const auto mask = env.Mask();
      const int expert = env.ExpertAction();
      obs.push_back(o);
      masks.push_back(mask);
      actions.push_back(expert);
      int action = expert;
      if (rng.Uniform() < options.bc_noise) {
        std::vector<int> allowed;
        for (int a = 0; a < kNumActions; ++a)
          if (mask[a]) allowed.push_back(a);
        action = allowed[rng.Below(allowed.size())];
      }
      const auto step = env.Step(action);
      if (step.done) break;
      o = step.obs;
    }
  }
  rl::Demonstrations d;
  d.obs.resize(static_cast<Eigen::Index>(obs.size()), kObservationSize);
  d.mask.resize(static_cast<Eigen::Index>(obs.size()), kNumActions);
  for (size_t i = 0; i < obs.size(); ++i) {
    for (int j = 0; j < kObservationSize; ++j) d.obs(i, j) = obs[i][j];
    for (int j = 0; j < kNumActions; ++j) d.mask(i, j) = masks[i][j];
  }
  d.actions = std::move(actions);
  return d;
}

}  // namespace

rl::ActorCritic Pretrain(std::shared_ptr<const std::vector<Task>> tasks, const PretrainOptions& options,
                         PretrainReport* report, const std::function<void(const rl::TrainLog&)>& on_update) {
  Rng rng(options.seed);
  PretrainReport local;
  PretrainReport& r = report ? *report : local;
  rl::ActorCritic model(kObservationSize, kNumActions, options.ppo.hidden, rng);
  if (options.bc_episodes > 0) {
    const auto start = std::chrono::steady_clock::now();
    const auto demos = Record(tasks, options, rng);
    r.demonstrations = static_cast<int64_t>(demos.actions.size());
    r.bc = rl::BehaviourCloning(&model, demos, options.bc, rng);
    r.bc_seconds = Seconds(start);
  }
  if (options.ppo_steps > 0) {
    const auto start = std::chrono::steady_clock::now();
    TuningEpisodeEnv env(tasks, options.episodes);
    auto trained = rl::Train(env, options.ppo, options.ppo_steps, rng.Next(), &model,
                             [&](const rl::TrainLog& log) {
                               r.ppo.push_back(log);
                               if (on_update) on_update(log);
                             });
    model = std::move(trained.model);
    r.ppo_seconds = Seconds(start);
  }
  return model;
}

std::vector<int64_t> EvalsToWithin(const rl::ActorCritic& policy, const Task& task, int episodes, int budget,
                                   double within, uint64_t seed) {
  auto one = std::make_shared<std::vector<Task>>(std::vector<Task>{task});
  EpisodeOptions options;
  options.min_budget = options.max_budget = budget;
  TuningEpisodeEnv env(one, options);
  Eigen::MatrixXd obs(1, kObservationSize);
  rl::MaskMatrix mask(1, kNumActions);
  std::vector<int64_t> out;
  for (int e = 0; e < episodes; ++e) {
    auto o = env.Reset(seed + e);
    for (;;) {
      const auto m = env.Mask();
      for (int j = 0; j < kObservationSize; ++j) obs(0, j) = o[j];
      for (int j = 0; j < kNumActions; ++j) mask(0, j) = m[j];
      const auto step = env.Step(policy.Greedy(obs, mask)[0]);
      if (step.done) break;
      o = step.obs;
    }
    const int64_t reached = env.evals_to_within(within);
    out.push_back(reached > 0 ? reached : budget + 1);
  }
  return out;
}

}  // namespace dr_kernel::agent
