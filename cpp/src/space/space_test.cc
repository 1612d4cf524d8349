#include "dr_kernel/space.h"

#include <gtest/gtest.h>

#include <set>

namespace dr_kernel {
namespace {

Space MatmulSpace(const std::vector<std::string>& constraints = {}) {
  return Space({{"BLOCK_M", {int64_t{16}, int64_t{32}, int64_t{64}, int64_t{128}, int64_t{256}}},
                {"BLOCK_N", {int64_t{32}, int64_t{64}, int64_t{128}, int64_t{256}}},
                {"num_warps", {int64_t{2}, int64_t{4}, int64_t{8}}}},
               constraints);
}

TEST(ConstraintTest, FollowsPythonSemantics) {
  const std::vector<std::string> names = {"a", "b"};
  auto holds = [&](const std::string& text, double a, double b) { return Constraint(text, names).Holds({a, b}); };
  EXPECT_TRUE(holds("a * b <= 128 * 128", 128, 128));
  EXPECT_FALSE(holds("a * b <= 128 * 128", 256, 128));
  EXPECT_TRUE(holds("1 < a <= b", 2, 2));   // Chained comparison.
  EXPECT_FALSE(holds("1 < a <= b", 3, 2));
  EXPECT_TRUE(holds("not (a == b) or a >= 64", 64, 64));
  EXPECT_TRUE(holds("a // 3 == 2 and a % 3 == 1", 7, 0));
  EXPECT_TRUE(holds("-7 % 3 == 2", 0, 0));  // Python's modulo sign.
  EXPECT_TRUE(holds("2 ** a == 8 && min(a, b, 9) == 3 || False", 3, 10));
  EXPECT_TRUE(holds("max(a, b) / 2 == 2.5e0", 5, 1));
  EXPECT_TRUE(holds("cdiv(a, b) == 3 and cdiv(a - 1, b) == 2", 61, 30));  // triton.cdiv.
  EXPECT_TRUE(holds("cdiv(a, 64) * 64 - a == 3 and cdiv(-a, b) == -2", 61, 30));  // Rounds up, as triton.cdiv.
}

TEST(ConstraintTest, ErrorsNameTheInputAndTheFix) {
  const std::vector<std::string> names = {"BLOCK_M"};
  for (const char* bad : {"BLOCK_Q < 4", "BLOCK_M <", "(BLOCK_M < 4", "BLOCK_M $ 4", "min(BLOCK_M)", "cdiv(BLOCK_M)"}) {
    try {
      Constraint(bad, names);
      FAIL() << "accepted " << bad;
    } catch (const SpaceError& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Python syntax"), std::string::npos) << e.what();
    }
  }
}

TEST(SpaceTest, RejectsMalformedParameters) {
  using Params = std::vector<Parameter>;
  EXPECT_THROW(Space(Params{{"a", {}}}), SpaceError);
  EXPECT_THROW(Space(Params{{"a", {int64_t{1}}}, {"a", {int64_t{2}}}}), SpaceError);
  EXPECT_THROW(Space(Params{{"a", {int64_t{1}, int64_t{1}}}}), SpaceError);
  EXPECT_THROW(MatmulSpace({"BLOCK_K > 2"}), SpaceError);
}

TEST(SpaceTest, EnumeratesExactlyTheValidConfigsInIndexOrder) {
  const Space space = MatmulSpace({"BLOCK_M * BLOCK_N <= 128 * 128", "num_warps >= 4 or BLOCK_M < 128"});
  EXPECT_EQ(space.product_size(), 60u);
  uint64_t previous = 0, count = 0;
  space.ForEach([&](const Config& c) {
    EXPECT_TRUE(space.IsValid(c));
    if (count) EXPECT_GT(space.Index(c), previous);
    previous = space.Index(c);
    EXPECT_EQ(space.FromIndex(previous), c);
    ++count;
    return true;
  });
  // By hand: pairs with BLOCK_M*BLOCK_N <= 16384: 16:4, 32:4, 64:4, 128:3, 256:2 = 17 pairs;
  // those with BLOCK_M >= 128 (5 pairs) lose num_warps=2.
  EXPECT_EQ(count, 17u * 3 - 5);
  EXPECT_EQ(space.CountValid(), count);
  EXPECT_EQ(space.WhyInvalid(*space.Find({{"BLOCK_M", int64_t{256}}, {"BLOCK_N", int64_t{256}}, {"num_warps", int64_t{4}}})),
            "breaks the constraint 'BLOCK_M * BLOCK_N <= 128 * 128'");
}

TEST(SpaceTest, NeighboursMoveOneParameterOneStep) {
  const Space space = MatmulSpace({"BLOCK_M <= 128"});
  const Config c = *space.Find({{"BLOCK_M", int64_t{128}}, {"BLOCK_N", int64_t{32}}, {"num_warps", int64_t{4}}});
  const auto neighbours = space.Neighbours(c);
  // BLOCK_M up is 256 (invalid), BLOCK_N down does not exist: 64/128 BLOCK_M, 64 BLOCK_N, warps 2 and 8.
  ASSERT_EQ(neighbours.size(), 4u);
  for (const auto& n : neighbours) {
    int changed = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      changed += n[i] != c[i];
      EXPECT_LE(std::abs(n[i] - c[i]), 1);
    }
    EXPECT_EQ(changed, 1);
  }
}

TEST(SpaceTest, MillionConfigSpaceSamplesUniformlyWithoutMaterialising) {
  std::vector<Parameter> params;
  for (int p = 0; p < 6; ++p) {
    Parameter param{"p" + std::to_string(p), {}};
    for (int v = 0; v < 10; ++v) param.values.push_back(int64_t{1} << v);
    params.push_back(param);
  }
  const Space space(params, {"p0 * p1 <= 4096", "p2 + p3 + p4 + p5 >= 8"});
  EXPECT_EQ(space.product_size(), 1000000u);
  Rng rng(7);
  UniqueSampler sampler(space, rng);
  std::set<uint64_t> drawn;
  for (int i = 0; i < 2000; ++i) {
    auto c = sampler.Next();
    ASSERT_TRUE(c);
    ASSERT_TRUE(space.IsValid(*c));
    ASSERT_TRUE(drawn.insert(space.Index(*c)).second) << "drew a config twice";
  }
  // Uniformity check on p0: among valid configs p0 < p1-limit pairs are symmetric, so the mean
  // encoded position of p0 over samples must match the mean over the space within noise.
  double sample_mean = 0;
  for (uint64_t index : drawn) sample_mean += space.Encode(space.FromIndex(index))[0];
  sample_mean /= drawn.size();
  double space_mean = 0;
  uint64_t n = 0;
  space.ForEach([&](const Config& c) {
    space_mean += space.Encode(c)[0];
    ++n;
    return true;
  });
  space_mean /= n;
  EXPECT_NEAR(sample_mean, space_mean, 0.02);
}

TEST(SpaceTest, UniqueSamplerExhaustsASmallSpaceExactlyOnce) {
  const Space space = MatmulSpace({"BLOCK_M * BLOCK_N <= 64 * 64"});
  Rng rng(3);
  UniqueSampler sampler(space, rng);
  std::set<uint64_t> drawn;
  while (auto c = sampler.Next()) ASSERT_TRUE(drawn.insert(space.Index(*c)).second);
  EXPECT_EQ(drawn.size(), space.CountValid());
}

TEST(SpaceTest, FindMatchesNumbersAcrossTypesAndEncodesLogScale) {
  const Space space = MatmulSpace();
  const auto c = space.Find({{"BLOCK_M", 64.0}, {"BLOCK_N", int64_t{32}}, {"num_warps", int64_t{8}}});
  ASSERT_TRUE(c);
  const auto features = space.Encode(*c);
  EXPECT_DOUBLE_EQ(features[0], 0.5);  // log2(64) between log2(16) and log2(256).
  EXPECT_DOUBLE_EQ(features[1], 0.0);
  EXPECT_DOUBLE_EQ(features[2], 1.0);
  EXPECT_FALSE(space.Find({{"BLOCK_M", int64_t{48}}, {"BLOCK_N", int64_t{32}}, {"num_warps", int64_t{8}}}));
  EXPECT_FALSE(space.Find({{"BLOCK_M", int64_t{64}}, {"BLOCK_N", int64_t{32}}}));
  EXPECT_EQ(space.Format(*c), R"({"BLOCK_M":64,"BLOCK_N":32,"num_warps":8})");
}

}  // namespace
}  // namespace dr_kernel
