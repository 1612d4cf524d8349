// Search spaces: named discrete parameters with ordered values and constraints between them.
#ifndef DR_KERNEL_SPACE_H_
#define DR_KERNEL_SPACE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "dr_kernel/rng.h"
#include "dr_kernel/value.h"

namespace dr_kernel {

// A user error in a space: a malformed parameter list or constraint. The message names the input
// and the fix.
class SpaceError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// One tunable parameter: its name and its values in the order that "one step up" follows.
struct Parameter {
  std::string name;
  std::vector<Value> values;
};

// A configuration as one index per parameter into that parameter's values. Indices rather than
// values keep neighbour moves, hashing and encodings cheap; Space::Named turns one into values.
using Config = std::vector<int32_t>;

// A constraint written as an expression over parameter names, in Python syntax:
// "BLOCK_M * BLOCK_N <= 128 * 128 and (num_warps >= 4 or BLOCK_M < 128)". Supported: numbers,
// names, + - * / // % **, comparisons, and/or/not, parentheses, min(a, b), max(a, b) and cdiv(a, b)
// (triton.cdiv: the blocks of b that cover a).
class Constraint {
 public:
  // Compiles `text` against the parameter names; throws SpaceError naming the problem.
  Constraint(const std::string& text, const std::vector<std::string>& names);
  ~Constraint();
  Constraint(const Constraint&);
  Constraint& operator=(const Constraint&);

  // True when the constraint holds for the parameter values (in parameter order).
  bool Holds(const std::vector<double>& values) const;
  const std::string& text() const { return text_; }

  struct Program;  // The compiled expression tree (space.cc).

 private:
  std::string text_;
  std::unique_ptr<Program> program_;
};

// A predicate supplied as code (a Python callable through the bindings) with a description.
struct Predicate {
  std::function<bool(const NamedValues&)> fn;
  std::string description;
};

// The cartesian product of parameters, less the configurations that break a constraint.
// Nothing is materialised: enumeration streams, sampling rejects, the size is counted on demand.
class Space {
 public:
  Space() = default;
  // Throws SpaceError for an empty parameter, duplicate names or values, or a bad constraint.
  explicit Space(std::vector<Parameter> params, const std::vector<std::string>& constraints = {});

  void AddPredicate(Predicate predicate);
  // Restricts the space to these configs (a hand-written list such as triton.autotune's): the
  // product of their values stays the space's shape, so neighbour moves still mean one step.
  void AllowOnly(const std::vector<Config>& configs);

  size_t num_params() const { return params_.size(); }
  const std::vector<Parameter>& params() const { return params_; }
  const std::vector<Constraint>& constraints() const { return constraints_; }
  // Position of the parameter named `name`, or -1.
  int ParamIndex(const std::string& name) const;

  // Number of configurations before constraints.
  uint64_t product_size() const { return product_size_; }
  // Mixed-radix position of a config in the product, and back.
  uint64_t Index(const Config& config) const;
  Config FromIndex(uint64_t index) const;

  // True when every index is in range and every constraint and predicate holds.
  bool IsValid(const Config& config) const;
  // Why the config is not valid ("" when it is): the first broken constraint, or a bad index.
  std::string WhyInvalid(const Config& config) const;

  // Calls fn with each valid config in index order until fn returns false.
  void ForEach(const std::function<bool(const Config&)>& fn) const;
  // Number of valid configurations (enumerates once, then remembers).
  uint64_t CountValid() const;
  // A uniformly random valid config; nullopt only when the space has none.
  std::optional<Config> Sample(Rng& rng) const;

  // The valid configs one step up or down in one parameter.
  std::vector<Config> Neighbours(const Config& config) const;
  // The config with parameter `param` moved by `delta` steps, or nullopt when out of range.
  std::optional<Config> Move(const Config& config, size_t param, int delta) const;

  // Features of a config: for each parameter its position in [0, 1] (log-scaled for positive
  // numeric values, rank-scaled otherwise).
  std::vector<double> Encode(const Config& config) const;

  NamedValues Named(const Config& config) const;
  // The config holding these named values; nullopt when a name is missing or a value is not in the
  // space. Extra names (e.g. num_ctas) are ignored only when `ignore_extra` is true.
  std::optional<Config> Find(const NamedValues& values, bool ignore_extra = false) const;
  // JSON text of the named values.
  std::string Format(const Config& config) const;

 private:
  std::vector<double> NumericValues(const Config& config) const;

  std::vector<Parameter> params_;
  std::vector<std::vector<double>> numeric_;  // Numeric view of each value; NaN for strings.
  std::vector<std::vector<double>> encoded_;  // Encoded position of each value.
  std::vector<Constraint> constraints_;
  std::vector<Predicate> predicates_;
  std::optional<std::unordered_set<uint64_t>> allowed_;  // Set by AllowOnly.
  uint64_t product_size_ = 0;
  mutable std::optional<uint64_t> valid_count_;
};

// Draws distinct valid configurations at random without materialising the space: rejection on the
// product while most of it is unseen, then a shuffled enumeration of what is left.
class UniqueSampler {
 public:
  UniqueSampler(const Space& space, Rng& rng) : space_(space), rng_(rng) {}
  // The next config not drawn or marked before; nullopt when all valid configs have been.
  std::optional<Config> Next();
  // Marks a config as seen so that Next never returns it.
  void Mark(const Config& config) { seen_.insert(space_.Index(config)); }

 private:
  const Space& space_;
  Rng& rng_;
  std::unordered_set<uint64_t> seen_;
  std::optional<std::vector<uint64_t>> rest_;  // Set once rejection stops paying.
};

}  // namespace dr_kernel

#endif  // DR_KERNEL_SPACE_H_
