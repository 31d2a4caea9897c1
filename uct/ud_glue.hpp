// Transport ud_roce: one datagram QP per interface and our own reliability (ud/transport.hpp).
// Endpoints are addresses: creating one sends nothing and costs a few dozen bytes, so a process
// can address thousands of peers; the per-peer state (sequence numbers, retransmission queue,
// window) lives in the transport and is created on first traffic.
//
// Interface address: UDP port (network order) + QPN (24 bit, big endian) + the QP's largest
// datagram payload as a power of two + its traffic class advert (gid::TcAdvert: ToS, priority
// and their sources, so both sides negotiate the same class), 10 bytes; an endpoint address
// (CONNECT_TO_EP) is the same.
// The device address is rc_roce's (netdev.hpp), so reachability is decided the same way.
#pragma once

#include <cstddef>

#include "glue.hpp"
#include "ud/transport.hpp"

namespace roce::uct {

extern uct_tl_t ud_tl;
inline constexpr const char* ud_tl_name = "ud_roce";

//   0      2        5          6         10
//   | port | qpn    | mtu      | class    |
//
// mtu: bits 0-6 the log2 (8..12: 256..4096 bytes), bit 7 set: the class follows. Builds before
// the class advert wrote 6 bytes and no bit 7, and refuse bit 7 (a log2 above 12): ranks of
// both generations refuse each other's address, rather than read 4 bytes that are not there.
inline constexpr uint8_t ud_addr_has_class = 0x80;
struct UdIfaceAddr {
    uint16_t port_be;
    uint8_t qpn[3];
    uint8_t mtu;        // log2 | ud_addr_has_class; packets to the peer fit both ends' (Transport::peer)
    ud::ClassAdvert cls;   // all zero: none (the peer is sent to in our own class)
} UCS_S_PACKED;
static_assert(sizeof(UdIfaceAddr) == 10);

UdIfaceAddr pack_iface_addr(const ud::Transport& tr);
// False if not an address this version writes: the caller logs what it was for.
bool unpack_iface_addr(const void* bytes, ud::UdAddr& addr, size_t& max_payload, ud::ClassAdvert& cls);

struct UdEp;

struct UdIface {
    uct_base_iface_t super;
    Md* md = nullptr;
    std::unique_ptr<ud::Transport> tr;
    std::string dev_name;
    uint8_t dev_addr[dev_addr_max_len] = {};
    size_t dev_addr_len = 0;
    size_t max_msg = 0;                       // largest AM (id in the header, not counted)
    std::unique_ptr<uint8_t[]> bcopy_buf;     // max_msg bytes
    std::vector<UdEp*> ep_by_peer;            // per transport peer: its endpoints (linked list)
    std::vector<UdEp*> waiting;               // eps with pending requests or flush waiters
    std::vector<uct_completion_t*> flush_waiters;
    std::vector<std::pair<ud::Transport::PeerId, Status>> failures;   // reported after progress
    bool in_progress = false;
    IdleYield idle_yield;                     // UCX_UD_ROCE_IDLE_YIELD
    bool async_callbacks = false;             // UCT_CB_FLAG_ASYNC handlers run in the thread
    StatsFile stats;                          // UCX_UD_ROCE_STATS_DIR
};
static_assert(std::is_standard_layout_v<UdIface>);

struct UdEp {
    uct_base_ep_t super;
    UdIface* iface = nullptr;
    ud::Transport::PeerId peer = 0;
    UdEp* next_of_peer = nullptr;             // the peer's other endpoints
    bool connected = false;                   // has a peer (CONNECT_TO_EP: after connect_to_ep)
    ucs_status_t error = UCS_OK;
    bool error_reported = false;
    bool waiting = false;                     // in iface->waiting
    bool dispatching = false;                 // progress is running this ep's pending queue
    // Pending requests, linked through their priv area (no allocation per endpoint).
    uct_pending_req_t* pending_head = nullptr;
    uct_pending_req_t* pending_tail = nullptr;
    std::vector<uct_completion_t*> flush_waiters;
};
static_assert(std::is_standard_layout_v<UdEp>);

inline UdIface* to_ud_iface(uct_iface_h h) { return reinterpret_cast<UdIface*>(h); }

inline UdEp* to_ud_ep(uct_ep_h h) { return reinterpret_cast<UdEp*>(h); }

// ud_ep.cpp
ucs_status_t ud_ep_create(const uct_ep_params_t* params, uct_ep_h* ep_p) noexcept;
void ud_ep_destroy(uct_ep_h tl_ep) noexcept;
ucs_status_t ud_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t* addr) noexcept;
ucs_status_t ud_ep_connect_to_ep(uct_ep_h tl_ep, const uct_device_addr_t* dev_addr,
                                 const uct_ep_addr_t* ep_addr) noexcept;
ucs_status_t ud_ep_am_short(uct_ep_h, uint8_t, uint64_t, const void*, unsigned) noexcept;
ucs_status_t ud_ep_am_short_iov(uct_ep_h, uint8_t, const uct_iov_t*, size_t) noexcept;
ssize_t ud_ep_am_bcopy(uct_ep_h, uint8_t, uct_pack_callback_t, void*, unsigned) noexcept;
ucs_status_t ud_ep_am_zcopy(uct_ep_h, uint8_t, const void*, unsigned, const uct_iov_t*, size_t,
                            unsigned, uct_completion_t*) noexcept;
ucs_status_t ud_ep_pending_add(uct_ep_h, uct_pending_req_t*, unsigned) noexcept;
void ud_ep_pending_purge(uct_ep_h, uct_pending_purge_callback_t, void*) noexcept;
ucs_status_t ud_ep_flush(uct_ep_h, unsigned, uct_completion_t*) noexcept;
ucs_status_t ud_ep_check(uct_ep_h, unsigned, uct_completion_t*) noexcept;
// Pending dispatch and flush completion of the waiting endpoints; failures reported.
void ud_progress_waiting(UdIface* iface, unsigned& count);
void ud_report_failures(UdIface* iface, unsigned& count);
void ud_ep_destroy_all(UdIface* iface);

} // namespace roce::uct
