// RoCEv2 transport headers as decoded host-order values, plus their wire encoders/decoders.
// All multi-byte wire fields are big-endian. Diagrams follow IBTA vol. 1, 9.2-9.5.
#pragma once
#include <cstddef>
#include <cstdint>

namespace roce::wire {

// Base Transport Header, 12 bytes:
//   0       8  9  10  12     16              32
//   | opcode |SE|M |Pad|TVer |     P_Key      |
//   |F|B| resv6 |        DestQP (24)          |
//   |A| resv7   |          PSN (24)           |
struct Bth {
    uint8_t opcode = 0;
    bool solicited = false;
    bool mig_req = false;
    uint8_t pad_count = 0;   // 0..3
    uint8_t tver = 0;
    uint16_t pkey = 0xffff;
    bool fecn = false, becn = false;
    uint32_t dest_qp = 0;    // 24 bit
    bool ack_req = false;
    uint32_t psn = 0;        // 24 bit
};
inline constexpr size_t bth_size = 12;

// RDMA Extended Transport Header, 16 bytes: VA (64) | R_Key (32) | DMA length (32).
struct Reth {
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint32_t dma_len = 0;
};
inline constexpr size_t reth_size = 16;

// ACK Extended Transport Header, 4 bytes: syndrome (8) | MSN (24).
// Syndrome: bits 7..5 = 000 ACK (low 5 bits credits, 0x1f = invalid), 001 RNR NAK (low 5 bits
// timer), 011 NAK (low 5 bits: 0 PSN sequence error, 1 invalid request, 2 remote access error,
// 3 remote operational error, 4 invalid RD request).
struct Aeth {
    uint8_t syndrome = 0x1f;
    uint32_t msn = 0;        // 24 bit
};
inline constexpr size_t aeth_size = 4;

enum class AethKind : uint8_t { ack, rnr_nak, nak, reserved };
inline constexpr AethKind aeth_kind(uint8_t syndrome) {
    switch (syndrome >> 5) {
    case 0: return AethKind::ack;
    case 1: return AethKind::rnr_nak;
    case 3: return AethKind::nak;
    default: return AethKind::reserved;
    }
}
enum NakCode : uint8_t { nak_psn_seq_error = 0, nak_invalid_request = 1, nak_remote_access = 2,
                         nak_remote_op_error = 3 };
inline constexpr uint8_t aeth_ack_syndrome = 0x1f;
inline constexpr uint8_t aeth_nak_syndrome(NakCode c) { return uint8_t(0x60 | c); }
inline constexpr uint8_t aeth_rnr_syndrome(uint8_t timer) { return uint8_t(0x20 | (timer & 0x1f)); }

// Datagram Extended Transport Header, 8 bytes: Q_Key (32) | resv (8) | SrcQP (24).
struct Deth {
    uint32_t qkey = 0;
    uint32_t src_qp = 0;
};
inline constexpr size_t deth_size = 8;

// Atomic Extended Transport Header, 28 bytes: VA (64) | R_Key (32) | swap/add (64) | compare (64).
struct AtomicEth {
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint64_t swap_add = 0;
    uint64_t compare = 0;
};
inline constexpr size_t atomic_eth_size = 28;

// Atomic ACK Extended Transport Header, 8 bytes: original remote data (64).
struct AtomicAckEth {
    uint64_t orig = 0;
};
inline constexpr size_t atomic_ack_eth_size = 8;

inline constexpr size_t imm_size = 4;
inline constexpr size_t ieth_size = 4;
inline constexpr size_t icrc_size = 4;
inline constexpr size_t cnp_reserved_size = 16;

inline constexpr uint16_t roce_v2_udp_port = 4791;
inline constexpr uint32_t psn_mask = 0xffffff;

// 24-bit PSN arithmetic: a - b as a signed distance (modulo 2^24).
inline constexpr int32_t psn_diff(uint32_t a, uint32_t b) {
    return int32_t((a - b) << 8) >> 8;
}
inline constexpr uint32_t psn_add(uint32_t a, uint32_t n) { return (a + n) & psn_mask; }

// Encoders write exactly *_size bytes; decoders read exactly *_size bytes.
void encode(const Bth& h, uint8_t* p);
void decode(const uint8_t* p, Bth& h);
void encode(const Reth& h, uint8_t* p);
void decode(const uint8_t* p, Reth& h);
void encode(const Aeth& h, uint8_t* p);
void decode(const uint8_t* p, Aeth& h);
void encode(const Deth& h, uint8_t* p);
void decode(const uint8_t* p, Deth& h);
void encode(const AtomicEth& h, uint8_t* p);
void decode(const uint8_t* p, AtomicEth& h);
void encode(const AtomicAckEth& h, uint8_t* p);
void decode(const uint8_t* p, AtomicAckEth& h);

} // namespace roce::wire
