#include "dr_kernel/model/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "dr_kernel/rng.h"

namespace dr_kernel {

namespace {

// The share of the trees' correction that a family with an analytic time and no training row
// gets: trees fitted to other families extrapolate badly to it (all of it: leave-one-family-out
// geomean 4.9-5.5, matmul 1024^3 1 -> 20-51.5 measurements), the analytic time alone misses what
// carries across (rmsnorm 16384x8192 above random search); any share from 0.1 to 0.35 gave
// 3.7-4.05 and no problem above random (benchmarks/agent.md, second session of 2026-12-05).
constexpr double kUnseenFamilyCorrection = 0.25;

constexpr char kMagic[] = "dr_kernel cost model\n";

// Positions of the baseline times (log2 ms; 0 for unknown families) in the feature vector.
const size_t kRooflineFeature = FeatureIndex("roofline_ms_log2");
const size_t kAnalyticFeature = FeatureIndex("analytic_ms_log2");

// Statuses that say the config itself fails (as opposed to kOk, or kInvalid: not a config at all).
bool IsFailure(Status s) { return s != Status::kOk && s != Status::kInvalid; }

// Runs fn(0..n) on up to `threads` threads; each index writes only its own results.
template <typename Fn>
void ParallelFor(size_t n, int threads, Fn fn) {
  size_t workers =
      threads > 0 ? static_cast<size_t>(threads) : std::max(1u, std::thread::hardware_concurrency());
  workers = std::min(workers, n);
  if (workers <= 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::thread> pool;
  for (size_t w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      for (size_t i = w; i < n; i += workers) fn(i);
    });
  for (auto& t : pool) t.join();
}

void WriteTrees(std::ostream& out, const GbdtOptions& o) {
  io::WriteU64(out, static_cast<uint64_t>(o.loss));
  io::WriteU64(out, static_cast<uint64_t>(o.num_trees));
  io::WriteU64(out, static_cast<uint64_t>(o.max_depth));
  io::WriteF64(out, o.learning_rate);
  io::WriteU64(out, static_cast<uint64_t>(o.min_samples_leaf));
  io::WriteF64(out, o.l2);
  io::WriteF64(out, o.min_split_gain);
  io::WriteF64(out, o.subsample);
  io::WriteF64(out, o.colsample);
  io::WriteU64(out, static_cast<uint64_t>(o.max_bins));
  io::WriteU64(out, o.seed);
}

GbdtOptions ReadTrees(std::istream& in) {
  GbdtOptions o;
  o.loss = static_cast<Loss>(io::ReadU64(in, "tree options"));
  o.num_trees = static_cast<int>(io::ReadU64(in, "tree options"));
  o.max_depth = static_cast<int>(io::ReadU64(in, "tree options"));
  o.learning_rate = io::ReadF64(in, "tree options");
  o.min_samples_leaf = static_cast<int>(io::ReadU64(in, "tree options"));
  o.l2 = io::ReadF64(in, "tree options");
  o.min_split_gain = io::ReadF64(in, "tree options");
  o.subsample = io::ReadF64(in, "tree options");
  o.colsample = io::ReadF64(in, "tree options");
  o.max_bins = static_cast<int>(io::ReadU64(in, "tree options"));
  o.seed = io::ReadU64(in, "tree options");
  return o;
}

// The counter features, in CounterFeatureNames() order; the stall shares are fractions of all
// the stalls ncu reported, so kernels with long and short instruction streams compare.
constexpr const char* kCounterNames[] = {
    "counters_missing",         "probe_ms_log2",
    "probe_over_roofline_log2", "probe_achieved_occupancy",
    "probe_l2_hit_rate",        "probe_dram_throughput",
    "probe_sm_throughput",      "probe_stall_long_scoreboard",
    "probe_stall_barrier",      "probe_stall_short_scoreboard",
    "probe_stall_math_pipe",    "probe_stall_mio_throttle",
    "probe_stall_not_selected",
};
constexpr size_t kNumCounterFeatures = sizeof kCounterNames / sizeof kCounterNames[0];
constexpr size_t kProbeMsFeature = 1, kProbeOverRooflineFeature = 2;

std::vector<double> MissingCounters() {
  std::vector<double> f(kNumCounterFeatures, -1.0);
  f[0] = 1;
  return f;
}

// The counter features of a probe's counters (profiling.stored_counters' names); the
// probe-over-roofline slot is filled per problem in Input.
std::vector<double> CounterFeaturesOf(const NamedValues& counters) {
  auto get = [&](const char* name) {
    const Value* v = Find(counters, name);
    return v && !std::holds_alternative<std::string>(*v) ? ToDouble(*v) : kNaN;
  };
  const double duration_ns = get("duration_ns");
  if (!(duration_ns > 0)) return MissingCounters();
  std::vector<double> f(kNumCounterFeatures, 0.0);
  f[kProbeMsFeature] = std::log2(duration_ns * 1e-6);
  int i = 3;
  for (const char* name :
       {"achieved_occupancy_pct", "l2_hit_rate_pct", "dram_throughput_pct", "sm_throughput_pct"}) {
    const double pct = get(name);
    f[i++] = std::isnan(pct) ? -1.0 : pct / 100.0;
  }
  double stalls = 0;
  for (const auto& [name, value] : counters)
    if (name.rfind("stall_", 0) == 0 && !std::holds_alternative<std::string>(value))
      stalls += std::max(0.0, ToDouble(value));
  for (const char* name : {"stall_long_scoreboard", "stall_barrier", "stall_short_scoreboard",
                           "stall_math_pipe_throttle", "stall_mio_throttle", "stall_not_selected"}) {
    const double v = get(name);
    f[i++] = stalls > 0 && !std::isnan(v) ? v / stalls : 0.0;
  }
  return f;
}

// Inserts `s` into the sorted `v` unless it is there.
void InsertSorted(std::vector<std::string>* v, const std::string& s) {
  const auto it = std::lower_bound(v->begin(), v->end(), s);
  if (it == v->end() || *it != s) v->insert(it, s);
}

}  // namespace

const std::vector<std::string>& CounterFeatureNames() {
  static const std::vector<std::string> names(std::begin(kCounterNames), std::end(kCounterNames));
  return names;
}

GbdtOptions CostModelOptions::DefaultTimeTrees() {
  GbdtOptions o;
  o.loss = Loss::kSquared;
  // Leave-one-problem-out ranking barely moves with these (benchmarks/cost_model.md); 100 trees
  // keep prediction near 4 us per config.
  o.num_trees = 100;
  o.max_depth = 6;
  o.learning_rate = 0.1;
  o.min_samples_leaf = 5;
  o.l2 = 1.0;
  o.subsample = 0.8;
  o.colsample = 0.8;
  o.max_bins = 64;
  return o;
}

GbdtOptions CostModelOptions::DefaultFailureTrees() {
  GbdtOptions o;
  o.loss = Loss::kLogistic;
  o.num_trees = 40;
  o.max_depth = 4;
  o.learning_rate = 0.3;
  // Failures of one corner of one problem (compile timeouts) otherwise spill over to unrelated
  // configs of other families: with 3, 12 ok attention configs were called failures.
  o.min_samples_leaf = 10;
  o.l2 = 1.0;
  o.subsample = 1.0;
  o.colsample = 1.0;
  o.max_bins = 64;
  return o;
}

double CostPrediction::ms() const { return std::exp(log_ms); }

CostModel::CostModel(CostModelOptions options, DeviceDescription device)
    : options_(std::move(options)), extractor_(std::move(device)), shape_extractor_(extractor_.ByShape()) {
  if (options_.ensemble_size < 1) throw std::invalid_argument("a cost model needs ensemble_size >= 1");
}

size_t CostModel::num_ok_rows() const {
  return static_cast<size_t>(
      std::count_if(rows_.begin(), rows_.end(), [](const Row& r) { return r.status == Status::kOk; }));
}

const FeatureExtractor& CostModel::FeaturesFor(const Problem& problem) const {
  const bool trained = std::binary_search(trained_families_.begin(), trained_families_.end(), problem.family);
  return describe_by_shape_ && !trained ? shape_extractor_ : extractor_;
}

ModelInput CostModel::Input(const Problem& problem, const NamedValues& config,
                            const StaticFeatures* static_features) const {
  return InputWith(FeaturesFor(problem), problem, config, static_features);
}

ModelInput CostModel::InputWith(const FeatureExtractor& fx, const Problem& problem, const NamedValues& config,
                                const StaticFeatures* static_features) const {
  ModelInput in;
  in.failure_features = fx.Extract(problem, config, nullptr);
  if (options_.use_static_features && static_features && static_features->known()) {
    in.time_features = fx.Extract(problem, config, static_features);
  } else {
    in.time_features = in.failure_features;
  }
  if (options_.use_counters) {
    const auto it = problem_counters_.find(problem.Key());
    std::vector<double> c = it != problem_counters_.end()      ? it->second
                            : !problem.probe_counters.empty() ? CounterFeaturesOf(problem.probe_counters)
                                                               : MissingCounters();
    const double roofline_log2 = in.failure_features[kRooflineFeature];
    if (c[0] == 0 && roofline_log2 != 0) c[kProbeOverRooflineFeature] = c[kProbeMsFeature] - roofline_log2;
    in.time_features.insert(in.time_features.end(), c.begin(), c.end());
  }
  in.family_seen = FamilySeen(problem.family);
  switch (options_.baseline) {
    case TimeBaseline::kNone:
      in.log_offset = 0;
      break;
    case TimeBaseline::kRoofline:
      in.log_offset = std::log(2.0) * in.failure_features[kRooflineFeature];
      break;
    case TimeBaseline::kAnalytic:
      in.log_offset = std::log(2.0) * in.failure_features[kAnalyticFeature];
      break;
  }
  return in;
}

void CostModel::Add(const Problem& problem, const NamedValues& config, const Measurement& m, double weight) {
  InsertSorted(&trained_families_, problem.family);
  AddRow(extractor_, problem, config, m, weight);
}

void CostModel::AddRow(const FeatureExtractor& fx, const Problem& problem, const NamedValues& config,
                       const Measurement& m, double weight) {
  if (m.status == Status::kInvalid || !(weight > 0)) return;
  if (m.ok() && !(m.ms > 0)) return;
  const StaticFeatures st = StaticFeatures::From(m);
  const ModelInput in = InputWith(fx, problem, config, &st);
  InsertSorted(&families_, problem.family);
  rows_.push_back({problem.family, in.log_offset, m.ok() ? std::log(m.ms) : kNaN, m.status, weight});
  time_x_.insert(time_x_.end(), in.time_features.begin(), in.time_features.end());
  failure_x_.insert(failure_x_.end(), in.failure_features.begin(), in.failure_features.end());
}

size_t CostModel::TimeFeatureCount() const {
  return FeatureExtractor::size() + (options_.use_counters ? kNumCounterFeatures : 0);
}

void CostModel::SetProblemCounters(const Problem& problem, const NamedValues& counters) {
  problem_counters_[problem.Key()] = CounterFeaturesOf(counters);
}

bool CostModel::SetProblemCounters(const ProblemTable& table) {
  const NamedValues* counters = ProbeCounters(table, options_.counter_probe);
  if (counters) SetProblemCounters(table.problem, *counters);
  return counters != nullptr;
}

bool CostModel::has_counters(const Problem& problem) const {
  const auto it = problem_counters_.find(problem.Key());
  return it != problem_counters_.end() && it->second[0] == 0;
}

namespace {

size_t FamilyOtherFeature() {
  static const size_t index = FeatureIndex("family_other");
  return index;
}

bool Estimated(const std::string& family) {
  static const std::vector<std::string> known = FeatureExtractor::KnownFamilies();
  return std::find(known.begin(), known.end(), family) != known.end();
}

}  // namespace

void CostModel::Add(const ProblemTable& table, double weight) {
  SetProblemCounters(table);
  for (const auto& row : table.rows) Add(table.problem, row.config, row.measurement, weight);
  if (!(options_.generic_rows > 0) || !Estimated(table.problem.family)) return;
  // The copies: features as of a kernel the table does not know, rows under the family's name.
  Problem generic = table.problem;
  generic.family = "generic " + table.problem.family;
  const size_t first = rows_.size();
  for (const auto& row : table.rows)
    AddRow(extractor_, generic, row.config, row.measurement, weight * options_.generic_rows);
  for (size_t i = first; i < rows_.size(); ++i) rows_[i].family = table.problem.family;
  families_.erase(std::remove(families_.begin(), families_.end(), generic.family), families_.end());
}

bool CostModel::IsCopy(size_t i) const {
  return Estimated(rows_[i].family) && failure_x_[i * FeatureExtractor::size() + FamilyOtherFeature()] == 1;
}

const std::vector<Gbdt>& CostModel::MembersFor(const ModelInput& input) const {
  // A family with rows of its own (other shapes, or a session's refits) is predicted by the main
  // ensemble, which learned them at full weight.
  const bool generic =
      !generic_members_.empty() && !input.family_seen && input.failure_features[FamilyOtherFeature()] == 1;
  return generic ? generic_members_ : members_;
}

void CostModel::Fit() {
  const size_t nf = FeatureExtractor::size();
  std::vector<bool> copy(rows_.size());
  bool any_copy = false;
  for (size_t i = 0; i < rows_.size(); ++i) {
    copy[i] = IsCopy(i);
    any_copy = any_copy || (copy[i] && rows_[i].status == Status::kOk);
  }
  std::vector<Gbdt> members = FitTimeEnsemble([&](size_t i) { return !copy[i]; });
  // The generic ensemble: rows described without estimates (copies, and the families the table
  // does not estimate), all with a zero offset.
  std::vector<Gbdt> generic_members;
  if (any_copy)
    generic_members = FitTimeEnsemble([&](size_t i) { return failure_x_[i * nf + FamilyOtherFeature()] == 1; });
  members_ = std::move(members);
  generic_members_ = std::move(generic_members);
  FitFailures([&](size_t i) { return !copy[i]; });
}

std::vector<Gbdt> CostModel::FitTimeEnsemble(const std::function<bool(size_t)>& use) const {
  const size_t ntf = TimeFeatureCount();
  // Time: ok rows, target log ms relative to the roofline so that trees learn efficiency, which
  // transfers across problem sizes, rather than size itself.
  Dataset time;
  time.num_features = ntf;
  for (size_t i = 0; i < rows_.size(); ++i)
    if (rows_[i].status == Status::kOk && use(i))
      time.Add(&time_x_[i * ntf], rows_[i].log_ms - rows_[i].log_offset, rows_[i].weight);
  if (time.num_rows() == 0)
    throw std::invalid_argument("the cost model has no ok measurement to fit; add measured rows first");
  const FeatureBins time_bins = FeatureBins::Fit(time, options_.time_trees.max_bins);
  const std::vector<uint8_t> time_binned = time_bins.BinRows(time);

  const size_t k = static_cast<size_t>(options_.ensemble_size);
  std::vector<Gbdt> members(k);
  ParallelFor(k, options_.threads, [&](size_t m) {
    // Bootstrap: each row weighs its row weight times how often a draw with replacement picks it.
    Rng rng(options_.seed * 1000003 + m);
    Dataset sample = time;
    std::vector<double> count(time.num_rows(), 0.0);
    if (k > 1)
      for (size_t i = 0; i < time.num_rows(); ++i) count[rng.Below(time.num_rows())] += 1;
    else
      std::fill(count.begin(), count.end(), 1.0);
    sample.weight.assign(time.num_rows(), 1.0);
    for (size_t i = 0; i < time.num_rows(); ++i)
      sample.weight[i] = count[i] * (time.weight.empty() ? 1.0 : time.weight[i]);
    GbdtOptions o = options_.time_trees;
    o.seed = options_.seed * 7919 + m * 104729 + 1;
    members[m].Fit(sample, time_bins, time_binned, o);
  });
  return members;
}

void CostModel::FitFailures(const std::function<bool(size_t)>& use) {
  const size_t nf = FeatureExtractor::size();
  // Failures: every row used, one classifier per failure status that the rows contain.
  Dataset fail;
  fail.num_features = nf;
  std::vector<Status> statuses;
  std::vector<size_t> used;
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (!use(i)) continue;
    used.push_back(i);
    fail.Add(&failure_x_[i * nf], 0.0, rows_[i].weight);
    if (IsFailure(rows_[i].status) &&
        std::find(statuses.begin(), statuses.end(), rows_[i].status) == statuses.end())
      statuses.push_back(rows_[i].status);
  }
  std::sort(statuses.begin(), statuses.end());
  std::vector<std::pair<Status, Gbdt>> failure_models(statuses.size());
  if (!statuses.empty()) {
    const FeatureBins fail_bins = FeatureBins::Fit(fail, options_.failure_trees.max_bins);
    const std::vector<uint8_t> fail_binned = fail_bins.BinRows(fail);
    ParallelFor(statuses.size(), options_.threads, [&](size_t s) {
      Dataset labelled = fail;
      for (size_t j = 0; j < used.size(); ++j) labelled.y[j] = rows_[used[j]].status == statuses[s] ? 1.0 : 0.0;
      GbdtOptions o = options_.failure_trees;
      o.seed = options_.seed * 6151 + static_cast<uint64_t>(statuses[s]) + 17;
      failure_models[s].first = statuses[s];
      failure_models[s].second.Fit(labelled, fail_bins, fail_binned, o);
    });
  }
  failure_models_ = std::move(failure_models);
}

void CostModel::Update(const Problem& problem, const std::vector<std::pair<NamedValues, Measurement>>& batch,
                       double weight) {
  const FeatureExtractor& fx = FeaturesFor(problem);
  for (const auto& [config, m] : batch) AddRow(fx, problem, config, m, weight);
  Fit();
}

std::unique_ptr<CostModel> CostModel::WithoutFamily(const std::string& family) const {
  auto out = std::make_unique<CostModel>(options_, extractor_.device());
  out->problem_counters_ = problem_counters_;
  out->describe_by_shape_ = describe_by_shape_;
  out->trained_families_ = trained_families_;  // The family it drops is still described by name.
  const size_t ntf = TimeFeatureCount(), nf = FeatureExtractor::size();
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i].family == family) continue;
    out->rows_.push_back(rows_[i]);
    out->time_x_.insert(out->time_x_.end(), time_x_.begin() + i * ntf, time_x_.begin() + (i + 1) * ntf);
    out->failure_x_.insert(out->failure_x_.end(), failure_x_.begin() + i * nf, failure_x_.begin() + (i + 1) * nf);
  }
  std::copy_if(families_.begin(), families_.end(), std::back_inserter(out->families_),
               [&](const std::string& f) { return f != family; });
  if (out->num_ok_rows() == 0) return nullptr;
  out->Fit();
  return out;
}

size_t CostModel::FamilyShapes(const std::string& family) const {
  static const std::vector<size_t> kShapeFeatures = [] {
    std::vector<size_t> out;
    for (int i = 0; i < feature::kMaxShapeSlots; ++i)
      out.push_back(FeatureIndex("shape" + std::to_string(i) + "_log2"));
    out.push_back(FeatureIndex("problem_flops_log2"));
    out.push_back(FeatureIndex("problem_bytes_log2"));
    return out;
  }();
  const size_t nf = FeatureExtractor::size();
  std::set<std::vector<double>> shapes;
  for (size_t i = 0; i < rows_.size(); ++i) {
    if (rows_[i].family != family) continue;
    if (IsCopy(i)) continue;  // A generic copy (options().generic_rows).
    std::vector<double> shape;
    for (size_t f : kShapeFeatures) shape.push_back(failure_x_[i * nf + f]);
    shapes.insert(std::move(shape));
  }
  return shapes.size();
}

bool CostModel::FamilySeen(const std::string& family) const {
  return std::binary_search(families_.begin(), families_.end(), family);
}

bool CostModel::AnalyticOnly(const ModelInput& input) const {
  return !input.family_seen && options_.baseline == TimeBaseline::kAnalytic && input.log_offset != 0;
}

CostPrediction CostModel::Predict(const ModelInput& input) const {
  if (!fitted()) throw std::logic_error("the cost model has not been fitted; call Fit() after adding rows");
  CostPrediction p;
  double sum = 0, sum2 = 0;
  const std::vector<Gbdt>& members = MembersFor(input);
  for (const Gbdt& m : members) {
    const double v = m.Predict(input.time_features.data());
    sum += v;
    sum2 += v * v;
  }
  const double k = static_cast<double>(members.size());
  const double mean = sum / k;
  if (AnalyticOnly(input)) {
    p.log_ms = input.log_offset + kUnseenFamilyCorrection * mean;
    p.log_ms_std = options_.unseen_family_log_std;
  } else {
    p.log_ms = mean + input.log_offset;
    p.log_ms_std = k > 1 ? std::sqrt(std::max(0.0, (sum2 - k * mean * mean) / (k - 1))) : 0.0;
  }
  double survive = 1;
  for (const auto& [status, model] : failure_models_) {
    const double q = model.PredictProbability(input.failure_features.data());
    p.p_status[static_cast<size_t>(status)] = q;
    survive *= 1 - q;
  }
  p.p_fail = 1 - survive;
  return p;
}

CostPrediction CostModel::Predict(const Problem& problem, const NamedValues& config,
                                  const StaticFeatures* static_features) const {
  return Predict(Input(problem, config, static_features));
}

double CostModel::PredictMember(size_t k, const ModelInput& input) const {
  if (k >= members_.size())
    throw std::out_of_range("ensemble member " + std::to_string(k) + " does not exist (the model has " +
                            std::to_string(members_.size()) + ")");
  const double correction = MembersFor(input)[k].Predict(input.time_features.data());
  return input.log_offset + (AnalyticOnly(input) ? kUnseenFamilyCorrection : 1.0) * correction;
}

// ---------------------------------------------------------------------------------------------
// Streams.

void CostModel::Save(std::ostream& out) const {
  out.write(kMagic, sizeof kMagic - 1);
  io::WriteU64(out, kFormatVersion);
  // Options.
  io::WriteU64(out, static_cast<uint64_t>(options_.ensemble_size));
  WriteTrees(out, options_.time_trees);
  WriteTrees(out, options_.failure_trees);
  io::WriteU64(out, options_.use_static_features ? 1 : 0);
  io::WriteU64(out, static_cast<uint64_t>(options_.baseline));
  io::WriteF64(out, options_.unseen_family_log_std);
  io::WriteU64(out, options_.seed);
  // Device.
  const DeviceDescription& d = extractor_.device();
  io::WriteString(out, d.name);
  for (int64_t v :
       {int64_t{d.sm_count}, d.smem_per_block, d.smem_per_sm, int64_t{d.regs_per_sm},
        int64_t{d.max_threads_per_sm}, int64_t{d.max_blocks_per_sm}, int64_t{d.has_warpgroup_mma}})
    io::WriteU64(out, static_cast<uint64_t>(v));
  io::WriteF64(out, d.peak_tflops);
  io::WriteF64(out, d.dram_tb_per_s);
  io::WriteF64(out, d.launch_overhead_ms);
  io::WriteF64(out, d.l2_tb_per_s);
  io::WriteF64(out, d.memory_latency_us);
  io::WriteF64(out, d.mma_sync_fraction);
  io::WriteF64(out, d.fp32_tflops);
  io::WriteU64(out, static_cast<uint64_t>(d.max_regs_per_thread));
  io::WriteF64(out, d.sfu_tops);
  io::WriteU64(out, static_cast<uint64_t>(d.warps_to_saturate));
  io::WriteF64(out, d.dot_step_latency_us);  // Version 3.
  // Feature set.
  const auto& names = FeatureExtractor::names();
  io::WriteU64(out, names.size());
  for (const auto& n : names) io::WriteString(out, n);
  // Counters (version 2).
  io::WriteU64(out, options_.use_counters ? 1 : 0);
  io::WriteF64(out, options_.counter_probe);
  io::WriteU64(out, kNumCounterFeatures);
  for (const char* n : kCounterNames) io::WriteString(out, n);
  io::WriteU64(out, problem_counters_.size());
  for (const auto& [key, features] : problem_counters_) {
    io::WriteString(out, key);
    for (double v : features) io::WriteF64(out, v);
  }
  // Training rows.
  io::WriteU64(out, rows_.size());
  for (const Row& r : rows_) {
    io::WriteString(out, r.family);
    io::WriteF64(out, r.log_offset);
    io::WriteF64(out, r.log_ms);
    io::WriteU64(out, static_cast<uint64_t>(r.status));
    io::WriteF64(out, r.weight);
  }
  for (double v : time_x_) io::WriteF64(out, v);
  for (double v : failure_x_) io::WriteF64(out, v);
  // Trees.
  io::WriteU64(out, members_.size());
  for (const Gbdt& m : members_) m.Save(out);
  io::WriteU64(out, failure_models_.size());
  for (const auto& [status, model] : failure_models_) {
    io::WriteU64(out, static_cast<uint64_t>(status));
    model.Save(out);
  }
  // The generic ensemble (version 4).
  io::WriteU64(out, generic_members_.size());
  for (const Gbdt& m : generic_members_) m.Save(out);
  if (!out) throw ModelError("could not write the cost model: the output stream failed (disk full?)");
}

CostModel CostModel::Load(std::istream& in) {
  char magic[sizeof kMagic - 1] = {};
  in.read(magic, sizeof magic);
  if (!in || std::memcmp(magic, kMagic, sizeof magic) != 0)
    throw ModelError(
        "the stream is not a dr_kernel cost model (it does not start with 'dr_kernel cost model'); "
        "pass a file written by CostModel::Save");
  const uint64_t version = io::ReadU64(in, "the format version");
  if (version < 1 || version > kFormatVersion)
    throw ModelError("the cost model was saved in format version " + std::to_string(version) +
                     " but this build reads versions 1 to " + std::to_string(kFormatVersion) +
                     "; refit the model with this build or load it with the build that saved it");
  CostModelOptions o;
  o.ensemble_size = static_cast<int>(io::ReadU64(in, "the options"));
  o.time_trees = ReadTrees(in);
  o.failure_trees = ReadTrees(in);
  o.use_static_features = io::ReadU64(in, "the options") != 0;
  const uint64_t baseline = io::ReadU64(in, "the options");
  if (baseline > static_cast<uint64_t>(TimeBaseline::kAnalytic))
    throw ModelError("the cost model stream names an unknown time baseline; it is corrupt");
  o.baseline = static_cast<TimeBaseline>(baseline);
  o.unseen_family_log_std = io::ReadF64(in, "the options");
  o.seed = io::ReadU64(in, "the options");
  if (o.ensemble_size < 1 || o.ensemble_size > 10000)
    throw ModelError("the cost model stream has an implausible ensemble size; it is corrupt");
  DeviceDescription d;
  d.name = io::ReadString(in, "the device");
  d.sm_count = static_cast<int>(io::ReadU64(in, "the device"));
  d.smem_per_block = static_cast<int64_t>(io::ReadU64(in, "the device"));
  d.smem_per_sm = static_cast<int64_t>(io::ReadU64(in, "the device"));
  d.regs_per_sm = static_cast<int>(io::ReadU64(in, "the device"));
  d.max_threads_per_sm = static_cast<int>(io::ReadU64(in, "the device"));
  d.max_blocks_per_sm = static_cast<int>(io::ReadU64(in, "the device"));
  d.has_warpgroup_mma = io::ReadU64(in, "the device") != 0;
  d.peak_tflops = io::ReadF64(in, "the device");
  d.dram_tb_per_s = io::ReadF64(in, "the device");
  d.launch_overhead_ms = io::ReadF64(in, "the device");
  d.l2_tb_per_s = io::ReadF64(in, "the device");
  d.memory_latency_us = io::ReadF64(in, "the device");
  d.mma_sync_fraction = io::ReadF64(in, "the device");
  d.fp32_tflops = io::ReadF64(in, "the device");
  d.max_regs_per_thread = static_cast<int>(io::ReadU64(in, "the device"));
  d.sfu_tops = io::ReadF64(in, "the device");
  d.warps_to_saturate = static_cast<int>(io::ReadU64(in, "the device"));
  // A model saved before the latency term predicts without it, as it was trained.
  d.dot_step_latency_us = version >= 3 ? io::ReadF64(in, "the device") : 0.0;

  const auto& names = FeatureExtractor::names();
  const uint64_t nf = io::ReadU64(in, "the feature names");
  if (nf > 100000) throw ModelError("the cost model stream has an implausible feature count; it is corrupt");
  std::vector<std::string> saved(nf);
  for (auto& n : saved) n = io::ReadString(in, "the feature names");
  if (saved != names) {
    size_t i = 0;
    while (i < saved.size() && i < names.size() && saved[i] == names[i]) ++i;
    throw ModelError("the cost model was saved with another feature set (" + std::to_string(saved.size()) +
                     " features, this build has " + std::to_string(names.size()) + "; first difference at " +
                     std::to_string(i) + ": '" + (i < saved.size() ? saved[i] : "") + "' vs '" +
                     (i < names.size() ? names[i] : "") + "'); refit the model with this build");
  }

  std::map<std::string, std::vector<double>> problem_counters;
  if (version >= 2) {
    o.use_counters = io::ReadU64(in, "the counter options") != 0;
    o.counter_probe = io::ReadF64(in, "the counter options");
    const uint64_t nc = io::ReadU64(in, "the counter feature names");
    std::vector<std::string> saved_counters(nc > 1000 ? 0 : nc);
    for (auto& n : saved_counters) n = io::ReadString(in, "the counter feature names");
    if (saved_counters != CounterFeatureNames())
      throw ModelError("the cost model was saved with another set of counter features; refit the model with "
                       "this build");
    const uint64_t problems = io::ReadU64(in, "the problems' counters");
    if (problems > (1u << 20)) throw ModelError("the cost model stream has implausible counters; it is corrupt");
    for (uint64_t i = 0; i < problems; ++i) {
      std::string key = io::ReadString(in, "the problems' counters");
      std::vector<double> features(kNumCounterFeatures);
      for (double& v : features) v = io::ReadF64(in, "the problems' counters");
      problem_counters.emplace(std::move(key), std::move(features));
    }
  }

  CostModel model(o, d);
  model.problem_counters_ = std::move(problem_counters);
  const size_t ntf = model.TimeFeatureCount();
  const uint64_t num_rows = io::ReadU64(in, "the training rows");
  if (num_rows > (1u << 26))
    throw ModelError("the cost model stream has an implausible row count; it is corrupt");
  model.rows_.resize(num_rows);
  for (Row& r : model.rows_) {
    r.family = io::ReadString(in, "a training row");
    InsertSorted(&model.families_, r.family);
    r.log_offset = io::ReadF64(in, "a training row");
    r.log_ms = io::ReadF64(in, "a training row");
    const uint64_t s = io::ReadU64(in, "a training row");
    if (s >= kNumStatuses)
      throw ModelError("the cost model stream has a row with an unknown status; it is corrupt");
    r.status = static_cast<Status>(s);
    r.weight = io::ReadF64(in, "a training row");
  }
  model.trained_families_ = model.families_;  // A saved model's rows are its training rows.
  model.time_x_.resize(num_rows * ntf);
  for (double& v : model.time_x_) v = io::ReadF64(in, "the training features");
  model.failure_x_.resize(num_rows * nf);
  for (double& v : model.failure_x_) v = io::ReadF64(in, "the training features");

  const uint64_t members = io::ReadU64(in, "the ensemble");
  if (members > 10000) throw ModelError("the cost model stream has an implausible ensemble; it is corrupt");
  for (uint64_t i = 0; i < members; ++i) model.members_.push_back(Gbdt::Load(in));
  const uint64_t classifiers = io::ReadU64(in, "the failure classifiers");
  if (classifiers > kNumStatuses)
    throw ModelError("the cost model stream has too many classifiers; it is corrupt");
  for (uint64_t i = 0; i < classifiers; ++i) {
    const uint64_t s = io::ReadU64(in, "a failure classifier");
    if (s >= kNumStatuses)
      throw ModelError("the cost model stream has an unknown failure status; it is corrupt");
    model.failure_models_.emplace_back(static_cast<Status>(s), Gbdt::Load(in));
  }
  if (version >= 4) {
    const uint64_t generic = io::ReadU64(in, "the generic ensemble");
    if (generic > 10000) throw ModelError("the cost model stream has an implausible ensemble; it is corrupt");
    for (uint64_t i = 0; i < generic; ++i) model.generic_members_.push_back(Gbdt::Load(in));
  }
  for (const auto* ensemble : {&model.members_, &model.generic_members_})
   for (const Gbdt& m : *ensemble)
    if (m.num_features() != ntf)
      throw ModelError("a saved tree ensemble disagrees with the feature count; it is corrupt");
  return model;
}

}  // namespace dr_kernel
