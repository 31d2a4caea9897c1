// The ping-pongs of `roce_doctor check` and the echo side `roce_doctor serve` runs for them. RC
// goes through the backend-neutral device contract (common/rc_device.hpp), so the same code
// checks the userspace device and the verbs backend; UD through the datagram QP contract
// (ud/datagram.hpp). Every payload is a fresh pseudo-random pattern checked byte by byte, and
// every wait has a deadline: a dead or silent server is a failure within seconds, never a hang.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/rc_device.hpp"
#include "common/status.hpp"
#include "ud/datagram.hpp"

namespace roce::doctor {

struct PingSize {
    size_t bytes;
    unsigned iters;
};

struct PingReport {
    struct Line {
        size_t bytes = 0;
        unsigned iters = 0;
        double median_half_rtt_us = 0;
    };
    std::vector<Line> lines;
    std::string text() const;   // "8 B 12.3 us, 64 KiB 150.2 us (median half round trip)"
};

// RC: connects a QP of `dev` to `peer` (the server's device), SENDs each size iters times and
// waits for the echo. Errors (err: which size/iteration, what happened): timeout, unreachable,
// io_error (data mismatch: err names the first differing byte), or the completion status.
Status rc_pingpong(RcDevice& dev, const WireAddr& peer, const std::vector<PingSize>& sizes, double timeout_s,
                   PingReport& out, std::string& err);

// UD: datagrams to `peer`, each retried a few times (UD is unreliable by contract).
Status ud_pingpong(ud::DatagramQp& qp, const ud::UdAddr& peer, const std::vector<PingSize>& sizes,
                   double timeout_s, PingReport& out, std::string& err);

// Server side: sends every SEND message received on any QP of the device back on that QP.
class RcEcho {
public:
    explicit RcEcho(std::unique_ptr<RcDevice> dev) : dev_(std::move(dev)) {}
    RcDevice& device() { return *dev_; }
    // One round of progress; returns whether anything arrived or was sent.
    bool poll();
    // Readable when poll() has work; arms the device's notification first (rc_device.hpp: arm,
    // then poll, then wait).
    int arm() { dev_->arm_events(); return dev_->event_fd(); }

private:
    std::unique_ptr<RcDevice> dev_;
    std::deque<std::pair<uint32_t, std::vector<uint8_t>>> backlog_;   // echoes the SQ had no room for
};

// Server side: sends every datagram back to its source.
class UdEcho {
public:
    explicit UdEcho(std::unique_ptr<ud::DatagramQp> qp) : qp_(std::move(qp)) {}
    ud::DatagramQp& qp() { return *qp_; }
    bool poll();
    int arm() { qp_->arm(); return qp_->event_fd(); }

private:
    std::unique_ptr<ud::DatagramQp> qp_;
};

} // namespace roce::doctor
