// CRC-32 and the RoCEv2 invariant CRC (ICRC). The ICRC is what a peer NIC (or rxe) checks first;
// a single wrong byte in the pseudo-header makes every packet we send silently vanish, so the
// recipe follows the kernel's rxe_icrc.c field by field (see icrc.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "wire/packet.hpp"

namespace roce::wire {

// zlib-compatible CRC-32 (IEEE 802.3 reflected 0xEDB88320); crc32_ieee(0, p, n) == zlib crc32(0, p, n).
// Chains like zlib: crc32_ieee(crc32_ieee(0, a, na), b, nb) == crc32 of a||b.
uint32_t crc32_ieee(uint32_t crc, const uint8_t* p, size_t n);

// zlib crc32_combine: the CRC of a||b from crc(a), crc(b) and len(b), in O(log len) time.
uint32_t crc32_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);

// ICRC over the masked pseudo-header (8 x 0xFF LRH stand-in, IPv4/IPv6 header with variant fields
// all-ones, UDP header with checksum 0xFFFF and length = 8 + udp_payload length incl. ICRC,
// BTH with byte 4 = 0xFF) and the rest of the packet. `udp_payload` is the whole UDP payload
// INCLUDING the trailing 4 ICRC bytes (which are not covered). Returns the CRC value; on the
// wire it is stored least-significant byte first.
uint32_t icrc_compute(const IpContext& ip, std::span<const uint8_t> udp_payload);
// The same ICRC for a UDP payload given in pieces (a gather send keeps the headers in a tx
// slot and the payload where the application left it): `parts` concatenated are the UDP
// payload WITHOUT its 4 ICRC bytes. One pass over the bytes, as for the contiguous form.
uint32_t icrc_compute_parts(const IpContext& ip, std::span<const std::span<const uint8_t>> parts);

// False as well when the payload is too short to hold a BTH and an ICRC.
bool icrc_verify(const IpContext& ip, std::span<const uint8_t> udp_payload);

// The change of the ICRC of a UDP payload of this length when bit b of its IPv4 ID flips, for
// b = 0 .. out.size() - 1 (at most 16): the CRC is affine in the ID, so the change of any ID is
// the XOR of its bits' changes. The ID solver below and GSO senders (segment k has ID k) use it.
void icrc_ipv4_id_bit_deltas(size_t udp_payload_len, std::span<uint32_t> out);

// A UDP socket never shows the IPv4 identification field. True if the ICRC is valid for
// ip.ipv4_id, or else for some 16-bit ID (solved in closed form: the CRC is affine over GF(2)).
// Optionally returns the ID that matched. For IPv6 this is icrc_verify.
// Note: a corrupted packet passes with probability 2^-16 instead of 2^-32.
bool icrc_verify_any_ipv4_id(const IpContext& ip, std::span<const uint8_t> udp_payload,
                             uint16_t* id_out = nullptr);

// The ICRC as stored in the last 4 bytes of a UDP payload (least-significant byte first).
inline uint32_t icrc_stored(std::span<const uint8_t> udp_payload) {
    const uint8_t* p = udp_payload.data() + udp_payload.size() - 4;
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

namespace detail {
// Exposed for tests and benchmarks: the table-driven path and whether the carry-less multiply
// path is in use on this CPU.
uint32_t crc32_ieee_portable(uint32_t crc, const uint8_t* p, size_t n);
uint32_t crc32_ieee_bytewise(uint32_t crc, const uint8_t* p, size_t n);
bool crc32_uses_pclmul();
bool crc32_uses_vpclmul();      // 256-bit folding (VPCLMULQDQ) for 128 bytes and more
bool crc32_uses_vpclmul512();   // 512-bit folding (AVX-512 + VPCLMULQDQ) for 256 bytes and more
uint32_t crc32_ieee_128(uint32_t crc, const uint8_t* p, size_t n);   // never a wider path
uint32_t crc32_ieee_256(uint32_t crc, const uint8_t* p, size_t n);   // never the 512-bit path
// Raw (no pre/post inversion) CRC register after appending `n` zero bytes: r * x^(8n) mod P.
uint32_t crc32_shift_zeros(uint32_t r, size_t n);
// Polynomial arithmetic mod P in the reflected representation (x^0 = 0x80000000).
uint32_t crc32_mulmod(uint32_t a, uint32_t b);
uint32_t crc32_x8n(size_t n);   // x^(8n) mod P
} // namespace detail

} // namespace roce::wire
