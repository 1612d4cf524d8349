#include "dr_kernel/rl/grid_env.h"

#include <cstdlib>
#include <stdexcept>

#include "dr_kernel/rng.h"

namespace dr_kernel::rl {

GridWalkEnv::GridWalkEnv(GridWalkOptions options) : options_(options) {
  if (options_.dims <= 0 || options_.size < 2 || options_.max_steps <= 0) {
    throw std::invalid_argument("A grid walk needs dims >= 1, size >= 2 and max_steps >= 1.");
  }
  max_distance_ = options_.dims * (options_.size - 1);
  penalty_ = options_.step_penalty > 0 ? options_.step_penalty : 0.5 / (max_distance_ + 1);
  position_.assign(options_.dims, 0);
  goal_.assign(options_.dims, 0);
}

std::vector<double> GridWalkEnv::Reset(uint64_t seed) {
  Rng rng(seed);
  start_distance_ = 0;
  for (int d = 0; d < options_.dims; ++d) {
    position_[d] = static_cast<int>(rng.Below(options_.size));
    goal_[d] = static_cast<int>(rng.Below(options_.size));
    start_distance_ += std::abs(goal_[d] - position_[d]);
  }
  steps_ = 0;
  return Observe();
}

std::vector<uint8_t> GridWalkEnv::Mask() const {
  std::vector<uint8_t> mask(num_actions(), 1);
  for (int d = 0; d < options_.dims; ++d) {
    mask[2 * d] = position_[d] > 0;
    mask[2 * d + 1] = position_[d] + 1 < options_.size;
  }
  return mask;
}

EpisodeStep GridWalkEnv::Step(int action) {
  if (action < 0 || action >= num_actions()) throw std::invalid_argument("Grid walk action out of range.");
  EpisodeStep step;
  step.reward = -penalty_;
  ++steps_;
  if (action == num_actions() - 1) {
    int distance = 0;
    for (int d = 0; d < options_.dims; ++d) distance += std::abs(goal_[d] - position_[d]);
    step.reward += 1.0 - 2.0 * distance / max_distance_;
    step.done = true;
  } else {
    const int d = action / 2, delta = action % 2 == 0 ? -1 : 1;
    const int next = position_[d] + delta;
    if (next < 0 || next >= options_.size)
      throw std::invalid_argument("Grid walk move off the grid (masked).");
    position_[d] = next;
    if (steps_ >= options_.max_steps) {
      step.done = true;
      step.truncated = true;
    }
  }
  step.obs = Observe();
  return step;
}

double GridWalkEnv::OptimalReturn() const { return 1.0 - penalty_ * (start_distance_ + 1); }

int GridWalkEnv::ExpertAction() const {
  for (int d = 0; d < options_.dims; ++d) {
    if (position_[d] < goal_[d]) return 2 * d + 1;
    if (position_[d] > goal_[d]) return 2 * d;
  }
  return num_actions() - 1;
}

std::vector<double> GridWalkEnv::Observe() const {
  std::vector<double> obs;
  obs.reserve(observation_size());
  const double scale = 2.0 / (options_.size - 1);
  for (int d = 0; d < options_.dims; ++d) {
    obs.push_back(position_[d] * scale - 1.0);
    obs.push_back(goal_[d] * scale - 1.0);
    obs.push_back((goal_[d] - position_[d]) * scale);
    obs.push_back(position_[d] == 0 ? 1.0 : 0.0);
    obs.push_back(position_[d] == options_.size - 1 ? 1.0 : 0.0);
    obs.push_back(position_[d] == goal_[d] ? 1.0 : 0.0);
  }
  obs.push_back(1.0 - static_cast<double>(steps_) / options_.max_steps);
  return obs;
}

}  // namespace dr_kernel::rl
