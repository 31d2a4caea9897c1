#include "common/recursive_lock.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace roce {

void RecursiveLock::lock_contended(int c) {
    if (c != 2)
        c = state_.exchange(2, std::memory_order_acquire);
    while (c != 0) {
        syscall(SYS_futex, reinterpret_cast<int*>(&state_), FUTEX_WAIT_PRIVATE, 2, nullptr, nullptr, 0);
        c = state_.exchange(2, std::memory_order_acquire);
    }
}

void RecursiveLock::wake_one() {
    syscall(SYS_futex, reinterpret_cast<int*>(&state_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

} // namespace roce
