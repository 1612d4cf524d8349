#include <sstream>

#include "dr_kernel/strategy.h"

namespace dr_kernel {

Options::Options(const std::vector<OptionSpec>& specs, const std::map<std::string, double>& overrides,
                 const std::string& strategy) {
  for (const auto& spec : specs) values_[spec.name] = spec.default_value;
  for (const auto& [name, value] : overrides) {
    if (!values_.count(name)) {
      std::string known;
      for (const auto& spec : specs) known += (known.empty() ? "" : ", ") + spec.name;
      throw StrategyError("strategy '" + strategy + "' has no option '" + name + "'; its options are: " +
                          (known.empty() ? "none" : known));
    }
    values_[name] = value;
  }
}

double Options::Get(const std::string& name) const { return values_.at(name); }

const std::vector<StrategyInfo>& Strategies() {
  static const std::vector<StrategyInfo> all = {ExhaustiveStrategy(), RandomStrategy(), AnnealingStrategy(),
                                                GeneticStrategy(),
                                                PpoStrategy()};
  return all;
}

const StrategyInfo& FindStrategy(const std::string& name) {
  std::string known;
  for (const auto& s : Strategies()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  throw StrategyError("unknown strategy '" + name + "'; the available strategies are: " + known);
}

std::string HelpText(const StrategyInfo& info) {
  std::ostringstream out;
  out << info.name << ": " << info.description << "\n";
  for (const auto& o : info.options) out << "  " << o.name << " (default " << o.default_value << "): " << o.description << "\n";
  return out.str();
}

void RunStrategy(const std::string& name, Evaluator& evaluator, uint64_t seed,
                 const std::map<std::string, double>& options) {
  const StrategyInfo& info = FindStrategy(name);
  const Options resolved(info.options, options, name);
  Rng rng(seed);
  try {
    info.run(evaluator, resolved, rng);
  } catch (const StopTuning&) {
    // The budget is spent: the one normal way for a strategy to end early.
  }
}

}  // namespace dr_kernel
