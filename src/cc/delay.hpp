// Delay-target window control (Swift, Kumar et al., SIGCOMM 2020; the delay signal as in TIMELY)
// for any device: the requester measures request-to-completion round trips (post -> CQE, or
// packet -> ACK on the userspace device) and keeps a byte window:
//   rtt <  target:  cwnd += ai * acked / cwnd                (~ +ai bytes per round trip)
//   rtt >= target:  cwnd *= max(1 - beta*(rtt-target)/rtt, 1 - max_mdf), at most once per RTT
// clamped to [min_cwnd, max_cwnd]. Below one MTU the window cannot be enforced by counting
// packets; pacing_rate_bps() then returns cwnd/srtt and the caller paces (Swift's sub-packet cwnd).
// A completion is timed when software finds it, and software may have been away (an MPI rank
// computing between calls): `slack` is how long it may have waited there (since the poll before
// the one that found it), so the round trip was between rtt - slack and rtt. The window shrinks
// only for what the network surely took (rtt - slack >= target) and by that much; a sample that
// may be the poller's absence alone changes nothing (counted as ambiguous). Without this, every
// compute phase longer than the target cut the window by max_mdf.
#pragma once
#include <cstdint>

#include "cc/cc_time.hpp"
#include "cc/config.hpp"

namespace roce::cc {

struct DelayCounters {
    uint64_t samples = 0, increases = 0, decreases = 0, losses = 0, ambiguous = 0;
    uint64_t acked_bytes = 0;   // what the samples covered: every byte acknowledged, once
};

class DelayCc {
public:
    DelayCc(const DelayParams& p, uint32_t mtu);

    // false: ambiguous (the poller's absence may explain it), nothing changed.
    bool on_rtt_sample(Nanos rtt, uint64_t acked_bytes, Nanos now, Nanos slack = 0);
    // A loss (NAK / timeout): cwnd *= 1 - max_mdf, at most once per RTT (Swift's retransmit reaction).
    void on_loss(Nanos now);
    double cwnd_bytes() const { return cwnd_; }
    // May a new request go out with `outstanding` bytes already unacknowledged? One request is
    // always allowed when nothing is outstanding (then pacing bounds the rate).
    bool can_send(uint64_t outstanding) const { return outstanding == 0 || static_cast<double>(outstanding) < cwnd_; }
    // 0: no pacing needed (cwnd >= MTU); else the rate that enforces cwnd per smoothed RTT.
    double pacing_rate_bps() const;
    Nanos srtt() const { return srtt_; }
    const DelayCounters& counters() const { return ctr_; }

private:
    DelayParams p_;
    double mtu_;
    double cwnd_;
    Nanos srtt_ = 0;
    Nanos last_decrease_ = 0;
    bool decreased_ = false;
    DelayCounters ctr_;
};

// Cap on outstanding RDMA READs per QP: each READ request makes the responder send up to its
// length back, so READs bypass the requester's send-side rate control; counting them bounds the
// response burst a QP can trigger (initiator depth + bytes).
class ReadCap {
public:
    explicit ReadCap(const ReadCapParams& p) : p_(p) {}
    bool can_post(uint64_t len) const {
        return reads_ < p_.max_reads && (bytes_ == 0 || bytes_ + len <= p_.max_bytes);
    }
    void on_post(uint64_t len) { reads_++; bytes_ += len; }
    void on_complete(uint64_t len) {
        if (reads_ > 0) reads_--;
        bytes_ = bytes_ >= len ? bytes_ - len : 0;
    }
    uint32_t reads() const { return reads_; }
    uint64_t bytes() const { return bytes_; }
private:
    ReadCapParams p_;
    uint32_t reads_ = 0;
    uint64_t bytes_ = 0;
};

} // namespace roce::cc
