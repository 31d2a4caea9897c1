// Idle byte buffers kept for reuse instead of going back to malloc. Both devices' hot paths
// hand out and take back message-sized buffers at packet or message rate; freeing them made
// glibc trim and regrow its heap (mmap/munmap or brk plus a page fault per 4 KiB, which UCX's
// memory hooks make dearer still): measured 200 MB/s instead of > 1 GB/s for rc_roce's 64 KiB
// active messages, and malloc plus page faults at ~16% of a ud_roce 1 MiB bidirectional stream.
// Not thread-safe: the owner's lock guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace roce {

class BufferPool {
public:
    // Keeps at most `max_idle` buffers, none with more than `max_capacity` bytes of capacity (a
    // one-off huge message must not pin its memory).
    explicit BufferPool(size_t max_idle, size_t max_capacity = std::numeric_limits<size_t>::max())
        : max_idle_(max_idle), max_capacity_(max_capacity) {}

    // An empty buffer with capacity, if one is idle; else an empty one without.
    std::vector<uint8_t> take() {
        if (idle_.empty()) return {};
        std::vector<uint8_t> b = std::move(idle_.back());
        idle_.pop_back();
        b.clear();
        return b;
    }
    // Keeps `b` if it has memory and the pool has room for it; frees it otherwise.
    void give(std::vector<uint8_t>&& b) {
        if (b.capacity() == 0 || b.capacity() > max_capacity_ || idle_.size() >= max_idle_) {
            std::vector<uint8_t>().swap(b);
            return;
        }
        idle_.push_back(std::move(b));
    }
    size_t idle() const { return idle_.size(); }

private:
    size_t max_idle_;
    size_t max_capacity_;
    std::vector<std::vector<uint8_t>> idle_;
};

} // namespace roce
