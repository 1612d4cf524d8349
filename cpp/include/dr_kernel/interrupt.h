// Stopping long operations when the user asks: Ctrl-C or SIGTERM during a replay or a training.
//
// Replays and training run in C++ for minutes without returning to their caller. They call
// PollInterrupt() between units of work (an evaluation, a replay run, a PPO update, an epoch of
// behaviour cloning, a model fit); a front end installs the question "has the user asked to stop?"
// with SetInterruptCheck() (the Python module: has a signal handler raised?). When it says yes,
// PollInterrupt() throws Interrupted, which unwinds the operation before it writes anything.
#ifndef DR_KERNEL_INTERRUPT_H_
#define DR_KERNEL_INTERRUPT_H_

#include <functional>
#include <stdexcept>

namespace dr_kernel {

class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted") {}
};

// Installs the check (an empty function removes it). It runs on the thread that polls, at most
// every 50 ms of that thread's polls, so that a replay's million polls cost nothing.
void SetInterruptCheck(std::function<bool()> check);

// Throws Interrupted when the installed check says the user asked to stop. Call it from the thread
// that runs the operation, not from the workers of a parallel loop.
void PollInterrupt();

}  // namespace dr_kernel

#endif  // DR_KERNEL_INTERRUPT_H_
