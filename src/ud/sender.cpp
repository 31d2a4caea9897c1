#include "ud/sender.hpp"

#include <algorithm>

namespace roce::ud {

void Sender::enqueue(PktType type, uint8_t flags, uint8_t am_id, const iovec* iov, size_t iovcnt,
                     size_t offset, size_t len, uint64_t now) {
    if (q_.empty()) {
        last_progress_ns_ = now;   // the peer timeout runs from here while we wait for ACKs
    }
    Packet& p = q_.push_back();
    p.psn = next_psn_++;
    p.type = type;
    p.flags = flags;
    p.am_id = am_id;
    p.tx_count = 0;
    p.sacked = false;
    p.sent_ns = 0;
    // Appended, not resized and overwritten: resize() zeroed every byte first.
    p.payload.reserve(len);
    size_t done = 0;
    for (size_t i = 0; i < iovcnt && done < len; ++i) {
        const auto* base = static_cast<const uint8_t*>(iov[i].iov_base);
        size_t n = iov[i].iov_len;
        if (offset >= n) {
            offset -= n;
            continue;
        }
        const size_t take = std::min(n - offset, len - done);
        p.payload.insert(p.payload.end(), base + offset, base + offset + take);
        done += take;
        offset = 0;
    }
}

bool Sender::send_one(Packet& p, uint64_t now, const Emit& emit, bool retransmit) {
    // Ask for an ACK now and then, and when the window is about to fill (the sender would
    // otherwise wait for the receiver's delayed ACK).
    bool ack_req = retransmit || ++since_ack_req_ >= cfg_.ack_req_every ||
                   double(n_sent_ + 1) >= cwnd_ ||
                   (delay_ && !delay_->can_send(inflight_bytes_ + p.payload.size()));
    if (!emit(p, ack_req)) {
        return false;
    }
    if (ack_req) {
        since_ack_req_ = 0;
    }
    if (retransmit) {
        ++stats_.retransmits;
    }
    ++p.tx_count;
    p.sent_ns = now;
    return true;
}

bool Sender::window_open() const {
    if (double(n_sent_) >= cwnd_)
        return false;
    return !delay_ || delay_->can_send(inflight_bytes_);
}

void Sender::transmit(uint64_t now, const Emit& emit) {
    while (n_sent_ < q_.size() && window_open()) {
        if (!send_one(q_[n_sent_], now, emit, false)) {
            return;
        }
        inflight_bytes_ += q_[n_sent_].payload.size();
        ++n_sent_;
    }
    if (delay_ && n_sent_ < q_.size() && double(n_sent_) < cwnd_)
        ++stats_.delay_blocked;
}

std::string Sender::describe() const {
    return "snd_una " + std::to_string(q_.empty() ? next_psn_ : q_.front().psn) + " next " +
           std::to_string(next_psn_) + " queued " + std::to_string(q_.size()) + " in flight " +
           std::to_string(n_sent_) + " cwnd " + std::to_string(int(cwnd_)) + " rto " +
           std::to_string(rto_ns() / 1000) + " us, " + std::to_string(stats_.timeouts) +
           " timeouts, " + std::to_string(stats_.retransmits) + " retransmissions";
}

uint64_t Sender::rto_ns() const {
    uint64_t base = srtt_ns_ < 0 ? cfg_.min_rto_ns : uint64_t(srtt_ns_ + 4 * rttvar_ns_);
    base = std::max(base, cfg_.min_rto_ns);
    return std::min(cfg_.max_rto_ns, base << std::min(backoff_, 16u));
}

void Sender::cut_window(uint64_t now) {
    cwnd_ = std::max(double(cfg_.min_window), cwnd_ / 2);
    ++stats_.window_cuts;
    if (delay_)
        delay_->on_loss(cc::Nanos(now));
}

void Sender::on_ack(uint32_t ack, uint32_t sack, uint64_t now, const Emit& emit, uint64_t slack, bool nak) {
    const uint32_t una = q_.empty() ? next_psn_ : q_.front().psn;
    const uint32_t sent_end = una + uint32_t(n_sent_);
    if (seq_lt(sent_end, ack)) {
        return;   // acknowledges what we never sent: a confused or hostile peer
    }
    const bool advanced = seq_lt(una, ack);
    if (advanced) {
        // Cumulative ACK advanced: free, sample RTT (first transmissions only: Karn), grow.
        while (!q_.empty() && seq_lt(q_.front().psn, ack)) {
            Packet& p = q_.front();
            if (p.tx_count == 1 && now >= p.sent_ns) {
                const int64_t rtt = int64_t(now - p.sent_ns);
                if (srtt_ns_ < 0) {
                    srtt_ns_ = rtt;
                    rttvar_ns_ = rtt / 2;
                } else {
                    rttvar_ns_ += (std::abs(srtt_ns_ - rtt) - rttvar_ns_) / 4;
                    srtt_ns_ += (rtt - srtt_ns_) / 8;
                }
                if (delay_)
                    delay_->on_rtt_sample(cc::Nanos(rtt), p.payload.size(), cc::Nanos(now), cc::Nanos(slack));
            }
            inflight_bytes_ -= std::min<uint64_t>(inflight_bytes_, p.payload.size());
            // Additive increase: about one packet per window's worth of ACKs.
            cwnd_ = std::min(double(cfg_.max_window), cwnd_ + 1.0 / cwnd_);
            q_.pop_front();
            --n_sent_;
        }
        backoff_ = 0;
        dupacks_ = 0;
        nak_answered_.reset();
        since_ack_req_ = 0;
        last_progress_ns_ = now;
        timer_deferred_ = false;
        if (in_recovery_ && !seq_lt(ack, recover_psn_)) {
            in_recovery_ = false;
        }
        if (goback_end_ && !seq_lt(ack, *goback_end_)) {
            goback_end_.reset();
        }
    } else if (ack == una && sack != 0) {
        ++dupacks_;   // (an older ACK, overtaken by a newer one, is no news)
    }
    // The peer's sequence stops at a packet it had SACKed: it let the held copy go (a first
    // fragment with no room in its reassembly pool waits for this packet again) - reneged, in
    // TCP's word. Missing like any other now, or the timer would never send it again.
    if (n_sent_ != 0 && ack == q_.front().psn && q_.front().sacked) {
        q_.front().sacked = false;
    }
    // Selective ACK: these need no retransmission.
    uint32_t highest_sacked = 0;
    bool any_sacked = false;
    for (uint32_t bits = sack; bits != 0; bits &= bits - 1) {   // the set bits only
        const unsigned i = unsigned(__builtin_ctz(bits));
        const uint32_t psn = ack + 1 + i;
        const size_t idx = psn - (q_.empty() ? next_psn_ : q_.front().psn);
        if (idx < n_sent_) {
            q_[idx].sacked = true;
            highest_sacked = psn;
            any_sacked = true;
        }
    }
    // Fast retransmit: the peer holds packets beyond a hole (three times reported, or more than
    // three packets beyond it) — resend the holes below the highest it has, once per episode.
    size_t resent_below = 0;   // packets q_[0, this) were just seen to by the SACK path
    if (any_sacked && !in_recovery_ &&
        (dupacks_ >= 3 || seq_lt(ack + 3, highest_sacked))) {
        in_recovery_ = true;
        recover_psn_ = next_psn_;
        cut_window(now);
        ++stats_.fast_retransmits;
        for (; resent_below < n_sent_ && seq_lt(q_[resent_below].psn, highest_sacked); ++resent_below) {
            if (!q_[resent_below].sacked && !send_one(q_[resent_below], now, emit, true)) {
                break;
            }
        }
    }
    // The peer dropped what came beyond the hole at `ack` (its hold budget spent): without SACKs
    // the above never runs, so go back to the hole now instead of on the timer. Once per hole:
    // each dropped packet still on its way brings the same NAK (a window resent per packet),
    // and a hole the peer cannot take yet (no reassembly room) would loop; a resend lost again
    // is the timer's.
    if (nak && n_sent_ != 0 && ack == q_.front().psn && nak_answered_ != ack) {
        nak_answered_ = ack;
        if (!in_recovery_) {
            in_recovery_ = true;
            recover_psn_ = next_psn_;
            cut_window(now);
        } else if (seq_lt(recover_psn_, next_psn_)) {
            // (A SACK episode under way: it lasts as long as this go-back, or its end would let
            // the SACK path resend what the go-back resends.)
            recover_psn_ = next_psn_;
        }
        ++stats_.fast_retransmits;
        const size_t window = std::max<size_t>(1, size_t(cwnd_));
        const size_t stop = resend_unreported(now, emit, resent_below, n_sent_, window);
        goback_end_ = ack + uint32_t(n_sent_);
        goback_next_ = ack + uint32_t(stop);
    } else if (advanced && goback_end_) {
        continue_goback(now, emit);
    }
    transmit(now, emit);
}

size_t Sender::resend_unreported(uint64_t now, const Emit& emit, size_t from, size_t upto, size_t budget) {
    size_t i = from;
    for (; i < upto && budget > 0; ++i) {
        if (q_[i].sacked) continue;
        if (!send_one(q_[i], now, emit, true)) break;
        --budget;
    }
    return i;
}

void Sender::continue_goback(uint64_t now, const Emit& emit) {
    const uint32_t una = q_.front().psn;   // (goback_end_ is beyond it: packets are in flight)
    if (seq_lt(goback_next_, una)) goback_next_ = una;
    // In flight now: the resent packets the ACK has not covered yet.
    const size_t resent = goback_next_ - una;
    const size_t window = size_t(cwnd_);
    if (resent >= window) return;
    const size_t upto = std::min<size_t>(n_sent_, *goback_end_ - una);
    goback_next_ = una + uint32_t(resend_unreported(now, emit, resent, upto, window - resent));
    if (!seq_lt(goback_next_, *goback_end_)) goback_end_.reset();   // all of them resent
}

bool Sender::on_timer(uint64_t now, const Emit& emit, bool were_away) {
    if (q_.empty()) {
        return true;
    }
    if (elapsed_ns(now, last_progress_ns_) >= cfg_.peer_timeout_ns) {
        return false;
    }
    if (n_sent_ == 0) {
        transmit(now, emit);   // the device refused earlier
        return true;
    }
    // The oldest packet the peer has not reported decides. When it reported every one (SACK)
    // but the cumulative ACK never came (lost), the front packet's timer decides: resending it
    // makes the peer acknowledge again — otherwise nothing would ever be sent and both wait.
    uint64_t oldest = UINT64_MAX;
    for (size_t i = 0; i < n_sent_; ++i) {
        if (!q_[i].sacked) {
            oldest = q_[i].sent_ns;
            break;
        }
    }
    const bool all_sacked = oldest == UINT64_MAX;
    if (all_sacked) {
        oldest = q_[0].sent_ns;
    }
    if (elapsed_ns(now, std::max(oldest, timer_floor_ns_)) < rto_ns()) {
        return true;
    }
    if (were_away && !timer_deferred_) {
        // Measured: a test driving both ends from one thread, descheduled for > 20 ms under a
        // loaded CI run, timed out on a clean loopback and resent 59 packets the peer had.
        timer_deferred_ = true;
        timer_floor_ns_ = now;
        ++stats_.timers_deferred;
        return true;
    }
    timer_deferred_ = false;
    ++stats_.timeouts;
    ++backoff_;
    cut_window(now);
    in_recovery_ = false;
    dupacks_ = 0;
    if (all_sacked) {
        send_one(q_[0], now, emit, true);
        return true;
    }
    // Resend what the peer has not reported, up to the (reduced) window.
    const size_t stop = resend_unreported(now, emit, 0, n_sent_, std::max<size_t>(1, size_t(cwnd_)));
    if (goback_end_) {
        // A resend of a NAK's go-back was lost: the peer still drops what comes beyond the
        // hole, so the go-back starts again there and goes on with the ACKs — else each window
        // of it would cost a timeout (and a window cut) of its own.
        goback_next_ = q_.front().psn + uint32_t(stop);
        if (!seq_lt(goback_next_, *goback_end_)) goback_end_.reset();
    }
    return true;
}

} // namespace roce::ud
