// rc_roce on an RDMA device (verbs backend): its transport devices are the RoCE ports of the MD's
// RDMA device ("rxe0:1"), and an iface is a roce::verbs::Device on one port. Everything else
// (endpoints, AM, RMA, atomics, progress) is the same glue as on the userspace device.
#include "glue.hpp"

#include <algorithm>
#include <cmath>

#include "verbs/gid_choice.hpp"
#include "verbs/ports.hpp"

namespace roce::uct {

std::vector<std::string> verbs_tl_devices(const Md& md, const char* tl) {
    std::vector<std::string> all, usable;
    const std::optional<gid::GidConfig> cfg = gid_settings_for_listing(md, tl);
    for (const verbs::RocePort& p : verbs::list_roce_ports()) {
        if (p.dev_name != md.rdma_dev || p.name().size() >= UCT_DEVICE_NAME_MAX) {
            continue;
        }
        all.push_back(p.name());
        verbs::GidContext ctx;
        verbs::GidChoice choice;
        std::string err;
        if (cfg && verbs::load_gid_context(p.dev_name, p.port, *cfg, ctx, err) == Status::ok &&
            verbs::choose_gid(ctx, nullptr, {}, choice, err) == Status::ok) {
            usable.push_back(p.name());
        } else {
            ucs_debug("%s: not listing %s: %s", tl, p.name().c_str(), err.c_str());
        }
    }
    return usable.empty() ? all : usable;
}

ucs_status_t open_verbs_device(const IfaceConfig& c, const gid::GidConfig& gid_cfg, const cc::CcConfig& cc_cfg, Md& md, const char* tl_dev,
                               Iface& iface) {
    verbs::RocePort port;
    if (!verbs::parse_port_name(tl_dev, port) || port.dev_name != md.rdma_dev) {
        ucs_error("rc_roce: '%s' is not a port of RDMA device %s (expected %s:<port>)", tl_dev,
                  md.rdma_dev.c_str(), md.rdma_dev.c_str());
        return UCS_ERR_NO_DEVICE;
    }
    if (c.verbs_ack_timeout > 31) {
        ucs_error("rc_roce: UCX_RC_ROCE_VERBS_ACK_TIMEOUT=%u out of range [0, 31]",
                  c.verbs_ack_timeout);
        return UCS_ERR_INVALID_PARAM;
    }
    verbs::DeviceConfig dc;
    dc.dev_name = port.dev_name;
    dc.port = port.port;
    dc.gid = gid_cfg;   // GID choice per peer and traffic class: the backend applies the policy
    dc.mtu = c.mtu == UCS_ULUNITS_AUTO ? 4096 : uint32_t(c.mtu);   // the path MTU is min(this, the port's)
    dc.sq_depth = c.tx_queue_len;
    dc.max_rd_atomic = c.max_rd_atomic;
    dc.retry_count = std::min(c.retry_count, 7u);
    dc.rnr_retry = std::min(c.rnr_retry, 7u);
    dc.ack_timeout = static_cast<uint8_t>(c.verbs_ack_timeout);
    dc.max_recv_msg = static_cast<uint32_t>(std::min<size_t>(c.max_recv_msg, UINT32_MAX));
    dc.cc = cc_cfg;
    dc.line_rate_bps = c.cc_line_rate > 0 ? c.cc_line_rate * 1e9 : 0;   // 0: the port's rate

    std::unique_ptr<verbs::Device> dev;
    Status s = verbs::Device::open(dc, md.verbs_pd, dev);
    if (s != Status::ok) {
        // The backend logged the cause (device, port, GID); this says which iface it was for.
        ucs_error("rc_roce: cannot open %s: %s", tl_dev, std::string(to_string(s)).c_str());
        return to_ucs(s);
    }
    const verbs::DeviceConfig& actual = dev->config();
    iface.mtu = actual.mtu;
    iface.sq_depth = actual.sq_depth;
    iface.max_msg = actual.max_recv_msg;
    iface.dev = std::move(dev);
    return UCS_OK;
}

void verbs_perf_estimate(const Iface&, uct_iface_attr_t* attr) {
    // The HCA moves the data: the host pays one post per operation. Figures of a 25 Gb/s RoCE
    // port (UCX's ib transports assume similar); soft-RoCE (rxe) is far slower, and UCP only
    // compares lanes of one job, so the ratios between operations are what matters here.
    attr->latency = ucs_linear_func_make(2e-6, 0);
    attr->bandwidth.dedicated = 3e9;
    attr->bandwidth.shared = 0;
    attr->overhead = 0.2e-6;
}

} // namespace roce::uct
