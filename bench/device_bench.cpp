// The userspace device's owner path, per operation, with its system calls (Google Benchmark;
// figures reported, never asserted): two devices on loopback in one thread, so every iteration
// does the same work — no waiting, no polling that finds nothing, unlike a two-process
// ucx_perftest whose count of empty polls depends on scheduling. Under callgrind
// (`valgrind --tool=callgrind build/bench/roce_device_bench`) the user instructions per
// iteration are deterministic.
//   BM_sw_idle_round      one progress round that finds nothing (a busy-polling rank's loop)
//   BM_sw_rc_pingpong     an 8-byte SEND each way, each side's round delivering it: a ping-pong
//                         round trip of rc_roce on the userspace device, less UCX
//   BM_udp_pingpong       the same round trip with plain sockets (sendto + recv each way): the
//                         system calls' share; the difference to the above is the device's own
#include <benchmark/benchmark.h>

#include "sw/test_support.hpp"

using namespace roce;
using namespace roce::sw;

namespace {

struct CountingSink final : RcDevice::ProgressSink {
    size_t messages = 0, completions = 0;
    void completion(const Completion&) override { ++completions; }
    void message(const RecvMessage&) override { ++messages; }
};

DeviceConfig bench_config() {
    DeviceConfig c;
    c.progress_thread = false;   // the benchmark thread is the only one in the device
    return c;
}

bool open_pair(testing::Pair& p, benchmark::State& st) {
    if (!p.open(bench_config(), bench_config())) {
        st.SkipWithError("cannot open two userspace devices on 127.0.0.1");
        return false;
    }
    return true;
}

// The measured bodies are functions of their own, so that callgrind can count them alone
// (--toggle-collect='*one_idle_round*' / '*pingpong_once*', then divide by their calls).
[[gnu::noinline]] unsigned one_idle_round(Device& d, CountingSink& sink) { return d.progress_round(sink, 64); }

void BM_sw_idle_round(benchmark::State& st) {
    testing::Pair p;
    if (!open_pair(p, st))
        return;
    CountingSink sink;
    for (auto _ : st)
        benchmark::DoNotOptimize(one_idle_round(*p.a.dev, sink));
}
BENCHMARK(BM_sw_idle_round);

// Rounds until `sink` has one more message (loopback delivers inside the sender's system call:
// the first round finds it; the bound only keeps a lost packet from hanging the benchmark).
bool round_until_message(Device& d, CountingSink& sink, uint64_t& rounds) {
    const size_t want = sink.messages + 1;
    for (int i = 0; i < 1000000 && sink.messages < want; ++i, ++rounds)
        d.progress_round(sink, 64);
    return sink.messages >= want;
}

[[gnu::noinline]] bool pingpong_once(testing::Pair& p, const iovec& iov, CountingSink& sa, CountingSink& sb,
                                     uint64_t& rounds) {
    // Lazy, as rc_roce's short active messages: acknowledged by delayed ACKs.
    return p.a.dev->post_send(p.qa, wr_id_lazy, &iov, 1) == Status::ok && round_until_message(*p.b.dev, sb, rounds) &&
           p.b.dev->post_send(p.qb, wr_id_lazy, &iov, 1) == Status::ok && round_until_message(*p.a.dev, sa, rounds);
}

void BM_sw_rc_pingpong(benchmark::State& st) {
    testing::Pair p;
    if (!open_pair(p, st))
        return;
    uint64_t payload = 0;
    iovec iov{&payload, sizeof(payload)};
    CountingSink sa, sb;
    uint64_t rounds = 0;
    const uint64_t packets0 = p.a.dev->stats().tx_packets + p.b.dev->stats().tx_packets;
    for (auto _ : st) {
        ++payload;
        if (!pingpong_once(p, iov, sa, sb, rounds)) {
            st.SkipWithError("a message was refused or lost");
            return;
        }
    }
    // Per iteration: rounds (2 when every round found its message), packets (2 SENDs + ACKs).
    const uint64_t packets = p.a.dev->stats().tx_packets + p.b.dev->stats().tx_packets - packets0;
    st.counters["rounds"] = benchmark::Counter(double(rounds), benchmark::Counter::kAvgIterations);
    st.counters["packets"] = benchmark::Counter(double(packets), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_sw_rc_pingpong);

// Two plain UDP sockets on 127.0.0.1: 8 bytes each way, non-blocking receives (as the device's).
void BM_udp_pingpong(benchmark::State& st) {
    sockaddr_in sa{}, sb{};
    const int a = testing::loopback_udp_socket(sa), b = testing::loopback_udp_socket(sb);
    if (a < 0 || b < 0) {
        st.SkipWithError("cannot bind two UDP sockets on 127.0.0.1");
        if (a >= 0) ::close(a);
        if (b >= 0) ::close(b);
        return;
    }
    uint64_t msg = 0, in = 0;
    auto hop = [&](int from, const sockaddr_in& to, int at) {
        if (::sendto(from, &msg, sizeof(msg), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) != sizeof(msg))
            return false;
        for (int i = 0; i < 1000000; ++i)
            if (::recv(at, &in, sizeof(in), MSG_DONTWAIT) == sizeof(in))
                return true;
        return false;
    };
    for (auto _ : st) {
        ++msg;
        if (!hop(a, sb, b) || !hop(b, sa, a)) {
            st.SkipWithError("a datagram was lost");
            break;
        }
    }
    ::close(a);
    ::close(b);
}
BENCHMARK(BM_udp_pingpong);

} // namespace
