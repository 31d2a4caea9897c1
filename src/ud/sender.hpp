// Send side of one ud_roce peer: sequence numbers, the retransmission queue, the AIMD window,
// retransmission (fast, from selective ACKs; on timeout, of what the ACKs do not cover) and peer
// failure detection. Pure state machine: time comes in as nanoseconds, packets leave through
// the `emit` callback, nothing here touches a socket.
//
// Queue layout (oldest first):  [ sent, unacknowledged ... | queued, not sent yet ... ]
//                                 ^ snd_una                  ^ n_sent
// Only the first `cwnd` packets are ever in flight, so a slow or lossy peer fills its own queue
// (and its sender sees no_resource) without stalling the others.
// Congestion control (SenderConfig::delay, UCX_UD_ROCE_CC=delay): the Swift-like byte window of
// src/cc (cc::DelayCc) on top of the AIMD packet window, fed by the same Karn RTT samples; a
// packet goes out only while both windows have room (one is always allowed when none is in
// flight), and losses cut both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <sys/uio.h>
#include <vector>

#include <optional>

#include "cc/delay.hpp"
#include "common/clock.hpp"
#include "common/function_ref.hpp"
#include "ud/header.hpp"
#include "ud/packet_queue.hpp"

namespace roce::ud {

struct SenderConfig {
    uint32_t min_window = 2;         // packets
    uint32_t init_window = 64;
    uint32_t max_window = 256;
    uint32_t queue_len = 1024;       // packets queued (sent + not sent) before no_resource
    // Ask for an immediate ACK once N packets went out since an ACK last advanced: a one-way
    // stream's receiver acknowledges every 16 anyway, and in a ping-pong every reply carries one,
    // so asking on a fixed count made every 32nd ping-pong message cost an extra ACK packet
    // ahead of the reply (3% more packets through rxe, counted in the guest). A packet that
    // fills either window (packets, or the delay window's bytes) asks too.
    uint32_t ack_req_every = 32;
    uint64_t min_rto_ns = 2'000'000;
    uint64_t max_rto_ns = 500'000'000;
    uint64_t peer_timeout_ns = 30'000'000'000ull;   // no progress for this long: peer failed
    bool delay = false;              // the delay window (cc::DelayCc) on top of AIMD
    cc::DelayParams delay_params;
    uint32_t mtu = 4096;             // the delay window's unit below which it paces (not here)
};

struct SenderStats {
    uint64_t retransmits = 0, fast_retransmits = 0, timeouts = 0, window_cuts = 0;
    uint64_t delay_blocked = 0;      // transmit() stopped by the delay window
    uint64_t timers_deferred = 0;    // expiries after a gap in the caller's runs (on_timer)
};

class Sender {
public:
    struct Packet {
        uint32_t psn = 0;
        PktType type = PktType::data;
        uint8_t flags = 0;
        uint8_t am_id = 0;
        uint16_t tx_count = 0;      // transmissions so far (0: queued, not sent)
        bool sacked = false;
        uint64_t sent_ns = 0;       // last transmission
        std::vector<uint8_t> payload;
    };
    // Transmits one packet (header fields other than psn/type/flags/am_id are the caller's);
    // false: the device cannot take it now, try again later.
    using Emit = FunctionRef<bool(const Packet&, bool ack_req)>;

    // pool: where retired payload buffers wait for the next packets (shared by a transport's
    // senders under its lock); none: each queue keeps PacketQueue::keep_buffers.
    explicit Sender(const SenderConfig& cfg, BufferPool* pool = nullptr)
        : cfg_(cfg), q_(pool), cwnd_(cfg.init_window) {
        if (cfg.delay) delay_.emplace(cfg.delay_params, cfg.mtu);
    }

    bool can_queue(size_t packets) const { return q_.size() + packets <= cfg_.queue_len; }
    // Queues one packet carrying the gathered iov bytes (starting `offset` bytes in, `len` of them).
    void enqueue(PktType type, uint8_t flags, uint8_t am_id, const iovec* iov, size_t iovcnt,
                 size_t offset, size_t len, uint64_t now);
    // Sends queued packets while the window allows.
    void transmit(uint64_t now, const Emit& emit);
    // An acknowledgement from the peer (any packet's ack/sack fields).
    // slack: how long the ACK may have waited unread (the delay window's samples, cc::DelayCc).
    // nak: the peer dropped packets beyond `ack` (header flag_nak): resent now, counted as a
    // fast retransmit.
    void on_ack(uint32_t ack, uint32_t sack, uint64_t now, const Emit& emit, uint64_t slack = 0,
                bool nak = false);
    // The peer said it is busy (header flag_busy): alive, so the peer timeout starts again, as
    // rc_roce's RNR NAKs keep a requester waiting for a receiver whose owner is away.
    void on_peer_busy(uint64_t now) { last_progress_ns_ = now; }
    // Retransmission timer and failure detection; returns false once the peer failed.
    // were_away: the caller has not run for a while (descheduled, computing), so an expired timer
    // says nothing about the peer, whose ACK may be waiting unread: the first expiry after such
    // a gap restarts the timer instead (once per timeout, so a rare caller still retransmits).
    bool on_timer(uint64_t now, const Emit& emit, bool were_away = false);

    bool idle() const { return q_.empty(); }              // everything acknowledged
    bool unsent() const { return n_sent_ < q_.size(); }
    uint32_t next_psn() const { return next_psn_; }
    double cwnd() const { return cwnd_; }
    const cc::DelayCc* delay() const { return delay_ ? &*delay_ : nullptr; }
    uint64_t inflight_bytes() const { return inflight_bytes_; }
    uint64_t rto_ns() const;
    std::string describe() const;   // for the failure log: queue, window, timer
    const SenderStats& stats() const { return stats_; }
    // Frees the queue (peer failed).
    void drop_all() { q_.clear(); n_sent_ = 0; inflight_bytes_ = 0; goback_end_.reset(); }

private:
    bool send_one(Packet& p, uint64_t now, const Emit& emit, bool retransmit);
    // Resends the packets in flight q_[from, upto) that the peer has not reported, `budget` of
    // them at most; returns the index after the last one it looked at.
    size_t resend_unreported(uint64_t now, const Emit& emit, size_t from, size_t upto, size_t budget);
    // After a NAK's go-back: an ACK moved, so the resent packets it took make room for the next
    // of those the peer dropped (as TCP NewReno does on a partial ACK).
    void continue_goback(uint64_t now, const Emit& emit);
    void cut_window(uint64_t now);
    bool window_open() const;

    SenderConfig cfg_;
    PacketQueue<Packet> q_;
    size_t n_sent_ = 0;
    uint32_t next_psn_ = 0;
    double cwnd_;
    uint32_t since_ack_req_ = 0;
    uint32_t dupacks_ = 0;
    uint32_t recover_psn_ = 0;       // no new fast retransmit before snd_una passes this
    bool in_recovery_ = false;
    std::optional<uint32_t> nak_answered_;   // the hole last gone back to on a NAK (until ack moves)
    // A NAK's go-back under way: the packets in flight at the NAK end at goback_end_; those up
    // to goback_next_ have been resent.
    std::optional<uint32_t> goback_end_;
    uint32_t goback_next_ = 0;
    int64_t srtt_ns_ = -1, rttvar_ns_ = 0;
    unsigned backoff_ = 0;
    uint64_t last_progress_ns_ = 0;  // last ACK that advanced, or when the queue became busy
    uint64_t timer_floor_ns_ = 0;    // the timer runs from here at the earliest (were_away)
    bool timer_deferred_ = false;    // restarted once since the last timeout or advancing ACK
    SenderStats stats_;
    std::optional<cc::DelayCc> delay_;
    uint64_t inflight_bytes_ = 0;    // payload of the packets in flight (first n_sent_)
};

} // namespace roce::ud
