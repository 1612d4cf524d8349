#include "dr_kernel/interrupt.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <utility>

namespace dr_kernel {
namespace {

std::mutex check_mutex;
std::shared_ptr<const std::function<bool()>> installed;  // Guarded by check_mutex.
constexpr auto kEvery = std::chrono::milliseconds(50);

}  // namespace

void SetInterruptCheck(std::function<bool()> check) {
  std::lock_guard<std::mutex> lock(check_mutex);
  installed = check ? std::make_shared<const std::function<bool()>>(std::move(check)) : nullptr;
}

void PollInterrupt() {
  thread_local auto last = std::chrono::steady_clock::time_point{};
  const auto now = std::chrono::steady_clock::now();
  if (now - last < kEvery) return;
  last = now;
  std::shared_ptr<const std::function<bool()>> check;
  {
    std::lock_guard<std::mutex> lock(check_mutex);
    check = installed;
  }
  if (check && (*check)()) throw Interrupted();
}

}  // namespace dr_kernel
