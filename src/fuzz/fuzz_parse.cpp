// Fuzz target: the RoCEv2 packet parser (wire::parse) and builder (wire::build) on arbitrary
// bytes. Oracle: whatever parses must survive a round trip — build(parse(x)) has x's length,
// carries a valid ICRC, parses again, and rebuilding that gives the same bytes (a fixpoint) — and
// nothing parses that is shorter than its headers. Input: byte 0 selects IPv4/IPv6 and whether
// the ICRC is checked, the rest is the UDP payload.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "wire/icrc.hpp"
#include "wire/packet.hpp"

namespace {

roce::wire::IpContext context(bool v6) {
    roce::wire::IpContext ip;
    ip.ipv6 = v6;
    const uint8_t a4[4] = {10, 0, 0, 1}, b4[4] = {10, 0, 0, 2};
    const uint8_t a6[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    const uint8_t b6[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    std::memcpy(ip.src_ip, v6 ? a6 : a4, v6 ? 16 : 4);
    std::memcpy(ip.dst_ip, v6 ? b6 : b4, v6 ? 16 : 4);
    ip.src_port = 49152;
    ip.dst_port = 4791;
    return ip;
}

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_parse: %s\n", what);
    std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1)
        return 0;
    const uint8_t control = data[0];
    const roce::wire::IpContext ip = context(control & 1);
    const std::span<const uint8_t> x(data + 1, size - 1);
    roce::wire::Packet p;
    if (roce::wire::parse(x, ip, control & 2, p) != roce::wire::ParseError::none)
        return 0;
    if (x.size() < roce::wire::bth_size + 4)
        fail("a packet shorter than BTH + ICRC parsed");
    if (p.payload.data() < x.data() || p.payload.data() + p.payload.size() > x.data() + x.size())
        fail("the payload view points outside the packet");
    std::vector<uint8_t> b1(x.size() + 64), b2(x.size() + 64);
    const size_t n1 = roce::wire::build(p, p.payload, ip, b1);
    if (n1 != x.size())
        fail("build(parse(x)) has another length than x");
    b1.resize(n1);
    if (!roce::wire::icrc_verify(ip, b1))
        fail("build wrote an invalid ICRC");
    roce::wire::Packet q;
    if (roce::wire::parse(b1, ip, true, q) != roce::wire::ParseError::none)
        fail("a built packet does not parse");
    const size_t n2 = roce::wire::build(q, q.payload, ip, b2);
    if (n2 != n1 || std::memcmp(b1.data(), b2.data(), n1) != 0)
        fail("build(parse(build(parse(x)))) differs from build(parse(x))");
    return 0;
}
