// An environment that answers from the cost model instead of a GPU: any config of any problem of a
// known family, shapes never recorded included. It is where a PPO agent gets its millions of
// pre-training steps.
#ifndef DR_KERNEL_MODEL_SURROGATE_ENV_H_
#define DR_KERNEL_MODEL_SURROGATE_ENV_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "dr_kernel/env.h"
#include "dr_kernel/model/cost_model.h"
#include "dr_kernel/rng.h"

namespace dr_kernel {

// How a session's landscape is drawn from the model.
enum class SurrogateSampling {
  kMean,    // Every config takes the ensemble mean: one fixed landscape.
  kNormal,  // Each config draws its log time from N(mean, std) once per session.
  kMember,  // The session takes one ensemble member's predictions (a coherent sample of the
            // model's uncertainty), the member chosen by the seed.
};

// How a SurrogateEnv draws its answers and charges simulated time.
struct SurrogateOptions {
  SurrogateSampling sampling = SurrogateSampling::kNormal;
  // Multiplies the model's standard deviation in kNormal sampling. Leave-one-problem-out errors
  // on the H200 tables are 3-4x the ensemble's spread (benchmarks/cost_model.md), but they are
  // correlated across configs, whereas kNormal draws each config independently: a larger scale
  // gives a rougher landscape, not a more faithful one.
  double std_scale = 1.0;
  // Noise of one measurement around the session's landscape (log ms standard deviation), drawn
  // anew at every evaluation: the recorded tables show about 1-2 % between repeats.
  double noise_log_std = 0.015;
  // Failures: drawn per config and session from the predicted probabilities, or (false) a config
  // fails exactly when p_fail >= 0.5, with its most likely failure status.
  bool sample_failures = true;

  // Simulated tuning time, charged like ReplayEnv charges recorded rows.
  double compile_s = 0.5;    // Compiling one config (a recorded table's compile_s).
  double load_s = 0.01;      // Loading the compiled module.
  double timeout_s = 60.0;   // Charged for a compile_timeout.
  int launches = 30;         // Warm-up plus timed launches of an ok config.
  double flush_ms = 0.07;    // One L2 flush before each timed launch.
  double overhead_s = 0.01;  // Fixed cost of setting up one measurement.
};

// Answers Step() with the cost model's predictions for `problem`. Deterministic for a seed: the
// landscape of a session is a function of (seed, config) whatever order configs are asked in, and
// the measurement noise follows the order of evaluations. Not thread-safe (it caches predictions).
class SurrogateEnv : public Env {
 public:
  // Throws std::invalid_argument when the model is not fitted or uses static features (a simulated
  // config has no compiled kernel to analyse: fit the model with use_static_features = false).
  SurrogateEnv(std::shared_ptr<const CostModel> model, Problem problem, Space space,
               SurrogateOptions options = {});

  const Problem& problem() const override { return problem_; }
  const Space& space() const override { return space_; }
  // Starts a session: draws a new landscape from `seed`.
  void Reset(uint64_t seed) override;
  // One simulated measurement per config; a config the space does not allow is kInvalid.
  std::vector<Evaluation> Step(const std::vector<Config>& configs) override;
  // Static analysis is not simulated: always nullopt.
  std::optional<Measurement> Observe(const Config& config) const override;

  // The model's prediction for a config of the problem (cached).
  const CostPrediction& Prediction(const Config& config) const;
  // The session's noiseless answer for a valid config: its status and, when ok, its ms.
  Measurement Landscape(const Config& config) const;
  // Simulated tuning seconds of one measurement.
  double Cost(const Measurement& m) const;
  const SurrogateOptions& options() const { return options_; }

 private:
  struct Cached {
    CostPrediction prediction;
    double member_log_ms;  // The session member's prediction (kMember only).
  };
  const Cached& Lookup(const Config& config) const;

  std::shared_ptr<const CostModel> model_;
  Problem problem_;
  Space space_;
  SurrogateOptions options_;
  uint64_t seed_ = 0;
  size_t member_ = 0;
  Rng noise_;
  mutable std::unordered_map<uint64_t, Cached> cache_;  // Space::Index -> prediction.
};

}  // namespace dr_kernel

#endif  // DR_KERNEL_MODEL_SURROGATE_ENV_H_
