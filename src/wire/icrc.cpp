// RoCEv2 ICRC (IBTA annex A17.3.3). The pseudo-header follows the kernel's rxe_icrc.c:
//   - 8 bytes 0xFF for the LRH that RoCEv2 does not have;
//   - IPv4: the real header with TOS, TTL and checksum set to all ones (routers rewrite them);
//     IPv6: traffic class, flow label (first 4 bytes except the version nibble) and hop limit
//     set to all ones;
//   - UDP with checksum 0xFFFF;
//   - BTH with byte 4 (FECN/BECN/resv, rewritten by congestion marking) 0xFF.
// We never see the kernel's IP header, so it is reconstructed from IpContext; the fields that
// depend on the datagram length are derived from the UDP payload size.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "wire/byteorder.hpp"
#include "wire/icrc.hpp"

namespace roce::wire {
namespace {

constexpr size_t lrh_size = 8, ipv4_size = 20, ipv6_size = 40, udp_size = 8;
constexpr size_t ipv4_id_offset = lrh_size + 4;   // in the pseudo-header
constexpr size_t max_pseudo = lrh_size + ipv6_size + udp_size + bth_size;

// Writes the masked pseudo-header up to the end of the UDP header; returns its length.
size_t write_ip_udp(const IpContext& ip, size_t udp_payload_len, uint8_t* h) {
    std::memset(h, 0xff, lrh_size);
    uint8_t* p = h + lrh_size;
    const size_t udp_len = udp_size + udp_payload_len;
    if (ip.ipv6) {
        p[0] = 0x6f;   // version 6, traffic class high nibble masked
        p[1] = p[2] = p[3] = 0xff;
        be::store16(p + 4, uint16_t(udp_len));
        p[6] = 17;     // next header: UDP
        p[7] = 0xff;   // hop limit
        std::memcpy(p + 8, ip.src_ip, 16);
        std::memcpy(p + 24, ip.dst_ip, 16);
        p += ipv6_size;
    } else {
        p[0] = 0x45;
        p[1] = 0xff;   // TOS
        be::store16(p + 2, uint16_t(ipv4_size + udp_len));
        be::store16(p + 4, ip.ipv4_id);
        be::store16(p + 6, ip.ipv4_flags_df ? 0x4000 : 0);
        p[8] = 0xff;   // TTL
        p[9] = 17;     // protocol: UDP
        p[10] = p[11] = 0xff;   // header checksum
        std::memcpy(p + 12, ip.src_ip, 4);
        std::memcpy(p + 16, ip.dst_ip, 4);
        p += ipv4_size;
    }
    be::store16(p, ip.src_port);
    be::store16(p + 2, ip.dst_port);
    be::store16(p + 4, uint16_t(udp_len));
    p[6] = p[7] = 0xff;   // checksum
    return size_t(p + udp_size - h);
}

// Raw CRC (zero init, no final inversion) of the 2-byte big-endian ID with only bit b set: the
// CRC is affine, so flipping ID bit b changes the final CRC by this value times x^(8*rest).
constexpr std::array<uint32_t, 16> id_bit_raw = [] {
    std::array<uint32_t, 16> t{};
    for (int b = 0; b < 16; ++b) {
        const uint8_t bytes[2] = {uint8_t((1u << b) >> 8), uint8_t(1u << b)};
        uint32_t c = 0;
        for (uint8_t byte : bytes) {
            c ^= byte;
            for (int k = 0; k < 8; ++k)
                c = c & 1 ? (c >> 1) ^ 0xedb88320u : c >> 1;
        }
        t[size_t(b)] = c;
    }
    return t;
}();

// Row-reduced contributions of the 16 ID bits for one message length: basis[pivot] is the CRC
// change caused by the ID bits in combo[pivot]. Building it takes ~1 us of GF(2) arithmetic,
// and a receiver sees few distinct packet lengths, so a small per-thread cache keeps the solve
// itself to at most 16 XORs.
struct IdSolver {
    size_t length = SIZE_MAX;
    uint32_t basis[32] = {};
    uint16_t combo[32] = {};
};

const IdSolver& id_solver(size_t udp_payload_len) {
    thread_local IdSolver cache[4];
    thread_local unsigned next = 0;
    for (const IdSolver& s : cache)
        if (s.length == udp_payload_len)
            return s;
    IdSolver& s = cache[next++ % 4];
    s = IdSolver{};
    s.length = udp_payload_len;
    uint32_t deltas[16];
    icrc_ipv4_id_bit_deltas(udp_payload_len, deltas);
    for (int b = 0; b < 16; ++b) {
        uint32_t v = deltas[b];
        uint16_t c = uint16_t(1u << b);
        while (v) {
            const int piv = 31 - __builtin_clz(v);
            if (!s.basis[piv]) {
                s.basis[piv] = v;
                s.combo[piv] = c;
                break;
            }
            v ^= s.basis[piv];
            c ^= s.combo[piv];
        }
    }
    return s;
}

} // namespace

void icrc_ipv4_id_bit_deltas(size_t udp_payload_len, std::span<uint32_t> out) {
    // Bytes the ICRC covers after the ID field: the ID bits' raw CRC is shifted over them.
    const size_t covered_after_id =
            lrh_size + ipv4_size + udp_size + udp_payload_len - icrc_size - (ipv4_id_offset + 2);
    const uint32_t shift = detail::crc32_x8n(covered_after_id);
    for (size_t b = 0; b < out.size() && b < id_bit_raw.size(); ++b)
        out[b] = detail::crc32_mulmod(shift, id_bit_raw[b]);
}

uint32_t icrc_compute(const IpContext& ip, std::span<const uint8_t> udp_payload) {
    uint8_t h[max_pseudo];
    const size_t covered = udp_payload.size() >= icrc_size ? udp_payload.size() - icrc_size : 0;
    size_t n = write_ip_udp(ip, udp_payload.size(), h);
    const size_t bth_len = std::min(covered, bth_size);
    std::memcpy(h + n, udp_payload.data(), bth_len);
    if (bth_len > 4)
        h[n + 4] = 0xff;
    n += bth_len;
    const uint32_t crc = crc32_ieee(0, h, n);
    return crc32_ieee(crc, udp_payload.data() + bth_len, covered - bth_len);
}

uint32_t icrc_compute_parts(const IpContext& ip, std::span<const std::span<const uint8_t>> parts) {
    size_t covered = 0;
    for (const auto& part : parts)
        covered += part.size();
    uint8_t h[max_pseudo];
    size_t n = write_ip_udp(ip, covered + icrc_size, h);
    // The BTH goes through the pseudo-header (its byte 4 masked), wherever the parts split it.
    const size_t bth_len = std::min(covered, bth_size);
    size_t i = 0, at = 0;   // part index, offset in it
    for (size_t copied = 0; copied < bth_len;) {
        const size_t k = std::min(bth_len - copied, parts[i].size() - at);
        std::memcpy(h + n + copied, parts[i].data() + at, k);
        copied += k;
        at += k;
        if (at == parts[i].size()) {
            ++i;
            at = 0;
        }
    }
    if (bth_len > 4)
        h[n + 4] = 0xff;
    n += bth_len;
    uint32_t crc = crc32_ieee(0, h, n);
    for (; i < parts.size(); ++i, at = 0)
        crc = crc32_ieee(crc, parts[i].data() + at, parts[i].size() - at);
    return crc;
}

bool icrc_verify(const IpContext& ip, std::span<const uint8_t> udp_payload) {
    if (udp_payload.size() < bth_size + icrc_size)
        return false;
    return icrc_compute(ip, udp_payload) == icrc_stored(udp_payload);
}

bool icrc_verify_any_ipv4_id(const IpContext& ip, std::span<const uint8_t> udp_payload,
                             uint16_t* id_out) {
    if (ip.ipv6) {
        if (id_out)
            *id_out = 0;
        return icrc_verify(ip, udp_payload);
    }
    if (udp_payload.size() < bth_size + icrc_size)
        return false;
    const uint32_t delta = icrc_compute(ip, udp_payload) ^ icrc_stored(udp_payload);
    uint16_t id = ip.ipv4_id;
    if (delta != 0) {
        // Find x with XOR_{b in x} contrib[b] == delta over GF(2): 16 unknowns, 32 equations.
        // The contributions are independent (a nonzero 16-bit pattern times x^32 is never a
        // multiple of P, and x^k is invertible mod P), so a solution, if the other 16 equations
        // allow one, is unique.
        const IdSolver& solver = id_solver(udp_payload.size());
        const auto& basis = solver.basis;
        const auto& combo = solver.combo;
        uint32_t d = delta;
        uint16_t x = 0;
        while (d) {
            const int piv = 31 - __builtin_clz(d);
            if (!basis[piv])
                return false;
            d ^= basis[piv];
            x ^= combo[piv];
        }
        id = uint16_t(id ^ x);
    }
    if (id_out)
        *id_out = id;
    return true;
}

} // namespace roce::wire
