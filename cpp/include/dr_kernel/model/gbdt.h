// Gradient-boosted regression trees, written for the cost model: histogram splits on features
// pre-binned at quantile edges, depth-limited trees, shrinkage, a minimum leaf size, L2-regularised
// leaf values, row and column subsampling, squared or logistic loss, and sample weights.
#ifndef DR_KERNEL_MODEL_GBDT_H_
#define DR_KERNEL_MODEL_GBDT_H_

#include <cstdint>
#include <istream>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace dr_kernel {

// A model stream that cannot be read back (wrong kind, other version, truncated, inconsistent).
// The message names what was expected and what to do.
class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Rows of features and their targets, row-major: row i is x[i * num_features ...].
struct Dataset {
  size_t num_features = 0;
  std::vector<double> x;
  std::vector<double> y;
  std::vector<double> weight;  // Empty means every row weighs 1.

  size_t num_rows() const { return y.size(); }
  const double* row(size_t i) const { return x.data() + i * num_features; }
  // Appends one row of num_features values.
  void Add(const double* features, double target, double w = 1.0);
};

// Quantile bin edges of each feature: values <= edges[f][b] and > edges[f][b - 1] fall in bin b.
// At most max_bins bins (so at most max_bins - 1 edges) per feature.
class FeatureBins {
 public:
  FeatureBins() = default;
  // Edges from the distinct values of each feature: midpoints between neighbours when there are
  // few, quantile cuts otherwise.
  static FeatureBins Fit(const Dataset& data, int max_bins);

  size_t num_features() const { return edges_.size(); }
  const std::vector<double>& edges(size_t feature) const { return edges_[feature]; }
  // Bin of value v of feature f.
  uint8_t Bin(size_t f, double v) const;
  // Every row's bins, row-major (num_rows x num_features).
  std::vector<uint8_t> BinRows(const Dataset& data) const;

 private:
  std::vector<std::vector<double>> edges_;
};

// What the trees minimise: squared error of a real target, or log loss of a 0/1 target.
enum class Loss { kSquared, kLogistic };

// Settings of one boosted ensemble.
struct GbdtOptions {
  Loss loss = Loss::kSquared;
  int num_trees = 200;
  int max_depth = 6;
  double learning_rate = 0.1;
  int min_samples_leaf = 5;     // Fewest rows in a leaf.
  double l2 = 1.0;              // L2 penalty on leaf values (lambda).
  double min_split_gain = 0.0;  // A split must reduce the loss by more than this.
  double subsample = 0.8;       // Fraction of rows each tree sees (without replacement).
  double colsample = 1.0;       // Fraction of features each tree may split on.
  int max_bins = 64;            // At most 255.
  uint64_t seed = 0;            // Drives row and column subsampling.
};

// One tree node in a flat array; a leaf has feature -1.
struct TreeNode {
  int32_t feature = -1;
  int32_t left = -1;     // The right child is left + 1.
  double threshold = 0;  // Rows with x[feature] <= threshold go left.
  double value = 0;      // Leaf output (learning rate applied).
};

// A fitted boosted ensemble. Prediction walks the trees over raw feature values.
class Gbdt {
 public:
  // Fits to the data. Rows with weight 0 are left out. Throws std::invalid_argument for empty data
  // or bad options.
  void Fit(const Dataset& data, const GbdtOptions& options);
  // The same, with bins and binned rows already computed (shared by the members of an ensemble).
  void Fit(const Dataset& data, const FeatureBins& bins, const std::vector<uint8_t>& binned,
           const GbdtOptions& options);

  // The raw score: the prediction for squared loss, the log-odds for logistic loss.
  double Predict(const double* features) const;
  // 1 / (1 + exp(-score)), for logistic loss.
  double PredictProbability(const double* features) const;

  size_t num_trees() const { return roots_.size(); }
  size_t num_features() const { return num_features_; }
  size_t num_nodes() const { return nodes_.size(); }
  // Total loss reduction of the splits on each feature (a feature-importance measure).
  std::vector<double> SplitGains() const { return gains_; }

  void Save(std::ostream& out) const;
  // Throws ModelError when the stream does not hold a tree ensemble.
  static Gbdt Load(std::istream& in);

 private:
  // The nodes laid out for prediction: a leaf points to itself with an infinite threshold, so that
  // every tree of a group can be walked the same number of steps, several trees at once.
  struct PackedNode {
    double threshold;
    int32_t feature;
    int32_t left;
  };
  static constexpr size_t kGroup = 8;  // Trees walked together.
  void Pack();

  double base_score_ = 0;
  size_t num_features_ = 0;
  std::vector<TreeNode> nodes_;
  std::vector<int32_t> roots_;
  std::vector<double> gains_;
  std::vector<PackedNode> packed_;
  std::vector<double> leaf_;      // Leaf value by node (0 for split nodes).
  std::vector<int> group_depth_;  // Deepest tree of each group of kGroup trees.
};

// Binary stream helpers shared by the model files: fixed-width little-endian-as-stored values with
// checks that say which field was cut short.
namespace io {
void WriteU64(std::ostream& out, uint64_t v);
void WriteF64(std::ostream& out, double v);
void WriteString(std::ostream& out, const std::string& s);
uint64_t ReadU64(std::istream& in, const char* what);
double ReadF64(std::istream& in, const char* what);
std::string ReadString(std::istream& in, const char* what);
}  // namespace io

}  // namespace dr_kernel

#endif  // DR_KERNEL_MODEL_GBDT_H_
