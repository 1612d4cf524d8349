#include "dr_kernel/evaluator.h"

#include <algorithm>

#include "dr_kernel/interrupt.h"

namespace dr_kernel {

Evaluator::Evaluator(Env& env, Budget budget) : env_(env), budget_(budget) {}

int64_t Evaluator::evals_left() const { return std::max<int64_t>(0, budget_.max_evals - evals()); }

bool Evaluator::exhausted() const { return evals() >= budget_.max_evals || seconds_ >= budget_.max_seconds; }

const Measurement* Evaluator::Lookup(const Config& config) const {
  const auto it = seen_.find(space().Index(config));
  return it == seen_.end() ? nullptr : &history_[it->second].measurement;
}

std::vector<Measurement> Evaluator::Evaluate(const std::vector<Config>& configs, const std::vector<std::string>* why) {
  PollInterrupt();  // A replay or a tuning session stops here when the user asks.
  // Which configs need measuring: valid, new, and each once even if the batch repeats it.
  std::vector<Config> fresh;
  std::vector<uint64_t> fresh_index;
  std::vector<std::string> fresh_why;
  for (size_t k = 0; k < configs.size(); ++k) {
    const Config& c = configs[k];
    if (!space().IsValid(c)) continue;
    const uint64_t index = space().Index(c);
    if (seen_.count(index) || std::find(fresh_index.begin(), fresh_index.end(), index) != fresh_index.end())
      continue;
    fresh.push_back(c);
    fresh_index.push_back(index);
    fresh_why.push_back(why && k < why->size() ? (*why)[k] : std::string());
  }
  bool truncated = false;
  if (!fresh.empty()) {
    if (exhausted()) throw StopTuning();
    if (static_cast<int64_t>(fresh.size()) > evals_left()) {
      fresh.resize(evals_left());
      truncated = true;
    }
    // Every result of a batch is kept: the seconds budget is checked before a batch starts, so a
    // batch measured in parallel may overrun it, but nothing measured is thrown away.
    const auto results = env_.Step(fresh);
    for (size_t i = 0; i < fresh.size(); ++i) {
      Trial trial{fresh[i], results[i].measurement, results[i].cost_s, seconds_ + results[i].cost_s, batches_,
                  std::move(fresh_why[i])};
      seconds_ = trial.elapsed_s;
      seen_.emplace(space().Index(trial.config), history_.size());
      if (trial.measurement.ok() && trial.measurement.ms < best_ms()) best_ = static_cast<int64_t>(history_.size());
      history_.push_back(std::move(trial));
      if (on_trial_) on_trial_(history_.back());
    }
    ++batches_;
  }
  if (truncated) throw StopTuning();

  std::vector<Measurement> out;
  out.reserve(configs.size());
  for (const auto& c : configs) {
    if (const Measurement* m = space().IsValid(c) ? Lookup(c) : nullptr) {
      out.push_back(*m);
    } else {
      Measurement invalid;
      invalid.status = Status::kInvalid;
      invalid.error = space().WhyInvalid(c);
      out.push_back(std::move(invalid));
    }
  }
  return out;
}

Measurement Evaluator::Evaluate(const Config& config) { return Evaluate(std::vector<Config>{config}).front(); }

}  // namespace dr_kernel
