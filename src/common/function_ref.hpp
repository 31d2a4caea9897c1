// A non-owning reference to a callable: what std::function costs without the ownership — no
// type-erased copy at every call site, one indirect call. For callbacks handed down a call
// (poll loops, emit hooks) and never stored: the referenced callable must outlive the call, so
// bind it to a named lambda or pass the lambda directly as the argument, never keep a
// FunctionRef made from a temporary in a variable.
#pragma once

#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

namespace roce {

template <typename Sig>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
public:
    template <typename F,
              typename = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
                                          std::is_invocable_r_v<R, F&, Args...>>>
    FunctionRef(F&& f) noexcept   // NOLINT: implicit, like std::function
        : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
          call_([](void* o, Args... a) -> R {
              return std::invoke(*static_cast<std::remove_reference_t<F>*>(o), std::forward<Args>(a)...);
          }) {}

    R operator()(Args... a) const { return call_(obj_, std::forward<Args>(a)...); }

private:
    void* obj_;
    R (*call_)(void*, Args...);
};

} // namespace roce
