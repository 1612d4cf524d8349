#include "dr_kernel/agent/agent.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>

#include "dr_kernel/env.h"
#include "dr_kernel/interrupt.h"

namespace dr_kernel::agent {

namespace {

std::mutex default_mutex;
std::shared_ptr<const Agent> default_agent;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

void SetDefaultAgent(std::shared_ptr<const Agent> agent) {
  std::lock_guard<std::mutex> lock(default_mutex);
  default_agent = std::move(agent);
}

std::shared_ptr<const Agent> DefaultAgent() {
  std::lock_guard<std::mutex> lock(default_mutex);
  return default_agent;
}

namespace {

// The hardware estimates of every config of the space, from the model's family knowledge.
void FillEstimates(const CostModel& model, const Problem& problem, const Space& space, Prior* prior) {
  const FeatureExtractor& features = model.FeaturesFor(problem);
  const DeviceDescription& device = features.DeviceOf(problem);
  prior->estimates.assign(space.product_size(), ConfigEstimate{});
  space.ForEach([&](const Config& c) {
    const NamedValues named = space.Named(c);
    const KernelEstimate e = features.Estimate(problem, named);
    if (!e.known) return true;
    ConfigEstimate& out = prior->estimates[space.Index(c)];
    out.known = true;
    out.waves = e.programs / device.sm_count;
    const double full = std::ceil(out.waves) * device.sm_count;
    out.tail_efficiency = full > 0 ? e.programs / full : 0;
    out.tile_intensity = e.tile_bytes > 0 ? e.tile_flops / e.tile_bytes : 0;
    out.regs = std::min<double>(e.regs_per_thread, device.max_regs_per_thread);
    out.smem = e.smem_bytes;
    if (const Value* w = Find(named, "num_warps")) out.num_warps = ToDouble(*w);
    return true;
  });
}

}  // namespace

Prior PriorFromModel(const CostModel* model, const Problem& problem, const Space& space) {
  if (space.product_size() > (uint64_t{1} << 22))
    throw SpaceError("the ppo strategy keeps a prediction per configuration, and this space has " +
                     std::to_string(space.product_size()) + " before constraints (over 4,194,304): narrow it, or "
                     "use another strategy");
  Prior prior;
  const size_t n = space.product_size();
  prior.log_ms.assign(n, 0.0);
  prior.log_std.assign(n, 1.0);
  prior.p_fail.assign(n, 0.1);
  prior.trust = 0;
  if (model && model->fitted()) {
    // A family the model has rows of ranks well (leave-one-problem-out); one it has never seen is
    // predicted from the analytic estimate (and a share of what the trees learned elsewhere) or
    // from generic features alone, which may be far off.
    const FeatureExtractor& features = model->FeaturesFor(problem);
    space.ForEach([&](const Config& c) {
      const NamedValues named = space.Named(c);
      const ModelInput input = model->Input(problem, named);
      prior.trust = input.family_seen ? kSeenFamilyTrust : kUnseenFamilyTrust;
      if (!input.family_seen && !features.Estimate(problem, named).known) prior.trust = kUnknownKernelTrust;
      const auto p = model->Predict(input);
      const uint64_t i = space.Index(c);
      prior.log_ms[i] = p.log_ms;
      prior.log_std[i] = p.log_ms_std;
      prior.p_fail[i] = p.p_fail;
      return true;
    });
    FillEstimates(*model, problem, space, &prior);
  }
  prior.Rank(space);
  return prior;
}

std::vector<double> ProblemFeaturesFor(const CostModel* model, const Problem& problem, const Space& space) {
  double flops = 0, bytes = 0;
  if (model && space.num_params() > 0) {
    // Any config gives the problem's flops and bytes; the first valid one will do.
    space.ForEach([&](const Config& c) {
      const auto e = model->FeaturesFor(problem).Estimate(problem, space.Named(c));
      flops = e.flops;
      bytes = e.bytes;
      return false;
    });
  }
  return ProblemFeatures(flops, bytes, space.CountValid());
}

namespace {

// Shapes between the recorded ones: each size of a recorded problem scaled by a random factor of
// 1/4 to 4 (rounded to a multiple of 8 half the time, left odd otherwise).
Problem SyntheticProblem(const Problem& base, Rng& rng) {
  Problem p = base;
  for (auto& [name, value] : p.shape) {
    if (!std::holds_alternative<int64_t>(value)) continue;
    const int64_t v = std::get<int64_t>(value);
    if (v <= 1 || name == "HEAD_DIM") continue;  // Head sizes are compile-time: keep recorded ones.
    double scaled = static_cast<double>(v) * std::pow(2.0, rng.Uniform() * 4.0 - 2.0);
    int64_t out = std::max<int64_t>(1, static_cast<int64_t>(scaled));
    if (rng.Uniform() < 0.5) out = std::max<int64_t>(8, out / 8 * 8);
    value = out;
  }
  return p;
}

}  // namespace

Agent TrainAgent(const std::vector<ProblemTable>& tables, const TrainOptions& options, TrainReport* report,
                 const std::function<void(const rl::TrainLog&)>& on_update) {
  TrainReport local;
  TrainReport& r = report ? *report : local;
  Rng rng(options.seed);
  auto tasks = std::make_shared<std::vector<Task>>();
  Agent agent;
  const auto model_start = std::chrono::steady_clock::now();
  if (options.use_model) {
    auto model = std::make_shared<CostModel>(options.model);
    for (const auto& t : tables) model->Add(t);
    model->Fit();
    agent.model = model;
  }
  // Recorded problems, each with the prior of a model that has not seen it, and (when the tables
  // hold several families) again with the prior of a model that has not seen its family, with and
  // without the feature table's knowledge of the kernel: priors that may be confidently wrong, as
  // they are on a user's new kernel, so that the policy learns to act on the session's trust.
  std::map<std::string, std::shared_ptr<CostModel>> without_family;
  if (options.use_model && options.family_tasks) {
    for (const auto& t : tables) without_family.emplace(t.problem.family, nullptr);
    if (without_family.size() < 2) without_family.clear();
    for (auto& [family, model] : without_family) {
      PollInterrupt();
      model = std::make_shared<CostModel>(options.model);
      model->SetDescribeByShape(false);  // The practice priors stand for the tables' own description.
      for (const auto& t : tables)
        if (t.problem.family != family) model->Add(t);
      if (model->num_ok_rows() == 0) model.reset();
      else model->Fit();
    }
  }
  for (size_t i = 0; i < tables.size(); ++i) {
    PollInterrupt();
    const Space space = TableSpace(tables[i]);
    std::unique_ptr<CostModel> others;
    if (options.use_model) {
      others = std::make_unique<CostModel>(options.model);
      others->SetDescribeByShape(false);
      for (size_t j = 0; j < tables.size(); ++j)
        if (j != i) others->Add(tables[j]);
      if (others->num_ok_rows() == 0) others.reset();
      else others->Fit();
    }
    // With its probe's counters, as a session that profiled the probe knows it (read only by a
    // model that uses counters).
    const Problem problem = ProfiledProblem(tables[i]);
    const auto features = ProblemFeaturesFor(agent.model.get(), problem, space);
    tasks->push_back(Task::FromTable(tables[i], PriorFromModel(others.get(), problem, space), features));
    if (const auto it = without_family.find(problem.family); it != without_family.end() && it->second) {
      tasks->push_back(Task::FromTable(tables[i], PriorFromModel(it->second.get(), problem, space), features));
      tasks->back().label += " (family unseen)";
      // And as a kernel the feature table does not know either (generic features only).
      Problem renamed = problem;
      renamed.family = "new kernel " + renamed.family;
      tasks->push_back(Task::FromTable(tables[i], PriorFromModel(it->second.get(), renamed, space), features));
      tasks->back().label += " (kernel unknown)";
    }
  }
  r.table_tasks = static_cast<int>(tasks->size());
  // Synthetic problems: the truth is one ensemble member's landscape, the prior is the ensemble's
  // mean with an error as large as the model makes on problems it has not seen.
  if (options.use_model && options.synthetic_tasks > 0 && !tables.empty()) {
    for (int s = 0; s < options.synthetic_tasks; ++s) {
      const ProblemTable& base = tables[rng.Below(tables.size())];
      const Problem problem = SyntheticProblem(ProfiledProblem(base), rng);
      auto space = std::make_shared<Space>(TableSpace(base));
      Task task;
      task.label = "synthetic " + problem.Label();
      task.space = space;
      task.truth.assign(space->product_size(), Measurement{});
      const size_t member = rng.Below(agent.model->ensemble_size());
      Prior prior;
      prior.log_ms.assign(space->product_size(), 0.0);
      prior.log_std.assign(space->product_size(), 1.0);
      prior.p_fail.assign(space->product_size(), 0.1);
      prior.trust = kSeenFamilyTrust;
      space->ForEach([&](const Config& c) {
        const uint64_t i = space->Index(c);
        const ModelInput input = agent.model->Input(problem, space->Named(c));
        const CostPrediction p = agent.model->Predict(input);
        Measurement& m = task.truth[i];
        if (p.p_fail > 0.5) {
          m.status = Status::kOutOfResources;
        } else {
          m.status = Status::kOk;
          m.ms = std::exp(agent.model->PredictMember(member, input) + 0.03 * rng.Normal());
          task.oracle_ms = std::min(task.oracle_ms, m.ms);
        }
        prior.log_ms[i] = p.log_ms + options.synthetic_prior_noise * rng.Normal();
        prior.log_std[i] = std::max(p.log_ms_std, 0.05);
        prior.p_fail[i] = p.p_fail;
        return true;
      });
      if (!std::isfinite(task.oracle_ms)) continue;
      FillEstimates(*agent.model, problem, *space, &prior);
      prior.Rank(*space);
      task.prior = std::make_shared<Prior>(std::move(prior));
      task.problem_features = ProblemFeaturesFor(agent.model.get(), problem, *space);
      tasks->push_back(std::move(task));
      ++r.synthetic_tasks;
    }
  }
  r.model_seconds = Seconds(model_start);
  PretrainOptions pretrain = options.pretrain;
  pretrain.seed = options.seed;
  agent.policy = Pretrain(tasks, pretrain, &r.pretrain, on_update);
  return agent;
}

void SaveAgent(const Agent& agent, const std::string& policy_path, const std::string& model_path) {
  std::ofstream policy(policy_path, std::ios::binary);
  if (!policy) throw ModelError(policy_path + ": cannot be written; check that its folder exists");
  agent.policy.Save(policy);
  if (agent.model) {
    std::ofstream model(model_path, std::ios::binary);
    if (!model) throw ModelError(model_path + ": cannot be written; check that its folder exists");
    agent.model->Save(model);
  }
}

Agent LoadAgent(const std::string& policy_path, const std::string& model_path) {
  Agent agent;
  std::ifstream policy(policy_path, std::ios::binary);
  if (!policy) throw ModelError(policy_path + ": no policy there; run `dr-kernel train` to build one");
  try {
    agent.policy = rl::ActorCritic::Load(policy);
  } catch (const std::exception& e) {
    throw ModelError(policy_path + ": " + e.what());
  }
  std::ifstream model(model_path, std::ios::binary);
  if (model) {
    try {
      agent.model = std::make_shared<CostModel>(CostModel::Load(model));
    } catch (const std::exception& e) {
      throw ModelError(model_path + ": " + e.what());
    }
  }
  return agent;
}

}  // namespace dr_kernel::agent
