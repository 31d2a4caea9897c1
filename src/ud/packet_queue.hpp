// A sender's packet queue (ud/sender.hpp): a ring in sequence order, oldest first, that keeps the
// payload buffers of packets it retired for the next ones. It replaces a std::deque of packets
// plus a free list of payload vectors: on a ping-pong that was ~250 instructions per message
// (deque node bookkeeping, indexing by division, moving vectors in and out of the free list),
// counted with callgrind in the rxe guest, where every instruction is emulated.
// Slots grow by doubling up to what the queue ever held; at most `keep_buffers` idle slots keep
// their payload's memory (a burst to one peer must not pin its peak forever). Beyond those, a
// retired buffer goes to the BufferPool its transport's queues share, if any, not back to
// malloc: a stream keeps a window of up to MAX_WINDOW packets in flight, and freeing and
// allocating a 4 KiB buffer per packet beyond the 64 kept made glibc trim and regrow its heap
// (page faults, malloc at ~16% of a 1 MiB bidirectional stream's samples, 2026-12-07:
// MPI bibw 1 MiB 0.6-0.9 GB/s with it, 1.8-2.6 GB/s with 1024 kept per queue).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/buffer_pool.hpp"

namespace roce::ud {

// The pool a transport's queues share (src/common/buffer_pool.hpp), guarded by the transport's
// lock; it keeps at most TX_QUEUE_LEN buffers (one full queue's worth, however many peers).
using roce::BufferPool;

template <typename Packet>
class PacketQueue {
public:
    static constexpr size_t keep_buffers = 64;

    explicit PacketQueue(BufferPool* pool = nullptr) : pool_(pool) {}

    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    Packet& operator[](size_t i) { return slots_[(head_ + i) & mask_]; }
    const Packet& operator[](size_t i) const { return slots_[(head_ + i) & mask_]; }
    Packet& front() { return slots_[head_]; }
    const Packet& front() const { return slots_[head_]; }

    // A new packet at the back: its fields as the last occupant left them, its payload empty
    // (with that occupant's capacity, if kept).
    Packet& push_back() {
        if (size_ == slots_.size()) grow();
        Packet& p = slots_[(head_ + size_) & mask_];
        if (p.payload.capacity() != 0) --kept_;
        else if (pool_) p.payload = pool_->take();
        p.payload.clear();
        ++size_;
        return p;
    }
    void pop_front() {
        Packet& p = slots_[head_];
        if (p.payload.capacity() != 0) {
            if (kept_ < keep_buffers) {
                ++kept_;
            } else if (pool_) {
                pool_->give(std::exchange(p.payload, {}));
            } else {
                std::vector<uint8_t>().swap(p.payload);
            }
        }
        head_ = (head_ + 1) & mask_;
        --size_;
    }
    void clear() {
        while (!empty()) pop_front();
    }

private:
    void grow() {
        std::vector<Packet> bigger(slots_.empty() ? 8 : slots_.size() * 2);
        for (size_t i = 0; i < slots_.size(); ++i) {
            bigger[i] = std::move(slots_[(head_ + i) & mask_]);
        }
        slots_.swap(bigger);
        head_ = 0;
        mask_ = slots_.size() - 1;
    }

    BufferPool* pool_;
    std::vector<Packet> slots_;
    size_t head_ = 0, size_ = 0, mask_ = 0;
    size_t kept_ = 0;   // idle slots whose payload keeps its memory
};

} // namespace roce::ud
