// The cost model: predicts a configuration's log kernel time with an uncertainty, and the chance
// that it fails (does not compile, runs out of resources, times out compiling), from features of
// the problem and config. A bagged ensemble of boosted trees for the time, one boosted classifier
// per failure status for the failures. Fitted on measured rows, refitted online as more arrive.
#ifndef DR_KERNEL_MODEL_COST_MODEL_H_
#define DR_KERNEL_MODEL_COST_MODEL_H_

#include <array>
#include <cstdint>
#include <functional>
#include <istream>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "dr_kernel/model/features.h"
#include "dr_kernel/model/gbdt.h"
#include "dr_kernel/problem.h"
#include "dr_kernel/table.h"

namespace dr_kernel {

// Number of Status values (the size of per-status arrays).
constexpr size_t kNumStatuses = static_cast<size_t>(Status::kInvalid) + 1;

// What the time trees predict log ms relative to. Trees cannot extrapolate, so they learn a
// residual that transfers across problem sizes better than the raw time does.
enum class TimeBaseline {
  kNone,      // Raw log ms.
  kRoofline,  // The problem's roofline time (the same for every config of a problem).
  kAnalytic,  // FeatureExtractor::AnalyticMs of the config (waves, padding, pipelining).
};

// How a cost model is built. The defaults are the settings of benchmarks/cost_model.md.
struct CostModelOptions {
  // Members of the bagged time ensemble; each sees a bootstrap sample of the rows.
  int ensemble_size = 5;
  // Trees of one member (squared loss on log ms relative to `baseline`).
  GbdtOptions time_trees = DefaultTimeTrees();
  // Trees of one failure classifier (logistic loss; the seed is derived from `seed`).
  GbdtOptions failure_trees = DefaultFailureTrees();
  // Use registers, spills and shared memory from static analysis. Only worth it when they will be
  // known at prediction time too (after compiling); a synthetic problem never has them.
  bool use_static_features = false;
  // What the time trees predict relative to; kAnalytic ranks unseen shapes best.
  TimeBaseline baseline = TimeBaseline::kAnalytic;
  // With the analytic baseline, a family that no training row belongs to is predicted by the
  // analytic time and a quarter of the trees' correction (trees fitted to other families
  // extrapolate badly to it; some of what they learned carries), with this standard deviation in
  // log ms as its uncertainty.
  double unseen_family_log_std = 0.7;
  // Weight of a second copy of every recorded row of a family the feature table estimates, described
  // as a kernel it does not know (generic features only: parameters, shape, launch), so that the
  // trees learn what a new kernel's configs cost from every family's rows, not only from those of the
  // few unestimated families. The copy keeps its family's name (WithoutFamily drops it with the
  // family). The copies, with the rows of the families the table does not estimate, fit an ensemble
  // of their own that predicts only such kernels of families no row is of, so every other prediction
  // is that of the model without copies. 0: no copies.
  double generic_rows = 1;
  // Append problem-level features from hardware counters (Nsight Compute) of the problem's probe
  // config (profiling.probe_config: the middle of the space) to the time features: bound by
  // memory or arithmetic, L2 hit rate, occupancy, what warps stall on. Problems without counters
  // get the "missing" indicator. Off by default: see benchmarks/cost_model.md, "Hardware counters".
  bool use_counters = false;
  // Which probe's counters describe a problem: the quantile that ncu_probes.py stored as "probe".
  double counter_probe = 0.5;
  // Threads fitting ensemble members in parallel (0: one per hardware thread). Results do not
  // depend on it.
  int threads = 0;
  // Seeds the bootstrap samples and every tree's subsampling: equal seeds, equal models.
  uint64_t seed = 0;

  // The defaults of time_trees and failure_trees.
  static GbdtOptions DefaultTimeTrees();
  static GbdtOptions DefaultFailureTrees();
};

// The problem-level features that CostModelOptions::use_counters appends, in order.
const std::vector<std::string>& CounterFeatureNames();

// What the model says of one configuration.
struct CostPrediction {
  double log_ms = 0;      // Mean over the ensemble of the predicted natural log of the time in ms.
  double log_ms_std = 0;  // Standard deviation over the ensemble (model uncertainty).
  double p_fail = 0;      // Probability that the config fails in any way.
  std::array<double, kNumStatuses> p_status{};  // Per failure status; 0 for kOk and kInvalid.

  double ms() const;
  double p(Status status) const { return p_status[static_cast<size_t>(status)]; }
};

// The inputs of a prediction, computed once per (problem, config): keep it to predict repeatedly.
struct ModelInput {
  std::vector<double> time_features;     // With static features when the model uses them.
  std::vector<double> failure_features;  // Never with static features.
  double log_offset = 0;                 // log of the baseline time (CostModelOptions::baseline).
  bool family_seen = true;               // Some training row is of the problem's family.
};

// Predicts log kernel time (mean and spread over a bagged ensemble of boosted trees) and the
// chance of each failure status, from features of (problem, config). Rows from any problem and
// family can be mixed; the model is refitted from all its rows at every Fit or Update. Const
// methods are safe to call from several threads at once.
class CostModel {
 public:
  explicit CostModel(CostModelOptions options = {}, DeviceDescription device = {});

  // Adds one measured configuration to the training rows; invalid measurements (not a config of
  // the problem) are skipped. Does not refit.
  void Add(const Problem& problem, const NamedValues& config, const Measurement& measurement,
           double weight = 1.0);
  // Adds every row of a recorded table, and its probe's counters (SetProblemCounters).
  void Add(const ProblemTable& table, double weight = 1.0);
  // The hardware counters of `problem`'s probe config (names as profiling.stored_counters writes
  // them), for every later Add and Input of that problem; ignored unless options().use_counters.
  // A problem without them here is described by its Problem::probe_counters when it has them.
  void SetProblemCounters(const Problem& problem, const NamedValues& counters);
  // SetProblemCounters with the table's probe counters, when it has them (true then).
  bool SetProblemCounters(const ProblemTable& table);
  bool has_counters(const Problem& problem) const;
  // Fits every tree afresh on all rows added so far. Throws std::invalid_argument when no row is ok.
  void Fit();
  // The online update: adds a batch of measurements of one problem and refits.
  void Update(const Problem& problem, const std::vector<std::pair<NamedValues, Measurement>>& batch,
              double weight = 1.0);

  // A model of the same options and device fitted on this one's rows of every other family: what
  // it would predict for `family` had it never seen it (its analytic estimate, or what other
  // families teach). Null when no ok row of another family is left.
  std::unique_ptr<CostModel> WithoutFamily(const std::string& family) const;
  // True when some training row is of `family`.
  bool FamilySeen(const std::string& family) const;
  // How many problems of `family` the rows are of, told apart by the shape and size features they
  // carry (problems that differ in dtype only count once; 0 for a family never seen).
  size_t FamilyShapes(const std::string& family) const;

  bool fitted() const { return !members_.empty(); }
  size_t num_rows() const { return rows_.size(); }
  size_t num_ok_rows() const;
  size_t ensemble_size() const { return members_.size(); }
  const CostModelOptions& options() const { return options_; }
  // The extractor that describes the rows learned by name (a family the feature table does not
  // name gets generic features).
  const FeatureExtractor& features() const { return extractor_; }
  // The extractor that describes `problem`: features() for a family the model was trained on
  // (Add(), not Update()); for any other, features().ByShape() unless SetDescribeByShape(false),
  // so that a new GEMM of M x N x K is described as a matmul. A session's Update() rows of such a
  // family keep that description; WithoutFamily() keeps describing the family it drops by name.
  const FeatureExtractor& FeaturesFor(const Problem& problem) const;
  // Whether FeaturesFor() may describe untrained families by shape (on by default; not saved).
  // Pre-training turns it off on its practice models, whose priors stand for the tables' own.
  void SetDescribeByShape(bool on) { describe_by_shape_ = on; }

  // The features and offset of a config of a problem (described by FeaturesFor(problem)).
  ModelInput Input(const Problem& problem, const NamedValues& config,
                   const StaticFeatures* static_features = nullptr) const;
  // Throws std::logic_error before Fit.
  CostPrediction Predict(const ModelInput& input) const;
  CostPrediction Predict(const Problem& problem, const NamedValues& config,
                         const StaticFeatures* static_features = nullptr) const;
  // The log ms that ensemble member k predicts: one coherent sample of the landscape.
  double PredictMember(size_t k, const ModelInput& input) const;

  // Writes the model (options, device, training rows and trees) in a versioned binary format.
  void Save(std::ostream& out) const;
  // Reads what Save wrote. Throws ModelError naming the problem: not a cost model, another format
  // version, another feature set, or a truncated stream.
  static CostModel Load(std::istream& in);

  // The format version that Save writes; Load also reads versions 1 (before counters) and 2 (before
  // the device's dot-step latency) and 3 (before the generic ensemble).
  static constexpr uint64_t kFormatVersion = 4;

 private:
  // A family the model has an analytic time for and no training row of (see unseen_family_log_std).
  bool AnalyticOnly(const ModelInput& input) const;
  // Whether row i is a generic copy (CostModelOptions::generic_rows) of an estimated family's row.
  bool IsCopy(size_t i) const;
  // The time ensemble that predicts `input`: the generic one for a kernel the feature table does
  // not estimate and no row is of, when there is one; else the main one.
  const std::vector<Gbdt>& MembersFor(const ModelInput& input) const;
  // A bagged time ensemble fitted on the ok rows for which `use` is true.
  std::vector<Gbdt> FitTimeEnsemble(const std::function<bool(size_t)>& use) const;
  // The failure classifiers, fitted on the rows for which `use` is true.
  void FitFailures(const std::function<bool(size_t)>& use);
  // What is kept of one training row besides its features.
  struct Row {
    std::string family;
    double log_offset;
    double log_ms;  // NaN unless ok.
    Status status;
    double weight;
  };

  // Features of one time row: the extractor's, plus the counter features when used.
  size_t TimeFeatureCount() const;
  // Input() with the features of `fx`.
  ModelInput InputWith(const FeatureExtractor& fx, const Problem& problem, const NamedValues& config,
                       const StaticFeatures* static_features) const;
  // Adds one row described by `fx` (Add() and Update() without their bookkeeping).
  void AddRow(const FeatureExtractor& fx, const Problem& problem, const NamedValues& config,
              const Measurement& m, double weight);

  CostModelOptions options_;
  FeatureExtractor extractor_;
  FeatureExtractor shape_extractor_;  // extractor_.ByShape().
  bool describe_by_shape_ = true;
  std::vector<Row> rows_;
  std::vector<std::string> families_;          // Families of the rows, sorted.
  std::vector<std::string> trained_families_;  // Families added by Add() (not Update()), sorted.
  std::vector<double> time_x_;         // Row-major time features of rows_.
  std::vector<double> failure_x_;      // Row-major failure features of rows_.
  std::vector<Gbdt> members_;          // Fitted on every row but the generic copies.
  std::vector<Gbdt> generic_members_;  // Fitted on the rows without estimates: the copies and the
                                       // unestimated families' rows (empty without copies).
  std::vector<std::pair<Status, Gbdt>> failure_models_;
  std::map<std::string, std::vector<double>> problem_counters_;  // Problem::Key() -> counter features.
};

}  // namespace dr_kernel

#endif  // DR_KERNEL_MODEL_COST_MODEL_H_
