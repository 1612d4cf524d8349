#include <algorithm>
#include <cmath>

#include "dr_kernel/env.h"

namespace dr_kernel {

namespace {

// Orders values for "one step up": numbers ascending, then strings in first-seen order.
bool ValueLess(const Value& a, const Value& b) {
  const bool a_str = std::holds_alternative<std::string>(a), b_str = std::holds_alternative<std::string>(b);
  if (a_str || b_str) return !a_str && b_str;
  return ToDouble(a) < ToDouble(b);
}

Space SpaceOfTable(const ProblemTable& table) {
  if (table.rows.empty())
    throw TableError(table.source + ": problem '" + table.problem.Label() +
                     "' has no measure rows; record at least one config");
  std::vector<Parameter> params;
  for (const auto& [name, value] : table.rows.front().config) params.push_back({name, {}});
  for (const auto& row : table.rows) {
    if (row.config.size() != params.size())
      throw TableError(table.source + ": problem '" + table.problem.Label() + "' has a row with config " +
                       ToJson(row.config) + " whose parameters differ from the first row's; record one space per problem");
    for (auto& p : params) {
      const Value* v = Find(row.config, p.name);
      if (!v)
        throw TableError(table.source + ": problem '" + table.problem.Label() + "' has a row with config " +
                         ToJson(row.config) + " that lacks '" + p.name + "'; record one space per problem");
      if (std::find(p.values.begin(), p.values.end(), *v) == p.values.end()) p.values.push_back(*v);
    }
  }
  for (auto& p : params) std::stable_sort(p.values.begin(), p.values.end(), ValueLess);
  const auto fail = [&](const std::string& what) {
    throw TableError(table.source + ": problem '" + table.problem.Label() + "': " + what +
                     "; fix or delete its 'space' row");
  };
  Space space;
  try {
    space = Space(std::move(params), table.constraints);
  } catch (const SpaceError& e) {
    fail(std::string("its space's constraints do not fit its configs (") + e.what() + ")");
  }
  for (const auto& row : table.rows) {
    const auto config = space.Find(row.config);
    if (config && !space.IsValid(*config))
      fail("its row with config " + ToJson(row.config) + " breaks a constraint of its space (" +
           space.WhyInvalid(*config) + ")");
  }
  return space;
}

}  // namespace

ReplayEnv::ReplayEnv(const ProblemTable& table, ReplayCost cost)
    : table_(table),
      problem_(ProfiledProblem(table)),
      cost_(cost),
      space_(SpaceOfTable(table)),
      oracle_ms_(table.oracle_ms()) {
  for (const auto& row : table_.rows) {
    const auto config = space_.Find(row.config);
    const uint64_t index = space_.Index(*config);
    rows_.emplace(index, &row.measurement);  // A repeated config keeps its first row.
    const auto leader = row.same_binary_as.empty() ? std::nullopt : space_.Find(row.same_binary_as);
    binaries_.emplace(index, (leader ? space_.Index(*leader) : index) + 1);
  }
}

const Measurement* ReplayEnv::Lookup(const Config& config) const {
  const auto it = rows_.find(space_.Index(config));
  return it == rows_.end() ? nullptr : it->second;
}

double TuningCost(const Measurement& m, const ReplayCost& cost) {
  auto known = [](double v) { return std::isnan(v) ? 0.0 : v; };
  if (m.status == Status::kInvalid) return 0;
  if (m.status == Status::kCompileTimeout) return cost.timeout_s;
  double seconds = known(m.compile_s);
  if (m.status == Status::kOk || m.status == Status::kWrong) {
    seconds += known(m.load_s) + cost.overhead_s;
    if (m.ok()) seconds += cost.launches * (m.ms + cost.flush_ms) / 1000.0;
  }
  return seconds;
}

double ReplayEnv::Cost(const Measurement& m) const { return TuningCost(m, cost_); }

std::vector<Evaluation> ReplayEnv::Step(const std::vector<Config>& configs) {
  std::vector<Evaluation> out;
  out.reserve(configs.size());
  for (const auto& config : configs) {
    Evaluation e;
    if (const Measurement* m = Lookup(config)) {
      e.measurement = *m;
      e.cost_s = Cost(*m);
    } else {
      e.measurement.status = Status::kInvalid;
      e.measurement.error = "the recorded table has no row for " + space_.Format(config);
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::optional<Measurement> ReplayEnv::Observe(const Config& config) const {
  const Measurement* m = Lookup(config);
  if (!m) return std::nullopt;
  // Only what compiling it and analysing the binary would tell: no times, no status of a launch
  // (a wrong result or a crash shows only when it runs).
  Measurement features;
  features.n_regs = m->n_regs;
  features.n_spills = m->n_spills;
  features.shared = m->shared;
  const bool static_failure = m->status == Status::kOutOfResources || m->status == Status::kCompileError ||
                              m->status == Status::kCompileTimeout;
  features.status = static_failure ? m->status : Status::kOk;
  if (!static_failure) features.binary = binaries_.at(space_.Index(config));
  return features;
}

std::vector<Evaluation> CallbackEnv::Step(const std::vector<Config>& configs) {
  auto out = measure_(configs);
  if (out.size() != configs.size())
    throw std::runtime_error("the measuring callback returned " + std::to_string(out.size()) + " results for " +
                             std::to_string(configs.size()) + " configs; it must return one per config");
  return out;
}

}  // namespace dr_kernel
