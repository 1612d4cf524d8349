// Values of tuning parameters and problem keys.
#ifndef DR_KERNEL_VALUE_H_
#define DR_KERNEL_VALUE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace dr_kernel {

// One value of a parameter or of a problem key (a shape size, a flag, a dtype name).
// Triton meta-parameters are almost always integers; bools and strings appear in problem keys
// (CAUSAL, dtype) and occasionally as constexpr switches.
using Value = std::variant<int64_t, double, bool, std::string>;

// The value as a number: bools are 0/1; a string throws std::invalid_argument.
double ToDouble(const Value& v);

// The value as it would be written in JSON (strings quoted).
std::string ToJson(const Value& v);

// A configuration or a shape as ordered (name, value) pairs: the order is the space's or the file's.
using NamedValues = std::vector<std::pair<std::string, Value>>;

// Compact JSON object text of named values, in their order, e.g. {"BLOCK_M":128,"num_warps":4}.
std::string ToJson(const NamedValues& values);

// The value named `name`, or nullptr.
const Value* Find(const NamedValues& values, const std::string& name);

}  // namespace dr_kernel

#endif  // DR_KERNEL_VALUE_H_
