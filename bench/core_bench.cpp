// Hot-path bookkeeping of the core, per operation (Google Benchmark; figures reported, never
// asserted): the MR table's rkey lookup the responder does for every remote access, ud_roce's
// reliability per packet (sender queue + ACK, receiver in-order delivery + SACK), the congestion
// controllers' per-event updates (DCQCN CNP / timer / byte counter, the delay window's RTT
// sample, QpCc's pacer check), PSN window arithmetic and the clock every poll reads. The wire layer (build/parse/ICRC) is
// bench/wire_bench.cpp.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "cc/dcqcn.hpp"
#include "common/clock.hpp"
#include "cc/delay.hpp"
#include "cc/qp_cc.hpp"
#include "sw/pd.hpp"
#include "ud/receiver.hpp"
#include "ud/sender.hpp"
#include "wire/headers.hpp"

using namespace roce;

namespace {

// The responder's check of a remote access: rkey -> region, bounds, rights (N regions registered).
void BM_rkey_lookup(benchmark::State& st) {
    sw::PdImpl pd;
    const size_t n = size_t(st.range(0));
    std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(4096));
    std::vector<uint32_t> rkeys;
    for (auto& b : bufs) {
        MrKeys k;
        pd.reg_mr(b.data(), b.size(), access_all, k);
        rkeys.push_back(k.rkey);
    }
    size_t i = 0;
    for (auto _ : st) {
        const size_t j = i++ % n;
        uint8_t* p = pd.lookup(rkeys[j], reinterpret_cast<uintptr_t>(bufs[j].data()) + 64, 1024,
                               access_remote_write);
        benchmark::DoNotOptimize(p);
    }
}
BENCHMARK(BM_rkey_lookup)->Arg(1)->Arg(64)->Arg(4096);

// ud_roce sender per packet: queue a 1 KiB fragment, send it, and free it by a cumulative ACK
// every 32 packets (the receiver's ack_every), as on a clean link.
void BM_ud_sender_packet(benchmark::State& st) {
    ud::SenderConfig cfg;
    cfg.delay = st.range(0) != 0;
    ud::Sender s(cfg);
    std::vector<uint8_t> payload(1024, 0x5a);
    iovec iov{payload.data(), payload.size()};
    const auto emit = [](const ud::Sender::Packet&, bool) { return true; };
    uint64_t now = 0;
    uint32_t psn = 0;
    for (auto _ : st) {
        s.enqueue(ud::PktType::data, 0, 1, &iov, 1, 0, payload.size(), now);
        s.transmit(now, emit);
        now += 1000;
        if (++psn % 32 == 0)
            s.on_ack(psn, 0, now, emit);
    }
    st.SetLabel(cfg.delay ? "with the delay window" : "AIMD only");
}
BENCHMARK(BM_ud_sender_packet)->Arg(0)->Arg(1);

// ud_roce receiver per packet, in order (delivery of single-packet AMs) and with every other
// packet swapped (held out of order, SACK bookkeeping).
void BM_ud_receiver_packet(benchmark::State& st) {
    ud::ReceiverConfig cfg;
    ud::Receiver r(cfg);
    std::vector<uint8_t> payload(1024, 0x33);
    const auto deliver = [](uint8_t, const uint8_t* d, size_t) { benchmark::DoNotOptimize(d); };
    const bool swap = st.range(0) != 0;
    uint32_t base = 0;
    uint64_t now = 0;
    for (auto _ : st) {
        ud::Header h;
        h.type = ud::PktType::data;
        h.flags = ud::flag_first | ud::flag_last;
        h.am_id = 1;
        const uint32_t k = base++;
        h.psn = swap ? (k ^ 1u) : k;
        r.receive(h, payload.data(), payload.size(), now += 1000, deliver);
        benchmark::DoNotOptimize(r.sack());
    }
    st.SetLabel(swap ? "pairs swapped" : "in order");
}
BENCHMARK(BM_ud_receiver_packet)->Arg(0)->Arg(1);

// DCQCN reaction point: a CNP (rate cut, alpha update), then the timer and byte-counter events.
void BM_dcqcn_cnp(benchmark::State& st) {
    cc::DcqcnRp rp(cc::DcqcnParams{}, 100e9);
    cc::Nanos now = 0;
    for (auto _ : st) {
        rp.on_cnp(now += 60'000);
        benchmark::DoNotOptimize(rp.rate_bps());
    }
}
BENCHMARK(BM_dcqcn_cnp);

void BM_dcqcn_bytes_and_timer(benchmark::State& st) {
    cc::DcqcnRp rp(cc::DcqcnParams{}, 100e9);
    rp.on_cnp(0);
    cc::Nanos now = 0;
    for (auto _ : st) {
        rp.on_bytes_sent(4096, now += 400);
        rp.on_timer(now);
        benchmark::DoNotOptimize(rp.rate_bps());
    }
}
BENCHMARK(BM_dcqcn_bytes_and_timer);

// Delay window: one RTT sample (alternately below and above the target).
void BM_delay_rtt_sample(benchmark::State& st) {
    cc::DelayCc d(cc::DelayParams{}, 4096);
    cc::Nanos now = 0;
    bool high = false;
    for (auto _ : st) {
        d.on_rtt_sample((high = !high) ? 80'000 : 20'000, 4096, now += 10'000);
        benchmark::DoNotOptimize(d.cwnd_bytes());
    }
}
BENCHMARK(BM_delay_rtt_sample);

// The check before every requester packet: QpCc::next_send_time + on_sent (dcqcn pacer).
void BM_qpcc_send_check(benchmark::State& st) {
    cc::QpCc q(cc::CcConfig{}, cc::CcMode::dcqcn, 100e9, 4096);
    q.on_cnp(0);
    cc::Nanos now = 1000;
    for (auto _ : st) {
        const cc::Nanos t = q.next_send_time(now, 4096, 65536);
        now = std::max(now + 50, t);
        q.on_sent(4096, now);
        benchmark::DoNotOptimize(t);
    }
}
BENCHMARK(BM_qpcc_send_check);

// PSN window arithmetic of the requester/responder (24-bit serial numbers across the wrap).
void BM_psn_window(benchmark::State& st) {
    std::mt19937 rng(3);
    std::vector<uint32_t> a(1024), b(1024);
    for (size_t i = 0; i < a.size(); ++i) {
        a[i] = rng() & 0xffffff;
        b[i] = (a[i] + (rng() % 2048) - 1024) & 0xffffff;
    }
    size_t i = 0;
    for (auto _ : st) {
        const size_t j = i++ & 1023;
        benchmark::DoNotOptimize(wire::psn_diff(a[j], b[j]));
    }
}
BENCHMARK(BM_psn_window);

// now_ns() per read: arg 0 CLOCK_MONOTONIC, 1 the TSC-extrapolated clock (common/clock.hpp);
// where clock_gettime has no vDSO path (an HPET guest) the gap is 30x.
void BM_now_ns(benchmark::State& st) {
    const ClockSource want = st.range(0) ? ClockSource::tsc : ClockSource::system;
    if (set_clock_source_for_test(want) != want) {
        st.SkipWithError("no usable time-stamp counter");
        return;
    }
    for (auto _ : st)
        benchmark::DoNotOptimize(now_ns());
    set_clock_source_for_test(ClockSource::undecided);
}
BENCHMARK(BM_now_ns)->Arg(0)->Arg(1);

} // namespace
