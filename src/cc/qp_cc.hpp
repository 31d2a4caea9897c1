// Per-QP congestion control: the object a transport (userspace device, or the rc_roce software
// window over a verbs device) owns per QP, and the simulator owns per flow. It composes the state
// machines chosen by the mode (off | dcqcn | delay) and exposes the hooks the datapath calls.
// All calls take `now` (ns, the caller's monotonic clock); nothing reads a clock or blocks.
//
// Requester (sender) side, per packet / WQE:
//   t = next_send_time(now, bytes, outstanding)   // now: send; later: arm a wake-up; never: window full
//   on_sent(bytes, now)                           // after the packet is on the wire
//   on_cnp(now)                                   // a CNP for this QP arrived (dcqcn)
//   on_rtt_sample(rtt, acked_bytes, now, slack)   // a completion: rtt = completion - post time (delay);
//                                                 //   slack: how long it may have waited unseen
//   on_loss(now)                                  // a sequence NAK or a retransmission timeout
//   on_timer(now) when now >= next_timer()        // DCQCN increase timer
// Responder (receiver) side:
//   if (on_ce_packet(now)) send a CNP             // a CE-marked packet for this QP (dcqcn NP)
// READs: read_cap().can_post / on_post / on_complete, in every mode.
#pragma once
#include <cstdint>
#include <optional>

#include "cc/config.hpp"
#include "cc/dcqcn.hpp"
#include "cc/delay.hpp"
#include "cc/pacer.hpp"

namespace roce::cc {

struct QpCcCounters {
    uint64_t cnps_received = 0, cnps_ignored = 0;   // ignored: CNPs while not in dcqcn mode
    uint64_t ce_packets = 0, cnps_to_send = 0;
    uint64_t paced = 0;                             // next_send_time said "later"
    uint64_t window_blocked = 0;                    // next_send_time said "never"
};

class QpCc {
public:
    // mode must be resolved (not auto): see resolve_mode / make_qp_cc.
    QpCc(const CcConfig& cfg, CcMode mode, double line_rate_bps, uint32_t mtu);

    CcMode mode() const { return mode_; }

    Nanos next_send_time(Nanos now, uint32_t bytes, uint64_t outstanding_bytes);
    void on_sent(uint32_t bytes, Nanos now);
    void on_cnp(Nanos now);
    bool on_rtt_sample(Nanos rtt, uint64_t acked_bytes, Nanos now, Nanos slack = 0);   // DelayCc's
    void on_loss(Nanos now);                      // sequence NAK or retransmission timeout
    void on_timer(Nanos now);
    Nanos next_timer() const { return rp_ ? rp_->next_timer() : never; }

    bool on_ce_packet(Nanos now);

    ReadCap& read_cap() { return read_cap_; }
    const ReadCap& read_cap() const { return read_cap_; }

    // Introspection (stats, tests, simulator plots).
    double rate_bps() const;                 // dcqcn: R_C; delay: pacing rate or line rate; off: line rate
    double cwnd_bytes() const { return delay_ ? delay_->cwnd_bytes() : 0; }
    const DcqcnRp* rp() const { return rp_ ? &*rp_ : nullptr; }
    const DelayCc* delay() const { return delay_ ? &*delay_ : nullptr; }
    const QpCcCounters& counters() const { return ctr_; }

private:
    void sync_pacer(Nanos now);

    CcMode mode_;
    double line_;
    std::optional<DcqcnRp> rp_;
    std::optional<DelayCc> delay_;
    Pacer pacer_;
    CnpLimiter np_;
    ReadCap read_cap_;
    QpCcCounters ctr_;
};

// The factory: resolves auto for the device kind and builds the QP's controller.
QpCc make_qp_cc(const CcConfig& cfg, DeviceKind dev, double line_rate_bps, uint32_t mtu);

} // namespace roce::cc
