// A toy episodic environment: walk on a grid to a goal and stop there. Small enough to learn in
// seconds and cheap enough to time the trainer with; used by tests, benchmarks and demos.
#ifndef DR_KERNEL_RL_GRID_ENV_H_
#define DR_KERNEL_RL_GRID_ENV_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "dr_kernel/rl/episode_env.h"

namespace dr_kernel::rl {

// The shape of a grid walk.
struct GridWalkOptions {
  int dims = 2;        // Dimensions of the grid.
  int size = 5;        // Cells along each dimension.
  int max_steps = 20;  // Steps after which an episode is truncated.
  // Cost of every action; when not positive, 0.5 / (dims * (size - 1) + 1), so that walking to the
  // goal and stopping always beats stopping at once.
  double step_penalty = 0;
};

// Start and goal are drawn uniformly. Actions 2d and 2d + 1 move one cell down and up along
// dimension d (masked at the grid's edge); the last action stops the episode, earning
// 1 - 2 * distance / max_distance (1 at the goal, -1 at the farthest cell), distance being the
// Manhattan distance to the goal. Every action costs the step penalty, so the best return is
// 1 - penalty * (start distance + 1). Grading the stop by distance, rather than paying only at the
// goal, keeps "stop at once" from being a trap that exploration must escape first, while leaving
// the optimal policy the same. Per dimension the observation holds the position
// and the goal scaled to [-1, 1], their difference, and flags for the lower edge, the upper edge and
// the goal's coordinate; a last entry holds the share of the step limit left.
class GridWalkEnv : public EpisodeEnv {
 public:
  explicit GridWalkEnv(GridWalkOptions options = {});

  int observation_size() const override { return 6 * options_.dims + 1; }
  int num_actions() const override { return 2 * options_.dims + 1; }
  std::vector<double> Reset(uint64_t seed) override;
  std::vector<uint8_t> Mask() const override;
  EpisodeStep Step(int action) override;
  std::unique_ptr<EpisodeEnv> Clone() const override { return std::make_unique<GridWalkEnv>(options_); }

  // The best return the current episode allows.
  double OptimalReturn() const;
  // A shortest-path expert's action: move along the first dimension off the goal, else stop.
  int ExpertAction() const;
  const std::vector<int>& position() const { return position_; }
  const std::vector<int>& goal() const { return goal_; }
  double step_penalty() const { return penalty_; }

 private:
  std::vector<double> Observe() const;

  GridWalkOptions options_;
  double penalty_;
  int max_distance_;
  std::vector<int> position_, goal_;
  int start_distance_ = 0;
  int steps_ = 0;
};

}  // namespace dr_kernel::rl

#endif  // DR_KERNEL_RL_GRID_ENV_H_
