// Receive side of one ud_roce peer: in-order delivery of sequenced packets, duplicate
// suppression, a bounded out-of-order buffer (so a loss costs one retransmission, not the whole
// window), reassembly of fragmented AMs, and when to acknowledge. Pure state machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "common/clock.hpp"
#include "common/function_ref.hpp"
#include "ud/header.hpp"

namespace roce::ud {

struct ReceiverConfig {
    uint32_t window = 1024;          // packets beyond the next expected one that are buffered
    uint32_t ack_every = 16;         // acknowledge at least every N sequenced packets
    size_t max_msg = 65536;          // largest reassembled AM
};

struct ReceiverStats {
    uint64_t delivered = 0, duplicates = 0, out_of_order = 0, out_of_window = 0, malformed = 0;
    uint64_t over_budget = 0;   // packets not kept: the transport's HoldBudget was spent
    uint64_t reasm_expired = 0; // AMs under way given up: their sender fell silent (release_stale)
    uint64_t reasm_refused = 0; // their later fragments, not taken
};

// What all receivers of one transport may hold out of order together, in bytes (payload plus a
// fixed charge per packet). One receiver alone is bounded by its window (1024 packets, ~4 MiB),
// but datagrams from unknown or hostile sources each make a receiver of their own: without a
// common bound their holes could pin memory without limit. A packet over budget is dropped like
// a loss (the sender retransmits it once the hole before it is filled).
struct HoldBudget {
    size_t limit = size_t(64) << 20;
    size_t used = 0;
    static constexpr size_t per_packet = 64;   // the entry around a payload (header, map node)
    // AMs being reassembled, a pool of its own: each reserves its receiver's max_msg (SEG_SIZE)
    // when its first fragment is taken, so an AM under way always completes (its further
    // fragments need nothing) and at most reasm_limit / max_msg are under way at once - one per
    // peer at most, and a peer is only a header field. A first fragment beyond that is dropped
    // like a loss and taken when it comes again, after AMs under way completed. (Sharing one
    // pool with the out-of-order packets could deadlock: held packets drain only through the
    // in-order one a full pool would refuse.)
    size_t reasm_limit = size_t(64) << 20;
    size_t reasm_used = 0;
    // One reassembly buffer passed between the receivers: a finished AM's serves the next one
    // with no allocation, and no receiver keeps one for a peer that may never send again.
    std::vector<uint8_t> spare;
};

class Receiver {
public:
    // A whole AM, in order. `data` is valid during the call only.
    using Deliver = FunctionRef<void(uint8_t am_id, const uint8_t* data, size_t len)>;

    // `budget` (shared, outliving this receiver) bounds what it holds out of order; none: its
    // window alone.
    explicit Receiver(const ReceiverConfig& cfg, HoldBudget* budget = nullptr) : cfg_(cfg), budget_(budget) {}
    ~Receiver() { drop_held(); }
    Receiver(const Receiver&) = delete;
    Receiver& operator=(const Receiver&) = delete;

    // A sequenced packet (data or probe) arrived; delivers what became in order.
    void receive(const Header& h, const uint8_t* payload, size_t len, uint64_t now,
                 const Deliver& deliver);

    uint32_t ack() const { return rcv_next_; }
    uint32_t sack() const { return ooo_.empty() ? 0 : sack_bits(); }   // (every packet sent asks)
    // Whether an ACK should go out now (ack_req, a hole, a duplicate, every ack_every packets),
    // or once `delay_ns` passed since the first unacknowledged packet.
    bool ack_now() const { return ack_now_; }
    bool ack_pending() const { return unacked_ != 0 || ack_now_; }
    bool ack_due(uint64_t now, uint64_t delay_ns) const {
        return ack_now_ || (unacked_ != 0 && elapsed_ns(now, first_unacked_ns_) >= delay_ns);
    }
    // Whether the next ACK says "dropped beyond ack()" (header flag_nak): only while a dropped
    // packet is still missing, or a NAK sent after the go-back filled the hole would make the
    // sender resend a window that was merely in flight.
    bool nak() const { return nak_ && seq_le(rcv_next_, nak_end_); }
    // Every packet we send to the peer carries ack()/sack() (and nak()).
    void ack_sent() { unacked_ = 0; ack_now_ = false; nak_ = false; }
    const ReceiverStats& stats() const { return stats_; }
    // Forgets what is held out of order and the AM being reassembled, and gives their bytes
    // back (a failed peer).
    void drop_held();
    // An AM under way whose sender's sequence has not advanced for `idle_ns` (dead mid-message,
    // or a stranger that sent a first fragment only, perhaps again and again: duplicates do not
    // count) gives its reassembly reservation back; true if
    // it did. Its pool is shared: such leftovers would otherwise refuse every other peer's
    // multi-packet AMs for good. The rest of that AM is then never taken (nor acknowledged):
    // should its sender be alive after all (stopped for that long), it times out and says so,
    // instead of the AM going missing without a word.
    bool release_stale(uint64_t now, uint64_t idle_ns);
    bool holds_reservation() const { return reasm_reserved_; }
    // The sender was heard although its packet was not taken (Transport: the owner is away).
    void heard(uint64_t now) { last_rx_ns_ = now; }

private:
    struct Held {
        Header h;
        std::vector<uint8_t> payload;
    };
    void consume(const Header& h, const uint8_t* payload, size_t len, const Deliver& deliver);
    void over_limit(size_t len);   // an AM above max_msg: counted, logged once per process
    uint32_t sack_bits() const;

    static size_t charge(size_t len) { return len + HoldBudget::per_packet; }
    // Takes a held packet out, its bytes back to the budget.
    Held unhold(std::unordered_map<uint32_t, Held>::iterator it);
    // Whether an in-order packet may be consumed now: one that starts a fragmented AM needs a
    // reassembly reservation.
    bool reasm_room(const Header& h) const;
    void reasm_release();   // the AM was delivered or discarded: reservation and buffer go back

    ReceiverConfig cfg_;
    HoldBudget* budget_;
    uint32_t rcv_next_ = 0;
    std::unordered_map<uint32_t, Held> ooo_;   // by psn, all within (rcv_next, rcv_next+window]
    std::vector<uint8_t> reasm_;
    bool reasm_reserved_ = false;              // holds budget_->reasm_limit's share for reasm_
    uint8_t reasm_am_ = 0;
    bool in_msg_ = false;
    uint64_t last_rx_ns_ = 0;                  // latest packet taken in order (or heard())
    bool discarding_ = false;                  // rest of a malformed AM
    bool refusing_ = false;                    // rest of an AM release_stale gave up
    uint32_t unacked_ = 0;
    uint64_t first_unacked_ns_ = 0;
    bool ack_now_ = false;
    bool nak_ = false;                         // dropped a packet beyond the hole since the last ACK
    uint32_t nak_end_ = 0;                     // the highest psn dropped since then
    ReceiverStats stats_;
};

} // namespace roce::ud
