// BTH opcodes (IBTA vol. 1, 9.2; RoCEv2 annex A17). The upper 3 bits select the transport
// (RC 000, UC 001, RD 010, UD 011, CNP 100), the lower 5 the operation.
#pragma once
#include <cstddef>
#include <cstdint>

namespace roce::wire {

enum class Opcode : uint8_t {
    rc_send_first = 0x00,
    rc_send_middle = 0x01,
    rc_send_last = 0x02,
    rc_send_last_imm = 0x03,
    rc_send_only = 0x04,
    rc_send_only_imm = 0x05,
    rc_write_first = 0x06,
    rc_write_middle = 0x07,
    rc_write_last = 0x08,
    rc_write_last_imm = 0x09,
    rc_write_only = 0x0a,
    rc_write_only_imm = 0x0b,
    rc_read_request = 0x0c,
    rc_read_response_first = 0x0d,
    rc_read_response_middle = 0x0e,
    rc_read_response_last = 0x0f,
    rc_read_response_only = 0x10,
    rc_ack = 0x11,
    rc_atomic_ack = 0x12,
    rc_cmp_swap = 0x13,
    rc_fetch_add = 0x14,
    rc_send_last_inv = 0x16,
    rc_send_only_inv = 0x17,
    uc_send_first = 0x20,
    uc_send_middle = 0x21,
    uc_send_last = 0x22,
    uc_send_last_imm = 0x23,
    uc_send_only = 0x24,
    uc_send_only_imm = 0x25,
    uc_write_first = 0x26,
    uc_write_middle = 0x27,
    uc_write_last = 0x28,
    uc_write_last_imm = 0x29,
    uc_write_only = 0x2a,
    uc_write_only_imm = 0x2b,
    ud_send_only = 0x64,
    ud_send_only_imm = 0x65,
    cnp = 0x81,
};

// Which extension headers follow the BTH, per opcode (IBTA table 38).
enum HeaderMask : uint16_t {
    hdr_reth = 1u << 0,
    hdr_aeth = 1u << 1,
    hdr_deth = 1u << 2,
    hdr_atomic = 1u << 3,
    hdr_atomic_ack = 1u << 4,
    hdr_imm = 1u << 5,
    hdr_ieth = 1u << 6,
    hdr_payload = 1u << 7,   // opcode may carry payload
    hdr_cnp_pad = 1u << 8,   // CNP: 16 reserved bytes
    op_valid = 1u << 15,     // opcode is one we implement
};

// Returns the header mask of `op` (op_valid clear for reserved / unimplemented opcodes).
uint16_t opcode_headers(uint8_t op);
// Size of the extension headers of `op` in bytes (0 for invalid opcodes).
size_t opcode_ext_size(uint8_t op);
const char* opcode_name(uint8_t op);

} // namespace roce::wire
