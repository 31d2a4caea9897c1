// A recursive lock on a futex word, for objects whose owner thread takes the lock several times
// per busy-poll iteration and almost never meets the other thread (a CM or background thread):
// the verbs device and ud_roce's transport. Recursive because callbacks run under it re-enter
// the object (an AM handler that replies sends). glibc's recursive pthread mutex cost ~45
// instructions per lock+unlock pair more (callgrind in the rxe guest, where every instruction is
// emulated). State: 0 free, 1 held, 2 held with waiters (U. Drepper, "Futexes Are Tricky",
// mutex 3); owner_ is only ever equal to a thread's own id while that thread holds the lock.
// Meets Lockable: std::lock_guard / std::unique_lock (also with std::try_to_lock) work.
#pragma once

#include <pthread.h>

#include <atomic>

namespace roce {

class RecursiveLock {
public:
    void lock() {
        int c;
        if (!try_lock(c)) {
            lock_contended(c);
            owner_.store(pthread_self(), std::memory_order_relaxed);
            depth_ = 1;
        }
    }
    bool try_lock() {
        int c;
        return try_lock(c);
    }
    void unlock() {
        if (--depth_ != 0)
            return;
        owner_.store(pthread_t{}, std::memory_order_relaxed);
        if (state_.exchange(0, std::memory_order_release) == 2)
            wake_one();
    }

private:
    // Taken (again, or free until now); else false with the state word seen in `c`.
    bool try_lock(int& c) {
        const pthread_t self = pthread_self();
        if (owner_.load(std::memory_order_relaxed) == self) {
            ++depth_;
            return true;
        }
        c = 0;
        if (!state_.compare_exchange_strong(c, 1, std::memory_order_acquire))
            return false;
        owner_.store(self, std::memory_order_relaxed);
        depth_ = 1;
        return true;
    }
    void lock_contended(int c);
    void wake_one();
    std::atomic<int> state_{0};
    std::atomic<pthread_t> owner_{};
    unsigned depth_ = 0;   // only touched by the owner
};

} // namespace roce
