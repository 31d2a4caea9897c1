#include "ud/receiver.hpp"

#include <atomic>

#include "common/log.hpp"

namespace roce::ud {

uint32_t Receiver::sack_bits() const {
    uint32_t bits = 0;
    for (unsigned i = 0; i < 32; ++i) {
        if (ooo_.count(rcv_next_ + 1 + i) != 0) {
            bits |= 1u << i;
        }
    }
    return bits;
}

void Receiver::receive(const Header& h, const uint8_t* payload, size_t len, uint64_t now,
                       const Deliver& deliver) {
    if (unacked_++ == 0) {
        first_unacked_ns_ = now;
    }
    if (h.flags & flag_ack_req || unacked_ >= cfg_.ack_every) {
        ack_now_ = true;
    }
    if (seq_lt(h.psn, rcv_next_)) {
        ++stats_.duplicates;
        ack_now_ = true;   // our ACK may have been lost: say again what we have
        return;
    }
    if (h.psn != rcv_next_) {
        if (refusing_) {
            ++stats_.reasm_refused;   // nothing is held behind a refused AM: it never drains
            return;
        }
        if (seq_lt(rcv_next_ + cfg_.window, h.psn)) {
            ++stats_.out_of_window;
            return;
        }
        if (ooo_.count(h.psn) != 0) {
            ++stats_.duplicates;
        } else if (budget_ && budget_->used + charge(len) > budget_->limit) {
            ++stats_.over_budget;
            if (!nak_ || seq_lt(nak_end_, h.psn)) nak_end_ = h.psn;
            nak_ = true;
        } else {
            ++stats_.out_of_order;
            ooo_.emplace(h.psn, Held{h, std::vector<uint8_t>(payload, payload + len)});
            if (budget_) {
                budget_->used += charge(len);
            }
        }
        ack_now_ = true;   // report the hole at once: the sender retransmits just it
        return;
    }
    if (!reasm_room(h)) {
        ++stats_.over_budget;   // not taken: the sender sends it again
        ack_now_ = true;
        return;
    }
    if (refusing_) {
        if (h.type == PktType::data && !(h.flags & flag_first)) {
            ++stats_.reasm_refused;   // (release_stale): never taken, the sender times out
            return;
        }
        refusing_ = false;      // a new AM (or a probe) where the given-up one went on: not ours
    }
    // In order and taken: the sequence advances. What release_stale() counts from: any packet
    // would do for a live sender, but a stranger's duplicates (its first fragment sent again
    // and again) then kept its reservation for good.
    last_rx_ns_ = now;
    if (ooo_.empty()) {
        consume(h, payload, len, deliver);   // the common case: nothing held
        return;
    }
    if (auto it = ooo_.find(h.psn); it != ooo_.end()) {
        // A copy held since the drain below stopped at it (no reservation then): this one
        // replaces it.
        unhold(it);
    }
    consume(h, payload, len, deliver);
    while (!ooo_.empty()) {
        auto it = ooo_.find(rcv_next_);
        if (it == ooo_.end() || !reasm_room(it->second.h)) {
            break;   // (a held first fragment without a reservation waits for its retransmission)
        }
        Held held = unhold(it);
        consume(held.h, held.payload.data(), held.payload.size(), deliver);
    }
}

Receiver::Held Receiver::unhold(std::unordered_map<uint32_t, Held>::iterator it) {
    Held held = std::move(it->second);
    ooo_.erase(it);
    if (budget_) {
        budget_->used -= charge(held.payload.size());
    }
    return held;
}

// An AM above our limit is dropped (and acknowledged: the sequence goes on). A legitimate peer
// sends one only when its limit is larger than ours, a setting that must match on every side:
// said once per process, since many peers (or strangers) may do it.
void Receiver::over_limit(size_t len) {
    ++stats_.malformed;
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true, std::memory_order_relaxed))
        ROCE_WARN("ud: an AM of %zu bytes or more is above this side's limit of %zu: dropped (a peer "
                  "with a larger segment size setting?); later ones are only counted (malformed)",
                  len, cfg_.max_msg);
}

void Receiver::drop_held() {
    if (budget_) {
        for (const auto& [psn, held] : ooo_) {
            budget_->used -= charge(held.payload.size());
        }
    }
    ooo_.clear();
    in_msg_ = false;
    discarding_ = false;
    refusing_ = false;
    reasm_release();
}

bool Receiver::release_stale(uint64_t now, uint64_t idle_ns) {
    if (!reasm_reserved_ || elapsed_ns(now, last_rx_ns_) < idle_ns) {
        return false;
    }
    ++stats_.reasm_expired;
    refusing_ = in_msg_;
    in_msg_ = false;
    reasm_release();
    while (refusing_ && !ooo_.empty()) {
        unhold(ooo_.begin());   // (held beyond it: would never drain)
    }
    return true;
}

bool Receiver::reasm_room(const Header& h) const {
    const bool starts = h.type == PktType::data && (h.flags & flag_first) && !(h.flags & flag_last);
    return !starts || !budget_ || reasm_reserved_ ||
           budget_->reasm_used + cfg_.max_msg <= budget_->reasm_limit;
}

void Receiver::reasm_release() {
    reasm_.clear();
    if (!budget_) {
        return;
    }
    if (reasm_reserved_) {
        budget_->reasm_used -= cfg_.max_msg;
        reasm_reserved_ = false;
    }
    if (budget_->spare.capacity() < reasm_.capacity()) {
        budget_->spare.swap(reasm_);   // the larger buffer serves the next AM
    }
    reasm_ = {};                       // the smaller one is freed
}

// One in-order packet: advance, and deliver or collect the AM it belongs to. A fragment that
// does not fit the AM in progress (a peer that does not follow the protocol) discards that AM;
// the sequence itself stays intact.
void Receiver::consume(const Header& h, const uint8_t* payload, size_t len, const Deliver& deliver) {
    ++rcv_next_;
    if (h.type != PktType::data) {
        return;   // probe: sequenced so that its ACK proves the peer alive, nothing to deliver
    }
    const bool first = h.flags & flag_first, last = h.flags & flag_last;
    if (first) {
        if (in_msg_) {
            ++stats_.malformed;   // the previous AM never ended
        }
        in_msg_ = false;
        discarding_ = false;
        if (last) {
            if (reasm_reserved_) {
                reasm_release();   // the AM cut short
            }
            if (len > cfg_.max_msg) {
                // One datagram above the limit: a device may hand up more than the path MTU
                // (a UDP socket takes up to 64 KiB); fuzz_ud found it delivered.
                over_limit(len);
                return;
            }
            ++stats_.delivered;
            deliver(h.am_id, payload, len);   // the common case: no copy
            return;
        }
        in_msg_ = true;
        reasm_am_ = h.am_id;
        if (budget_) {
            // An AM cut short by a new first fragment still holds its reservation: kept.
            if (!reasm_reserved_) {
                budget_->reasm_used += cfg_.max_msg;
                reasm_reserved_ = true;
            }
            if (reasm_.capacity() == 0) {
                reasm_.swap(budget_->spare);
            }
        }
        reasm_.clear();
    } else if (!in_msg_) {
        if (!discarding_) {
            ++stats_.malformed;   // a continuation without a start
        }
        discarding_ = !last;
        return;
    }
    if (reasm_.size() + len > cfg_.max_msg) {
        over_limit(reasm_.size() + len);
        in_msg_ = false;
        discarding_ = !last;
        reasm_release();
        return;
    }
    reasm_.insert(reasm_.end(), payload, payload + len);
    if (last) {
        in_msg_ = false;
        ++stats_.delivered;
        deliver(reasm_am_, reasm_.data(), reasm_.size());
        reasm_release();
    }
}

} // namespace roce::ud
