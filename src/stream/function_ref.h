// A non-owning reference to a callable: what a wait needs to re-check its
// condition, without std::function's possible allocation.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace qpsock::stream {

template <typename Signature>
class FunctionRef;

template <typename Result, typename... Arguments>
class FunctionRef<Result(Arguments...)> {
 public:
  template <typename Callable,
            typename = std::enable_if_t<!std::is_same_v<std::decay_t<Callable>, FunctionRef>>>
  FunctionRef(Callable&& callable)  // NOLINT: implicit, like a function pointer
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(callable)))),
        invoke_([](void* object, Arguments... arguments) -> Result {
          return (*static_cast<std::remove_reference_t<Callable>*>(object))(
              std::forward<Arguments>(arguments)...);
        }) {}

  Result operator()(Arguments... arguments) const {
    return invoke_(object_, std::forward<Arguments>(arguments)...);
  }

 private:
  void* object_;
  Result (*invoke_)(void*, Arguments...);
};

}  // namespace qpsock::stream
