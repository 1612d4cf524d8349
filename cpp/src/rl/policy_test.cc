#include "dr_kernel/rl/policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "test_util.h"

namespace dr_kernel::rl {
namespace {

using testing::NumericGradient;
using testing::RandomAllowedActions;
using testing::RandomMask;
using testing::RandomMatrix;
using testing::RelativeError;

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(MaskedSoftmaxTest, NormalisesOverAllowedActionsOnly) {
  Eigen::MatrixXd logits(2, 4);
  logits << 1.0, 2.0, 1e300, 3.0,  //
      -5.0, std::numeric_limits<double>::quiet_NaN(), 0.0, 0.0;
  MaskMatrix mask(2, 4);
  mask << 1, 1, 0, 1,  //
      1, 0, 1, 1;
  const Eigen::MatrixXd lp = MaskedLogSoftmax(logits, mask);
  EXPECT_EQ(lp(0, 2), -kInf);
  EXPECT_EQ(lp(1, 1), -kInf);  // A masked logit cannot poison its row, even when NaN.
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(lp.row(i).array().exp().sum(), 1.0, 1e-15);
  EXPECT_NEAR(lp(0, 1) - lp(0, 0), 1.0, 1e-15);
  EXPECT_NEAR(lp(1, 2), lp(1, 3), 1e-15);
}

TEST(MaskedSoftmaxTest, EntropyOfAUniformChoice) {
  MaskMatrix mask(1, 5);
  mask << 1, 0, 1, 1, 0;
  const Eigen::VectorXd h = Entropy(MaskedLogSoftmax(Eigen::MatrixXd::Constant(1, 5, 0.7), mask));
  EXPECT_NEAR(h(0), std::log(3.0), 1e-15);
}

TEST(MaskedSoftmaxTest, RejectsARowWithNoAllowedAction) {
  MaskMatrix mask = MaskMatrix::Ones(3, 4);
  mask.row(1).setZero();
  try {
    MaskedLogSoftmax(Eigen::MatrixXd::Zero(3, 4), mask);
    FAIL() << "an empty row was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("Row 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(MaskedLogSoftmax(Eigen::MatrixXd::Zero(3, 5), MaskMatrix::Ones(3, 4)), std::invalid_argument);
}

// The policy's loss  sum_i w_i log pi(a_i) + c_i H_i  through the masked softmax, against finite
// differences in the logits.
TEST(MaskedSoftmaxTest, PolicyLossGradientMatchesFiniteDifferences) {
  Rng rng(11);
  const Eigen::Index n = 9, k = 6;
  const MaskMatrix mask = RandomMask(n, k, 0.6, rng);
  const Eigen::MatrixXd logits = 2.0 * RandomMatrix(n, k, rng);
  const std::vector<int> actions = RandomAllowedActions(mask, rng);
  const Eigen::VectorXd w = RandomMatrix(n, 1, rng).col(0), c = RandomMatrix(n, 1, rng).col(0);
  auto loss = [&](const Eigen::VectorXd& flat) {
    const Eigen::MatrixXd z = Eigen::Map<const Eigen::MatrixXd>(flat.data(), n, k);
    const Eigen::MatrixXd lp = MaskedLogSoftmax(z, mask);
    const Eigen::VectorXd h = Entropy(lp);
    double total = 0;
    for (Eigen::Index i = 0; i < n; ++i) total += w(i) * lp(i, actions[i]) + c(i) * h(i);
    return total;
  };
  const Eigen::MatrixXd grad = LogProbGradient(MaskedLogSoftmax(logits, mask), actions, w, c);
  const Eigen::VectorXd flat_logits = Eigen::Map<const Eigen::VectorXd>(logits.data(), logits.size());
  const Eigen::VectorXd numeric = NumericGradient(loss, flat_logits);
  EXPECT_LT(RelativeError(Eigen::Map<const Eigen::VectorXd>(grad.data(), grad.size()), numeric), 1e-6);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = 0; j < k; ++j) {
      if (!mask(i, j)) {
        EXPECT_EQ(grad(i, j), 0.0);
      }
    }
  }
}

TEST(SamplingTest, NeverDrawsAMaskedAction) {
  Rng rng(12);
  const Eigen::Index n = 200, k = 7;
  const MaskMatrix mask = RandomMask(n, k, 0.3, rng);
  Eigen::MatrixXd logits = RandomMatrix(n, k, rng);
  // Masked actions get the largest logits: only the mask keeps them out.
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = 0; j < k; ++j) {
      if (!mask(i, j)) logits(i, j) = 50.0;
    }
  }
  const Eigen::MatrixXd lp = MaskedLogSoftmax(logits, mask);
  Eigen::MatrixXd counts = Eigen::MatrixXd::Zero(n, k);
  const int draws = 500;
  for (int d = 0; d < draws; ++d) {
    const std::vector<int> actions = SampleActions(lp, rng);
    for (Eigen::Index i = 0; i < n; ++i) {
      ASSERT_TRUE(mask(i, actions[i])) << "row " << i << " drew masked action " << actions[i];
      counts(i, actions[i]) += 1;
    }
  }
  // The frequencies follow the probabilities (pooled over rows: 100000 draws in all).
  const Eigen::MatrixXd expected = draws * lp.array().exp().matrix();
  const double chi = ((counts - expected).array().square() / expected.array().max(1e-12)).sum();
  const double dof = mask.cast<double>().sum() - n;
  EXPECT_LT(chi, dof + 6 * std::sqrt(2 * dof));
  const std::vector<int> greedy = GreedyActions(lp);
  for (Eigen::Index i = 0; i < n; ++i) {
    ASSERT_TRUE(mask(i, greedy[i]));
    Eigen::Index best;
    lp.row(i).maxCoeff(&best);
    EXPECT_EQ(greedy[i], best);
  }
}

TEST(ActorCriticTest, ShapesAndActions) {
  Rng rng(13);
  const ActorCritic model(6, 4, {16, 16}, rng);
  EXPECT_EQ(model.observation_size(), 6);
  EXPECT_EQ(model.num_actions(), 4);
  const Eigen::MatrixXd obs = RandomMatrix(5, 6, rng);
  MaskMatrix mask = MaskMatrix::Ones(5, 4);
  mask(0, 0) = mask(0, 1) = mask(0, 2) = 0;
  const ActResult act = model.Sample(obs, mask, rng);
  ASSERT_EQ(act.actions.size(), 5u);
  EXPECT_EQ(act.actions[0], 3);
  EXPECT_EQ(act.log_probs(0), 0.0);  // The only allowed action is certain.
  const Eigen::MatrixXd lp = model.LogProbs(obs, mask);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(act.log_probs(i), lp(i, act.actions[i]));
  EXPECT_EQ(act.values, model.Values(obs));
  EXPECT_EQ(model.Greedy(obs, mask)[0], 3);
  // The actor's small output gain makes the initial policy close to uniform.
  EXPECT_LT((lp.bottomRows(4).array() + std::log(4.0)).abs().maxCoeff(), 0.05);
  EXPECT_THROW(ActorCritic(Mlp({6, 4}), Mlp({5, 1})), std::invalid_argument);
  EXPECT_THROW(ActorCritic(Mlp({6, 4}), Mlp({6, 2})), std::invalid_argument);
}

TEST(ActorCriticTest, SaveLoadRoundTripIsBitIdentical) {
  Rng rng(14);
  ActorCritic model(8, 5, {12, 10}, rng);
  Eigen::VectorXd p = model.critic().params();
  for (Eigen::Index i = 0; i < p.size(); ++i) p(i) += 0.05 * rng.Normal();  // Nonzero biases too.
  model.critic().set_params(p);
  std::stringstream stream;
  model.Save(stream);
  const std::string bytes = stream.str();
  const ActorCritic loaded = ActorCritic::Load(stream);
  const Eigen::MatrixXd obs = RandomMatrix(20, 8, rng);
  const MaskMatrix mask = RandomMask(20, 5, 0.5, rng);
  EXPECT_EQ(loaded.LogProbs(obs, mask), model.LogProbs(obs, mask));
  EXPECT_EQ(loaded.Values(obs), model.Values(obs));

  for (size_t cut : {size_t{0}, size_t{5}, size_t{30}, bytes.size() / 2, bytes.size() - 1}) {
    std::istringstream truncated(bytes.substr(0, cut));
    try {
      ActorCritic::Load(truncated);
      FAIL() << "a stream cut to " << cut << " bytes loaded";
    } catch (const ModelFormatError& e) {
      EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    }
  }
  // A bare MLP file is not an actor-critic file.
  std::stringstream mlp_stream;
  model.actor().Save(mlp_stream);
  EXPECT_THROW(ActorCritic::Load(mlp_stream), ModelFormatError);
}

}  // namespace
}  // namespace dr_kernel::rl
