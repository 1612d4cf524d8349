#include "dr_kernel/space.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

namespace dr_kernel {

// ---------------------------------------------------------------------------------------------
// Constraint expressions: a small recursive-descent parser into a tree evaluated on doubles.

struct Constraint::Program {
  enum Op { kNum, kVar, kNeg, kNot, kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow,
            kLt, kLe, kGt, kGe, kEq, kNe, kAnd, kOr, kMin, kMax, kCdiv };
  struct Node {
    Op op;
    double num = 0;  // kNum.
    int var = -1;    // kVar.
    int a = -1, b = -1;
  };
  std::vector<Node> nodes;
  int root = -1;

  double Eval(int n, const std::vector<double>& v) const {
    const Node& node = nodes[n];
    switch (node.op) {
      case kNum: return node.num;
      case kVar: return v[node.var];
      case kNeg: return -Eval(node.a, v);
      case kNot: return Eval(node.a, v) == 0.0 ? 1.0 : 0.0;
      case kAnd: return (Eval(node.a, v) != 0.0 && Eval(node.b, v) != 0.0) ? 1.0 : 0.0;
      case kOr: return (Eval(node.a, v) != 0.0 || Eval(node.b, v) != 0.0) ? 1.0 : 0.0;
      default: break;
    }
    const double x = Eval(node.a, v), y = Eval(node.b, v);
    switch (node.op) {
      case kAdd: return x + y;
      case kSub: return x - y;
      case kMul: return x * y;
      case kDiv: return x / y;
      case kFloorDiv: return std::floor(x / y);
      case kMod: return x - y * std::floor(x / y);  // Python's sign convention.
      case kPow: return std::pow(x, y);
      case kLt: return x < y;
      case kLe: return x <= y;
      case kGt: return x > y;
      case kGe: return x >= y;
      case kEq: return x == y;
      case kNe: return x != y;
      case kMin: return std::min(x, y);
      case kMax: return std::max(x, y);
      case kCdiv: return std::ceil(x / y);
      default: return 0.0;
    }
  }
};

namespace {

using Program = Constraint::Program;

class Parser {
 public:
  Parser(const std::string& text, const std::vector<std::string>& names, Program& program)
      : text_(text), names_(names), p_(program) {}

  void Parse() {
    Tokenize();
    p_.root = Or();
    if (pos_ != tokens_.size()) Fail("unexpected '" + tokens_[pos_] + "'");
  }

 private:
  [[noreturn]] void Fail(const std::string& why) const {
    throw SpaceError("constraint '" + text_ + "': " + why +
                     "; write it in Python syntax over the parameter names, e.g. "
                     "'BLOCK_M * BLOCK_N <= 16384 and num_warps >= 4'");
  }

  void Tokenize() {
    static const char* kTwoChar[] = {"**", "//", "<=", ">=", "==", "!=", "&&", "||"};
    size_t i = 0;
    while (i < text_.size()) {
      const char c = text_[i];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
      } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
        size_t j = i;
        while (j < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[j])) || text_[j] == '.' ||
                                    text_[j] == '_' ||
                                    ((text_[j] == '+' || text_[j] == '-') && (text_[j - 1] == 'e' || text_[j - 1] == 'E'))))
          ++j;
        tokens_.push_back(text_.substr(i, j - i));
        i = j;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t j = i;
        while (j < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[j])) || text_[j] == '_')) ++j;
        tokens_.push_back(text_.substr(i, j - i));
        i = j;
      } else {
        bool two = false;
        for (const char* op : kTwoChar) {
          if (text_.compare(i, 2, op) == 0) {
            tokens_.push_back(op);
            i += 2;
            two = true;
            break;
          }
        }
        if (two) continue;
        if (std::string("+-*/%<>()!,").find(c) == std::string::npos) Fail(std::string("unexpected character '") + c + "'");
        tokens_.push_back(std::string(1, c));
        ++i;
      }
    }
  }

  bool Accept(const std::string& tok) {
    if (pos_ < tokens_.size() && tokens_[pos_] == tok) {
      ++pos_;
      return true;
    }
    return false;
  }
  void Expect(const std::string& tok) {
    if (!Accept(tok)) Fail("expected '" + tok + "'" + (pos_ < tokens_.size() ? " before '" + tokens_[pos_] + "'" : " at the end"));
  }

  int Add(Program::Op op, int a = -1, int b = -1) {
    p_.nodes.push_back({op, 0, -1, a, b});
    return static_cast<int>(p_.nodes.size()) - 1;
  }

  int Or() {
    int left = And();
    while (Accept("or") || Accept("||")) left = Add(Program::kOr, left, And());
    return left;
  }
  int And() {
    int left = Not();
    while (Accept("and") || Accept("&&")) left = Add(Program::kAnd, left, Not());
    return left;
  }
  int Not() {
    if (Accept("not") || Accept("!")) return Add(Program::kNot, Not());
    return Compare();
  }
  int Compare() {
    static const std::pair<const char*, Program::Op> kOps[] = {
        {"<=", Program::kLe}, {">=", Program::kGe}, {"==", Program::kEq},
        {"!=", Program::kNe}, {"<", Program::kLt},  {">", Program::kGt}};
    int left = Sum();
    int result = -1;
    // Python chains comparisons: a < b <= c means a < b and b <= c.
    for (;;) {
      bool matched = false;
      for (const auto& [tok, op] : kOps) {
        if (Accept(tok)) {
          const int right = Sum();
          const int cmp = Add(op, left, right);
          result = result < 0 ? cmp : Add(Program::kAnd, result, cmp);
          left = right;
          matched = true;
          break;
        }
      }
      if (!matched) break;
    }
    return result < 0 ? left : result;
  }
  int Sum() {
    int left = Term();
    for (;;) {
      if (Accept("+")) left = Add(Program::kAdd, left, Term());
      else if (Accept("-")) left = Add(Program::kSub, left, Term());
      else return left;
    }
  }
  int Term() {
    int left = Unary();
    for (;;) {
      if (Accept("*")) left = Add(Program::kMul, left, Unary());
      else if (Accept("//")) left = Add(Program::kFloorDiv, left, Unary());
      else if (Accept("/")) left = Add(Program::kDiv, left, Unary());
      else if (Accept("%")) left = Add(Program::kMod, left, Unary());
      else return left;
    }
  }
  int Unary() {
    if (Accept("-")) return Add(Program::kNeg, Unary());
    if (Accept("+")) return Unary();
    return Power();
  }
  int Power() {
    const int base = Atom();
    if (Accept("**")) return Add(Program::kPow, base, Unary());
    return base;
  }
  int Atom() {
    if (pos_ >= tokens_.size()) Fail("the expression ends too early");
    const std::string tok = tokens_[pos_++];
    if (tok == "(") {
      const int inner = Or();
      Expect(")");
      return inner;
    }
    if (std::isdigit(static_cast<unsigned char>(tok[0])) || tok[0] == '.') {
      size_t used = 0;
      double value = 0;
      try {
        value = std::stod(tok, &used);
      } catch (const std::exception&) {
        Fail("'" + tok + "' is not a number");
      }
      if (used != tok.size()) Fail("'" + tok + "' is not a number");
      const int n = Add(Program::kNum);
      p_.nodes[n].num = value;
      return n;
    }
    if (tok == "True" || tok == "False") {
      const int n = Add(Program::kNum);
      p_.nodes[n].num = tok == "True" ? 1.0 : 0.0;
      return n;
    }
    if (tok == "min" || tok == "max") {
      Expect("(");
      int acc = Or();
      int count = 1;
      while (Accept(",")) {
        acc = Add(tok == "min" ? Program::kMin : Program::kMax, acc, Or());
        ++count;
      }
      Expect(")");
      if (count < 2) Fail(tok + "() needs at least two arguments");
      return acc;
    }
    if (tok == "cdiv") {  // triton.cdiv(a, b): the blocks of size b that cover a.
      Expect("(");
      const int a = Or();
      Expect(",");
      const int b = Or();
      Expect(")");
      return Add(Program::kCdiv, a, b);
    }
    if (std::isalpha(static_cast<unsigned char>(tok[0])) || tok[0] == '_') {
      const auto it = std::find(names_.begin(), names_.end(), tok);
      if (it == names_.end()) {
        std::string known;
        for (const auto& n : names_) known += (known.empty() ? "" : ", ") + n;
        Fail("'" + tok + "' is not a parameter of the space (parameters: " + known + ")");
      }
      const int n = Add(Program::kVar);
      p_.nodes[n].var = static_cast<int>(it - names_.begin());
      return n;
    }
    Fail("unexpected '" + tok + "'");
  }

  const std::string& text_;
  const std::vector<std::string>& names_;
  Program& p_;
  std::vector<std::string> tokens_;
  size_t pos_ = 0;
};

}  // namespace

Constraint::Constraint(const std::string& text, const std::vector<std::string>& names)
    : text_(text), program_(std::make_unique<Program>()) {
  Parser(text_, names, *program_).Parse();
}
Constraint::~Constraint() = default;
Constraint::Constraint(const Constraint& other)
    : text_(other.text_), program_(std::make_unique<Program>(*other.program_)) {}
Constraint& Constraint::operator=(const Constraint& other) {
  text_ = other.text_;
  program_ = std::make_unique<Program>(*other.program_);
  return *this;
}

bool Constraint::Holds(const std::vector<double>& values) const {
  return program_->Eval(program_->root, values) != 0.0;
}

// ---------------------------------------------------------------------------------------------
// Space.

namespace {

bool IsNumeric(const Value& v) { return !std::holds_alternative<std::string>(v); }

}  // namespace

Space::Space(std::vector<Parameter> params, const std::vector<std::string>& constraints)
    : params_(std::move(params)) {
  std::set<std::string> names;
  product_size_ = 1;
  for (const auto& p : params_) {
    if (p.name.empty()) throw SpaceError("a parameter has an empty name; give every parameter a name");
    if (!names.insert(p.name).second)
      throw SpaceError("parameter '" + p.name + "' appears twice; list each parameter once");
    if (p.values.empty())
      throw SpaceError("parameter '" + p.name + "' has no values; give it at least one value");
    for (size_t i = 0; i < p.values.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (p.values[i] == p.values[j])
          throw SpaceError("parameter '" + p.name + "' lists the value " + ToJson(p.values[i]) +
                           " twice; list each value once");
    if (product_size_ > UINT64_MAX / p.values.size())
      throw SpaceError("the space has more than 2^64 configurations; split it or drop values");
    product_size_ *= p.values.size();

    std::vector<double> numeric;
    bool positive = true;
    for (const auto& v : p.values) {
      numeric.push_back(IsNumeric(v) ? ToDouble(v) : std::nan(""));
      positive = positive && IsNumeric(v) && numeric.back() > 0;
    }
    // Log-scale positive numbers (block sizes are powers of two); rank-scale anything else.
    std::vector<double> encoded(p.values.size(), 0.0);
    if (positive) {
      const auto [lo, hi] = std::minmax_element(numeric.begin(), numeric.end());
      const double span = std::log2(*hi) - std::log2(*lo);
      for (size_t i = 0; i < numeric.size(); ++i)
        encoded[i] = span > 0 ? (std::log2(numeric[i]) - std::log2(*lo)) / span : 0.0;
    } else if (p.values.size() > 1) {
      for (size_t i = 0; i < numeric.size(); ++i) encoded[i] = static_cast<double>(i) / (p.values.size() - 1);
    }
    numeric_.push_back(std::move(numeric));
    encoded_.push_back(std::move(encoded));
  }
  std::vector<std::string> ordered_names;
  for (const auto& p : params_) ordered_names.push_back(p.name);
  for (const auto& text : constraints) constraints_.emplace_back(text, ordered_names);
}

void Space::AddPredicate(Predicate predicate) {
  predicates_.push_back(std::move(predicate));
  valid_count_.reset();
}

void Space::AllowOnly(const std::vector<Config>& configs) {
  allowed_.emplace();
  for (const auto& c : configs) allowed_->insert(Index(c));
  valid_count_.reset();
}

int Space::ParamIndex(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].name == name) return static_cast<int>(i);
  return -1;
}

uint64_t Space::Index(const Config& config) const {
  uint64_t index = 0;
  for (size_t i = 0; i < params_.size(); ++i) index = index * params_[i].values.size() + config[i];
  return index;
}

Config Space::FromIndex(uint64_t index) const {
  Config config(params_.size());
  for (size_t i = params_.size(); i-- > 0;) {
    const uint64_t n = params_[i].values.size();
    config[i] = static_cast<int32_t>(index % n);
    index /= n;
  }
  return config;
}

std::vector<double> Space::NumericValues(const Config& config) const {
  std::vector<double> values(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) values[i] = numeric_[i][config[i]];
  return values;
}

std::string Space::WhyInvalid(const Config& config) const {
  if (config.size() != params_.size())
    return "the config has " + std::to_string(config.size()) + " values for " + std::to_string(params_.size()) +
           " parameters";
  for (size_t i = 0; i < params_.size(); ++i)
    if (config[i] < 0 || config[i] >= static_cast<int32_t>(params_[i].values.size()))
      return "value index " + std::to_string(config[i]) + " is out of range for '" + params_[i].name + "'";
  if (allowed_ && !allowed_->count(Index(config))) return "is not one of the listed configs";
  if (!constraints_.empty()) {
    const auto values = NumericValues(config);
    for (const auto& c : constraints_)
      if (!c.Holds(values)) return "breaks the constraint '" + c.text() + "'";
  }
  if (!predicates_.empty()) {
    const auto named = Named(config);
    for (const auto& p : predicates_)
      if (!p.fn(named)) return "breaks the constraint '" + p.description + "'";
  }
  return "";
}

bool Space::IsValid(const Config& config) const {
  if (config.size() != params_.size()) return false;
  for (size_t i = 0; i < params_.size(); ++i)
    if (config[i] < 0 || config[i] >= static_cast<int32_t>(params_[i].values.size())) return false;
  if (allowed_ && !allowed_->count(Index(config))) return false;
  if (!constraints_.empty()) {
    const auto values = NumericValues(config);
    for (const auto& c : constraints_)
      if (!c.Holds(values)) return false;
  }
  if (!predicates_.empty()) {
    const auto named = Named(config);
    for (const auto& p : predicates_)
      if (!p.fn(named)) return false;
  }
  return true;
}

void Space::ForEach(const std::function<bool(const Config&)>& fn) const {
  if (params_.empty()) return;
  Config config(params_.size(), 0);
  for (;;) {
    if (IsValid(config) && !fn(config)) return;
    // Odometer increment, last parameter fastest (matches Index()).
    size_t i = params_.size();
    while (i-- > 0) {
      if (++config[i] < static_cast<int32_t>(params_[i].values.size())) break;
      config[i] = 0;
      if (i == 0) return;
    }
  }
}

uint64_t Space::CountValid() const {
  if (!valid_count_) {
    uint64_t n = 0;
    ForEach([&n](const Config&) {
      ++n;
      return true;
    });
    valid_count_ = n;
  }
  return *valid_count_;
}

std::optional<Config> Space::Sample(Rng& rng) const {
  if (params_.empty()) return std::nullopt;
  // Rejection sampling is uniform over the valid configs. After many misses the space is mostly
  // invalid: count it and pick by rank instead (still uniform, no materialisation).
  for (int attempt = 0; attempt < 4096; ++attempt) {
    Config config = FromIndex(rng.Below(product_size_));
    if (IsValid(config)) return config;
  }
  const uint64_t n = CountValid();
  if (n == 0) return std::nullopt;
  uint64_t rank = rng.Below(n);
  std::optional<Config> found;
  ForEach([&](const Config& c) {
    if (rank-- == 0) {
      found = c;
      return false;
    }
    return true;
  });
  return found;
}

std::optional<Config> Space::Move(const Config& config, size_t param, int delta) const {
  const int64_t next = static_cast<int64_t>(config[param]) + delta;
  if (next < 0 || next >= static_cast<int64_t>(params_[param].values.size())) return std::nullopt;
  Config moved = config;
  moved[param] = static_cast<int32_t>(next);
  return moved;
}

std::vector<Config> Space::Neighbours(const Config& config) const {
  std::vector<Config> out;
  for (size_t i = 0; i < params_.size(); ++i)
    for (int delta : {-1, 1})
      if (auto moved = Move(config, i, delta); moved && IsValid(*moved)) out.push_back(std::move(*moved));
  return out;
}

std::vector<double> Space::Encode(const Config& config) const {
  std::vector<double> features(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) features[i] = encoded_[i][config[i]];
  return features;
}

NamedValues Space::Named(const Config& config) const {
  NamedValues out;
  out.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) out.emplace_back(params_[i].name, params_[i].values[config[i]]);
  return out;
}

namespace {

// Values compare across int/float/bool (a JSON 4.0 matches 4); strings compare as strings.
bool SameValue(const Value& a, const Value& b) {
  if (IsNumeric(a) && IsNumeric(b)) return ToDouble(a) == ToDouble(b);
  return a == b;
}

}  // namespace

std::optional<Config> Space::Find(const NamedValues& values, bool ignore_extra) const {
  Config config(params_.size(), -1);
  for (const auto& [name, value] : values) {
    const int i = ParamIndex(name);
    if (i < 0) {
      if (ignore_extra) continue;
      return std::nullopt;
    }
    const auto& vals = params_[i].values;
    for (size_t j = 0; j < vals.size(); ++j)
      if (SameValue(vals[j], value)) config[i] = static_cast<int32_t>(j);
    if (config[i] < 0) return std::nullopt;
  }
  for (int32_t index : config)
    if (index < 0) return std::nullopt;
  return config;
}

std::string Space::Format(const Config& config) const { return ToJson(Named(config)); }

// ---------------------------------------------------------------------------------------------

std::optional<Config> UniqueSampler::Next() {
  if (!rest_) {
    // Rejection stays cheap while a good share of the product is unseen and valid.
    for (int attempt = 0; attempt < 64; ++attempt) {
      auto config = space_.Sample(rng_);
      if (!config) return std::nullopt;
      if (seen_.insert(space_.Index(*config)).second) return config;
    }
    // Most of what rejection finds is seen: enumerate the remainder once and shuffle it.
    rest_.emplace();
    space_.ForEach([this](const Config& c) {
      const uint64_t index = space_.Index(c);
      if (!seen_.count(index)) rest_->push_back(index);
      return true;
    });
    rng_.Shuffle(*rest_);
  }
  while (!rest_->empty()) {
    const uint64_t index = rest_->back();
    rest_->pop_back();
    if (seen_.insert(index).second) return space_.FromIndex(index);
  }
  return std::nullopt;
}

}  // namespace dr_kernel
