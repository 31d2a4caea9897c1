// Wire-layer costs on the datapath: CRC-32 throughput, the ICRC of a full packet, and building
// plus parsing (with ICRC verification) a 4 KiB WRITE_MIDDLE packet.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "wire/icrc.hpp"
#include "wire/packet.hpp"

using namespace roce::wire;

namespace {

std::vector<uint8_t> random_bytes(size_t n) {
    std::mt19937 rng(1);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = uint8_t(rng());
    return v;
}

IpContext bench_ip() {
    IpContext ip;
    ip.src_ip[0] = 10; ip.src_ip[3] = 2;
    ip.dst_ip[0] = 10; ip.dst_ip[3] = 1;
    ip.src_port = 0xc000;
    ip.dst_port = roce_v2_udp_port;
    return ip;
}

void BM_crc32_ieee(benchmark::State& st) {
    const auto buf = random_bytes(size_t(st.range(0)));
    uint32_t crc = 0;
    for (auto _ : st) {
        crc = crc32_ieee(crc, buf.data(), buf.size());
        benchmark::DoNotOptimize(crc);
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * st.range(0));
}
BENCHMARK(BM_crc32_ieee)->Arg(64)->Arg(1024)->Arg(4096);

void BM_crc32_slice16(benchmark::State& st) {
    const auto buf = random_bytes(size_t(st.range(0)));
    uint32_t crc = 0;
    for (auto _ : st) {
        crc = detail::crc32_ieee_portable(crc, buf.data(), buf.size());
        benchmark::DoNotOptimize(crc);
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * st.range(0));
}
BENCHMARK(BM_crc32_slice16)->Arg(64)->Arg(1024)->Arg(4096);

std::vector<uint8_t> write_middle_packet(size_t payload) {
    Packet p;
    p.bth.opcode = uint8_t(Opcode::rc_write_middle);
    p.bth.dest_qp = 0x11;
    p.bth.psn = 0x123456;
    const auto data = random_bytes(payload);
    std::vector<uint8_t> out(payload + 64);
    out.resize(build(p, data, bench_ip(), out));
    return out;
}

void BM_icrc_compute(benchmark::State& st) {
    const auto pkt = write_middle_packet(size_t(st.range(0)));
    const IpContext ip = bench_ip();
    for (auto _ : st)
        benchmark::DoNotOptimize(icrc_compute(ip, pkt));
    st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(pkt.size()));
}
BENCHMARK(BM_icrc_compute)->Arg(64)->Arg(1024)->Arg(4096);

void BM_build_write_middle_4k(benchmark::State& st) {
    const auto data = random_bytes(4096);
    std::vector<uint8_t> out(4096 + 64);
    Packet p;
    p.bth.opcode = uint8_t(Opcode::rc_write_middle);
    const IpContext ip = bench_ip();
    for (auto _ : st) {
        p.bth.psn = psn_add(p.bth.psn, 1);
        benchmark::DoNotOptimize(build(p, data, ip, out));
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * 4096);
}
BENCHMARK(BM_build_write_middle_4k);

void BM_parse_write_middle_4k(benchmark::State& st) {
    const auto pkt = write_middle_packet(4096);
    IpContext ip = bench_ip();
    ip.ipv4_id_known = st.range(0) != 0;
    if (!ip.ipv4_id_known)
        ip.ipv4_id = 0x5a5a;   // packet was built with ID 0: forces the GF(2) solve
    Packet p;
    for (auto _ : st)
        benchmark::DoNotOptimize(parse(pkt, ip, true, p));
    st.SetBytesProcessed(int64_t(st.iterations()) * 4096);
    st.SetLabel(ip.ipv4_id_known ? "id known" : "id solved");
}
BENCHMARK(BM_parse_write_middle_4k)->Arg(1)->Arg(0);

// The headers alone, as the devices' receive paths parse (they verify the ICRC apart): what a
// small packet costs besides its CRC. A SEND ONLY with 8 bytes of payload.
void BM_parse_headers_send_8b(benchmark::State& st) {
    Packet p;
    p.bth.opcode = uint8_t(Opcode::rc_send_only);
    const auto data = random_bytes(8);
    std::vector<uint8_t> pkt(64);
    const IpContext ip = bench_ip();
    pkt.resize(build(p, data, ip, pkt));
    for (auto _ : st) {
        Packet out;
        benchmark::DoNotOptimize(parse(pkt, ip, false, out));
        benchmark::DoNotOptimize(out);
    }
}
BENCHMARK(BM_parse_headers_send_8b);

void BM_build_parse_write_middle_4k(benchmark::State& st) {
    const auto data = random_bytes(4096);
    std::vector<uint8_t> out(4096 + 64);
    Packet p, q;
    p.bth.opcode = uint8_t(Opcode::rc_write_middle);
    const IpContext ip = bench_ip();
    for (auto _ : st) {
        const size_t n = build(p, data, ip, out);
        benchmark::DoNotOptimize(parse(std::span(out.data(), n), ip, true, q));
    }
    st.SetBytesProcessed(int64_t(st.iterations()) * 4096);
}
BENCHMARK(BM_build_parse_write_middle_4k);

} // namespace
