// Problems (what is tuned) and measurements (what one evaluation of a config returned).
#ifndef DR_KERNEL_PROBLEM_H_
#define DR_KERNEL_PROBLEM_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "dr_kernel/value.h"

namespace dr_kernel {

// A problem is a kernel family plus the values of its key arguments (shapes, dtypes) on one device.
struct Problem {
  std::string family;  // "matmul", "softmax", "attention", or a user kernel's name.
  NamedValues shape;   // Key arguments in their recorded order, e.g. M, N, K.
  std::string device;  // e.g. "NVIDIA H200"; empty when unknown.
  std::string dtype;   // e.g. "fp16"; empty when the family has one fixed dtype.
  // Hardware counters of the problem's probe config (profiling.probe_config, the middle of its
  // space), when it was profiled: what a cost model with CostModelOptions::use_counters describes
  // the problem by. Empty when not profiled. Not part of Key(): a problem is the same profiled or not.
  NamedValues probe_counters;

  // A canonical text identity: family, shape JSON, device and dtype. Equal problems have equal keys.
  std::string Key() const;
  // A short human label such as "matmul M=4096 N=4096 K=4096".
  std::string Label() const;
};

// The framework's own operator on the same problem (cuBLAS through torch.matmul, ...).
struct Reference {
  std::string name;  // e.g. "torch.matmul".
  double ms = std::numeric_limits<double>::quiet_NaN();
  double flops = 0;  // Floating-point operations of the problem.
  double bytes = 0;  // Fewest bytes the problem must move.
};

// What became of one evaluated configuration.
enum class Status {
  kOk,              // Correct and timed.
  kOutOfResources,  // Compiled, refused at load or by static analysis (shared memory, registers).
  kCompileError,    // The compiler raised.
  kCompileTimeout,  // Compiling did not finish within the deadline.
  kWrong,           // Ran, but failed the correctness check.
  kCrashed,         // The measuring process died (illegal address, ...).
  kInvalid,         // Not a config of this problem (absent from a replayed table, or breaks a constraint).
  kLaunchError,     // The launch raised an error that is not the compiler's or the device's limits:
                    // the kernel's or its caller's fault (a bad argument, a hook that raised).
};

const char* ToString(Status status);
// Parses the recorded-table spelling ("ok", "out_of_resources", ...); nullopt when unknown.
std::optional<Status> ParseStatus(const std::string& text);

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// One evaluation of one configuration. Fields a source does not know stay NaN / -1.
struct Measurement {
  Status status = Status::kInvalid;
  double ms = kNaN;      // Median kernel time; only meaningful when status is kOk.
  double ms_p20 = kNaN;  // 20th percentile.
  double ms_p80 = kNaN;  // 80th percentile.
  double compile_s = kNaN;
  double load_s = kNaN;
  double relerr = kNaN;  // Relative L2 error against the reference.
  int n_regs = -1;       // Registers per thread of the compiled kernel.
  int n_spills = -1;     // Spilled registers.
  int64_t shared = -1;   // Static shared memory in bytes.
  double occupancy = kNaN;  // Theoretical occupancy (resident warps / the SM's most) of the binary.
  std::string error;     // Why it failed, when it did.
  // Hardware counters of one profiled launch (Nsight Compute's metric names, as dr-kernel evaluate
  // --profile reads them: achieved occupancy, L2 hit rate, throughputs, stall reasons), in the order
  // read; empty when the launch was not profiled.
  NamedValues counters;
  // Which compiled binary (with its launch settings) the config runs, when a compile stage told:
  // configs with the same nonzero value run the same kernel, so one time serves them all (0:
  // not known).
  uint64_t binary = 0;

  bool ok() const { return status == Status::kOk; }
  // The time a tuner compares: ms for ok measurements, +inf otherwise.
  double objective() const { return ok() ? ms : kInf; }
};

}  // namespace dr_kernel

#endif  // DR_KERNEL_PROBLEM_H_
