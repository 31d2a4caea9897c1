// Opcode -> extension headers, IBTA vol. 1 table 38 (RC/UC/UD) and annex A17 (CNP).
#include "wire/opcode.hpp"

#include <array>

#include "wire/headers.hpp"

namespace roce::wire {
namespace {

struct OpInfo {
    uint16_t mask = 0;
    const char* name = nullptr;
};

constexpr uint16_t V = op_valid, P = hdr_payload;

// RC and UC share operations 0x00..0x0b; only RC has reads, ACKs, atomics and invalidate.
constexpr void add_send_write(std::array<OpInfo, 256>& t, uint8_t base, const char* const names[12]) {
    constexpr uint16_t masks[12] = {
        V | P,                           // SEND_FIRST
        V | P,                           // SEND_MIDDLE
        V | P,                           // SEND_LAST
        V | P | hdr_imm,                 // SEND_LAST_WITH_IMMEDIATE
        V | P,                           // SEND_ONLY
        V | P | hdr_imm,                 // SEND_ONLY_WITH_IMMEDIATE
        V | P | hdr_reth,                // RDMA_WRITE_FIRST
        V | P,                           // RDMA_WRITE_MIDDLE
        V | P,                           // RDMA_WRITE_LAST
        V | P | hdr_imm,                 // RDMA_WRITE_LAST_WITH_IMMEDIATE
        V | P | hdr_reth,                // RDMA_WRITE_ONLY
        V | P | hdr_reth | hdr_imm,      // RDMA_WRITE_ONLY_WITH_IMMEDIATE
    };
    for (int i = 0; i < 12; ++i)
        t[base + i] = {masks[i], names[i]};
}

constexpr std::array<OpInfo, 256> make_table() {
    std::array<OpInfo, 256> t{};
    constexpr const char* rc[12] = {
        "RC_SEND_FIRST", "RC_SEND_MIDDLE", "RC_SEND_LAST", "RC_SEND_LAST_WITH_IMMEDIATE",
        "RC_SEND_ONLY", "RC_SEND_ONLY_WITH_IMMEDIATE", "RC_RDMA_WRITE_FIRST",
        "RC_RDMA_WRITE_MIDDLE", "RC_RDMA_WRITE_LAST", "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        "RC_RDMA_WRITE_ONLY", "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"};
    constexpr const char* uc[12] = {
        "UC_SEND_FIRST", "UC_SEND_MIDDLE", "UC_SEND_LAST", "UC_SEND_LAST_WITH_IMMEDIATE",
        "UC_SEND_ONLY", "UC_SEND_ONLY_WITH_IMMEDIATE", "UC_RDMA_WRITE_FIRST",
        "UC_RDMA_WRITE_MIDDLE", "UC_RDMA_WRITE_LAST", "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        "UC_RDMA_WRITE_ONLY", "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"};
    add_send_write(t, 0x00, rc);
    add_send_write(t, 0x20, uc);
    t[0x0c] = {V | hdr_reth, "RC_RDMA_READ_REQUEST"};
    // Read responses: AETH on FIRST/LAST/ONLY (carries the MSN), none on MIDDLE.
    t[0x0d] = {V | P | hdr_aeth, "RC_RDMA_READ_RESPONSE_FIRST"};
    t[0x0e] = {V | P, "RC_RDMA_READ_RESPONSE_MIDDLE"};
    t[0x0f] = {V | P | hdr_aeth, "RC_RDMA_READ_RESPONSE_LAST"};
    t[0x10] = {V | P | hdr_aeth, "RC_RDMA_READ_RESPONSE_ONLY"};
    t[0x11] = {V | hdr_aeth, "RC_ACKNOWLEDGE"};
    t[0x12] = {V | hdr_aeth | hdr_atomic_ack, "RC_ATOMIC_ACKNOWLEDGE"};
    t[0x13] = {V | hdr_atomic, "RC_CMP_SWAP"};
    t[0x14] = {V | hdr_atomic, "RC_FETCH_ADD"};
    t[0x16] = {V | P | hdr_ieth, "RC_SEND_LAST_WITH_INVALIDATE"};
    t[0x17] = {V | P | hdr_ieth, "RC_SEND_ONLY_WITH_INVALIDATE"};
    t[0x64] = {V | P | hdr_deth, "UD_SEND_ONLY"};
    t[0x65] = {V | P | hdr_deth | hdr_imm, "UD_SEND_ONLY_WITH_IMMEDIATE"};
    t[0x81] = {V | hdr_cnp_pad, "CNP"};
    return t;
}

constexpr size_t ext_size(uint16_t m) {
    if (!(m & op_valid))
        return 0;
    return (m & hdr_reth ? reth_size : 0) + (m & hdr_aeth ? aeth_size : 0) +
           (m & hdr_deth ? deth_size : 0) + (m & hdr_atomic ? atomic_eth_size : 0) +
           (m & hdr_atomic_ack ? atomic_ack_eth_size : 0) + (m & hdr_imm ? imm_size : 0) +
           (m & hdr_ieth ? ieth_size : 0) + (m & hdr_cnp_pad ? cnp_reserved_size : 0);
}

constexpr auto table = make_table();

// ext_size per opcode, computed once here: the hot paths ask for it per packet (parse, build,
// packet_size), and the sum over the mask bits was ~100 instructions per ping-pong iteration.
constexpr auto ext_sizes = [] {
    std::array<uint8_t, 256> s{};
    for (size_t op = 0; op < s.size(); ++op)
        s[op] = uint8_t(ext_size(table[op].mask));
    return s;
}();

// Spot checks against table 38 so a slip in the table fails the build, not a peer.
static_assert(ext_size(table[0x0b].mask) == 20);   // WRITE_ONLY_IMM: RETH + ImmDt
static_assert(ext_size(table[0x12].mask) == 12);   // ATOMIC_ACK: AETH + AtomicAckETH
static_assert(ext_size(table[0x13].mask) == 28);
static_assert(ext_size(table[0x65].mask) == 12);   // UD SEND_ONLY_IMM: DETH + ImmDt
static_assert(ext_size(table[0x0e].mask) == 0);    // READ_RESPONSE_MIDDLE
static_assert(ext_size(table[0x15].mask) == 0 && !(table[0x15].mask & op_valid));

} // namespace

uint16_t opcode_headers(uint8_t op) { return table[op].mask; }
size_t opcode_ext_size(uint8_t op) { return ext_sizes[op]; }
const char* opcode_name(uint8_t op) { return table[op].name ? table[op].name : "RESERVED"; }

} // namespace roce::wire
