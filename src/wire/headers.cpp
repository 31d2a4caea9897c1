// Header encoders/decoders with explicit byte offsets (no packed structs: the wire layout is
// written out once here, and every field is byte-order independent of the host).
#include "wire/headers.hpp"

#include "wire/byteorder.hpp"

namespace roce::wire {

// BTH byte offsets:
//   0 opcode | 1 SE M PadCnt(2) TVer(4) | 2-3 P_Key | 4 F B resv6 | 5-7 DestQP | 8 A resv7 | 9-11 PSN
void encode(const Bth& h, uint8_t* p) {
    p[0] = h.opcode;
    p[1] = uint8_t((h.solicited ? 0x80 : 0) | (h.mig_req ? 0x40 : 0) | (h.pad_count & 3) << 4 |
                   (h.tver & 0x0f));
    be::store16(p + 2, h.pkey);
    p[4] = uint8_t((h.fecn ? 0x80 : 0) | (h.becn ? 0x40 : 0));
    be::store24(p + 5, h.dest_qp);
    p[8] = h.ack_req ? 0x80 : 0;
    be::store24(p + 9, h.psn);
}

void decode(const uint8_t* p, Bth& h) {
    h.opcode = p[0];
    h.solicited = p[1] & 0x80;
    h.mig_req = p[1] & 0x40;
    h.pad_count = (p[1] >> 4) & 3;
    h.tver = p[1] & 0x0f;
    h.pkey = be::load16(p + 2);
    h.fecn = p[4] & 0x80;
    h.becn = p[4] & 0x40;
    h.dest_qp = be::load24(p + 5);
    h.ack_req = p[8] & 0x80;
    h.psn = be::load24(p + 9);
}

// RETH: 0-7 VA | 8-11 R_Key | 12-15 DMA length
void encode(const Reth& h, uint8_t* p) {
    be::store64(p, h.va);
    be::store32(p + 8, h.rkey);
    be::store32(p + 12, h.dma_len);
}

void decode(const uint8_t* p, Reth& h) {
    h.va = be::load64(p);
    h.rkey = be::load32(p + 8);
    h.dma_len = be::load32(p + 12);
}

// AETH: 0 syndrome | 1-3 MSN
void encode(const Aeth& h, uint8_t* p) {
    p[0] = h.syndrome;
    be::store24(p + 1, h.msn);
}

void decode(const uint8_t* p, Aeth& h) {
    h.syndrome = p[0];
    h.msn = be::load24(p + 1);
}

// DETH: 0-3 Q_Key | 4 reserved | 5-7 SrcQP
void encode(const Deth& h, uint8_t* p) {
    be::store32(p, h.qkey);
    p[4] = 0;
    be::store24(p + 5, h.src_qp);
}

void decode(const uint8_t* p, Deth& h) {
    h.qkey = be::load32(p);
    h.src_qp = be::load24(p + 5);
}

// AtomicETH: 0-7 VA | 8-11 R_Key | 12-19 swap/add | 20-27 compare
void encode(const AtomicEth& h, uint8_t* p) {
    be::store64(p, h.va);
    be::store32(p + 8, h.rkey);
    be::store64(p + 12, h.swap_add);
    be::store64(p + 20, h.compare);
}

void decode(const uint8_t* p, AtomicEth& h) {
    h.va = be::load64(p);
    h.rkey = be::load32(p + 8);
    h.swap_add = be::load64(p + 12);
    h.compare = be::load64(p + 20);
}

// AtomicAckETH: 0-7 original remote data
void encode(const AtomicAckEth& h, uint8_t* p) { be::store64(p, h.orig); }
void decode(const uint8_t* p, AtomicAckEth& h) { h.orig = be::load64(p); }

static_assert(bth_size == 12 && reth_size == 16 && aeth_size == 4 && deth_size == 8 &&
              atomic_eth_size == 28 && atomic_ack_eth_size == 8,
              "offsets above assume the IBTA header sizes");

} // namespace roce::wire
