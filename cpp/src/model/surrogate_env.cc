#include "dr_kernel/model/surrogate_env.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace dr_kernel {

namespace {

// A well-mixed seed for the draws of one config in one session.
uint64_t ConfigSeed(uint64_t session, uint64_t index) {
  uint64_t z = session * 0x9e3779b97f4a7c15ULL + index + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::string Percent(double p) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * p);
  return buf;
}

}  // namespace

SurrogateEnv::SurrogateEnv(std::shared_ptr<const CostModel> model, Problem problem, Space space,
                           SurrogateOptions options)
    : model_(std::move(model)), problem_(std::move(problem)), space_(std::move(space)), options_(options) {
  if (!model_ || !model_->fitted())
    throw std::invalid_argument("SurrogateEnv needs a fitted cost model; call CostModel::Fit() first");
  if (model_->options().use_static_features)
    throw std::invalid_argument(
        "SurrogateEnv needs a cost model fitted without static features (use_static_features = false): a "
        "simulated config has no compiled kernel to analyse");
  Reset(0);
}

void SurrogateEnv::Reset(uint64_t seed) {
  seed_ = seed;
  noise_.Seed(ConfigSeed(seed, ~uint64_t{0}));
  member_ = static_cast<size_t>(ConfigSeed(seed, ~uint64_t{1}) % model_->ensemble_size());
  cache_.clear();  // Member predictions depend on the session.
}

const SurrogateEnv::Cached& SurrogateEnv::Lookup(const Config& config) const {
  const uint64_t index = space_.Index(config);
  auto it = cache_.find(index);
  if (it != cache_.end()) return it->second;
  const ModelInput input = model_->Input(problem_, space_.Named(config));
  Cached c;
  c.prediction = model_->Predict(input);
  c.member_log_ms = options_.sampling == SurrogateSampling::kMember ? model_->PredictMember(member_, input)
                                                                    : c.prediction.log_ms;
  return cache_.emplace(index, c).first->second;
}

const CostPrediction& SurrogateEnv::Prediction(const Config& config) const {
  return Lookup(config).prediction;
}

Measurement SurrogateEnv::Landscape(const Config& config) const {
  const Cached& c = Lookup(config);
  const CostPrediction& p = c.prediction;
  Rng rng(ConfigSeed(seed_, space_.Index(config)));
  const double u_fail = rng.Uniform(), u_status = rng.Uniform(), z = rng.Normal();

  Measurement m;
  // Failure: which status, if any.
  Status failure = Status::kOk;
  if (options_.sample_failures) {
    if (u_fail < p.p_fail) {
      double total = 0;
      for (double q : p.p_status) total += q;
      double cumulative = 0;
      for (size_t s = 0; s < kNumStatuses; ++s) {
        if (p.p_status[s] <= 0) continue;
        failure = static_cast<Status>(s);
        cumulative += p.p_status[s] / total;
        if (u_status < cumulative) break;
      }
    }
  } else if (p.p_fail >= 0.5) {
    size_t best = 0;
    for (size_t s = 1; s < kNumStatuses; ++s)
      if (p.p_status[s] > p.p_status[best]) best = s;
    failure = static_cast<Status>(best);
  }
  m.compile_s = options_.compile_s;
  if (failure != Status::kOk) {
    m.status = failure;
    m.error = std::string("simulated ") + ToString(failure) + " (the cost model gives it " +
              Percent(p.p(failure)) + ", any failure " + Percent(p.p_fail) + ")";
    if (failure == Status::kCompileTimeout) m.compile_s = kNaN;
    return m;
  }
  double log_ms = p.log_ms;
  if (options_.sampling == SurrogateSampling::kNormal) log_ms += options_.std_scale * p.log_ms_std * z;
  if (options_.sampling == SurrogateSampling::kMember) log_ms = c.member_log_ms;
  m.status = Status::kOk;
  m.ms = std::exp(log_ms);
  m.load_s = options_.load_s;
  return m;
}

std::vector<Evaluation> SurrogateEnv::Step(const std::vector<Config>& configs) {
  std::vector<Evaluation> out;
  out.reserve(configs.size());
  for (const Config& config : configs) {
    Evaluation e;
    const std::string why = space_.WhyInvalid(config);
    if (!why.empty()) {
      e.measurement.status = Status::kInvalid;
      e.measurement.error = "not a config of this space: " + why;
      out.push_back(std::move(e));
      continue;
    }
    e.measurement = Landscape(config);
    if (e.measurement.ok()) {
      // This evaluation's noise around the landscape; the percentiles spread like a real timing's.
      const double noisy = e.measurement.ms * std::exp(options_.noise_log_std * noise_.Normal());
      e.measurement.ms = noisy;
      e.measurement.ms_p20 = noisy * std::exp(-0.5 * options_.noise_log_std);
      e.measurement.ms_p80 = noisy * std::exp(0.5 * options_.noise_log_std);
    }
    e.cost_s = Cost(e.measurement);
    out.push_back(std::move(e));
  }
  return out;
}

std::optional<Measurement> SurrogateEnv::Observe(const Config& config) const {
  (void)config;
  return std::nullopt;
}

double SurrogateEnv::Cost(const Measurement& m) const {
  // A simulated config has no recorded compile or load time: charge the typical ones.
  Measurement charged = m;
  charged.compile_s = options_.compile_s;
  charged.load_s = options_.load_s;
  return TuningCost(charged, ReplayCost{options_.timeout_s, options_.launches, options_.flush_ms, options_.overhead_s});
}

}  // namespace dr_kernel
