// Random search without replacement: uniformly random valid configurations, none measured twice.
#include "dr_kernel/strategy.h"

namespace dr_kernel {

namespace {

void Run(Evaluator& evaluator, const Options& options, Rng& rng) {
  const size_t batch = static_cast<size_t>(std::max<int64_t>(1, options.Int("batch")));
  UniqueSampler sampler(evaluator.space(), rng);
  for (;;) {
    std::vector<Config> round;
    while (round.size() < batch) {
      auto c = sampler.Next();
      if (!c) break;
      round.push_back(std::move(*c));
    }
    if (round.empty()) return;  // Every valid configuration has been measured.
    evaluator.Evaluate(round);
  }
}

}  // namespace

StrategyInfo RandomStrategy() {
  return {"random", "uniformly random valid configurations without replacement",
          {{"batch", "configurations measured per round (for parallel measuring workers)", 1}},
          Run};
}

}  // namespace dr_kernel
