// Environments: where measurements come from. Replaying a recorded table, simulating with the cost
// model and measuring on a real GPU differ only in the environment.
#ifndef DR_KERNEL_ENV_H_
#define DR_KERNEL_ENV_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "dr_kernel/problem.h"
#include "dr_kernel/space.h"
#include "dr_kernel/table.h"

namespace dr_kernel {

// What one evaluation returned and what it cost in tuning time (compiling, loading, timing).
struct Evaluation {
  Measurement measurement;
  double cost_s = 0;
};

// The interface every source of measurements implements (cf. CompilerGym's CompilationSession:
// a space, a reset, a step, an observation).
class Env {
 public:
  virtual ~Env() = default;

  virtual const Problem& problem() const = 0;
  virtual const Space& space() const = 0;

  // Starts a new tuning session; `seed` drives any simulated noise.
  virtual void Reset(uint64_t seed) = 0;
  // Evaluates configs of space(), possibly in parallel; one result per config, in order.
  virtual std::vector<Evaluation> Step(const std::vector<Config>& configs) = 0;
  // What is known of a config without timing it (static features: registers, spills, shared
  // memory), or nullopt. Cheap; never counts as an evaluation.
  virtual std::optional<Measurement> Observe(const Config& config) const {
    (void)config;
    return std::nullopt;
  }
};

// How ReplayEnv charges simulated tuning time for one evaluation.
struct ReplayCost {
  double timeout_s = 60.0;   // Charged for a compile_timeout row (the tuner's per-config deadline).
  int launches = 30;         // Warm-up plus timed launches of an ok config.
  double flush_ms = 0.07;    // One L2 flush before each timed launch (256 MB at ~4 TB/s).
  double overhead_s = 0.01;  // Fixed cost of setting up one measurement.
};

// Tuning seconds one evaluation costs: its compile seconds, plus for a config that ran its load and
// the timed launches (an ok one) with their L2 flushes; a compile timeout costs the deadline.
// Unknown (NaN) compile or load seconds count as zero.
double TuningCost(const Measurement& m, const ReplayCost& cost);

// Replays a recorded table: every config asked for is one evaluation whatever its status, its cost
// is the recorded compile_s plus a measuring cost, and a config absent from the table is invalid.
// The space is the product of the values the table holds for each parameter, in ascending order,
// less the configs that break the constraints of its space row (not configs of the problem: the
// Evaluator charges nothing for them); a row that breaks one throws TableError.
class ReplayEnv : public Env {
 public:
  explicit ReplayEnv(const ProblemTable& table, ReplayCost cost = {});

  // The table's problem with its probe's counters when the table has them (ProfiledProblem): what a
  // session that profiled the probe first knows; only a cost model that uses counters reads them.
  const Problem& problem() const override { return problem_; }
  const Space& space() const override { return space_; }
  void Reset(uint64_t seed) override { (void)seed; }
  std::vector<Evaluation> Step(const std::vector<Config>& configs) override;
  std::optional<Measurement> Observe(const Config& config) const override;

  // The recorded measurement of a config, or nullptr when the table lacks it.
  const Measurement* Lookup(const Config& config) const;
  // Simulated tuning seconds of one recorded measurement.
  double Cost(const Measurement& m) const;
  const ProblemTable& table() const { return table_; }
  double oracle_ms() const { return oracle_ms_; }

 private:
  const ProblemTable& table_;
  Problem problem_;
  ReplayCost cost_;
  Space space_;
  std::unordered_map<uint64_t, const Measurement*> rows_;  // Space::Index -> recorded row.
  // Space::Index -> Measurement::binary that compiling it tells: one id per binary the recording
  // measured, shared by the rows it says compiled to it ("same_binary_as").
  std::unordered_map<uint64_t, uint64_t> binaries_;
  double oracle_ms_;
};

// An environment whose measurements come from a callback (the Python measuring pool, a test's fake
// benchmarker). The callback receives whole batches so that it can measure them in parallel.
class CallbackEnv : public Env {
 public:
  using Measure = std::function<std::vector<Evaluation>(const std::vector<Config>&)>;
  using Static = std::function<std::optional<Measurement>(const Config&)>;

  CallbackEnv(Problem problem, Space space, Measure measure, Static observe = nullptr)
      : problem_(std::move(problem)), space_(std::move(space)), measure_(std::move(measure)),
        observe_(std::move(observe)) {}

  const Problem& problem() const override { return problem_; }
  const Space& space() const override { return space_; }
  void Reset(uint64_t seed) override { (void)seed; }
  std::vector<Evaluation> Step(const std::vector<Config>& configs) override;
  std::optional<Measurement> Observe(const Config& config) const override {
    return observe_ ? observe_(config) : std::nullopt;
  }

 private:
  Problem problem_;
  Space space_;
  Measure measure_;
  Static observe_;
};

}  // namespace dr_kernel

#endif  // DR_KERNEL_ENV_H_
