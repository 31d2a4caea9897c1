// ud_roce interfaces: open/close, query, addresses, progress, flush and events.
#include "ud_glue.hpp"

#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <cstring>

#include "cc/config.hpp"
#include "common/roce_mtu.hpp"
#include "gid/traffic_class.hpp"
#include "netdev.hpp"
#include "sw/ud_qp.hpp"
#include "verbs/ports.hpp"
#include "verbs/ud_datagram.hpp"

namespace roce::uct {

// UCX_UD_ROCE_CC: auto and off are the AIMD window alone, delay adds cc::DelayCc; auto_ = invalid.
cc::CcMode ud_cc_mode(const UdIfaceConfig& c) {
    const std::string_view v = c.cc ? c.cc : "";
    if (v == "off" || v == "auto") return cc::CcMode::off;
    if (v == "delay") return cc::CcMode::delay;
    return cc::CcMode::auto_;
}

UdIfaceAddr pack_iface_addr(const ud::Transport& tr) {
    const ud::UdAddr a = tr.address();
    // An IB MTU (a power of two); were it not, the power below it still fits.
    const size_t payload = tr.max_datagram_payload();
    const auto log2 = uint8_t(63 - __builtin_clzll(std::max<size_t>(payload, 1)));
    return {htons(a.net.port), {uint8_t(a.qpn >> 16), uint8_t(a.qpn >> 8), uint8_t(a.qpn)},
            uint8_t(log2 | ud_addr_has_class), tr.class_advert()};
}

bool unpack_iface_addr(const void* bytes, ud::UdAddr& addr, size_t& max_payload, ud::ClassAdvert& cls) {
    UdIfaceAddr ia{};
    // The first 6 bytes are there in every format: what follows only when bit 7 says so.
    std::memcpy(&ia, bytes, offsetof(UdIfaceAddr, cls));
    addr.net.port = ntohs(ia.port_be);
    addr.qpn = uint32_t(ia.qpn[0]) << 16 | uint32_t(ia.qpn[1]) << 8 | ia.qpn[2];
    const uint8_t log2 = ia.mtu & uint8_t(~ud_addr_has_class);
    max_payload = size_t(1) << std::min<uint8_t>(log2, 31);
    if (!(ia.mtu & ud_addr_has_class))
        return false;   // an older build's address
    std::memcpy(cls.data(), static_cast<const uint8_t*>(bytes) + offsetof(UdIfaceAddr, cls), cls.size());
    return addr.net.port != 0 && addr.qpn >= 2 && log2 >= 8 && log2 <= 12;
}

namespace {

ucs_status_t ud_iface_get_device_address(uct_iface_h tl_iface, uct_device_addr_t* addr) noexcept {
    UdIface* iface = to_ud_iface(tl_iface);
    std::memcpy(addr, iface->dev_addr, iface->dev_addr_len);
    return UCS_OK;
}

ucs_status_t ud_iface_get_address(uct_iface_h tl_iface, uct_iface_addr_t* addr) noexcept {
    const UdIfaceAddr ia = pack_iface_addr(*to_ud_iface(tl_iface)->tr);
    std::memcpy(addr, &ia, sizeof(ia));
    return UCS_OK;
}

int ud_iface_is_reachable(const uct_iface_h tl_iface, const uct_device_addr_t* dev_addr,
                          const uct_iface_addr_t* iface_addr) noexcept {
    if (dev_addr == nullptr || iface_addr == nullptr) {
        return 0;
    }
    return dev_addr_is_reachable(to_ud_iface(tl_iface)->dev_addr, dev_addr);
}

ucs_status_t ud_iface_query(uct_iface_h tl_iface, uct_iface_attr_t* attr) noexcept {
    UdIface* iface = to_ud_iface(tl_iface);
    uct_base_iface_query(&iface->super, attr);
    attr->device_addr_len = iface->dev_addr_len;
    attr->iface_addr_len = sizeof(UdIfaceAddr);
    attr->ep_addr_len = sizeof(UdIfaceAddr);
    attr->max_conn_priv = 0;
    attr->cap.flags = UCT_IFACE_FLAG_CONNECT_TO_IFACE | UCT_IFACE_FLAG_CONNECT_TO_EP |
                      UCT_IFACE_FLAG_AM_SHORT |
                      UCT_IFACE_FLAG_AM_BCOPY | UCT_IFACE_FLAG_AM_ZCOPY | UCT_IFACE_FLAG_PENDING |
                      UCT_IFACE_FLAG_CB_SYNC | UCT_IFACE_FLAG_EP_CHECK |
                      UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE;
    if (iface->async_callbacks) {
        // The background thread runs handlers registered with UCT_CB_FLAG_ASYNC (UCP wants this
        // of an auxiliary transport: its wireup messages are handled while the peer computes).
        attr->cap.flags |= UCT_IFACE_FLAG_CB_ASYNC;
    }
    attr->cap.event_flags = UCT_IFACE_FLAG_EVENT_SEND_COMP | UCT_IFACE_FLAG_EVENT_RECV |
                            UCT_IFACE_FLAG_EVENT_FD;
    const size_t pkt = iface->tr->packet_payload();
    // One packet for short messages (the latency path), fragments above; to a peer with a
    // smaller MTU a short message may take several (these attributes are the interface's).
    attr->cap.am.max_short = std::min(pkt, iface->max_msg);   // SEG_SIZE may be below a packet
    attr->cap.am.max_bcopy = iface->max_msg;
    attr->cap.am.min_zcopy = 0;
    attr->cap.am.max_hdr = std::min<size_t>(128, iface->max_msg / 2);
    attr->cap.am.max_zcopy = iface->max_msg - attr->cap.am.max_hdr;
    attr->cap.am.opt_zcopy_align = 1;
    attr->cap.am.align_mtu = pkt;
    attr->cap.am.max_iov = max_send_iov - 1;
    // Measured like rc_roce's on loopback: a UDP round trip plus the reliability header;
    // a little above rc_roce so that UCP prefers rc_roce where both are offered.
    attr->latency = ucs_linear_func_make(6e-6, 0);
    attr->bandwidth.dedicated = 0;
    attr->bandwidth.shared = 1.2e9;
    attr->overhead = 1e-6;
    attr->priority = 0;
    return UCS_OK;
}

// Rewrites the iface's counter file (UCX_UD_ROCE_STATS_DIR): the transport's counters and a
// section per peer.
void write_ud_stats(UdIface* iface) {
    CounterSnapshot snap;
    snap.address = iface->tr->address().to_string();
    snap.counters = iface->tr->counters();
    for (auto& p : iface->tr->peer_counters())
        snap.qps.push_back({p.id, p.remote_id, std::move(p.addr), p.failed ? "failed" : "ok", std::move(p.counters),
                            "peer"});
    iface->stats.write(std::move(snap));
}

unsigned ud_iface_progress(uct_iface_h tl_iface) noexcept {
    UdIface* iface = to_ud_iface(tl_iface);
    unsigned count = 0;
    {
        AsyncGuard guard(&iface->super);
        if (iface->in_progress) {
            return 0;   // an AM handler called progress: the outer call finishes the work
        }
        iface->in_progress = true;
        try {
            count = iface->tr->progress();
            ud_progress_waiting(iface, count);
            if (iface->stats.due()) {
                write_ud_stats(iface);
            }
            ud_report_failures(iface, count);
        } catch (...) {
            exception_status("ud_iface_progress");
        }
        iface->in_progress = false;
    }
    yield_if_idle(iface->idle_yield, count);   // not holding the async lock
    return count;
}

ucs_status_t ud_iface_flush(uct_iface_h tl_iface, unsigned flags, uct_completion_t* comp) noexcept {
    UdIface* iface = to_ud_iface(tl_iface);
    AsyncGuard guard(&iface->super);
    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        return UCS_ERR_UNSUPPORTED;
    }
    ROCE_UCT_TRY("ud_iface_flush", return _exc_status, {
        bool busy = !iface->tr->all_flushed();
        for (UdEp* ep : iface->waiting) {
            busy = busy || ep->pending_head != nullptr;
        }
        if (!busy) {
            UCT_TL_IFACE_STAT_FLUSH(&iface->super);
            return UCS_OK;
        }
        if (comp != nullptr) {
            iface->flush_waiters.push_back(comp);
        }
        UCT_TL_IFACE_STAT_FLUSH_WAIT(&iface->super);
        return UCS_INPROGRESS;
    })
}

ucs_status_t ud_iface_event_fd_get(uct_iface_h tl_iface, int* fd_p) noexcept {
    *fd_p = to_ud_iface(tl_iface)->tr->event_fd();
    return UCS_OK;
}

// The fd tells of arriving packets and of what the background thread received. While a peer
// has something unacknowledged (or is owed an ACK) arming fails with BUSY: the owner's
// progress runs those timers faster than the background thread's tick.
ucs_status_t ud_iface_event_arm(uct_iface_h tl_iface, unsigned) noexcept {
    UdIface* iface = to_ud_iface(tl_iface);
    AsyncGuard guard(&iface->super);
    ROCE_UCT_TRY("ud_iface_event_arm", return _exc_status, {
        if (!iface->failures.empty() || !iface->waiting.empty() || !iface->flush_waiters.empty() ||
            iface->tr->busy() || iface->tr->has_deferred()) {
            return UCS_ERR_BUSY;
        }
        iface->tr->arm();
        pollfd p{iface->tr->event_fd(), POLLIN, 0};
        if (::poll(&p, 1, 0) > 0) {
            return UCS_ERR_BUSY;
        }
        return UCS_OK;
    })
}

void ud_iface_close(uct_iface_h tl_iface) noexcept {
    UdIface* iface = to_ud_iface(tl_iface);
    // Held throughout, as rc_roce's iface_close does; the background thread only try-locks it,
    // so joining it here cannot deadlock.
    AsyncGuard guard(&iface->super);
    try {
        uct_base_iface_progress_disable(tl_iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
        ud_ep_destroy_all(iface);
        if (iface->stats.enabled()) {
            write_ud_stats(iface);
        }
        if (ucs_log_is_enabled(UCS_LOG_LEVEL_DEBUG)) {
            ucs_debug("ud_roce: %s %s stats: %s", iface->dev_name.c_str(),
                      iface->tr->address().to_string().c_str(), iface->tr->stats_text().c_str());
        }
        iface->tr.reset();
    } catch (...) {
        exception_status("ud_iface_close");
    }
    UCS_CLASS_CLEANUP(uct_base_iface_t, &iface->super);
    delete iface;
}

uct_iface_ops_t ud_iface_ops = {
    .ep_put_short = unsupported<ucs_status_t, uct_ep_h, const void*, unsigned, uint64_t, uct_rkey_t>,
    .ep_put_bcopy = unsupported<ssize_t, uct_ep_h, uct_pack_callback_t, void*, uint64_t, uct_rkey_t>,
    .ep_put_zcopy = unsupported<ucs_status_t, uct_ep_h, const uct_iov_t*, size_t, uint64_t,
                                uct_rkey_t, uct_completion_t*>,
    .ep_get_short = unsupported<ucs_status_t, uct_ep_h, void*, unsigned, uint64_t, uct_rkey_t>,
    .ep_get_bcopy = unsupported<ucs_status_t, uct_ep_h, uct_unpack_callback_t, void*, size_t,
                                uint64_t, uct_rkey_t, uct_completion_t*>,
    .ep_get_zcopy = unsupported<ucs_status_t, uct_ep_h, const uct_iov_t*, size_t, uint64_t,
                                uct_rkey_t, uct_completion_t*>,
    .ep_am_short = ud_ep_am_short,
    .ep_am_short_iov = ud_ep_am_short_iov,
    .ep_am_bcopy = ud_ep_am_bcopy,
    .ep_am_zcopy = ud_ep_am_zcopy,
    .ep_atomic_cswap64 = unsupported<ucs_status_t, uct_ep_h, uint64_t, uint64_t, uint64_t,
                                     uct_rkey_t, uint64_t*, uct_completion_t*>,
    .ep_atomic_cswap32 = unsupported<ucs_status_t, uct_ep_h, uint32_t, uint32_t, uint64_t,
                                     uct_rkey_t, uint32_t*, uct_completion_t*>,
    .ep_atomic32_post = unsupported<ucs_status_t, uct_ep_h, unsigned, uint32_t, uint64_t, uct_rkey_t>,
    .ep_atomic64_post = unsupported<ucs_status_t, uct_ep_h, unsigned, uint64_t, uint64_t, uct_rkey_t>,
    .ep_atomic32_fetch = unsupported<ucs_status_t, uct_ep_h, unsigned, uint32_t, uint32_t*,
                                     uint64_t, uct_rkey_t, uct_completion_t*>,
    .ep_atomic64_fetch = unsupported<ucs_status_t, uct_ep_h, unsigned, uint64_t, uint64_t*,
                                     uint64_t, uct_rkey_t, uct_completion_t*>,
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
    .ep_pending_add = ud_ep_pending_add,
    .ep_pending_purge = ud_ep_pending_purge,
    .ep_flush = ud_ep_flush,
    // Every peer's AMs are delivered in order, and AMs are all there is: nothing to fence.
    .ep_fence = [](uct_ep_h, unsigned) noexcept { return UCS_OK; },
    .ep_check = ud_ep_check,
    .ep_create = ud_ep_create,
    .ep_connect = unsupported<ucs_status_t, uct_ep_h, const uct_ep_connect_params_t*>,
    .ep_disconnect = unsupported<ucs_status_t, uct_ep_h, unsigned>,
    .cm_ep_conn_notify = unsupported<ucs_status_t, uct_ep_h>,
    .ep_destroy = ud_ep_destroy,
    .ep_get_address = ud_ep_get_address,
    .ep_connect_to_ep = ud_ep_connect_to_ep,
    .iface_accept = unsupported<ucs_status_t, uct_iface_h, uct_conn_request_h>,
    .iface_reject = unsupported<ucs_status_t, uct_iface_h, uct_conn_request_h>,
    .iface_flush = ud_iface_flush,
    .iface_fence = [](uct_iface_h, unsigned) noexcept { return UCS_OK; },
    .iface_progress_enable = uct_base_iface_progress_enable,
    .iface_progress_disable = uct_base_iface_progress_disable,
    .iface_progress = ud_iface_progress,
    .iface_event_fd_get = ud_iface_event_fd_get,
    .iface_event_arm = ud_iface_event_arm,
    .iface_close = ud_iface_close,
    .iface_query = ud_iface_query,
    .iface_get_device_address = ud_iface_get_device_address,
    .iface_get_address = ud_iface_get_address,
    .iface_is_reachable = ud_iface_is_reachable,
};

uct_iface_internal_ops_t ud_iface_internal_ops = {
    .iface_estimate_perf = uct_base_iface_estimate_perf,
    .iface_vfs_refresh = [](uct_iface_h) noexcept {},
    .ep_query = [](uct_ep_h, uct_ep_attr_t*) noexcept { return UCS_ERR_UNSUPPORTED; },
    .ep_invalidate = [](uct_ep_h, unsigned) noexcept { return UCS_ERR_UNSUPPORTED; },
};

ucs_status_t validate(const UdIfaceConfig& c) {
    if (const ucs_status_t st = check_time_settings(c, "ud_roce: UCX_UD_ROCE_"); st != UCS_OK)
        return st;
    if (c.mtu != UCS_ULUNITS_AUTO && !valid_roce_mtu(c.mtu)) {
        ucs_error("ud_roce: UCX_UD_ROCE_MTU=%zu is not an IB MTU (256, 512, 1024, 2048, 4096) or auto", c.mtu);
        return UCS_ERR_INVALID_PARAM;
    }
    if (sw::PortRange ports; !resolve_ports(c.port_range, ud_tl_name, ports)) {
        return UCS_ERR_INVALID_PARAM;   // checked for every device: a typo is not silently ignored
    }
    if (c.seg_size < 256 || c.seg_size > (16ul << 20)) {
        ucs_error("ud_roce: UCX_UD_ROCE_SEG_SIZE=%zu out of range [256, 16M]", c.seg_size);
        return UCS_ERR_INVALID_PARAM;
    }
    if (c.max_window < 2 || c.tx_queue_len < c.max_window) {
        ucs_error("ud_roce: UCX_UD_ROCE_MAX_WINDOW=%u must be >= 2 and <= UCX_UD_ROCE_TX_QUEUE_LEN=%u",
                  c.max_window, c.tx_queue_len);
        return UCS_ERR_INVALID_PARAM;
    }
    // (checked for the smallest MTU auto picks on a standard 1500-byte netdev)
    const size_t mtu = c.mtu == UCS_ULUNITS_AUTO ? 1024 : c.mtu;
    if (c.seg_size / (mtu - ud::header_size) + 1 > c.tx_queue_len) {
        ucs_error("ud_roce: UCX_UD_ROCE_TX_QUEUE_LEN=%u cannot hold one message of SEG_SIZE=%zu",
                  c.tx_queue_len, c.seg_size);
        return UCS_ERR_INVALID_PARAM;
    }
    if (ud_cc_mode(c) == cc::CcMode::auto_) {
        ucs_error("ud_roce: UCX_UD_ROCE_CC=%s: unknown or not available on ud_roce (dcqcn needs CNPs, "
                  "which only rc_roce sends); valid: auto, off, delay", c.cc ? c.cc : "");
        return UCS_ERR_INVALID_PARAM;
    }
    if (!(c.delay_target > 0) || c.delay_ai == 0) {
        ucs_error("ud_roce: UCX_UD_ROCE_DELAY_TARGET and DELAY_AI must be positive");
        return UCS_ERR_INVALID_PARAM;
    }
    for (double p : {c.fault_drop, c.fault_duplicate, c.fault_reorder, c.fault_corrupt, c.fault_truncate,
                     c.fault_delay}) {
        if (!(p >= 0 && p <= 1)) {
            ucs_error("ud_roce: fault probabilities must be in [0, 1] (got %g)", p);
            return UCS_ERR_INVALID_PARAM;
        }
    }
    if (!(c.timeout > 0) || !(c.retransmit_timeout > 0)) {
        ucs_error("ud_roce: UCX_UD_ROCE_TIMEOUT and RETRANSMIT_TIMEOUT must be positive");
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

ud::TransportConfig transport_config(const UdIfaceConfig& c) {
    ud::TransportConfig t;
    t.tx.delay = ud_cc_mode(c) == cc::CcMode::delay;
    t.tx.delay_params.target = time_in<cc::Nanos>(c.delay_target, 1e9);
    t.tx.delay_params.ai_bytes = double(c.delay_ai);
    t.tx.max_window = c.max_window;
    t.tx.init_window = std::min<uint32_t>(64, c.max_window);
    t.tx.queue_len = c.tx_queue_len;
    t.tx.min_rto_ns = time_in<uint64_t>(c.retransmit_timeout, 1e9);
    t.tx.peer_timeout_ns = time_in<uint64_t>(c.timeout, 1e9);
    t.rx.window = c.tx_queue_len;
    t.rx.max_msg = c.seg_size;
    t.ack_delay_ns = time_in<uint64_t>(c.ack_delay, 1e9);
    t.progress_thread = c.progress_thread != 0;
    t.idle_takeover_ns = time_in<uint64_t>(c.idle_takeover, 1e9);
    return t;
}

// The userspace device's UD QP on netdev `dev_name`, at the address the GID policy picks.
ucs_status_t open_sw_qp(const UdIfaceConfig& config, const gid::GidConfig& gid_cfg,
                        const char* dev_name, std::unique_ptr<ud::DatagramQp>& qp, Netdev& nd) {
    std::vector<Netdev> netdevs = list_netdevs();
    auto it = std::find_if(netdevs.begin(), netdevs.end(),
                           [&](const Netdev& d) { return d.name == dev_name; });
    if (it == netdevs.end()) {
        ucs_error("ud_roce: network device '%s' not found or has no usable IP address", dev_name);
        return UCS_ERR_NO_DEVICE;
    }
    nd = *it;
    sw::DeviceConfig dc;   // the GID policy fills address and traffic class
    ucs_status_t status = apply_gid_policy(gid_cfg, nd, dc, ud_tl_name);
    if (status != UCS_OK) {
        return status;
    }
    sw::UdQpConfig qc;
    qc.ip = dc.ip;
    if (!resolve_ports(config.port_range, ud_tl_name, qc.ports)) {
        return UCS_ERR_INVALID_PARAM;
    }
    if ((qc.mtu = resolve_mtu(config.mtu, nd, ud_tl_name)) == 0) {
        return UCS_ERR_INVALID_PARAM;
    }
    qc.traffic_class = dc.traffic_class;
    qc.traffic_class_source = dc.traffic_class_source;
    qc.priority = dc.priority;
    qc.priority_source = dc.priority_source;
    qc.faults.drop = config.fault_drop;
    qc.faults.duplicate = config.fault_duplicate;
    qc.faults.reorder = config.fault_reorder;
    qc.faults.corrupt = config.fault_corrupt;
    qc.faults.truncate = config.fault_truncate;
    qc.faults.delay = config.fault_delay;
    qc.faults.delay_us = static_cast<uint32_t>(std::clamp(config.fault_delay_time * 1e6, 1.0, 10e6));
    qc.faults.seed = config.fault_seed;
    const Status s = sw::open_ud_qp(qc, qp);
    if (s != Status::ok) {
        return device_open_failed(ud_tl_name, dev_name, qc.ip, qc.ports, s);
    }
    return UCS_OK;
}

// A verbs UD QP on an RDMA device's RoCE port ("rxe0:1"); its GID is the address.
ucs_status_t open_verbs_qp(const UdIfaceConfig& config, const gid::GidConfig& gid_cfg, Md& md,
                           const char* tl_dev, std::unique_ptr<ud::DatagramQp>& qp, Netdev& nd) {
    verbs::RocePort port;
    if (!verbs::parse_port_name(tl_dev, port) || port.dev_name != md.rdma_dev) {
        ucs_error("ud_roce: '%s' is not a port of RDMA device %s (expected %s:<port>)", tl_dev,
                  md.rdma_dev.c_str(), md.rdma_dev.c_str());
        return UCS_ERR_NO_DEVICE;
    }
    if (config.fault_drop > 0 || config.fault_duplicate > 0 || config.fault_reorder > 0 ||
        config.fault_corrupt > 0 || config.fault_truncate > 0 || config.fault_delay > 0) {
        ucs_warn("ud_roce: %s: fault injection applies to the userspace device only", tl_dev);
    }
    verbs::UdConfig uc;
    uc.dev_name = port.dev_name;
    uc.port = port.port;
    uc.gid = gid_cfg;   // the backend applies the whole policy (and the port's default class)
    const Status s = verbs::open_ud_datagram(uc, md.verbs_pd, qp);
    if (s != Status::ok) {
        // The backend logged the cause (device, port, GID); this says which iface it was for.
        ucs_error("ud_roce: cannot open %s: %s", tl_dev, std::string(to_string(s)).c_str());
        return to_ucs(s);
    }
    const WireAddr a = qp->address().net;
    nd.name = tl_dev;
    nd.family = a.family;
    std::memcpy(nd.ip, a.ip, sizeof(nd.ip));
    return UCS_OK;
}

ucs_status_t ud_query_tl_devices(uct_md_h tl_md, uct_tl_device_resource_t** devices_p,
                                 unsigned* num_p) noexcept {
    ROCE_UCT_TRY("ud_query_tl_devices", return _exc_status, {
        return md_tl_devices(*reinterpret_cast<const Md*>(tl_md), ud_tl_name, devices_p, num_p);
    })
}

ucs_status_t ud_iface_open(uct_md_h tl_md, uct_worker_h worker, const uct_iface_params_t* params,
                           const uct_iface_config_t* tl_config, uct_iface_h* iface_p) noexcept {
    ROCE_UCT_TRY("ud_iface_open", return _exc_status, {
        const auto& config = *reinterpret_cast<const UdIfaceConfig*>(tl_config);
        ucs_status_t status = check_open_params(params, ud_tl_name);
        if (status == UCS_OK) status = validate(config);
        if (status != UCS_OK) {
            return status;
        }
        gid::GidConfig gid_cfg;
        std::string gid_err;
        if (gid::parse_gid_config(table_settings(gid::gid_config_vars, config.gid), gid_cfg, gid_err,
                                  "UCX_UD_ROCE_") != Status::ok) {
            ucs_error("ud_roce: %s", gid_err.c_str());
            return UCS_ERR_INVALID_PARAM;
        }
        const char* dev_name = params->mode.device.dev_name;
        Md* md = reinterpret_cast<Md*>(tl_md);
        set_log_level(core_log_level(config.log_level));
        std::unique_ptr<ud::DatagramQp> qp;
        Netdev nd;   // the address the device address advertises
        status = md->is_verbs()
                         ? open_verbs_qp(config, gid_cfg, *md, dev_name, qp, nd)
                         : in_md_netns(md->netns, ud_tl_name,   // netdevs and socket in UCX_ROCE_NETNS
                                       [&] { return open_sw_qp(config, gid_cfg, dev_name, qp, nd); });   // log why not
        if (status != UCS_OK) {
            return status;
        }
        auto iface = std::make_unique<UdIface>();
        iface->idle_yield = idle_yield_for(worker, md->is_verbs(), config.idle_yield);
        status = UCS_CLASS_INIT(uct_base_iface_t, &iface->super, &ud_iface_ops,
                                &ud_iface_internal_ops, tl_md, worker, params, tl_config
                                UCS_STATS_ARG((params->field_mask &
                                               UCT_IFACE_PARAM_FIELD_STATS_ROOT)
                                                      ? params->stats_root : nullptr)
                                UCS_STATS_ARG(ud_tl_name));
        if (status != UCS_OK) {
            return status;
        }
        try {
            UdIface* self = iface.get();
            iface->md = md;
            iface->dev_name = dev_name;
            iface->dev_addr_len = pack_dev_addr(nd, md->is_verbs(), iface->dev_addr);
            iface->max_msg = config.seg_size;
            iface->async_callbacks = config.progress_thread != 0;
            iface->bcopy_buf.reset(new uint8_t[iface->max_msg]);
            ud::Transport::Callbacks cb;
            cb.deliver = [self](ud::Transport::PeerId, uint8_t am_id, const uint8_t* data, size_t len) {
                if (am_id >= UCT_AM_ID_MAX) {
                    return;
                }
                void* p = const_cast<uint8_t*>(data);
                uct_iface_trace_am(&self->super, UCT_AM_TRACE_TYPE_RECV, am_id, p, len, "RX: AM");
                // The data lives in the receive (or reassembly) buffer: no DESC flag, the
                // handler copies what it keeps.
                uct_iface_invoke_am(&self->super, am_id, p, static_cast<unsigned>(len), 0);
            };
            cb.failed = [self](ud::Transport::PeerId peer, Status why) {
                self->failures.emplace_back(peer, why);
            };
            if (iface->async_callbacks) {
                cb.async_ok = [self](uint8_t am_id) {
                    return am_id < UCT_AM_ID_MAX && (self->super.am[am_id].flags & UCT_CB_FLAG_ASYNC);
                };
                // A try-lock: the owner may hold the async lock while it waits for the thread
                // (iface close joins it under UCP's cleanup lock), so the thread must not block.
                // The mutex mode (valgrind) has no try: its async AMs wait for the owner.
                cb.outer_lock = [self](bool acquire) {
                    ucs_async_context_t* async = self->super.worker->async;
                    if (async->mode != UCS_ASYNC_MODE_THREAD_SPINLOCK) {
                        return false;
                    }
                    if (acquire) {
                        return ucs_recursive_spin_trylock(&async->thread.spinlock) != 0;
                    }
                    ucs_recursive_spin_unlock(&async->thread.spinlock);
                    return true;
                };
            }
            iface->tr = std::make_unique<ud::Transport>(transport_config(config), std::move(qp), cb);
            // validate() could only assume a 1024-byte MTU; this is the one auto picked (a small
            // netdev's) or the RDMA port's. A message needing more packets than the queue holds
            // would be refused at every send, with nothing said.
            if (const size_t most = size_t(config.tx_queue_len) * iface->tr->packet_payload();
                most < config.seg_size) {
                ucs_error("ud_roce: %s: UCX_UD_ROCE_SEG_SIZE=%zu needs more %zu-byte packets than "
                          "UCX_UD_ROCE_TX_QUEUE_LEN=%u holds; valid: SEG_SIZE up to %zu on this device, or a "
                          "longer TX_QUEUE_LEN", dev_name, config.seg_size, iface->tr->packet_payload(),
                          config.tx_queue_len, most);
                iface->tr.reset();
                UCS_CLASS_CLEANUP(uct_base_iface_t, &iface->super);
                return UCS_ERR_INVALID_PARAM;
            }
            iface->stats.open(config.stats_dir, ud_tl_name, iface->dev_name, iface->tr->address().net.port);
            if (iface->stats.enabled()) {
                write_ud_stats(iface.get());
            }
            ucs_debug("ud_roce: opened iface %p on %s (%s), max message %zu", self, dev_name,
                      iface->tr->address().to_string().c_str(), iface->max_msg);
        } catch (...) {
            iface->tr.reset();
            UCS_CLASS_CLEANUP(uct_base_iface_t, &iface->super);
            return exception_status("ud_iface_open");
        }
        *iface_p = &iface.release()->super.super;
        return UCS_OK;
    })
}

} // namespace

uct_tl_t ud_tl = {
    .name = "ud_roce",
    .query_devices = ud_query_tl_devices,
    .iface_open = ud_iface_open,
    .config = {.name = "ud_roce transport",
               .prefix = ud_tl_config_prefix,
               .table = ud_iface_config_table,
               .size = sizeof(UdIfaceConfig),
               .list = {}},
    .list = {},
};

} // namespace roce::uct
