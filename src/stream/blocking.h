// Whether a call may wait. The socket layer can only tell at a cost (O_NONBLOCK
// lives on the open file, where another fd or process may change it, so it is
// asked of the kernel), so the answer may be given as a question: asked once,
// and only if it matters, when the call has to wait or to choose a rendezvous.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace qpsock::stream {

class Blocking {
 public:
  using Clock = std::chrono::steady_clock;

  Blocking(bool known) : answer_(known ? Answer::yes : Answer::no) {}  // NOLINT: implicit
  // question(argument) gives the answer; timeout_question(argument), if given,
  // the longest a wait may take in nanoseconds (0: no limit), as SO_RCVTIMEO
  // and SO_SNDTIMEO set it on the kernel's socket.
  Blocking(bool (*question)(int), int argument, int64_t (*timeout_question)(int) = nullptr)
      : question_(question), timeout_question_(timeout_question), argument_(argument) {}

  bool operator()() {
    if (answer_ == Answer::unknown) answer_ = question_(argument_) ? Answer::yes : Answer::no;
    return answer_ == Answer::yes;
  }

  // When waiting must stop (the call then returns what it has, or EAGAIN):
  // counted from the first time a wait asks, as the kernel counts from the
  // start of the call's sleep.
  std::optional<Clock::time_point> deadline() {
    if (!deadline_asked_) {
      deadline_asked_ = true;
      const int64_t nanoseconds = timeout_question_ != nullptr ? timeout_question_(argument_) : 0;
      if (nanoseconds > 0) deadline_ = Clock::now() + std::chrono::nanoseconds(nanoseconds);
    }
    return deadline_;
  }

 private:
  enum class Answer : unsigned char { unknown, yes, no };
  Answer answer_ = Answer::unknown;
  bool deadline_asked_ = false;
  bool (*question_)(int) = nullptr;
  int64_t (*timeout_question_)(int) = nullptr;
  int argument_ = 0;
  std::optional<Clock::time_point> deadline_;
};

}  // namespace qpsock::stream
