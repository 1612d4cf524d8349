// JSON helpers shared by the recorded-table reader (table.cc) and the results store (store.cc).
// Both keep named values (configs, shapes) in the order they were written, so both parse with
// nlohmann::ordered_json. An internal header: nothing outside cpp/src/store includes it.
#ifndef DR_KERNEL_STORE_JSON_UTIL_H_
#define DR_KERNEL_STORE_JSON_UTIL_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "dr_kernel/value.h"

namespace dr_kernel {

// JSON whose objects keep their keys in written order.
using OrderedJson = nlohmann::ordered_json;

// The Value of a JSON scalar: integers stay int64_t (an unsigned integer too large for one becomes a
// double), floats become doubles, bools and strings stay themselves. Null, arrays and objects give
// nullopt.
std::optional<Value> ValueOfJson(const OrderedJson& json);

// Parses the text of a JSON object of scalars, as ToJson(NamedValues) writes it, into named values
// in the object's key order. Throws std::invalid_argument saying what is wrong when the text is not
// valid JSON, not an object, or holds a value that is not a scalar.
NamedValues ParseNamedValues(const std::string& text);

}  // namespace dr_kernel

#endif  // DR_KERNEL_STORE_JSON_UTIL_H_
