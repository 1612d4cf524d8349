// A multilayer perceptron on Eigen: the function approximator of the reinforcement-learning room.
#ifndef DR_KERNEL_RL_MLP_H_
#define DR_KERNEL_RL_MLP_H_

#include <Eigen/Dense>
#include <istream>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dr_kernel/rng.h"

namespace dr_kernel::rl {

// A model file or stream that cannot be read: wrong kind of file, unknown version, inconsistent
// shapes or cut short. The message says which and what to do.
class ModelFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How Mlp::Initialize draws the weights; biases always start at zero.
enum class InitScheme {
  // Each weight matrix is a random (semi-)orthogonal matrix times the layer's gain.
  kOrthogonal,
  // Each weight is normal with standard deviation gain / sqrt(fan_in).
  kScaledNormal,
};

// What a forward pass keeps for the backward pass: the input of every layer (the batch itself,
// then each hidden layer's tanh activations) and the network's output.
struct MlpCache {
  std::vector<Eigen::MatrixXd> inputs;
  Eigen::MatrixXd output;
};

// A fully connected network: tanh after every hidden layer, a linear output layer. Batches are
// matrices with one sample per row. All parameters live in one flat vector (for each layer its
// weights, in column-major order of an in x out matrix, then its bias), which is what optimisers,
// gradients and files see.
class Mlp {
 public:
  Mlp() = default;
  // A network with layer widths `sizes` (input, hidden..., output) and all parameters zero. Throws
  // std::invalid_argument when there are fewer than two sizes or one is not positive.
  explicit Mlp(std::vector<int> sizes);
  // The same network, initialised by Initialize(rng, scheme, hidden_gain, output_gain).
  Mlp(std::vector<int> sizes, Rng& rng, InitScheme scheme = InitScheme::kOrthogonal,
      double hidden_gain = 1.4142135623730951, double output_gain = 1.0);

  // Redraws every weight from `rng` (hidden layers scaled by hidden_gain, the output layer by
  // output_gain) and zeroes every bias.
  void Initialize(Rng& rng, InitScheme scheme, double hidden_gain, double output_gain);

  const std::vector<int>& sizes() const { return sizes_; }
  int input_size() const { return sizes_.empty() ? 0 : sizes_.front(); }
  int output_size() const { return sizes_.empty() ? 0 : sizes_.back(); }
  // Number of weight layers (one fewer than sizes()).
  int num_layers() const { return static_cast<int>(sizes_.size()) - 1; }
  Eigen::Index num_params() const { return params_.size(); }

  // Every parameter as one flat vector, in the layout described above.
  const Eigen::VectorXd& params() const { return params_; }
  // Replaces every parameter; throws std::invalid_argument when the size differs from num_params().
  void set_params(const Eigen::VectorXd& params);
  // Direct access for optimisers, which update the parameters in place.
  Eigen::VectorXd& mutable_params() { return params_; }

  // Views of layer `layer`'s weights (in x out) and bias (out) inside params().
  Eigen::Map<const Eigen::MatrixXd> weights(int layer) const;
  Eigen::Map<const Eigen::VectorXd> bias(int layer) const;

  // The outputs (batch x output_size) for inputs `x` (batch x input_size).
  Eigen::MatrixXd Forward(const Eigen::MatrixXd& x) const;
  // The same, keeping what Backward needs in `cache`; returns cache->output.
  const Eigen::MatrixXd& Forward(const Eigen::MatrixXd& x, MlpCache* cache) const;

  // Back-propagates `grad_output`, the gradient of a scalar loss with respect to the outputs of the
  // forward pass that filled `cache`, and ADDS the loss's gradient with respect to params() to
  // `grad_params` (which must have num_params() entries). When `grad_input` is not null it receives
  // the gradient with respect to the inputs.
  void Backward(const MlpCache& cache, const Eigen::MatrixXd& grad_output, Eigen::VectorXd* grad_params,
                Eigen::MatrixXd* grad_input = nullptr) const;

  // Writes the network (format "DRKMLP", version 1: layer sizes, parameters as little-endian IEEE
  // doubles and a checksum) so that Load gives back bit-identical outputs.
  void Save(std::ostream& out) const;
  // Reads a network written by Save; throws ModelFormatError for anything else, a newer version, a
  // truncated stream or a checksum mismatch.
  static Mlp Load(std::istream& in);

 private:
  void Layout();

  std::vector<int> sizes_;
  std::vector<Eigen::Index> offsets_;  // Where each layer's weights start in params_.
  Eigen::VectorXd params_;
};

// tanh of every element in place. Vectorised and accurate to a few units in the last place; plain
// std::tanh on doubles is scalar in Eigen 3.4 and was the largest cost after the matrix products.
void TanhInPlace(double* values, Eigen::Index count);

}  // namespace dr_kernel::rl

#endif  // DR_KERNEL_RL_MLP_H_
