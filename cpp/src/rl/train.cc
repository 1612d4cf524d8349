#include "dr_kernel/rl/train.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dr_kernel/interrupt.h"

namespace dr_kernel::rl {

namespace {

void CopyObservation(const std::vector<double>& obs, int expected, Eigen::Index row, Eigen::MatrixXd* out) {
  if (static_cast<int>(obs.size()) != expected) {
    throw std::invalid_argument("The environment returned an observation of " + std::to_string(obs.size()) +
                                " values; its observation_size() is " + std::to_string(expected) + ".");
  }
  for (int j = 0; j < expected; ++j) (*out)(row, j) = obs[j];
}

void CopyMask(const std::vector<uint8_t>& mask, int expected, Eigen::Index row, MaskMatrix* out) {
  if (static_cast<int>(mask.size()) != expected) {
    throw std::invalid_argument("The environment returned a mask of " + std::to_string(mask.size()) +
                                " entries; its num_actions() is " + std::to_string(expected) + ".");
  }
  for (int j = 0; j < expected; ++j) (*out)(row, j) = mask[j] ? 1 : 0;
}

}  // namespace

TrainResult Train(EpisodeEnv& env, const PpoConfig& config, int64_t steps, uint64_t seed,
                  const ActorCritic* initial, const std::function<void(const TrainLog&)>& on_update) {
  const int obs_size = env.observation_size(), num_actions = env.num_actions();
  const int num_envs = config.num_envs, num_steps = config.num_steps;
  if (obs_size <= 0 || num_actions <= 0) {
    throw std::invalid_argument("An environment needs a positive observation size and number of actions.");
  }
  if (num_envs <= 0 || num_steps <= 0 || steps < 0) {
    throw std::invalid_argument("Training needs positive num_envs and num_steps and a step count >= 0.");
  }
  Rng rng(seed);
  TrainResult result;
  if (initial != nullptr) {
    if (initial->observation_size() != obs_size || initial->num_actions() != num_actions) {
      throw std::invalid_argument("The initial model has " + std::to_string(initial->observation_size()) +
                                  " inputs and " + std::to_string(initial->num_actions()) +
                                  " actions; the environment has " + std::to_string(obs_size) + " and " +
                                  std::to_string(num_actions) + ".");
    }
    result.model = *initial;
  } else {
    result.model = ActorCritic(obs_size, num_actions, config.hidden, rng);
  }
  ActorCritic& model = result.model;

  std::vector<std::unique_ptr<EpisodeEnv>> clones;
  std::vector<EpisodeEnv*> envs{&env};
  for (int e = 1; e < num_envs; ++e) {
    clones.push_back(env.Clone());
    envs.push_back(clones.back().get());
  }

  PpoLearner learner(&model, config);
  RolloutBuffer buffer(num_steps, num_envs, obs_size, num_actions);
  Eigen::MatrixXd obs(num_envs, obs_size), next_obs(num_envs, obs_size), final_obs(num_envs, obs_size);
  MaskMatrix mask(num_envs, num_actions);
  Eigen::VectorXd rewards(num_envs), bootstrap(num_envs);
  std::vector<uint8_t> dones(num_envs), truncated(num_envs);
  std::vector<double> episode_return(num_envs, 0.0);
  std::vector<int64_t> episode_length(num_envs, 0);
  for (int e = 0; e < num_envs; ++e) CopyObservation(envs[e]->Reset(rng.Next()), obs_size, e, &obs);

  // Each environment is its own state, so they step on `threads` threads at once; what depends on
  // their order (rewards, resets, which draw from `rng`) runs after, in environment order, as if they
  // had not. An exception in any is rethrown here, not left to end the process on its thread.
  // (Their masks stay on this thread: computing them on the others too made training slower.)
  const size_t env_threads = std::min<size_t>(
      envs.size(), config.threads > 0 ? static_cast<size_t>(config.threads)
                                      : std::max(1u, std::thread::hardware_concurrency()));
  const auto for_each_env = [&](const auto& fn) {
    std::vector<std::exception_ptr> errors(env_threads);
    const auto some = [&](size_t worker) {
      try {
        for (size_t e = worker; e < envs.size(); e += env_threads) fn(e);
      } catch (...) {
        errors[worker] = std::current_exception();
      }
    };
    std::vector<std::thread> others;
    for (size_t w = 1; w < env_threads; ++w) others.emplace_back(some, w);
    some(0);
    for (auto& thread : others) thread.join();
    for (const auto& error : errors)
      if (error) std::rethrow_exception(error);
  };
  std::vector<EpisodeStep> stepped(envs.size());
  const int64_t per_update = static_cast<int64_t>(num_envs) * num_steps;
  const int64_t updates = (steps + per_update - 1) / per_update;
  for (int64_t u = 0; u < updates; ++u) {
    if (config.anneal_learning_rate) {
      learner.set_learning_rate(config.learning_rate *
                                (1.0 - static_cast<double>(u) / static_cast<double>(updates)));
    }
    buffer.Clear();
    double finished_return = 0;
    int64_t finished = 0, finished_length = 0;
    for (int t = 0; t < num_steps; ++t) {
      for (int e = 0; e < num_envs; ++e) CopyMask(envs[e]->Mask(), num_actions, e, &mask);
      const ActResult act = model.Sample(obs, mask, rng);
      for_each_env([&](size_t e) { stepped[e] = envs[e]->Step(act.actions[e]); });
      bool any_truncated = false;
      for (int e = 0; e < num_envs; ++e) {
        const EpisodeStep& step = stepped[e];
        rewards(e) = step.reward;
        for (const auto& [ago, credit] : step.credit_back) {
          // Step t is not in the buffer yet: "1 step ago" is the last one added.
          const int target = buffer.steps() - ago;
          if (ago >= 1 && target >= 0) buffer.AddReward(target, e, credit);
          if (ago >= 1 && ago <= episode_length[e]) episode_return[e] += credit;
        }
        dones[e] = step.done;
        truncated[e] = step.done && step.truncated;
        episode_return[e] += step.reward;
        ++episode_length[e];
        if (step.done) {
          if (truncated[e]) {
            CopyObservation(step.obs, obs_size, e, &final_obs);
            any_truncated = true;
          }
          finished_return += episode_return[e];
          finished_length += episode_length[e];
          ++finished;
          episode_return[e] = 0;
          episode_length[e] = 0;
          CopyObservation(envs[e]->Reset(rng.Next()), obs_size, e, &next_obs);
        } else {
          CopyObservation(step.obs, obs_size, e, &next_obs);
        }
      }
      // One batched critic pass for the episodes cut short; rows of other environments are unused.
      if (any_truncated) {
        bootstrap = model.Values(final_obs);
      } else {
        bootstrap.setZero();
      }
      buffer.Add(obs, mask, act.actions, act.log_probs, act.values, rewards, dones, truncated, bootstrap);
      obs.swap(next_obs);
    }
    buffer.ComputeAdvantages(model.Values(obs), config.gamma, config.gae_lambda);

    PollInterrupt();
    TrainLog entry;
    entry.update = learner.Update(buffer, rng);
    result.steps += per_update;
    result.episodes += finished;
    entry.steps = result.steps;
    entry.episodes = result.episodes;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    entry.mean_return = finished > 0 ? finished_return / static_cast<double>(finished) : nan;
    entry.mean_length =
        finished > 0 ? static_cast<double>(finished_length) / static_cast<double>(finished) : nan;
    result.log.push_back(entry);
    if (on_update) on_update(entry);
  }
  return result;
}

EvalResult Evaluate(EpisodeEnv& env, const ActorCritic& model, int episodes, uint64_t seed, bool greedy,
                    int max_steps) {
  // Episode seeds come from their own stream, so greedy and sampled runs play the same episodes.
  Rng episode_rng(seed), action_rng(seed ^ 0x5bd1e9955bd1e995ULL);
  const int obs_size = env.observation_size(), num_actions = env.num_actions();
  Eigen::MatrixXd obs(1, obs_size);
  MaskMatrix mask(1, num_actions);
  EvalResult result;
  double total_length = 0;
  for (int i = 0; i < episodes; ++i) {
    CopyObservation(env.Reset(episode_rng.Next()), obs_size, 0, &obs);
    double episode_return = 0;
    int length = 0;
    while (length < max_steps) {
      CopyMask(env.Mask(), num_actions, 0, &mask);
      const int action = greedy ? model.Greedy(obs, mask)[0] : model.Sample(obs, mask, action_rng).actions[0];
      const EpisodeStep step = env.Step(action);
      episode_return += step.reward;
      for (const auto& credit : step.credit_back) episode_return += credit.second;
      ++length;
      if (step.done) break;
      CopyObservation(step.obs, obs_size, 0, &obs);
    }
    result.returns.push_back(episode_return);
    result.mean_return += episode_return / episodes;
    total_length += length;
  }
  if (episodes > 0) result.mean_length = total_length / episodes;
  return result;
}

}  // namespace dr_kernel::rl
