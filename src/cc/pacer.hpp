// Token-bucket pacer: enforces a rate (from DCQCN's RP, or cwnd/RTT for sub-MTU delay windows) on
// the wire. Tokens are bytes; a packet may leave when the bucket is not in debt, and takes its
// whole size (the bucket may go negative), so packets larger than the bucket still pass and the
// long-run rate is exact. The bucket holds at most `burst` bytes, so an idle QP can send at most
// burst + one packet back to back.
#pragma once
#include <cstdint>

#include "cc/cc_time.hpp"

namespace roce::cc {

class Pacer {
public:
    Pacer(double rate_bps, uint64_t burst_bytes)
        : rate_(rate_bps), burst_(static_cast<double>(burst_bytes)), tokens_(static_cast<double>(burst_bytes)) {}

    // Changes the rate from `now` on (tokens earned so far are at the old rate).
    void set_rate(double bps, Nanos now) {
        refill(now);
        rate_ = bps;
    }
    double rate_bps() const { return rate_; }

    // Earliest time >= now at which a packet of `bytes` may leave.
    Nanos next_send_time(Nanos now, uint32_t /*bytes*/) const {
        const double t = tokens_at(now);
        if (t >= -eps) return now;
        return now + static_cast<Nanos>(ns_for(rate_, -t)) + 1;
    }
    // The packet left at `now`.
    void consume(uint32_t bytes, Nanos now) {
        refill(now);
        tokens_ -= bytes;
    }
    double tokens(Nanos now) const { return tokens_at(now); }

private:
    static constexpr double eps = 1e-6;
    double tokens_at(Nanos now) const {
        if (now <= last_) return tokens_;
        const double t = tokens_ + bytes_in(rate_, now - last_);
        return t < burst_ ? t : burst_;
    }
    void refill(Nanos now) {
        tokens_ = tokens_at(now);
        if (now > last_) last_ = now;
    }
    double rate_;
    double burst_;
    double tokens_;
    Nanos last_ = 0;
};

} // namespace roce::cc
