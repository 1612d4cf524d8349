#include "dr_kernel/model/gbdt.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "dr_kernel/rng.h"

namespace dr_kernel {

void Dataset::Add(const double* features, double target, double w) {
  x.insert(x.end(), features, features + num_features);
  y.push_back(target);
  if (!weight.empty() || w != 1.0) {
    weight.resize(y.size() - 1, 1.0);
    weight.push_back(w);
  }
}

// ---------------------------------------------------------------------------------------------
// Binning.

FeatureBins FeatureBins::Fit(const Dataset& data, int max_bins) {
  if (max_bins < 2 || max_bins > 255) throw std::invalid_argument("max_bins must be in [2, 255]");
  FeatureBins bins;
  const size_t n = data.num_rows(), nf = data.num_features;
  bins.edges_.resize(nf);
  std::vector<double> values(n);
  for (size_t f = 0; f < nf; ++f) {
    for (size_t i = 0; i < n; ++i) values[i] = data.x[i * nf + f];
    std::sort(values.begin(), values.end());
    std::vector<double>& edges = bins.edges_[f];
    const size_t distinct = static_cast<size_t>(std::unique(values.begin(), values.end()) - values.begin());
    if (distinct <= static_cast<size_t>(max_bins)) {
      for (size_t i = 0; i + 1 < distinct; ++i) edges.push_back(0.5 * (values[i] + values[i + 1]));
      continue;
    }
    // Many distinct values: cut at quantiles of the full (repeated) sample.
    for (size_t i = 0; i < n; ++i) values[i] = data.x[i * nf + f];
    std::sort(values.begin(), values.end());
    for (int q = 1; q < max_bins; ++q) {
      const size_t idx = static_cast<size_t>(static_cast<double>(q) * n / max_bins);
      if (idx == 0 || idx >= n) continue;
      const double lo = values[idx - 1], hi = values[idx];
      const double edge = lo < hi ? 0.5 * (lo + hi) : lo;
      if (edge >= values.back()) continue;  // Would leave the last bin empty.
      if (edges.empty() || edge > edges.back()) edges.push_back(edge);
    }
  }
  return bins;
}

uint8_t FeatureBins::Bin(size_t f, double v) const {
  const std::vector<double>& e = edges_[f];
  return static_cast<uint8_t>(std::lower_bound(e.begin(), e.end(), v) - e.begin());
}

std::vector<uint8_t> FeatureBins::BinRows(const Dataset& data) const {
  const size_t n = data.num_rows(), nf = data.num_features;
  std::vector<uint8_t> out(n * nf);
  for (size_t i = 0; i < n; ++i)
    for (size_t f = 0; f < nf; ++f) out[i * nf + f] = Bin(f, data.x[i * nf + f]);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Growing trees.

namespace {

struct HistBin {
  double g = 0, h = 0, n = 0;
};

struct Totals {
  double g = 0, h = 0, n = 0;
};

struct Split {
  int feature = -1;
  int active = -1;  // Position of the feature among the active ones.
  int bin = 0;
  double gain = 0;
};

class TreeGrower {
 public:
  TreeGrower(const FeatureBins& bins, const uint8_t* binned, size_t num_rows, size_t nf, const GbdtOptions& o,
             std::vector<TreeNode>& nodes, std::vector<double>& gains)
      : bins_(bins), binned_(binned), nf_(nf), o_(o), nodes_(nodes), gains_(gains) {
    offset_.resize(nf + 1, 0);
    for (size_t f = 0; f < nf; ++f) {
      offset_[f + 1] = offset_[f] + bins.edges(f).size() + 1;
      if (!bins.edges(f).empty()) active_.push_back(f);  // A feature with one bin cannot split.
    }
    // The active features' bins, contiguous per row: the histogram loop's only input.
    const size_t na = active_.size(), n = num_rows;
    compact_.resize(n * na);
    for (size_t r = 0; r < n; ++r)
      for (size_t j = 0; j < na; ++j) compact_[r * na + j] = binned[r * nf + active_[j]];
    active_offset_.resize(na);
    for (size_t j = 0; j < na; ++j) active_offset_[j] = offset_[active_[j]];
    pool_.resize(o.max_depth + 1);
    for (auto& level : pool_)
      for (auto& h : level) h.resize(offset_[nf]);
  }

  // Grows one tree over rows[0..n) with gradients g, hessians h; `allowed` marks usable features.
  // Returns the root's position in nodes.
  int32_t Grow(std::vector<int32_t>& rows, const std::vector<double>& g, const std::vector<double>& h,
               const std::vector<char>& allowed) {
    g_ = &g;
    h_ = &h;
    allowed_ = &allowed;
    const int32_t root = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
    split_active_.resize(nodes_.size(), 0);
    split_bin_.resize(nodes_.size(), 0);
    Build(rows.data(), rows.data() + rows.size(), pool_[0][0]);
    Totals totals;
    for (int32_t r : rows) {
      totals.g += g[r];
      totals.h += h[r];
      totals.n += 1;
    }
    GrowNode(root, rows.data(), rows.data() + rows.size(), 0, pool_[0][0], totals);
    return root;
  }

  // The leaf that row r of the binned data reaches from `root`: the same leaf as comparing its raw
  // values with the thresholds, since v <= edge[b] exactly when bin(v) <= b.
  int32_t Leaf(int32_t root, size_t r) const {
    const uint8_t* b = compact_.data() + r * active_.size();
    int32_t k = root;
    while (nodes_[k].feature >= 0) k = nodes_[k].left + (b[split_active_[k]] > split_bin_[k]);
    return k;
  }

 private:
  void Build(const int32_t* begin, const int32_t* end, std::vector<HistBin>& hist) const {
    std::fill(hist.begin(), hist.end(), HistBin{});
    const double* g = g_->data();
    const double* h = h_->data();
    for (const int32_t* r = begin; r != end; ++r) {
      const size_t na = active_.size();
      const uint8_t* b = compact_.data() + static_cast<size_t>(*r) * na;
      const double gi = g[*r], hi = h[*r];
      for (size_t j = 0; j < na; ++j) {
        HistBin& bin = hist[active_offset_[j] + b[j]];
        bin.g += gi;
        bin.h += hi;
        bin.n += 1;
      }
    }
  }

  Split BestSplit(const std::vector<HistBin>& hist, double G, double H, double N, Totals* left) const {
    Split best;
    best.gain = o_.min_split_gain;
    const double lambda = o_.l2, parent = G * G / (H + lambda);
    const double min_leaf = std::max(1, o_.min_samples_leaf);
    for (size_t j = 0; j < active_.size(); ++j) {
      const size_t f = active_[j];
      if (!(*allowed_)[f]) continue;
      double gl = 0, hl = 0, nl = 0;
      const size_t nb = offset_[f + 1] - offset_[f];
      for (size_t b = 0; b + 1 < nb; ++b) {
        const HistBin& bin = hist[offset_[f] + b];
        gl += bin.g;
        hl += bin.h;
        nl += bin.n;
        if (nl < min_leaf) continue;
        if (N - nl < min_leaf) break;
        const double gr = G - gl, hr = H - hl;
        if (hl <= 1e-9 || hr <= 1e-9) continue;
        const double gain = gl * gl / (hl + lambda) + gr * gr / (hr + lambda) - parent;
        // Near-ties (equal partitions summed in another order) go to the earlier feature, so that
        // an exact indicator listed first beats a continuous twin.
        if (gain > best.gain + 1e-9 * std::abs(best.gain)) {
          best.gain = gain;
          best.feature = static_cast<int>(f);
          best.active = static_cast<int>(j);
          best.bin = static_cast<int>(b);
          *left = {gl, hl, nl};
        }
      }
    }
    return best;
  }

  void GrowNode(int32_t node, int32_t* begin, int32_t* end, int depth, std::vector<HistBin>& hist,
                const Totals& totals) {
    const double G = totals.g, H = totals.h, N = totals.n;
    Split split;
    Totals left_totals;
    if (depth < o_.max_depth && N >= 2 * std::max(1, o_.min_samples_leaf))
      split = BestSplit(hist, G, H, N, &left_totals);
    if (split.feature < 0) {
      nodes_[node].feature = -1;
      nodes_[node].value = -G / (H + o_.l2) * o_.learning_rate;
      return;
    }
    gains_[split.feature] += split.gain;
    const size_t f = static_cast<size_t>(split.feature);
    const uint8_t sb = static_cast<uint8_t>(split.bin);
    const size_t na = active_.size(), j = static_cast<size_t>(split.active);
    int32_t* mid = std::stable_partition(
        begin, end, [&](int32_t r) { return compact_[static_cast<size_t>(r) * na + j] <= sb; });
    const int32_t left = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
    nodes_.emplace_back();
    split_active_.resize(nodes_.size(), 0);
    split_bin_.resize(nodes_.size(), 0);
    split_active_[node] = static_cast<uint32_t>(j);
    split_bin_[node] = sb;
    nodes_[node].feature = split.feature;
    nodes_[node].left = left;
    nodes_[node].threshold = bins_.edges(f)[split.bin];

    // Histogram of the smaller child by a pass over its rows, the other's by subtraction.
    std::vector<HistBin>& hl = pool_[depth + 1][0];
    std::vector<HistBin>& hr = pool_[depth + 1][1];
    const bool left_smaller = (mid - begin) <= (end - mid);
    std::vector<HistBin>& small = left_smaller ? hl : hr;
    std::vector<HistBin>& large = left_smaller ? hr : hl;
    if (left_smaller) {
      Build(begin, mid, small);
    } else {
      Build(mid, end, small);
    }
    for (size_t f : active_)
      for (size_t i = offset_[f]; i < offset_[f + 1]; ++i) {
        large[i].g = hist[i].g - small[i].g;
        large[i].h = hist[i].h - small[i].h;
        large[i].n = hist[i].n - small[i].n;
      }
    const Totals right_totals = {G - left_totals.g, H - left_totals.h, N - left_totals.n};
    GrowNode(left, begin, mid, depth + 1, hl, left_totals);
    GrowNode(left + 1, mid, end, depth + 1, hr, right_totals);
  }

  const FeatureBins& bins_;
  const uint8_t* binned_;
  size_t nf_;
  const GbdtOptions& o_;
  std::vector<TreeNode>& nodes_;
  std::vector<double>& gains_;
  std::vector<size_t> offset_;                             // First histogram bin of each feature.
  std::vector<size_t> active_;                             // Features with more than one bin.
  std::vector<uint8_t> compact_;                           // Bins of the active features, row-major.
  std::vector<uint32_t> split_active_;                     // Per node: the active feature it splits on.
  std::vector<uint8_t> split_bin_;                         // Per node: the last bin that goes left.
  std::vector<size_t> active_offset_;                      // offset_ of each active feature.
  std::vector<std::array<std::vector<HistBin>, 2>> pool_;  // Two child histograms per depth.
  const std::vector<double>* g_ = nullptr;
  const std::vector<double>* h_ = nullptr;
  const std::vector<char>* allowed_ = nullptr;
};

double Sigmoid(double s) { return 1.0 / (1.0 + std::exp(-s)); }

}  // namespace

void Gbdt::Fit(const Dataset& data, const GbdtOptions& options) {
  const FeatureBins bins = FeatureBins::Fit(data, options.max_bins);
  Fit(data, bins, bins.BinRows(data), options);
}

void Gbdt::Fit(const Dataset& data, const FeatureBins& bins, const std::vector<uint8_t>& binned,
               const GbdtOptions& o) {
  const size_t n = data.num_rows(), nf = data.num_features;
  if (n == 0) throw std::invalid_argument("cannot fit trees to an empty data set; add measured rows first");
  if (data.x.size() != n * nf || bins.num_features() != nf || binned.size() != n * nf)
    throw std::invalid_argument("the data set, its bins and its binned rows disagree in size");
  if (o.num_trees < 0 || o.max_depth < 0 || o.max_depth > 30 || !(o.learning_rate > 0) || !(o.l2 >= 0) ||
      !(o.subsample > 0 && o.subsample <= 1) || !(o.colsample > 0 && o.colsample <= 1))
    throw std::invalid_argument(
        "tree options out of range: need num_trees >= 0, 0 <= max_depth <= 30, learning_rate > 0, l2 >= 0 "
        "and subsample, colsample in (0, 1]");
  num_features_ = nf;
  nodes_.clear();
  roots_.clear();
  gains_.assign(nf, 0.0);

  std::vector<double> w(n, 1.0);
  if (!data.weight.empty()) w = data.weight;
  std::vector<int32_t> candidates;
  double sw = 0, swy = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!(w[i] > 0)) continue;
    candidates.push_back(static_cast<int32_t>(i));
    sw += w[i];
    swy += w[i] * data.y[i];
  }
  if (candidates.empty()) throw std::invalid_argument("every row has weight 0; nothing to fit");
  const double mean = swy / sw;
  if (o.loss == Loss::kLogistic) {
    const double p = std::clamp(mean, 1e-6, 1 - 1e-6);
    base_score_ = std::log(p / (1 - p));
  } else {
    base_score_ = mean;
  }

  Rng rng(o.seed);
  TreeGrower grower(bins, binned.data(), n, nf, o, nodes_, gains_);
  std::vector<double> score(n, base_score_), g(n, 0.0), h(n, 0.0);
  std::vector<int32_t> rows;
  std::vector<char> allowed(nf, 1);
  for (int t = 0; t < o.num_trees; ++t) {
    for (int32_t i : candidates) {
      if (o.loss == Loss::kLogistic) {
        const double p = Sigmoid(score[i]);
        g[i] = (p - data.y[i]) * w[i];
        h[i] = std::max(p * (1 - p), 1e-6) * w[i];
      } else {
        g[i] = (score[i] - data.y[i]) * w[i];
        h[i] = w[i];
      }
    }
    rows.clear();
    for (int32_t i : candidates)
      if (o.subsample >= 1 || rng.Uniform() < o.subsample) rows.push_back(i);
    if (rows.empty()) rows.push_back(candidates[rng.Below(candidates.size())]);
    if (o.colsample < 1) {
      bool any = false;
      for (size_t f = 0; f < nf; ++f) any |= (allowed[f] = rng.Uniform() < o.colsample);
      if (!any) allowed[rng.Below(nf)] = 1;
    }
    const int32_t root = grower.Grow(rows, g, h, allowed);
    roots_.push_back(root);
    // Update every candidate's score (rows outside the subsample too).
    for (int32_t i : candidates) score[i] += nodes_[grower.Leaf(root, static_cast<size_t>(i))].value;
  }
  Pack();
}

void Gbdt::Pack() {
  packed_.resize(nodes_.size());
  leaf_.assign(nodes_.size(), 0.0);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const TreeNode& n = nodes_[i];
    if (n.feature < 0) {
      packed_[i] = {std::numeric_limits<double>::infinity(), 0, static_cast<int32_t>(i)};
      leaf_[i] = n.value;
    } else {
      packed_[i] = {n.threshold, n.feature, n.left};
    }
  }
  // Depth of each tree, then the deepest of each group.
  std::vector<int> depth(nodes_.size(), 0);
  group_depth_.assign((roots_.size() + kGroup - 1) / kGroup, 0);
  for (size_t t = 0; t < roots_.size(); ++t) {
    int deepest = 0;
    std::vector<std::pair<int32_t, int>> stack = {{roots_[t], 0}};
    while (!stack.empty()) {
      const auto [k, d] = stack.back();
      stack.pop_back();
      deepest = std::max(deepest, d);
      if (nodes_[k].feature >= 0) {
        stack.push_back({nodes_[k].left, d + 1});
        stack.push_back({nodes_[k].left + 1, d + 1});
      }
    }
    group_depth_[t / kGroup] = std::max(group_depth_[t / kGroup], deepest);
  }
}

double Gbdt::Predict(const double* x) const {
  double s = base_score_;
  const PackedNode* nodes = packed_.data();
  const size_t num_trees = roots_.size();
  size_t t = 0;
  // Whole groups: kGroup independent walks interleaved, which keeps the core busy while each
  // walk waits for its next node.
  for (; t + kGroup <= num_trees; t += kGroup) {
    int32_t k[kGroup];
    for (size_t j = 0; j < kGroup; ++j) k[j] = roots_[t + j];
    const int steps = group_depth_[t / kGroup];
    for (int step = 0; step < steps; ++step)
      for (size_t j = 0; j < kGroup; ++j) {
        const PackedNode& n = nodes[k[j]];
        k[j] = n.left + (x[n.feature] > n.threshold);
      }
    for (size_t j = 0; j < kGroup; ++j) s += leaf_[k[j]];
  }
  for (; t < num_trees; ++t) {
    int32_t k = roots_[t];
    while (nodes[k].left != k) k = nodes[k].left + (x[nodes[k].feature] > nodes[k].threshold);
    s += leaf_[k];
  }
  return s;
}

double Gbdt::PredictProbability(const double* x) const { return Sigmoid(Predict(x)); }

// ---------------------------------------------------------------------------------------------
// Streams.

namespace io {

void WriteU64(std::ostream& out, uint64_t v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); }
void WriteF64(std::ostream& out, double v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); }
void WriteString(std::ostream& out, const std::string& s) {
  WriteU64(out, s.size());
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
}

namespace {
[[noreturn]] void Truncated(const char* what) {
  throw ModelError(std::string("the model stream ends (or fails) while reading ") + what +
                   "; the file is truncated or not a dr_kernel model: save it again");
}
}  // namespace

uint64_t ReadU64(std::istream& in, const char* what) {
  uint64_t v = 0;
  if (!in.read(reinterpret_cast<char*>(&v), sizeof v)) Truncated(what);
  return v;
}

double ReadF64(std::istream& in, const char* what) {
  double v = 0;
  if (!in.read(reinterpret_cast<char*>(&v), sizeof v)) Truncated(what);
  return v;
}

std::string ReadString(std::istream& in, const char* what) {
  const uint64_t size = ReadU64(in, what);
  if (size > (1u << 20)) Truncated(what);
  std::string s(size, '\0');
  if (size && !in.read(s.data(), static_cast<std::streamsize>(size))) Truncated(what);
  return s;
}

}  // namespace io

void Gbdt::Save(std::ostream& out) const {
  io::WriteString(out, "gbdt");
  io::WriteF64(out, base_score_);
  io::WriteU64(out, num_features_);
  io::WriteU64(out, nodes_.size());
  for (const TreeNode& node : nodes_) {
    io::WriteU64(out, static_cast<uint64_t>(static_cast<int64_t>(node.feature)));
    io::WriteU64(out, static_cast<uint64_t>(static_cast<int64_t>(node.left)));
    io::WriteF64(out, node.threshold);
    io::WriteF64(out, node.value);
  }
  io::WriteU64(out, roots_.size());
  for (int32_t r : roots_) io::WriteU64(out, static_cast<uint64_t>(r));
  for (double g : gains_) io::WriteF64(out, g);
}

Gbdt Gbdt::Load(std::istream& in) {
  if (io::ReadString(in, "the tree-ensemble tag") != "gbdt")
    throw ModelError("the model stream does not hold a tree ensemble where one was expected; it is corrupt");
  Gbdt m;
  m.base_score_ = io::ReadF64(in, "the base score");
  m.num_features_ = io::ReadU64(in, "the feature count");
  const uint64_t num_nodes = io::ReadU64(in, "the node count");
  if (m.num_features_ > 100000 || num_nodes > (1u << 28))
    throw ModelError("the model stream declares an implausible tree ensemble; it is corrupt");
  m.nodes_.resize(num_nodes);
  for (size_t i = 0; i < m.nodes_.size(); ++i) {
    TreeNode& node = m.nodes_[i];
    node.feature = static_cast<int32_t>(static_cast<int64_t>(io::ReadU64(in, "a tree node")));
    node.left = static_cast<int32_t>(static_cast<int64_t>(io::ReadU64(in, "a tree node")));
    node.threshold = io::ReadF64(in, "a tree node");
    node.value = io::ReadF64(in, "a tree node");
    const bool leaf = node.feature < 0;
    if (!leaf && (node.feature >= static_cast<int64_t>(m.num_features_) ||
                  node.left <= static_cast<int64_t>(i) || static_cast<uint64_t>(node.left) + 1 >= num_nodes))
      throw ModelError("the model stream has a tree node that points outside its tree; it is corrupt");
  }
  const uint64_t num_roots = io::ReadU64(in, "the tree count");
  if (num_roots > num_nodes) throw ModelError("the model stream has more trees than nodes; it is corrupt");
  m.roots_.resize(num_roots);
  for (int32_t& r : m.roots_) {
    r = static_cast<int32_t>(io::ReadU64(in, "a tree root"));
    if (r < 0 || static_cast<uint64_t>(r) >= num_nodes)
      throw ModelError("the model stream has a tree root outside its nodes; it is corrupt");
  }
  m.gains_.resize(m.num_features_);
  for (double& g : m.gains_) g = io::ReadF64(in, "the split gains");
  m.Pack();
  return m;
}

}  // namespace dr_kernel
