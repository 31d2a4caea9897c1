// Transport rc_roce: one RcDevice per interface. On the `roce` MD it is a roce::sw::Device (a UDP
// socket speaking RoCEv2) bound to the address of a network device: the devices are the netdevs
// with an IPv4/IPv6 address. On a `roce_<rdma device>` MD it is a roce::verbs::Device on one of
// that device's RoCE ports (iface_verbs.cpp).
#include "glue.hpp"
#include "netdev.hpp"
#include "ud_glue.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <functional>

#include "common/counters_file.hpp"
#include "common/log.hpp"
#include "common/roce_mtu.hpp"
#include "gid/synth.hpp"
#include "gid/traffic_class.hpp"

namespace roce::uct {
namespace {


ucs_status_t iface_get_device_address(uct_iface_h tl_iface, uct_device_addr_t* addr) noexcept {
    Iface* iface = to_iface(tl_iface);
    std::memcpy(addr, iface->dev_addr, iface->dev_addr_len);
    return UCS_OK;
}

ucs_status_t iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t* addr) noexcept {
    IfaceAddr a{htons(to_iface(tl_iface)->port)};
    std::memcpy(addr, &a, sizeof(a));
    return UCS_OK;
}

int iface_is_reachable(const uct_iface_h tl_iface, const uct_device_addr_t* dev_addr,
                       const uct_iface_addr_t* iface_addr) noexcept {
    if (dev_addr == nullptr || iface_addr == nullptr) {
        return 0;
    }
    return dev_addr_is_reachable(to_iface(tl_iface)->dev_addr, dev_addr);
}

// ---------------------------------------------------------------- query

ucs_status_t iface_query(uct_iface_h tl_iface, uct_iface_attr_t* attr) noexcept {
    Iface* iface = to_iface(tl_iface);
    uct_base_iface_query(&iface->super, attr);

    attr->device_addr_len = iface->dev_addr_len;
    attr->iface_addr_len = sizeof(IfaceAddr);
    attr->ep_addr_len = 0;
    attr->max_conn_priv = 0;
    attr->cap.flags = UCT_IFACE_FLAG_CONNECT_TO_IFACE | UCT_IFACE_FLAG_AM_SHORT |
                      UCT_IFACE_FLAG_AM_BCOPY | UCT_IFACE_FLAG_AM_ZCOPY |
                      UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                      UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_GET_BCOPY |
                      UCT_IFACE_FLAG_GET_ZCOPY | UCT_IFACE_FLAG_ATOMIC_DEVICE |
                      UCT_IFACE_FLAG_PENDING | UCT_IFACE_FLAG_CB_SYNC |
                      UCT_IFACE_FLAG_EP_CHECK | UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE;
    attr->cap.event_flags = UCT_IFACE_FLAG_EVENT_SEND_COMP | UCT_IFACE_FLAG_EVENT_RECV |
                            UCT_IFACE_FLAG_EVENT_FD;

    const size_t am_max = iface->max_msg - 1;   // 1 byte of the SEND carries the AM id
    attr->cap.am.max_short = std::min<size_t>(am_max, iface->mtu - 1);
    attr->cap.am.max_bcopy = am_max;
    attr->cap.am.min_zcopy = 0;
    attr->cap.am.max_hdr = std::min<size_t>(128, am_max / 2);
    attr->cap.am.max_zcopy = am_max - attr->cap.am.max_hdr;
    attr->cap.am.opt_zcopy_align = 1;
    attr->cap.am.align_mtu = iface->mtu;
    attr->cap.am.max_iov = max_send_iov - 2;   // AM id and header take two slots

    attr->cap.put.max_short = iface->mtu;
    attr->cap.put.max_bcopy = iface->bcopy_size;
    attr->cap.put.min_zcopy = 0;
    attr->cap.put.max_zcopy = max_rdma_msg;
    attr->cap.put.opt_zcopy_align = 1;
    attr->cap.put.align_mtu = iface->mtu;
    attr->cap.put.max_iov = 1;

    attr->cap.get.max_short = 0;
    attr->cap.get.max_bcopy = iface->bcopy_size;
    attr->cap.get.min_zcopy = 0;
    attr->cap.get.max_zcopy = max_rdma_msg;
    attr->cap.get.opt_zcopy_align = 1;
    attr->cap.get.align_mtu = iface->mtu;
    attr->cap.get.max_iov = 1;

    attr->cap.atomic64.op_flags = atomic_op_flags;
    attr->cap.atomic64.fop_flags = atomic_fop_flags;
    attr->cap.atomic32.op_flags = atomic_op_flags;
    attr->cap.atomic32.fop_flags = atomic_fop_flags;

    if (iface->md->is_verbs()) {
        verbs_perf_estimate(*iface, attr);
    } else {
        // Measured with ucx_perftest on loopback (2-core VM, device as of 2026-12-03): one-way
        // AM latency ~5 us (the UDP ping-pong floor is 1.8-4.8 us); ~1 us of sender CPU per
        // operation; 1.3-2.1 GB/s for large transfers (0.6 GB/s at 4 KiB).
        attr->latency = ucs_linear_func_make(5e-6, 0);
        attr->bandwidth.dedicated = 0;
        attr->bandwidth.shared = 1.5e9;
        attr->overhead = 1e-6;
    }
    attr->priority = 0;
    return UCS_OK;
}

// ---------------------------------------------------------------- progress

// Hands one received SEND to the AM handler its first byte names.
void deliver_am(Iface* iface, uint32_t qpn, const uint8_t* msg, size_t len) {
    if (len == 0) {
        return;
    }
    uint8_t am_id = msg[0];
    if (am_id >= UCT_AM_ID_MAX) {
        if (am_id != am_id_keepalive) {
            ucs_debug("rc_roce: dropping message with invalid AM id %u on QP %u", am_id, qpn);
        }
        return;
    }
    void* data = const_cast<uint8_t*>(msg + 1);
    uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_RECV, am_id, data, len - 1,
                       "RX: AM qpn %u", qpn);
    // The data lives in the device's (or the stash's) buffer: no UCT_CB_PARAM_FLAG_DESC, the
    // handler copies what it keeps.
    uct_iface_invoke_am(&iface->super, am_id, data, static_cast<unsigned>(len - 1), 0);
}

// One progress call: what event_arm stashed, then the device's round — its progress, then
// completions first (they free send-queue slots and complete flushes), then received messages —
// then what waits on those (pending queues, flushes, failures).
unsigned drain(Iface* iface) {
    unsigned count = 0;

    // Events event_arm took out of the device (older than anything still queued there).
    if (ucs_unlikely(!iface->comp_stash.empty() || !iface->recv_stash.empty())) {
        std::vector<sw::Completion> comps;
        comps.swap(iface->comp_stash);
        for (const sw::Completion& c : comps) {
            ep_handle_completion(iface, c);
        }
        std::vector<StashedMessage> msgs;
        msgs.swap(iface->recv_stash);
        for (const StashedMessage& m : msgs) {
            deliver_am(iface, m.qpn, m.data.data(), m.data.size());
        }
        count += static_cast<unsigned>(comps.size() + msgs.size());
    }

    struct Sink final : RcDevice::ProgressSink {
        Iface* iface;
        explicit Sink(Iface* i) : iface(i) {}
        void completion(const sw::Completion& c) override { ep_handle_completion(iface, c); }
        void message(const sw::RecvMessage& m) override { deliver_am(iface, m.qpn, m.data, m.len); }
    } sink(iface);
    count += iface->dev->progress_round(sink, 64);

    ep_progress_waiting(iface, count);
    return count;
}

ucs_status_t iface_flush(uct_iface_h tl_iface, unsigned flags, uct_completion_t* comp) noexcept {
    Iface* iface = to_iface(tl_iface);
    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        return UCS_ERR_UNSUPPORTED;
    }
    ROCE_UCT_TRY("iface_flush", return _exc_status, {
        AsyncGuard guard(&iface->super);
        if (iface_quiet(iface)) {
            UCT_TL_IFACE_STAT_FLUSH(&iface->super);
            return UCS_OK;
        }
        if (comp != nullptr) {
            iface->flush_waiters.push_back(comp);
            iface->attention = true;
        }
        iface->dev->complete_lazy(0);   // the untracked operations may be held back
        UCT_TL_IFACE_STAT_FLUSH_WAIT(&iface->super);
        return UCS_INPROGRESS;
    })
}

void iface_close(uct_iface_h tl_iface) noexcept;

// Wakeup: the device's event fd (epoll over its socket and the background thread's notify
// eventfd) becomes readable when progress() has work.
ucs_status_t iface_event_fd_get(uct_iface_h tl_iface, int* fd_p) noexcept {
    *fd_p = to_iface(tl_iface)->dev->event_fd();
    return UCS_OK;
}

// Arming must fail with UCS_ERR_BUSY while events are pending. The device has no peek, so
// pending completions and messages are moved into the stash that the next progress delivers
// first; the fd then reflects only what arrives after this call.
ucs_status_t iface_event_arm(uct_iface_h tl_iface, unsigned) noexcept {
    Iface* iface = to_iface(tl_iface);
    ROCE_UCT_TRY("iface_event_arm", return _exc_status, {
        AsyncGuard guard(&iface->super);
        if (!iface->comp_stash.empty() || !iface->recv_stash.empty() || !iface->failures.empty() ||
            ep_actionable(iface)) {
            return UCS_ERR_BUSY;
        }
        RcDevice& dev = *iface->dev;
        dev.arm_events();
        dev.progress();
        size_t n;
        while ((n = dev.poll_completions(iface->comps.data(), iface->comps.size())) != 0) {
            iface->comp_stash.insert(iface->comp_stash.end(), iface->comps.begin(),
                                     iface->comps.begin() + static_cast<ptrdiff_t>(n));
        }
        dev.poll_recv(
                [iface](const sw::RecvMessage& m) {
                    iface->recv_stash.push_back(
                            {m.qpn, std::vector<uint8_t>(m.data, m.data + m.len)});
                },
                SIZE_MAX);
        if (!iface->comp_stash.empty() || !iface->recv_stash.empty() || ep_actionable(iface)) {
            return UCS_ERR_BUSY;
        }
        return UCS_OK;
    })
}

uct_iface_ops_t iface_ops = {
    .ep_put_short = ep_put_short,
    .ep_put_bcopy = ep_put_bcopy,
    .ep_put_zcopy = ep_put_zcopy,
    .ep_get_short = unsupported<ucs_status_t, uct_ep_h, void*, unsigned, uint64_t, uct_rkey_t>,
    .ep_get_bcopy = ep_get_bcopy,
    .ep_get_zcopy = ep_get_zcopy,
    .ep_am_short = ep_am_short,
    .ep_am_short_iov = ep_am_short_iov,
    .ep_am_bcopy = ep_am_bcopy,
    .ep_am_zcopy = ep_am_zcopy,
    .ep_atomic_cswap64 = ep_atomic_cswap64,
    .ep_atomic_cswap32 = ep_atomic_cswap32,
    .ep_atomic32_post = ep_atomic32_post,
    .ep_atomic64_post = ep_atomic64_post,
    .ep_atomic32_fetch = ep_atomic32_fetch,
    .ep_atomic64_fetch = ep_atomic64_fetch,
    .ep_tag_eager_short = unsupported<ucs_status_t, uct_ep_h, uct_tag_t, const void*, size_t>,
    .ep_tag_eager_bcopy = unsupported<ssize_t, uct_ep_h, uct_tag_t, uint64_t, uct_pack_callback_t,
                                      void*, unsigned>,
    .ep_tag_eager_zcopy = unsupported<ucs_status_t, uct_ep_h, uct_tag_t, uint64_t,
                                      const uct_iov_t*, size_t, unsigned, uct_completion_t*>,
    .ep_tag_rndv_zcopy = unsupported<ucs_status_ptr_t, uct_ep_h, uct_tag_t, const void*, unsigned,
                                     const uct_iov_t*, size_t, unsigned, uct_completion_t*>,
    .ep_tag_rndv_cancel = unsupported<ucs_status_t, uct_ep_h, void*>,
    .ep_tag_rndv_request = unsupported<ucs_status_t, uct_ep_h, uct_tag_t, const void*, unsigned,
                                       unsigned>,
    .iface_tag_recv_zcopy = unsupported<ucs_status_t, uct_iface_h, uct_tag_t, uct_tag_t,
                                        const uct_iov_t*, size_t, uct_tag_context_t*>,
    .iface_tag_recv_cancel = unsupported<ucs_status_t, uct_iface_h, uct_tag_context_t*, int>,
    .ep_pending_add = ep_pending_add,
    .ep_pending_purge = ep_pending_purge,
    .ep_flush = ep_flush,
    .ep_fence = ep_fence,
    .ep_check = ep_check,
    .ep_create = ep_create,
    .ep_connect = unsupported<ucs_status_t, uct_ep_h, const uct_ep_connect_params_t*>,
    .ep_disconnect = unsupported<ucs_status_t, uct_ep_h, unsigned>,
    .cm_ep_conn_notify = unsupported<ucs_status_t, uct_ep_h>,
    .ep_destroy = ep_destroy,
    .ep_get_address = unsupported<ucs_status_t, uct_ep_h, uct_ep_addr_t*>,
    .ep_connect_to_ep = unsupported<ucs_status_t, uct_ep_h, const uct_device_addr_t*,
                                    const uct_ep_addr_t*>,
    .iface_accept = unsupported<ucs_status_t, uct_iface_h, uct_conn_request_h>,
    .iface_reject = unsupported<ucs_status_t, uct_iface_h, uct_conn_request_h>,
    .iface_flush = iface_flush,
    .iface_fence = [](uct_iface_h, unsigned) noexcept { return UCS_OK; },  // see ep_fence
    .iface_progress_enable = uct_base_iface_progress_enable,
    .iface_progress_disable = uct_base_iface_progress_disable,
    .iface_progress = iface_progress,
    .iface_event_fd_get = iface_event_fd_get,
    .iface_event_arm = iface_event_arm,
    .iface_close = iface_close,
    .iface_query = iface_query,
    .iface_get_device_address = iface_get_device_address,
    .iface_get_address = iface_get_address,
    .iface_is_reachable = iface_is_reachable,
};

// UCP's rendezvous threshold weighs eager (AM) against rendezvous (RDMA READ/WRITE) by their
// bandwidths, and both are this iface's. But the eager path copies every fragment twice more
// than rendezvous does (into the responder's reassembly or receive buffer, then UCP's copy to
// the user buffer), while RDMA moves data between registered buffers. That cost is reported as
// per-fragment send overhead of AM operations; without it UCP computes a threshold of several
// MB and moves 1 MB messages as eager fragments (measured: 35% less bandwidth than rendezvous).
constexpr double eager_copy_bw = 6e9;   // memcpy of a cached fragment, bytes/s (2-core VM)

ucs_status_t iface_estimate_perf(uct_iface_h tl_iface, uct_perf_attr_t* perf_attr) noexcept {
    ucs_status_t status = uct_base_iface_estimate_perf(tl_iface, perf_attr);
    if (status != UCS_OK || !(perf_attr->field_mask & UCT_PERF_ATTR_FIELD_OPERATION) ||
        !(perf_attr->field_mask & UCT_PERF_ATTR_FIELD_SEND_PRE_OVERHEAD)) {
        return status;
    }
    if (perf_attr->operation == UCT_EP_OP_AM_BCOPY || perf_attr->operation == UCT_EP_OP_AM_ZCOPY) {
        perf_attr->send_pre_overhead += 2.0 * static_cast<double>(to_iface(tl_iface)->max_msg) /
                                        eager_copy_bw;
    }
    return UCS_OK;
}

uct_iface_internal_ops_t iface_internal_ops = {
    .iface_estimate_perf = iface_estimate_perf,
    .iface_vfs_refresh = [](uct_iface_h) noexcept {},
    .ep_query = [](uct_ep_h, uct_ep_attr_t*) noexcept { return UCS_ERR_UNSUPPORTED; },
    .ep_invalidate = [](uct_ep_h, unsigned) noexcept { return UCS_ERR_UNSUPPORTED; },
};

// Rewrites the iface's counter file (UCX_RC_ROCE_STATS_DIR): the device's counters and a section
// per QP.
void write_stats(Iface* iface) {
    CounterSnapshot snap;
    snap.address = iface->dev->address().to_string();
    snap.counters = iface->dev->counters();
    for (auto& q : iface->dev->qp_counters())
        snap.qps.push_back({q.qpn, q.dest_qpn, std::move(q.peer), q.closed ? "closed" : to_string(q.state),
                            std::move(q.counters)});
    iface->stats.write(std::move(snap));
}

void iface_close(uct_iface_h tl_iface) noexcept {
    Iface* iface = to_iface(tl_iface);
    // Held throughout (it outlives the interface: the async context is the worker's), so that
    // an async handler cannot create an endpoint on an interface going away.
    AsyncGuard guard(&iface->super);
    try {
        uct_base_iface_progress_disable(tl_iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
        if (!iface->eps.empty()) {
            ucs_debug("rc_roce: closing iface %p with %zu endpoints", iface, iface->eps.size());
        }
        ep_destroy_all(iface);
        if (iface->stats.enabled()) {
            write_stats(iface);
        }
        if (ucs_log_is_enabled(UCS_LOG_LEVEL_DEBUG)) {
            ucs_debug("rc_roce: %s port %u stats: %s", iface->dev_name.c_str(), iface->port,
                      iface->dev->stats_text().c_str());
        }
        iface->dev.reset();
    } catch (...) {
        exception_status("iface_close");
    }
    UCS_CLASS_CLEANUP(uct_base_iface_t, &iface->super);
    delete iface;
}

sw::DeviceConfig device_config(const IfaceConfig& c, const Netdev& d) {
    sw::DeviceConfig dc;
    dc.ip = ip_string(d.family, d.ip);
    dc.sq_depth = c.tx_queue_len;
    dc.max_rd_atomic = c.max_rd_atomic;
    dc.max_read_request = static_cast<uint32_t>(std::min<size_t>(c.max_read_request, 1u << 30));
    dc.retransmit_timeout_us = std::max(1u, time_in<uint32_t>(c.timeout, 1e6));
    dc.retry_count = c.retry_count;
    dc.peer_timeout_ms = time_in<uint32_t>(c.peer_timeout, 1e3);
    // Whole milliseconds, rounded up: 500us must not become 0 (never ask).
    dc.passive_idle_ms = static_cast<uint32_t>(std::clamp(std::ceil(c.passive_probe * 1e3), 0.0, double(UINT32_MAX)));
    dc.passive_reap_ms = static_cast<uint32_t>(std::clamp(std::ceil(c.passive_reap * 1e3), 0.0, double(UINT32_MAX)));
    dc.rnr_retry = c.rnr_retry;
    dc.ack_coalesce = c.ack_coalesce;
    // The device refuses a delay over a quarter of the retransmission timeout; here a TIMEOUT
    // lowered below four times the default delay takes the delay down with it.
    dc.ack_delay_us = static_cast<uint32_t>(std::clamp(c.ack_delay * 1e6, 0.0, 1e6));
    if (dc.ack_delay_us > dc.ack_delay_limit_us()) {
        // Said aloud only when the user chose the delay (the default's is the core's).
        const bool chosen = dc.ack_delay_us != sw::DeviceConfig{}.ack_delay_us;
        if (const LogLevel lvl = chosen ? LogLevel::warn : LogLevel::debug; log_enabled(lvl))
            log(lvl, "UCX_RC_ROCE_ACK_DELAY %u us is over a quarter of UCX_RC_ROCE_TIMEOUT (%u us): using %u us",
                dc.ack_delay_us, dc.retransmit_timeout_us, dc.ack_delay_limit_us());
        dc.ack_delay_us = dc.ack_delay_limit_us();
    }
    dc.max_recv_msg = static_cast<uint32_t>(std::min<size_t>(c.max_recv_msg, UINT32_MAX));
    dc.recv_queue_len = c.rx_queue_len;
    dc.progress_thread = c.progress_thread != 0;
    dc.idle_takeover_us = time_in<uint32_t>(c.idle_takeover, 1e6);
    dc.gso = c.gso != 0;
    dc.gro = c.gro != 0;
    dc.faults.drop = c.fault_drop;
    dc.faults.duplicate = c.fault_duplicate;
    dc.faults.reorder = c.fault_reorder;
    dc.faults.corrupt = c.fault_corrupt;
    dc.faults.ce = c.fault_ce;
    dc.faults.truncate = c.fault_truncate;
    dc.faults.delay = c.fault_delay;
    dc.faults.delay_us = static_cast<uint32_t>(std::clamp(c.fault_delay_time * 1e6, 1.0, 10e6));
    dc.faults.drop_acks = c.fault_drop_acks;
    dc.faults.seed = c.fault_seed;
    dc.line_rate_bps = c.cc_line_rate > 0 ? c.cc_line_rate * 1e9 : netdev_speed_bps(d.name, 100e9);
    dc.pcap_path = c.pcap != nullptr ? c.pcap : "";
    dc.pcap_limit = c.pcap_size;
    return dc;
}

ucs_status_t validate_config(const IfaceConfig& c) {
    if (const ucs_status_t st = check_time_settings(c, "rc_roce: UCX_RC_ROCE_"); st != UCS_OK)
        return st;
    if (c.mtu != UCS_ULUNITS_AUTO && !valid_roce_mtu(c.mtu)) {
        ucs_error("rc_roce: UCX_RC_ROCE_MTU=%zu is not an IB MTU (256, 512, 1024, 2048, 4096) or auto",
                  c.mtu);
        return UCS_ERR_INVALID_PARAM;
    }
    if (sw::PortRange ports; !resolve_ports(c.port_range, tl_name, ports)) {
        return UCS_ERR_INVALID_PARAM;   // checked for every device: a typo is not silently ignored
    }
    if (c.max_recv_msg < 256 || c.max_recv_msg > (1ul << 30)) {
        ucs_error("rc_roce: UCX_RC_ROCE_MAX_RECV_MSG=%zu out of range [256, 1G]", c.max_recv_msg);
        return UCS_ERR_INVALID_PARAM;
    }
    for (const auto& [v, name] : {std::pair{c.tx_queue_len, "TX_QUEUE_LEN"}, std::pair{c.rx_queue_len, "RX_QUEUE_LEN"},
                                  std::pair{c.ack_coalesce, "ACK_COALESCE"}, std::pair{c.max_rd_atomic, "MAX_RD_ATOMIC"}}) {
        if (v == 0) {   // (the devices refuse it too, without saying which)
            ucs_error("rc_roce: UCX_RC_ROCE_%s=0: must be positive; valid: 1 or more", name);
            return UCS_ERR_INVALID_PARAM;
        }
    }
    for (double p : {c.fault_drop, c.fault_duplicate, c.fault_reorder, c.fault_corrupt, c.fault_truncate,
                     c.fault_drop_acks, c.fault_ce, c.fault_delay}) {
        if (!(p >= 0 && p <= 1)) {
            ucs_error("rc_roce: fault probabilities must be in [0, 1] (got %g)", p);
            return UCS_ERR_INVALID_PARAM;
        }
    }
    // (an infinite line rate is one no CNP can lower; NaN compares false everywhere)
    if (!(c.cc_line_rate >= 0 && c.cc_line_rate <= 1e4)) {
        ucs_error("rc_roce: UCX_RC_ROCE_CC_LINE_RATE=%g: not a line rate; valid: 0..10000 (Gbit/s; 0 = the "
                  "netdev's speed)", c.cc_line_rate);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

} // namespace

Status gid_settings(const IfaceConfig& config, gid::GidConfig& out, std::string& err) {
    return gid::parse_gid_config(table_settings(gid::gid_config_vars, config.gid), out, err, "UCX_RC_ROCE_");
}

Status cc_settings(const IfaceConfig& config, cc::CcConfig& out, std::string& err) {
    return cc::parse_cc_config(table_settings(cc::cc_vars(), config.cc), out, err);
}

std::optional<gid::GidConfig> gid_settings_for_listing(const Md& md, const char* tl) {
    // Before: the environment's UCX_RC_ROCE_* for both transports, so UCX_UD_ROCE_GID_NETDEV did not
    // narrow ud_roce's list (and UCX_RC_ROCE_* did), and settings in a UCX config file did not count.
    const bool ud = std::strcmp(tl, ud_tl_name) == 0;
    const char* prefix = ud ? "UCX_UD_ROCE_" : "UCX_RC_ROCE_";
    uct_iface_config_t* c = nullptr;
    gid::GidConfig cfg;
    std::string err;
    if (uct_md_iface_config_read(const_cast<uct_md_t*>(&md.super), tl, nullptr, nullptr, &c) != UCS_OK) {
        ucs_debug("%s: configuration unreadable, device list from the environment", tl);
        return gid::gid_config_from_env(cfg, err, prefix) == Status::ok ? std::optional(cfg) : std::nullopt;
    }
    char* const* values = ud ? reinterpret_cast<UdIfaceConfig*>(c)->gid : reinterpret_cast<IfaceConfig*>(c)->gid;
    const Status s = gid::parse_gid_config(table_settings(gid::gid_config_vars, values), cfg, err, prefix);
    uct_config_release(c);
    return s == Status::ok ? std::optional(cfg) : std::nullopt;
}

// ---------------------------------------------------------------- public entry points

sw::WireAddr peer_wire_addr(const uct_device_addr_t* dev_addr, const uct_iface_addr_t* iface_addr) {
    DevAddrView v = unpack_dev_addr(dev_addr);
    IfaceAddr ia;
    std::memcpy(&ia, iface_addr, sizeof(ia));
    sw::WireAddr w;
    w.family = static_cast<uint8_t>(v.family);
    std::memcpy(w.ip, v.ip, sizeof(w.ip));
    w.port = ntohs(ia.port_be);
    return w;
}

ucs_status_t query_tl_devices(uct_md_h tl_md, uct_tl_device_resource_t** devices_p,
                              unsigned* num_p) noexcept {
    ROCE_UCT_TRY("query_tl_devices", return _exc_status, {
        return md_tl_devices(*reinterpret_cast<const Md*>(tl_md), tl_name, devices_p, num_p);
    })
}

ucs_status_t iface_open(uct_md_h tl_md, uct_worker_h worker, const uct_iface_params_t* params,
                        const uct_iface_config_t* tl_config, uct_iface_h* iface_p) noexcept {
    ROCE_UCT_TRY("iface_open", return _exc_status, {
        const auto& config = *reinterpret_cast<const IfaceConfig*>(tl_config);

        ucs_status_t status = check_open_params(params, tl_name);
        if (status != UCS_OK) {
            return status;
        }
        status = validate_config(config);
        if (status != UCS_OK) {
            return status;
        }
        gid::GidConfig gid_cfg;
        std::string gid_err;
        if (gid_settings(config, gid_cfg, gid_err) != Status::ok) {
            ucs_error("rc_roce: %s", gid_err.c_str());
            return UCS_ERR_INVALID_PARAM;
        }
        cc::CcConfig cc_cfg;
        if (cc_settings(config, cc_cfg, gid_err) != Status::ok) {
            ucs_error("rc_roce: %s", gid_err.c_str());
            return UCS_ERR_INVALID_PARAM;
        }

        const char* dev_name = params->mode.device.dev_name;
        Md* md = reinterpret_cast<Md*>(tl_md);
        std::vector<Netdev> netdevs;
        if (!md->is_verbs()) {
            status = in_md_netns(md->netns, tl_name, [&] {
                netdevs = list_netdevs();
                return UCS_OK;
            });
            if (status != UCS_OK) {
                return status;
            }
        }
        auto it = std::find_if(netdevs.begin(), netdevs.end(),
                               [&](const Netdev& d) { return d.name == dev_name; });
        if (!md->is_verbs() && it == netdevs.end()) {
            ucs_error("rc_roce: network device '%s' not found or has no usable IP address",
                      dev_name);
            return UCS_ERR_NO_DEVICE;
        }

        set_log_level(core_log_level(config.log_level));

        auto iface = std::make_unique<Iface>();
        iface->idle_yield = idle_yield_for(worker, reinterpret_cast<Md*>(tl_md)->is_verbs(), config.idle_yield);
        status = UCS_CLASS_INIT(uct_base_iface_t, &iface->super, &iface_ops, &iface_internal_ops,
                                tl_md, worker, params, tl_config
                                UCS_STATS_ARG((params->field_mask &
                                               UCT_IFACE_PARAM_FIELD_STATS_ROOT)
                                                      ? params->stats_root : nullptr)
                                UCS_STATS_ARG(tl_name));
        if (status != UCS_OK) {
            return status;
        }
        // From here on the base class must be cleaned up on failure (exceptions included).
        auto fail = [&](ucs_status_t st) {
            iface->dev.reset();
            UCS_CLASS_CLEANUP(uct_base_iface_t, &iface->super);
            return st;
        };
        try {
            iface->md = md;
            iface->dev_name = dev_name;
            if (md->is_verbs()) {
                if (config.pcap != nullptr && config.pcap[0] != '\0') {
                    ucs_warn("rc_roce: %s: UCX_RC_ROCE_PCAP traces the userspace device only (capture "
                             "RDMA devices with tcpdump / ibdump)", dev_name);
                }
                status = open_verbs_device(config, gid_cfg, cc_cfg, *md, dev_name, *iface);   // logs why not
                if (status != UCS_OK) {
                    return fail(status);
                }
                const WireAddr& a = iface->dev->address();
                Netdev gid_ip;
                gid_ip.name = dev_name;
                gid_ip.family = a.family;
                std::memcpy(gid_ip.ip, a.ip, sizeof(gid_ip.ip));
                iface->dev_addr_len = pack_dev_addr(gid_ip, true, iface->dev_addr);
            } else {
                Netdev nd = *it;
                sw::DeviceConfig dc = device_config(config, nd);
                dc.cc = cc_cfg;
                std::unique_ptr<sw::Device> dev;
                // The GID policy reads the namespace's addresses, the device binds its socket there.
                status = in_md_netns(md->netns, tl_name, [&] {
                    ucs_status_t st = apply_gid_policy(gid_cfg, nd, dc, tl_name);   // logs why not
                    if (st != UCS_OK) {
                        return st;
                    }
                    if ((dc.mtu = resolve_mtu(config.mtu, nd, tl_name)) == 0 ||
                        !resolve_ports(config.port_range, tl_name, dc.ports)) {
                        return UCS_ERR_INVALID_PARAM;
                    }
                    Status s = sw::Device::open(dc, md->sw_pd, dev);
                    if (s != Status::ok) {
                        return device_open_failed(tl_name, dev_name, dc.ip, dc.ports, s);
                    }
                    return UCS_OK;
                });
                if (status != UCS_OK) {
                    return fail(status);
                }
                iface->dev_addr_len = pack_dev_addr(nd, false, iface->dev_addr);
                const sw::DeviceConfig& actual = dev->config();
                iface->mtu = actual.mtu;
                iface->sq_depth = actual.sq_depth;
                iface->max_msg = actual.max_recv_msg;
                iface->dev = std::move(dev);
            }
            iface->port = iface->dev->address().port;
            iface->bcopy_size = iface->max_msg;
            iface->comps.resize(64);
            iface->stats.open(config.stats_dir, tl_name, iface->dev_name, iface->port);
            if (iface->stats.enabled()) {
                write_stats(iface.get());
            }

            ucs_debug("rc_roce: opened iface %p on %s (%s), mtu %u, sq %u, max msg %zu",
                      iface.get(), dev_name, iface->dev->address().to_string().c_str(),
                      iface->mtu, iface->sq_depth, iface->max_msg);
        } catch (...) {
            return fail(exception_status("iface_open"));
        }
        *iface_p = &iface.release()->super.super;
        return UCS_OK;
    })
}

unsigned iface_progress(uct_iface_h tl_iface) noexcept {
    Iface* iface = to_iface(tl_iface);
    unsigned count = 0;
    {
        AsyncGuard guard(&iface->super);
        if (iface->in_progress) {
            return 0;   // a callback called progress again: the outer call finishes the work
        }
        iface->in_progress = true;
        try {
            count = drain(iface);
            if (iface->stats.due()) {
                write_stats(iface);
            }
        } catch (...) {
            exception_status("iface_progress");
        }
        iface->in_progress = false;
    }
    yield_if_idle(iface->idle_yield, count);   // not holding the async lock
    return count;
}

} // namespace roce::uct
