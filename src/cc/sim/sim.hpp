// Discrete-event simulator for the congestion-control state machines (roce_ccsim).
//
// Model: N senders, each with a line-rate NIC and a QpCc (the same object the device uses) that
// decides when the next packet may leave; one switch egress port (the bottleneck, line rate) with
// a FIFO of `buffer` bytes, RED/ECN marking on enqueue (Kmin, Kmax, Pmax; above Kmax every packet
// is marked, as DCQCN configures switches) and tail drop at the buffer limit (no PFC); one receiver
// whose notification point (QpCc::on_ce_packet) turns CE marks into CNPs. ACKs, NAKs and CNPs
// return after `feedback_delay` over an uncongested reverse path. Reliability is RC-like: PSNs,
// a window of `window_pkts` unacknowledged packets (rxe: 128), cumulative ACK per packet,
// go-back-N on a sequence NAK, and a retransmission timeout for tail losses.
//
// Metrics over the measurement window [warmup, duration]: goodput per flow (in-order delivered
// bytes), bottleneck utilisation, Jain's fairness index, queue depth (sampled), drops, and packet
// latency percentiles (sender NIC -> receiver, i.e. queueing + serialisation + propagation;
// time a packet waited in the sender for the pacer or window is not network latency).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cc/config.hpp"

namespace roce::cc::sim {

enum class Scenario : uint8_t { incast, fairness };

struct SimConfig {
    Scenario scenario = Scenario::incast;
    uint32_t n = 16;                        // senders (flows)
    CcConfig cc = default_cc_config();
    CcMode mode = CcMode::dcqcn;            // resolved mode for every flow
    double link_bps = 100e9;                // every NIC and the bottleneck port
    uint32_t pkt_bytes = 1024 + 62;         // wire bytes per data packet: path MTU 1024 (1500-byte
                                            // Ethernet, the userspace device) + headers
    Nanos prop_delay = 1 * ns_per_us;       // sender -> switch and switch -> receiver, each
    Nanos feedback_delay = 4 * ns_per_us;   // receiver -> sender (ACK/NAK/CNP), incl. NP processing
    uint64_t buffer = 4u << 20;             // switch egress buffer (bytes)
    uint64_t kmin = 5u << 10, kmax = 200u << 10;
    double pmax = 0.01;
    bool ecn = true;                        // false: the switch never marks (a broken fabric)
    uint32_t window_pkts = 128;             // RC: unacknowledged packets per QP
    Nanos rto = 500 * ns_per_us;            // retransmission timeout
    Nanos duration = 100 * ns_per_ms;
    Nanos warmup = 50 * ns_per_ms;          // measurement starts here (DCQCN converges in ~10-30 ms)
    Nanos start_spread = 500 * ns_per_us;   // incast: flows start uniformly in [0, spread]
    Nanos join_interval = 2 * ns_per_ms;    // fairness: flow i starts at i*join_interval
    Nanos sample_interval = 10 * ns_per_us; // time series
    uint32_t trace_flows = 8;               // flows whose rate is in the time series
    uint64_t seed = 1;
};

struct Sample {
    Nanos t;
    uint64_t queue_bytes;
    double total_gbps;                  // goodput over the last interval
    std::vector<double> flow_gbps;      // first trace_flows flows: goodput over the last interval
    std::vector<double> flow_rate_gbps; // their CC rate (dcqcn R_C / delay pacing / line)
};

struct SimResult {
    double utilisation = 0;             // goodput / link capacity over the window
    double jain = 0;
    std::vector<double> flow_gbps;      // goodput per flow over the window
    uint64_t drops = 0, drops_window = 0, marks = 0, cnps = 0, retransmits = 0, timeouts = 0;
    uint64_t packets_delivered = 0;
    uint64_t queue_max = 0;             // over the whole run
    uint64_t queue_max_window = 0;      // over the measurement window
    double queue_avg = 0;               // time-sampled over the window
    uint64_t queue_p99 = 0;
    double lat_p50_us = 0, lat_p99_us = 0, lat_p999_us = 0;
    uint64_t events = 0;
    std::vector<Sample> series;
};

SimResult run(const SimConfig& cfg);

double jain_index(const std::vector<double>& x);

// The qualitative acceptance (DCQCN paper), over the measurement window (steady state; the first
// round trip of N flows starting at line rate is N x BDP in flight, which no end-to-end scheme can
// absorb — the paper relies on PFC there; start-up drops are reported in SimResult::drops).
// Returns "" when it holds, else why not.
struct Expectation {
    bool bounded_queue = true;  // no drops, queue max < buffer
    double min_jain = 0.95;
    double min_util = 0.90;
};
std::string check(const SimConfig& cfg, const SimResult& r, const Expectation& e);

} // namespace roce::cc::sim
