#include "dr_kernel/rl/mlp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "test_util.h"

namespace dr_kernel::rl {
namespace {

using testing::NumericGradient;
using testing::RandomMatrix;
using testing::RelativeError;

// A network with nonzero biases, so that their gradients are exercised too.
Mlp RandomMlp(const std::vector<int>& sizes, uint64_t seed) {
  Rng rng(seed);
  Mlp mlp(sizes, rng, InitScheme::kScaledNormal, 1.5, 1.0);
  Eigen::VectorXd p = mlp.params();
  for (Eigen::Index i = 0; i < p.size(); ++i) p(i) += 0.1 * rng.Normal();
  mlp.set_params(p);
  return mlp;
}

TEST(MlpTest, RejectsBadSizes) {
  EXPECT_THROW(Mlp({3}), std::invalid_argument);
  EXPECT_THROW(Mlp({3, 0, 2}), std::invalid_argument);
  Mlp mlp({3, 4, 2});
  EXPECT_EQ(mlp.num_params(), (3 + 1) * 4 + (4 + 1) * 2);
  EXPECT_THROW(mlp.Forward(Eigen::MatrixXd::Zero(2, 4)), std::invalid_argument);
  EXPECT_THROW(mlp.set_params(Eigen::VectorXd::Zero(5)), std::invalid_argument);
}

TEST(MlpTest, ForwardMatchesTheDefinition) {
  const Mlp mlp = RandomMlp({4, 6, 5, 3}, 1);
  Rng rng(2);
  const Eigen::MatrixXd x = RandomMatrix(7, 4, rng);
  Eigen::MatrixXd h = x;
  for (int l = 0; l < mlp.num_layers(); ++l) {
    Eigen::MatrixXd z = (h * mlp.weights(l)).rowwise() + mlp.bias(l).transpose();
    h = l + 1 < mlp.num_layers() ? Eigen::MatrixXd(z.array().tanh().matrix()) : z;
  }
  const Eigen::MatrixXd y = mlp.Forward(x);
  EXPECT_LT((y - h).cwiseAbs().maxCoeff(), 1e-13);
  MlpCache cache;
  EXPECT_EQ(mlp.Forward(x, &cache), y);  // The cached pass computes the very same numbers.
}

TEST(MlpTest, TanhIsAccurate) {
  std::vector<double> xs;
  for (double x = -25; x <= 25; x += 0.001) xs.push_back(x);
  for (double x = 1e-300; x < 1; x *= 1.5) {
    xs.push_back(x);
    xs.push_back(-x);
  }
  xs.push_back(0.0);
  xs.push_back(-0.0);
  xs.push_back(1e300);
  xs.push_back(-std::numeric_limits<double>::infinity());
  xs.push_back(std::numeric_limits<double>::infinity());
  std::vector<double> ys = xs;
  TanhInPlace(ys.data(), static_cast<Eigen::Index>(ys.size()));
  for (size_t i = 0; i < xs.size(); ++i) {
    const double expected = std::tanh(xs[i]);
    ASSERT_LE(std::abs(ys[i] - expected), 1e-15 * std::abs(expected)) << "x = " << xs[i];
    ASSERT_EQ(std::signbit(ys[i]), std::signbit(expected)) << "x = " << xs[i];
  }
  double nan = std::numeric_limits<double>::quiet_NaN();
  TanhInPlace(&nan, 1);
  EXPECT_TRUE(std::isnan(nan));
  // The vector and scalar paths agree: an odd count sends the last element down the scalar path.
  std::vector<double> odd = {0.3, -1.7, 0.3}, even = {0.3, 0.3};
  TanhInPlace(odd.data(), 3);
  TanhInPlace(even.data(), 2);
  EXPECT_EQ(odd[2], even[0]);
}

TEST(MlpTest, GradientsMatchFiniteDifferences) {
  Mlp mlp = RandomMlp({5, 8, 7, 3}, 3);
  Rng rng(4);
  const Eigen::MatrixXd x = RandomMatrix(6, 5, rng);
  const Eigen::MatrixXd g = RandomMatrix(6, 3, rng);  // Loss = sum(g .* output).
  MlpCache cache;
  mlp.Forward(x, &cache);
  Eigen::VectorXd grad = Eigen::VectorXd::Zero(mlp.num_params());
  Eigen::MatrixXd grad_x;
  mlp.Backward(cache, g, &grad, &grad_x);

  const Eigen::VectorXd numeric = NumericGradient(
      [&](const Eigen::VectorXd& p) {
        Mlp m = mlp;
        m.set_params(p);
        return (m.Forward(x).array() * g.array()).sum();
      },
      mlp.params());
  EXPECT_LT(RelativeError(grad, numeric), 1e-6);

  const Eigen::VectorXd x_flat = Eigen::Map<const Eigen::VectorXd>(x.data(), x.size());
  const Eigen::VectorXd numeric_x = NumericGradient(
      [&](const Eigen::VectorXd& flat) {
        const Eigen::MatrixXd xi = Eigen::Map<const Eigen::MatrixXd>(flat.data(), x.rows(), x.cols());
        return (mlp.Forward(xi).array() * g.array()).sum();
      },
      x_flat);
  EXPECT_LT(RelativeError(Eigen::Map<const Eigen::VectorXd>(grad_x.data(), grad_x.size()), numeric_x), 1e-6);

  // Backward adds to what the gradient vector holds.
  Eigen::VectorXd twice = grad;
  mlp.Backward(cache, g, &twice);
  EXPECT_LT((twice - 2 * grad).norm(), 1e-12 * grad.norm());
}

TEST(MlpTest, OrthogonalInitialisation) {
  Rng rng(5);
  const Mlp mlp({10, 16, 4}, rng, InitScheme::kOrthogonal, 2.0, 0.5);
  // 10 x 16: orthonormal rows scaled by the gain; 16 x 4: orthonormal columns.
  const Eigen::MatrixXd w0 = mlp.weights(0), w1 = mlp.weights(1);
  EXPECT_LT((w0 * w0.transpose() - 4.0 * Eigen::MatrixXd::Identity(10, 10)).cwiseAbs().maxCoeff(), 1e-12);
  EXPECT_LT((w1.transpose() * w1 - 0.25 * Eigen::MatrixXd::Identity(4, 4)).cwiseAbs().maxCoeff(), 1e-12);
  EXPECT_EQ(mlp.bias(0).cwiseAbs().maxCoeff(), 0.0);
  EXPECT_EQ(mlp.bias(1).cwiseAbs().maxCoeff(), 0.0);
  Rng same(5);
  EXPECT_EQ(Mlp({10, 16, 4}, same, InitScheme::kOrthogonal, 2.0, 0.5).params(), mlp.params());
}

TEST(MlpTest, ScaledNormalInitialisation) {
  Rng rng(6);
  const Mlp mlp({400, 300, 1}, rng, InitScheme::kScaledNormal, 1.0, 1.0);
  const Eigen::MatrixXd w = mlp.weights(0);
  const double std = std::sqrt(w.array().square().mean());
  EXPECT_NEAR(std, 1.0 / std::sqrt(400.0), 0.01 / std::sqrt(400.0) * 5);
  EXPECT_NEAR(w.mean(), 0.0, 0.002);
}

TEST(MlpTest, SaveLoadRoundTripIsBitIdentical) {
  const Mlp mlp = RandomMlp({5, 9, 4}, 7);
  std::stringstream stream;
  mlp.Save(stream);
  const Mlp loaded = Mlp::Load(stream);
  EXPECT_EQ(loaded.sizes(), mlp.sizes());
  EXPECT_EQ(loaded.params(), mlp.params());
  Rng rng(8);
  const Eigen::MatrixXd x = RandomMatrix(11, 5, rng);
  EXPECT_EQ(loaded.Forward(x), mlp.Forward(x));
}

TEST(MlpTest, LoadRejectsTruncatedAndForeignStreams) {
  const Mlp mlp = RandomMlp({3, 4, 2}, 9);
  std::stringstream stream;
  mlp.Save(stream);
  const std::string bytes = stream.str();
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    std::istringstream truncated(bytes.substr(0, cut));
    try {
      Mlp::Load(truncated);
      FAIL() << "a stream cut to " << cut << " bytes loaded";
    } catch (const ModelFormatError& e) {
      EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    }
  }
  std::istringstream foreign("this is not a model at all, just text");
  try {
    Mlp::Load(foreign);
    FAIL() << "a text stream loaded";
  } catch (const ModelFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("not such a dr_kernel model file"), std::string::npos) << e.what();
  }
  std::string corrupt = bytes;
  corrupt[corrupt.size() - 20] ^= 0x01;  // A bit of the last parameter.
  std::istringstream corrupt_stream(corrupt);
  EXPECT_THROW(Mlp::Load(corrupt_stream), ModelFormatError);
  std::string miscounted = bytes;
  miscounted[8 + 4 + 4 + 3 * 8 + 5] = 0x7f;  // A huge parameter count (after magic, version, sizes).
  std::istringstream miscounted_stream(miscounted);
  try {
    Mlp::Load(miscounted_stream);
    FAIL() << "an inconsistent header loaded";
  } catch (const ModelFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
  std::string newer = bytes;
  newer[8] = 9;  // The version field follows the 8-byte magic.
  std::istringstream newer_stream(newer);
  try {
    Mlp::Load(newer_stream);
    FAIL() << "a newer version loaded";
  } catch (const ModelFormatError& e) {
    EXPECT_NE(std::string(e.what()).find("version 9"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dr_kernel::rl
