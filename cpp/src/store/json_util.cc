#include "json_util.h"

#include <cstdint>
#include <limits>
#include <stdexcept>

namespace dr_kernel {

std::optional<Value> ValueOfJson(const OrderedJson& json) {
  if (json.is_boolean()) return Value(json.get<bool>());
  if (json.is_number_unsigned()) {
    const auto u = json.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value(static_cast<double>(u));
    return Value(static_cast<int64_t>(u));
  }
  if (json.is_number_integer()) return Value(json.get<int64_t>());
  if (json.is_number_float()) return Value(json.get<double>());
  if (json.is_string()) return Value(json.get<std::string>());
  return std::nullopt;
}

NamedValues ParseNamedValues(const std::string& text) {
  OrderedJson object;
  try {
    object = OrderedJson::parse(text);
  } catch (const OrderedJson::parse_error& e) {
    throw std::invalid_argument("'" + text + "' is not valid JSON (" + e.what() + ")");
  }
  if (!object.is_object()) throw std::invalid_argument("'" + text + "' is not a JSON object");
  NamedValues out;
  out.reserve(object.size());
  for (auto it = object.begin(); it != object.end(); ++it) {
    auto value = ValueOfJson(it.value());
    if (!value)
      throw std::invalid_argument("'" + it.key() + "' in '" + text +
                                  "' should be a number, bool or string, not " + it.value().dump());
    out.emplace_back(it.key(), std::move(*value));
  }
  return out;
}

}  // namespace dr_kernel
