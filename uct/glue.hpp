// Internal declarations of the UCT glue (component `roce`, MD `roce`, transport `rc_roce`).
// Everything here is hidden (-fvisibility=hidden); UCX reaches it only through the function
// tables registered by the load-time constructor in component.cpp.
#pragma once

// UCX's internal headers have no C++ guards and depend on the binary's config.h.
extern "C" {
#include <uct/api/uct.h>
#include <uct/api/version.h>
#include <uct/base/uct_component.h>
#include <uct/base/uct_iface.h>
#include <uct/base/uct_md.h>
#include <uct/base/uct_worker.h>
#include <uct/base/uct_iov.inl>
#include <ucs/async/async.h>
#include <ucs/debug/log.h>
#include <ucs/sys/math.h>
#include <ucs/sys/string.h>
#include <ucs/sys/sys.h>
#include <ucs/time/time.h>
}

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.hpp"
#include "common/idle_yield.hpp"
#include "common/status.hpp"
#include "config_table.hpp"
#include "stats_file.hpp"
#include "common/rc_device.hpp"
#include "sw/device.hpp"
#include "verbs/device.hpp"

namespace roce::uct {

// ---------------------------------------------------------------- status and exceptions

// The one mapping of the core's status onto UCX's.
ucs_status_t to_ucs(Status s);

// Logs an exception that reached a C entry point (once, here) and maps it to a status.
ucs_status_t exception_status(const char* where) noexcept;

// Runs `body` and converts any exception into `fail(status)`; used at every C entry point.
#define ROCE_UCT_TRY(_where, _on_error, ...)                                                  \
    try {                                                                                     \
        __VA_ARGS__                                                                           \
    } catch (...) {                                                                           \
        ucs_status_t _exc_status = ::roce::uct::exception_status(_where);                     \
        (void)_exc_status;                                                                    \
        _on_error;                                                                            \
    }

// Entry of an ops table for an operation the transport does not have.
template <typename R, typename... A>
R unsupported(A...) noexcept {
    if constexpr (std::is_same_v<R, ucs_status_ptr_t>) {
        return UCS_STATUS_PTR(UCS_ERR_UNSUPPORTED);
    } else {
        return static_cast<R>(UCS_ERR_UNSUPPORTED);
    }
}

// ---------------------------------------------------------------- configuration

#define ROCE_CONFIG_FIELD_DECL(_field, _ctype, _name, _dfl, _type, _doc) _ctype _field;
struct IfaceConfig {
    uct_iface_config_t super;
    ROCE_IFACE_CONFIG(ROCE_CONFIG_FIELD_DECL)
    char* gid[n_gid_settings];   // gid::gid_config_vars values, in table order (UCX strings)
    char* cc[n_cc_settings];     // cc::cc_config_vars values, in table order
};
struct UdIfaceConfig {
    uct_iface_config_t super;
    ROCE_UD_IFACE_CONFIG(ROCE_CONFIG_FIELD_DECL)
    char* gid[n_gid_settings];
};
#undef ROCE_CONFIG_FIELD_DECL

struct MdConfig {
    uct_md_config_t super;
    char* netns;                      // UCX_ROCE_NETNS
    int rcache;                       // UCX_ROCE_RCACHE (ucs_ternary_auto_value_t: yes/no/try)
    uct_md_rcache_config_t rcache_config;   // UCX_ROCE_RCACHE_* (UCX's own table)
};

extern ucs_config_field_t iface_config_table[];
extern ucs_config_field_t ud_iface_config_table[];
extern ucs_config_field_t md_config_table[];

// Every TIME setting of the table (config_table.hpp) must be a finite number of seconds, >= 0:
// UCX's parser takes "inf" and negative times, which the core's integer units turned into the
// opposite of what was asked (UD_ROCE_TIMEOUT=inf: every peer failed at the first timer tick;
// IDLE_TAKEOVER=-1ms: a takeover after 71 minutes). One error naming the variable.
ucs_status_t check_time_settings(const IfaceConfig& c, const char* prefix);
ucs_status_t check_time_settings(const UdIfaceConfig& c, const char* prefix);

// `seconds` (checked: >= 0) times `per_second` as T, at most T's largest value: a finite but huge
// setting means "as long as can be said", never a wrapped count.
template <typename T>
T time_in(double seconds, double per_second) {
    const double v = seconds * per_second;
    constexpr T top = std::numeric_limits<T>::max();
    return v >= double(top) ? top : v > 0 ? T(v) : T(0);
}

// ---------------------------------------------------------------- component / MD

extern uct_component_t component;
extern uct_tl_t tl;

inline constexpr const char* component_name = "roce";
inline constexpr const char* tl_name = "rc_roce";

// An MD is either the userspace device's (name `roce`) or one RDMA device's (name
// `roce_<device>`, e.g. roce_rxe0; its transport devices are that device's RoCE ports, rxe0:1).
// Memory is registered with the backend's protection domain.
struct Md {
    uct_md_t super;
    std::string rdma_dev;                     // empty: the userspace device
    std::shared_ptr<sw::Pd> sw_pd;            // one of these two is set
    std::shared_ptr<verbs::Pd> verbs_pd;
    // UCX_ROCE_NETNS: the network namespace the userspace device's netdevs and sockets are in
    // (empty: the process's own).
    std::string netns;
    // Verbs memory domains: UCX's registration cache (md_rcache.cpp) in front of ibv_reg_mr;
    // null when UCX_ROCE_RCACHE=no or it could not be created.
    ucs_rcache_t* rcache = nullptr;
    double rcache_overhead = 0;               // its lookup cost (reg_cost)
    bool is_verbs() const { return !rdma_dev.empty(); }
    // The one that is set (md_open fails otherwise).
    RcPd* pd() const { return is_verbs() ? static_cast<RcPd*>(verbs_pd.get()) : sw_pd.get(); }
};
inline constexpr const char* verbs_md_prefix = "roce_";
static_assert(std::is_standard_layout_v<Md>);

struct Memh {
    void* address;
    size_t length;
    sw::MrKeys keys;
    bool registered;   // false for an empty range (nothing to register)
    bool allocated;    // memory mapped by mem_alloc (released by mem_free)
    bool cached;       // part of a registration-cache region (md_rcache.cpp)
};

// Packed remote key: the rkey plus a marker so keys of another component are refused.
struct PackedRkey {
    uint32_t rkey;
    uint32_t magic;
};
inline constexpr uint32_t rkey_magic = 0x52634531;   // "RcE1"

ucs_status_t md_open(uct_component_t* component, const char* md_name, const uct_md_config_t* config,
                     uct_md_h* md_p) noexcept;
ucs_status_t rkey_unpack(uct_component_t* component, const void* rkey_buffer, uct_rkey_t* rkey_p,
                         void** handle_p) noexcept;
ucs_status_t rkey_ptr(uct_component_t* component, uct_rkey_t rkey, void* handle, uint64_t raddr,
                      void** laddr_p) noexcept;
ucs_status_t rkey_release(uct_component_t* component, uct_rkey_t rkey, void* handle) noexcept;
ucs_status_t query_md_resources(uct_component_t* component, uct_md_resource_desc_t** resources_p,
                                unsigned* num_resources_p) noexcept;
// md.cpp: one registration of [address, address + length) (rounded out to atomic words) / its end.
ucs_status_t register_range(Md* md, void* address, size_t length, unsigned flags, Memh* memh,
                            unsigned access = access_all);
void deregister_range(Md* md, Memh* memh);
// md_rcache.cpp: the registration cache of a verbs memory domain. open: per UCX_ROCE_RCACHE
// (try: without a cache when UCX cannot create one); reg/dereg: a memh inside a cached region.
ucs_status_t md_rcache_open(Md* md, const MdConfig& config);
void md_rcache_close(Md* md);
ucs_status_t md_rcache_reg(Md* md, void* address, size_t length, unsigned flags, Memh** memh_p);
void md_rcache_dereg(Md* md, Memh* memh);

// ---------------------------------------------------------------- addresses

// Device address (variable length, <= 31 bytes as UCP requires):
//   byte 0       flags: dev_addr_ipv6 | dev_addr_loopback | dev_addr_has_ns
//   ip           4 bytes (IPv4), 16 bytes (IPv6, not loopback) or none (IPv6 loopback: ::1)
//   host id      8 bytes: ucs_get_system_id() (+ namespace flag bit 63), see uct_iface.c
//   net ns       8 bytes, only with dev_addr_has_ns (loopback inside a network namespace)
// A loopback address is reachable only from the same host and network namespace.
enum : uint8_t {
    dev_addr_ipv6 = 1u << 0,
    dev_addr_loopback = 1u << 1,
    dev_addr_has_ns = 1u << 2,
    dev_addr_verbs = 1u << 3,      // an RDMA device (rdma_cm port), not the userspace device
};
// Longest layout: IPv6 (not loopback) + host id; IPv4 loopback + host id + ns is 21 bytes.
inline constexpr size_t dev_addr_max_len = 1 + 16 + sizeof(uint64_t);
static_assert(1 + 4 + sizeof(uct_iface_local_addr_ns_t) <= dev_addr_max_len);
static_assert(dev_addr_max_len <= 31, "UCP packs device address lengths in 5 bits");

// Limits of the operations (the device copies SEND iovecs; RDMA lengths are 31-bit).
inline constexpr size_t max_send_iov = 16;
inline constexpr size_t max_rdma_msg = size_t{1} << 30;

// Flattens UCT iovecs (each `count` pieces `stride` apart) into `out` after its first `used`
// slots, adding their bytes to `total`. False if they do not fit in max_send_iov.
inline bool append_iov(const uct_iov_t* iov, size_t iovcnt, iovec* out, size_t& used, size_t& total) {
    for (size_t i = 0; i < iovcnt; ++i) {
        for (unsigned k = 0; k < iov[i].count; ++k) {
            if (iov[i].length == 0) {
                continue;
            }
            if (used == max_send_iov) {
                return false;
            }
            out[used].iov_base = UCS_PTR_BYTE_OFFSET(iov[i].buffer, k * iov[i].stride);
            out[used].iov_len = iov[i].length;
            total += iov[i].length;
            ++used;
        }
    }
    return true;
}

// Interface address: the UDP port, network byte order.
struct IfaceAddr {
    uint16_t port_be;
} UCS_S_PACKED;

// ---------------------------------------------------------------- iface / ep

struct Ep;

// Operation waiting for a device completion (wr_id = pointer to it).
struct Op {
    enum class Kind : uint8_t { plain, get_bcopy, amo_loop, check } kind = Kind::plain;
    Ep* ep = nullptr;                 // nullptr once the ep is destroyed (orphan)
    Op* prev = nullptr;               // ep's list of outstanding ops
    Op* next = nullptr;
    uct_completion_t* comp = nullptr;
    // get_bcopy
    uct_unpack_callback_t unpack_cb = nullptr;
    void* unpack_arg = nullptr;
    std::unique_ptr<uint8_t[]> buffer;
    size_t length = 0;
    // amo_loop: an atomic the device lacks (64-bit AND/OR/XOR/SWAP, every 32-bit op) as a
    // compare-and-swap loop on the aligned 64-bit word: exact, because the responder executes
    // atomics one at a time and a failed CAS returns the value to retry with.
    unsigned amo_op = 0;
    uint64_t operand = 0;
    uint64_t compare = 0;             // CSWAP (32-bit)
    uint64_t expected = 0;            // value the next CAS assumes
    uint64_t fetched = 0;             // value the last CAS found
    uint64_t* result = nullptr;
    uint32_t* result32 = nullptr;
    unsigned shift = 0;               // 32-bit ops: bit position of the operand in the word
    bool is32 = false;
    uint64_t remote_addr = 0;         // 8-byte aligned
    uint32_t rkey = 0;
    bool queued_retry = false;        // waiting in Ep::amo_retry, not posted on the device
};

struct Iface;

struct Ep {
    uct_base_ep_t super;
    Iface* iface = nullptr;
    uint32_t qpn = 0;
    uint64_t serial = 0;              // unique per iface: tells a reused QPN apart
    uint32_t inflight = 0;            // work requests posted whose completion is not polled yet
    sw::WireAddr peer{};
    ucs_status_t error = UCS_OK;      // set once the QP failed; UCS_ERR_CANCELED: flush(CANCEL), not reported
    bool error_reported = false;
    bool tx_blocked = false;          // the device said no_resource; cleared by progress
    bool dispatching = false;         // progress is running this ep's pending queue
    std::deque<uct_pending_req_t*> pending;
    std::vector<uct_completion_t*> flush_waiters;
    std::vector<Op*> amo_retry;       // CAS-loop steps the device could not take yet
    Op* ops_head = nullptr;           // outstanding ops with a completion
    unsigned amo_inflight = 0;        // CAS loops not finished
};
static_assert(std::is_standard_layout_v<Ep>, "uct_ep_h must point at Ep::super");

// A received message taken out of the device by event_arm (see iface.cpp).
struct StashedMessage {
    uint32_t qpn;
    std::vector<uint8_t> data;
};

struct Iface {
    uct_base_iface_t super;
    Md* md = nullptr;
    std::unique_ptr<RcDevice> dev;
    std::string dev_name;
    uint8_t dev_addr[dev_addr_max_len] = {};
    size_t dev_addr_len = 0;
    uint16_t port = 0;
    // figures derived from the configuration
    unsigned mtu = 0;
    unsigned sq_depth = 0;
    size_t max_msg = 0;              // max_recv_msg: one SEND message (am_id + header + data)
    size_t bcopy_size = 0;           // PUT bcopy limit
    std::unordered_map<uint32_t, Ep*> eps;   // by local QPN
    uint64_t next_ep_serial = 1;
    std::vector<uct_completion_t*> flush_waiters;
    std::vector<sw::Completion> comps;       // poll buffer
    std::vector<sw::Completion> comp_stash;  // taken out by event_arm, delivered by progress
    std::vector<StashedMessage> recv_stash;
    // ep failures to report (by QPN: the handler may destroy the ep) at the end of progress
    std::vector<std::pair<uint32_t, ucs_status_t>> failures;
    // Some ep has pending requests, flush waiters, CAS retries. Atomic: operations set it
    // without the async lock, and two threads may operate on different eps.
    std::atomic<bool> attention{false};
    bool in_progress = false;
    IdleYield idle_yield;            // UCX_RC_ROCE_IDLE_YIELD
    StatsFile stats;                 // UCX_RC_ROCE_STATS_DIR
};
static_assert(std::is_standard_layout_v<Iface>, "uct_iface_h must point at Iface::super");

// After a progress call that handled `events`: give the CPU away if the owner has been polling
// for nothing long enough (common/idle_yield.hpp says why).
// Only a worker that one thread drives without locks may yield: a UCP worker in multi-thread
// mode calls progress under its spinlock, and yielding with it held lets the other threads spin on
// it (measured: mpi_threads with 4 threads per rank stalled past its 90 s limit). Only on the
// userspace device: on rxe (TCG guest) the idle bookkeeping alone made latency ~5% worse in five
// interleaved A/B runs, and no oversubscribed gain was measured there.
inline IdleYield idle_yield_for(uct_worker_h worker, bool verbs, double after_s) {
    const bool single = reinterpret_cast<uct_priv_worker_t*>(worker)->thread_mode == UCS_THREAD_MODE_SINGLE;
    return IdleYield(single && !verbs ? uint64_t(std::max(0.0, after_s) * 1e9) : 0);
}

inline void yield_if_idle(IdleYield& y, unsigned events) {
    if (y.should_yield(events, now_ns))
        sched_yield();
}

// Holds the worker's async lock (recursive) for an entry point. UCX runs handlers registered
// with UCT_CB_FLAG_ASYNC on another thread under that lock (ud_roce's background thread,
// UCX's async thread), and UCP's wireup handler creates and destroys endpoints of every
// transport there; the owner's progress, flush and endpoint life cycle hold it too, as UCX's ud
// transport does, so the two never touch an interface's endpoint tables at once. Operations
// on an endpoint do not take it (an endpoint is used by one thread at a time). Lock order:
// this lock, then the device's or the ud transport's.
class AsyncGuard {
public:
    explicit AsyncGuard(const uct_base_iface_t* iface) : async_(iface->worker->async) {
        if (async_ != nullptr) UCS_ASYNC_BLOCK(async_);
    }
    ~AsyncGuard() {
        if (async_ != nullptr) UCS_ASYNC_UNBLOCK(async_);
    }
    AsyncGuard(const AsyncGuard&) = delete;
    AsyncGuard& operator=(const AsyncGuard&) = delete;

private:
    ucs_async_context_t* async_;
};

// A buffer of at least `size` bytes, this thread's own: bcopy operations pack into it and the
// device copies it out before they return. Per thread, not per interface: two threads may send
// on different endpoints of one interface at once (UCP sends wireup messages from the async
// thread while the owner sends).
inline uint8_t* pack_buffer(size_t size) {
    thread_local std::vector<uint8_t> buf;
    if (buf.size() < size) {
        buf.resize(size);
    }
    return buf.data();
}

inline Iface* to_iface(uct_iface_h h) { return reinterpret_cast<Iface*>(h); }
inline Ep* to_ep(uct_ep_h h) { return reinterpret_cast<Ep*>(h); }

// iface.cpp
ucs_status_t query_tl_devices(uct_md_h md, uct_tl_device_resource_t** devices_p,
                              unsigned* num_p) noexcept;
ucs_status_t iface_open(uct_md_h md, uct_worker_h worker, const uct_iface_params_t* params,
                        const uct_iface_config_t* config, uct_iface_h* iface_p) noexcept;
unsigned iface_progress(uct_iface_h tl_iface) noexcept;
// The GID and traffic-class settings of an iface configuration (IfaceConfig::gid), parsed and
// cross-checked; `err` is one line naming the setting and the valid choices.
Status gid_settings(const IfaceConfig& config, gid::GidConfig& out, std::string& err);
Status cc_settings(const IfaceConfig& config, cc::CcConfig& out, std::string& err);
// (name, value) of every setting of a declarative table (gid::gid_config_vars, cc::cc_config_vars)
// whose values UCX stored as strings in table order: what their parse_*_config functions take.
template <typename Vars>
std::vector<std::pair<std::string, std::string>> table_settings(const Vars& vars, char* const* values) {
    std::vector<std::pair<std::string, std::string>> settings;
    size_t i = 0;
    for (const auto& v : vars) {
        settings.emplace_back(std::string(v.name), values[i] != nullptr ? values[i] : "");
        ++i;
    }
    return settings;
}
// The same settings for the device lists of transport `tl` (rc_roce or ud_roce), read the way
// iface open reads them (uct_md_iface_config_read: UCX_<TL>_<NAME> from the environment and UCX's
// config files): a device on which they leave nothing to choose is not listed (unless that
// would leave none: opening one then explains why). nullopt when they do not parse (iface open
// reports it).
std::optional<gid::GidConfig> gid_settings_for_listing(const Md& md, const char* tl);
// iface_verbs.cpp: rc_roce or ud_roce (`tl`) on an RDMA device's RoCE ports (verbs backend).
std::vector<std::string> verbs_tl_devices(const Md& md, const char* tl);
// Opens iface.dev on tl_dev ("rxe0:1") and sets iface.mtu, sq_depth, max_msg.
ucs_status_t open_verbs_device(const IfaceConfig& config, const gid::GidConfig& gid_cfg, const cc::CcConfig& cc_cfg, Md& md,
                               const char* tl_dev, Iface& iface);
void verbs_perf_estimate(const Iface& iface, uct_iface_attr_t* attr);
// Peer's wire address from its device and interface addresses.
sw::WireAddr peer_wire_addr(const uct_device_addr_t* dev_addr, const uct_iface_addr_t* iface_addr);

// Endpoint operations (the iface's ops table in iface.cpp points at them): life cycle,
// pending/flush/fence/check in ep.cpp, AM and RMA in ep_am_rma.cpp, atomics in ep_amo.cpp.
ucs_status_t ep_create(const uct_ep_params_t* params, uct_ep_h* ep_p) noexcept;
void ep_destroy(uct_ep_h tl_ep) noexcept;
ucs_status_t ep_put_short(uct_ep_h, const void*, unsigned, uint64_t, uct_rkey_t) noexcept;
ssize_t ep_put_bcopy(uct_ep_h, uct_pack_callback_t, void*, uint64_t, uct_rkey_t) noexcept;
ucs_status_t ep_put_zcopy(uct_ep_h, const uct_iov_t*, size_t, uint64_t, uct_rkey_t,
                          uct_completion_t*) noexcept;
ucs_status_t ep_get_bcopy(uct_ep_h, uct_unpack_callback_t, void*, size_t, uint64_t, uct_rkey_t,
                          uct_completion_t*) noexcept;
ucs_status_t ep_get_zcopy(uct_ep_h, const uct_iov_t*, size_t, uint64_t, uct_rkey_t,
                          uct_completion_t*) noexcept;
ucs_status_t ep_am_short(uct_ep_h, uint8_t, uint64_t, const void*, unsigned) noexcept;
ucs_status_t ep_am_short_iov(uct_ep_h, uint8_t, const uct_iov_t*, size_t) noexcept;
ssize_t ep_am_bcopy(uct_ep_h, uint8_t, uct_pack_callback_t, void*, unsigned) noexcept;
ucs_status_t ep_am_zcopy(uct_ep_h, uint8_t, const void*, unsigned, const uct_iov_t*, size_t,
                         unsigned, uct_completion_t*) noexcept;
ucs_status_t ep_atomic_cswap64(uct_ep_h, uint64_t, uint64_t, uint64_t, uct_rkey_t, uint64_t*,
                               uct_completion_t*) noexcept;
ucs_status_t ep_atomic64_post(uct_ep_h, unsigned, uint64_t, uint64_t, uct_rkey_t) noexcept;
ucs_status_t ep_atomic64_fetch(uct_ep_h, unsigned, uint64_t, uint64_t*, uint64_t, uct_rkey_t,
                               uct_completion_t*) noexcept;
ucs_status_t ep_pending_add(uct_ep_h, uct_pending_req_t*, unsigned) noexcept;
void ep_pending_purge(uct_ep_h, uct_pending_purge_callback_t, void*) noexcept;
ucs_status_t ep_flush(uct_ep_h, unsigned, uct_completion_t*) noexcept;
ucs_status_t ep_fence(uct_ep_h, unsigned) noexcept;
ucs_status_t ep_check(uct_ep_h, unsigned, uct_completion_t*) noexcept;

ucs_status_t ep_atomic_cswap32(uct_ep_h, uint32_t, uint32_t, uint64_t, uct_rkey_t, uint32_t*,
                               uct_completion_t*) noexcept;
ucs_status_t ep_atomic32_post(uct_ep_h, unsigned, uint32_t, uint64_t, uct_rkey_t) noexcept;
ucs_status_t ep_atomic32_fetch(uct_ep_h, unsigned, uint32_t, uint32_t*, uint64_t, uct_rkey_t,
                               uct_completion_t*) noexcept;

// Atomic operations (all exact, see Op). The device has 64-bit fetch-add and compare-swap;
// the rest are CAS loops. 32-bit operands live in their aligned 64-bit word, which the MD
// makes accessible by registering regions rounded out to 8 bytes (x86-64: little endian).
inline constexpr uint64_t atomic_op_flags =
        UCS_BIT(UCT_ATOMIC_OP_ADD) | UCS_BIT(UCT_ATOMIC_OP_AND) | UCS_BIT(UCT_ATOMIC_OP_OR) |
        UCS_BIT(UCT_ATOMIC_OP_XOR);
inline constexpr uint64_t atomic_fop_flags = atomic_op_flags | UCS_BIT(UCT_ATOMIC_OP_SWAP) |
                                             UCS_BIT(UCT_ATOMIC_OP_CSWAP);
inline constexpr size_t atomic_word = 8;
static_assert(std::endian::native == std::endian::little,
              "32-bit atomics address their half of the 64-bit word as little endian");

// ep.cpp: what progress needs from the endpoints.
void ep_handle_completion(Iface* iface, const sw::Completion& c);
void ep_progress_waiting(Iface* iface, unsigned& count);
// Whether progress could do something right now without new packets (event_arm).
bool ep_actionable(Iface* iface);
bool ep_has_tx_resources(const Ep* ep);
bool ep_quiet(const Ep* ep);
bool ep_flushed(const Ep* ep);
bool iface_quiet(const Iface* iface);
void ep_destroy_all(Iface* iface);

// Internal AM id for keepalive probes (ep_check); user ids are < UCT_AM_ID_MAX.
inline constexpr uint8_t am_id_keepalive = 0xff;

} // namespace roce::uct
