// Search strategies: one file each under cpp/src/strategies, one entry point, one options table.
#ifndef DR_KERNEL_STRATEGY_H_
#define DR_KERNEL_STRATEGY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "dr_kernel/evaluator.h"
#include "dr_kernel/rng.h"

namespace dr_kernel {

// One option of a strategy: its meaning and default. Help text is generated from these.
struct OptionSpec {
  std::string name;
  std::string description;
  double default_value;
};

// Option values with the strategy's defaults filled in.
class Options {
 public:
  Options(const std::vector<OptionSpec>& specs, const std::map<std::string, double>& overrides,
          const std::string& strategy);
  double Get(const std::string& name) const;
  int64_t Int(const std::string& name) const { return static_cast<int64_t>(Get(name)); }

 private:
  std::map<std::string, double> values_;
};

// A user error in choosing a strategy or its options.
class StrategyError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The entry point: search through the evaluator until done or until it raises StopTuning.
using StrategyFn = std::function<void(Evaluator& evaluator, const Options& options, Rng& rng)>;

struct StrategyInfo {
  std::string name;
  std::string description;
  std::vector<OptionSpec> options;
  StrategyFn run;
};

// Every strategy, in the order help lists them.
const std::vector<StrategyInfo>& Strategies();
// The strategy called `name`; throws StrategyError listing the available ones.
const StrategyInfo& FindStrategy(const std::string& name);
// The strategy's description and options table as text.
std::string HelpText(const StrategyInfo& info);

// Runs a strategy to the end of its search or of the budget; a strategy that stops early leaves the
// rest of the budget unused.
void RunStrategy(const std::string& name, Evaluator& evaluator, uint64_t seed,
                 const std::map<std::string, double>& options = {});

// Entry points, one per file in cpp/src/strategies.
StrategyInfo ExhaustiveStrategy();
StrategyInfo RandomStrategy();
StrategyInfo AnnealingStrategy();
StrategyInfo GeneticStrategy();
StrategyInfo PpoStrategy();

}  // namespace dr_kernel

#endif  // DR_KERNEL_STRATEGY_H_
