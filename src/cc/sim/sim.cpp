#include "cc/sim/sim.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <queue>
#include <random>

#include "cc/qp_cc.hpp"

namespace roce::cc::sim {
namespace {

enum class Ev : uint8_t { sender_wake, rp_timer, switch_arrive, switch_depart, rx_arrive, ack, nak, cnp, rto, sample };

struct Event {
    Nanos t;
    uint64_t seq;
    Ev type;
    uint32_t flow;
    uint32_t psn;
    bool ce;
    Nanos sent;       // data packets: time the sender put it on the wire
    bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct QueuedPkt {
    uint32_t flow, psn;
    bool ce;
    Nanos sent;
};

struct Flow {
    explicit Flow(QpCc q) : cc(std::move(q)) {}
    QpCc cc;
    Nanos start = 0;
    bool started = false;
    uint32_t next_psn = 0, una = 0;
    std::vector<Nanos> sent_at;        // by psn % window
    Nanos nic_free = 0;
    Nanos wake_at = never;             // pending sender_wake (stale events are ignored)
    Nanos timer_at = never;            // pending rp_timer
    bool rto_armed = false;
    uint32_t rto_una = 0;
    // receiver
    uint32_t expected = 0;
    bool nak_sent = false;
    uint32_t expected_sent_max = 0;   // highest PSN ever sent + 1 (below it: a retransmission)
    uint64_t delivered_bytes = 0, window_bytes = 0, interval_bytes = 0;
};

class Sim {
public:
    explicit Sim(const SimConfig& c) : c_(c), rng_(c.seed) {
        std::uniform_int_distribution<Nanos> spread(0, std::max<Nanos>(c.start_spread, 0));
        for (uint32_t i = 0; i < c.n; ++i) {
            flows_.emplace_back(QpCc(c.cc, c.mode, c.link_bps, c.pkt_bytes));
            Flow& f = flows_.back();
            f.sent_at.assign(c.window_pkts, 0);
            f.start = c.scenario == Scenario::incast ? (c.n == 1 ? 0 : spread(rng_))
                                                     : static_cast<Nanos>(i) * c.join_interval;
            push(f.start, Ev::sender_wake, i);
            f.wake_at = f.start;
        }
        push(c.sample_interval, Ev::sample, 0);
        ser_ = static_cast<Nanos>(std::llround(ns_for(c.link_bps, c.pkt_bytes)));
    }

    SimResult run() {
        while (!q_.empty()) {
            Event e = q_.top();
            q_.pop();
            if (e.t > c_.duration) break;
            now_ = e.t;
            r_.events++;
            dispatch(e);
        }
        finish();
        return std::move(r_);
    }

private:
    void push(Nanos t, Ev type, uint32_t flow, uint32_t psn = 0, bool ce = false, Nanos sent = 0) {
        q_.push(Event{t, seq_++, type, flow, psn, ce, sent});
    }

    bool in_window() const { return now_ >= c_.warmup; }

    void dispatch(const Event& e) {
        switch (e.type) {
        case Ev::sender_wake: {
            Flow& f = flows_[e.flow];
            if (f.wake_at != e.t) return;     // superseded
            f.wake_at = never;
            f.started = true;
            try_send(e.flow);
            break;
        }
        case Ev::rp_timer: {
            Flow& f = flows_[e.flow];
            if (f.timer_at != e.t) return;
            f.timer_at = never;
            f.cc.on_timer(now_);
            arm_timer(e.flow);
            reschedule(e.flow);               // a faster rate may allow an earlier send
            break;
        }
        case Ev::switch_arrive: enqueue(e); break;
        case Ev::switch_depart: depart(); break;
        case Ev::rx_arrive: receive(e); break;
        case Ev::ack: on_ack(e); break;
        case Ev::nak: on_nak(e); break;
        case Ev::cnp: {
            Flow& f = flows_[e.flow];
            f.cc.on_cnp(now_);
            arm_timer(e.flow);
            reschedule(e.flow);
            break;
        }
        case Ev::rto: on_rto(e); break;
        case Ev::sample: sample(); break;
        }
    }

    void arm_timer(uint32_t i) {
        Flow& f = flows_[i];
        const Nanos t = f.cc.next_timer();
        if (t != never && t != f.timer_at) {
            f.timer_at = t;
            push(t, Ev::rp_timer, i);
        } else if (t == never) {
            f.timer_at = never;
        }
    }

    // Re-evaluate a flow that is waiting (pacer) or blocked (window): wake it now.
    void reschedule(uint32_t i) {
        Flow& f = flows_[i];
        if (!f.started) return;
        const Nanos t = std::max(now_, f.nic_free);
        if (f.wake_at == never || f.wake_at > t) {
            f.wake_at = t;
            push(t, Ev::sender_wake, i);
        }
    }

    void try_send(uint32_t i) {
        Flow& f = flows_[i];
        if (now_ < f.nic_free) {
            f.wake_at = f.nic_free;
            push(f.nic_free, Ev::sender_wake, i);
            return;
        }
        const uint32_t inflight = f.next_psn - f.una;
        if (inflight >= c_.window_pkts) return;             // an ACK/NAK/RTO wakes us
        const Nanos t = f.cc.next_send_time(now_, c_.pkt_bytes, uint64_t(inflight) * c_.pkt_bytes);
        arm_timer(i);
        if (t == never) return;                             // CC window full: an ACK wakes us
        if (t > now_) {
            f.wake_at = t;
            push(t, Ev::sender_wake, i);
            return;
        }
        const uint32_t psn = f.next_psn++;
        if (psn < f.expected_sent_max) r_.retransmits++;
        else f.expected_sent_max = psn + 1;
        f.sent_at[psn % c_.window_pkts] = now_;
        f.cc.on_sent(c_.pkt_bytes, now_);
        arm_timer(i);
        f.nic_free = now_ + ser_;
        push(now_ + ser_ + c_.prop_delay, Ev::switch_arrive, i, psn, false, now_);
        if (!f.rto_armed) {
            f.rto_armed = true;
            f.rto_una = f.una;
            push(now_ + c_.rto, Ev::rto, i);
        }
        f.wake_at = f.nic_free;
        push(f.nic_free, Ev::sender_wake, i);
    }

    void enqueue(const Event& e) {
        if (queue_bytes_ + c_.pkt_bytes > c_.buffer) {
            r_.drops++;
            if (in_window()) r_.drops_window++;
            return;
        }
        bool ce = false;
        if (c_.ecn) {
            double p = 0;
            if (queue_bytes_ > c_.kmax) p = 1;
            else if (queue_bytes_ > c_.kmin)
                p = c_.pmax * double(queue_bytes_ - c_.kmin) / double(c_.kmax - c_.kmin);
            if (p > 0 && (p >= 1 || uni_(rng_) < p)) {
                ce = true;
                r_.marks++;
            }
        }
        queue_.push_back({e.flow, e.psn, ce, e.sent});
        queue_bytes_ += c_.pkt_bytes;
        r_.queue_max = std::max(r_.queue_max, queue_bytes_);
        if (in_window()) r_.queue_max_window = std::max(r_.queue_max_window, queue_bytes_);
        if (!port_busy_) {
            port_busy_ = true;
            push(now_ + ser_, Ev::switch_depart, 0);
        }
    }

    void depart() {
        const QueuedPkt p = queue_.front();
        queue_.pop_front();
        queue_bytes_ -= c_.pkt_bytes;
        push(now_ + c_.prop_delay, Ev::rx_arrive, p.flow, p.psn, p.ce, p.sent);
        if (!queue_.empty()) push(now_ + ser_, Ev::switch_depart, 0);
        else port_busy_ = false;
    }

    void receive(const Event& e) {
        Flow& f = flows_[e.flow];
        if (e.ce && f.cc.on_ce_packet(now_)) {
            r_.cnps++;
            push(now_ + c_.feedback_delay, Ev::cnp, e.flow);
        }
        if (e.psn == f.expected) {
            f.expected++;
            f.nak_sent = false;
            f.delivered_bytes += c_.pkt_bytes;
            f.interval_bytes += c_.pkt_bytes;
            if (in_window()) {
                f.window_bytes += c_.pkt_bytes;
                lat_.push_back(now_ - e.sent);
                r_.packets_delivered++;
            }
            push(now_ + c_.feedback_delay, Ev::ack, e.flow, e.psn);
        } else if (e.psn > f.expected) {
            if (!f.nak_sent) {
                f.nak_sent = true;
                push(now_ + c_.feedback_delay, Ev::nak, e.flow, f.expected);
            }
        } else {
            push(now_ + c_.feedback_delay, Ev::ack, e.flow, f.expected - 1);   // duplicate
        }
    }

    void on_ack(const Event& e) {
        Flow& f = flows_[e.flow];
        if (e.psn < f.una || e.psn >= f.next_psn) return;   // stale (sender went back)
        const uint32_t acked = e.psn + 1 - f.una;
        const Nanos rtt = now_ - f.sent_at[e.psn % c_.window_pkts];
        f.una = e.psn + 1;
        f.cc.on_rtt_sample(rtt, uint64_t(acked) * c_.pkt_bytes, now_);
        reschedule(e.flow);
    }

    void on_nak(const Event& e) {
        Flow& f = flows_[e.flow];
        if (e.psn < f.una) return;
        f.una = e.psn;
        f.next_psn = e.psn;                                 // go back N
        f.cc.on_loss(now_);
        arm_timer(e.flow);
        reschedule(e.flow);
    }

    void on_rto(const Event& e) {
        Flow& f = flows_[e.flow];
        f.rto_armed = false;
        if (f.next_psn == f.una) return;                    // nothing outstanding
        if (f.una == f.rto_una) {
            r_.timeouts++;
            f.next_psn = f.una;
            f.cc.on_loss(now_);
            arm_timer(e.flow);
            reschedule(e.flow);
        }
        f.rto_armed = true;
        f.rto_una = f.una;
        push(now_ + c_.rto, Ev::rto, e.flow);
    }

    void sample() {
        Sample s;
        s.t = now_;
        s.queue_bytes = queue_bytes_;
        double total = 0;
        const double secs = double(c_.sample_interval) / 1e9;
        for (uint32_t i = 0; i < flows_.size(); ++i) {
            Flow& f = flows_[i];
            const double g = double(f.interval_bytes) * 8 / secs / 1e9;
            total += g;
            if (i < c_.trace_flows) {
                s.flow_gbps.push_back(g);
                s.flow_rate_gbps.push_back(f.started ? f.cc.rate_bps() / 1e9 : 0);
            }
            f.interval_bytes = 0;
        }
        s.total_gbps = total;
        if (in_window()) qsamples_.push_back(queue_bytes_);
        r_.series.push_back(std::move(s));
        push(now_ + c_.sample_interval, Ev::sample, 0);
    }

    void finish() {
        const double secs = double(c_.duration - c_.warmup) / 1e9;
        double total = 0;
        for (const auto& f : flows_) {
            const double g = double(f.window_bytes) * 8 / secs / 1e9;
            r_.flow_gbps.push_back(g);
            total += g;
        }
        r_.utilisation = total * 1e9 / c_.link_bps;
        r_.jain = jain_index(r_.flow_gbps);
        if (!qsamples_.empty()) {
            double sum = 0;
            for (auto q : qsamples_) sum += double(q);
            r_.queue_avg = sum / double(qsamples_.size());
            std::sort(qsamples_.begin(), qsamples_.end());
            r_.queue_p99 = qsamples_[std::min(qsamples_.size() - 1, qsamples_.size() * 99 / 100)];
        }
        if (!lat_.empty()) {
            std::sort(lat_.begin(), lat_.end());
            auto pct = [&](double p) {
                const size_t k = std::min(lat_.size() - 1, static_cast<size_t>(p * double(lat_.size())));
                return double(lat_[k]) / 1e3;
            };
            r_.lat_p50_us = pct(0.50);
            r_.lat_p99_us = pct(0.99);
            r_.lat_p999_us = pct(0.999);
        }
    }

    const SimConfig& c_;
    std::mt19937_64 rng_;
    std::uniform_real_distribution<double> uni_{0.0, 1.0};
    std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q_;
    uint64_t seq_ = 0;
    Nanos now_ = 0;
    Nanos ser_ = 0;
    std::vector<Flow> flows_;
    std::deque<QueuedPkt> queue_;
    uint64_t queue_bytes_ = 0;
    bool port_busy_ = false;
    std::vector<Nanos> lat_;
    std::vector<uint64_t> qsamples_;
    SimResult r_;
};

} // namespace

SimResult run(const SimConfig& cfg) { return Sim(cfg).run(); }

double jain_index(const std::vector<double>& x) {
    if (x.empty()) return 0;
    double s = 0, s2 = 0;
    for (double v : x) {
        s += v;
        s2 += v * v;
    }
    return s2 > 0 ? s * s / (double(x.size()) * s2) : 0;
}

std::string check(const SimConfig& cfg, const SimResult& r, const Expectation& e) {
    char buf[256];
    std::string why;
    if (e.bounded_queue && r.drops_window > 0) {
        std::snprintf(buf, sizeof buf, "%llu drops after warm-up; ", (unsigned long long)r.drops_window);
        why += buf;
    }
    if (e.bounded_queue && r.queue_max_window + cfg.pkt_bytes > cfg.buffer) {
        std::snprintf(buf, sizeof buf, "queue reached the buffer after warm-up (%llu of %llu bytes); ",
                      (unsigned long long)r.queue_max_window, (unsigned long long)cfg.buffer);
        why += buf;
    }
    if (r.jain < e.min_jain) {
        std::snprintf(buf, sizeof buf, "Jain %.3f < %.2f; ", r.jain, e.min_jain);
        why += buf;
    }
    if (r.utilisation < e.min_util) {
        std::snprintf(buf, sizeof buf, "utilisation %.3f < %.2f; ", r.utilisation, e.min_util);
        why += buf;
    }
    if (!why.empty()) why.resize(why.size() - 2);
    return why;
}

} // namespace roce::cc::sim
