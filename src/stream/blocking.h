// Whether a call may wait. The socket layer can only tell at a cost (O_NONBLOCK
// lives on the open file, where another fd or process may change it, so it is
// asked of the kernel), so the answer may be given as a question: asked once,
// and only if it matters, when the call has to wait or to choose a rendezvous.
#pragma once

namespace qpsock::stream {

class Blocking {
 public:
  Blocking(bool known) : answer_(known ? Answer::yes : Answer::no) {}  // NOLINT: implicit
  // question(argument) gives the answer.
  Blocking(bool (*question)(int), int argument) : question_(question), argument_(argument) {}

  bool operator()() {
    if (answer_ == Answer::unknown) answer_ = question_(argument_) ? Answer::yes : Answer::no;
    return answer_ == Answer::yes;
  }

 private:
  enum class Answer : unsigned char { unknown, yes, no };
  Answer answer_ = Answer::unknown;
  bool (*question_)(int) = nullptr;
  int argument_ = 0;
};

}  // namespace qpsock::stream
