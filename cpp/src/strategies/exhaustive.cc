// Exhaustive search: every valid configuration in enumeration order.
#include "dr_kernel/strategy.h"

namespace dr_kernel {

namespace {

void Run(Evaluator& evaluator, const Options& options, Rng&) {
  const size_t batch = static_cast<size_t>(std::max<int64_t>(1, options.Int("batch")));
  std::vector<Config> pending;
  evaluator.space().ForEach([&](const Config& c) {
    pending.push_back(c);
    if (pending.size() == batch) {
      evaluator.Evaluate(pending);
      pending.clear();
    }
    return true;
  });
  if (!pending.empty()) evaluator.Evaluate(pending);
}

}  // namespace

StrategyInfo ExhaustiveStrategy() {
  return {"exhaustive", "every valid configuration, in enumeration order (what triton.autotune does with the whole space)",
          {{"batch", "configurations measured per round (for parallel measuring workers)", 16}},
          Run};
}

}  // namespace dr_kernel
