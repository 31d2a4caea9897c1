// Traffic class of the userspace device's connections. Each side advertises its class in the CM
// REQ/REP (DeviceConfig::traffic_class and priority with their sources); both sides of a
// connection then use gid::negotiate_traffic_class of the two, a symmetric function, so the
// direction towards the side that did not configure a class is marked like the other one. A
// connection whose class (ToS and priority) differs from the device's sends from a class socket
// (udp_socket.hpp: a sibling on the same address and port whose IP_TOS and SO_PRIORITY are the
// class's), so the priority, and with it the PCP, holds in both directions too.
#include <utility>
#include "common/log.hpp"
#include "gid/traffic_class.hpp"
#include "sw/device_impl.hpp"

namespace roce::sw {

namespace {

gid::TrafficClass local_class(const DeviceConfig& c) {
    return gid::traffic_class_of(c.traffic_class, c.traffic_class_source, c.priority, c.priority_source);
}

} // namespace

void DeviceImpl::cm_put_tc(cm::Msg& m) const {
    m.has_tc = true;
    m.tc = gid::encode_tc_advert(local_class(cfg_));
}

void DeviceImpl::cm_take_tc(Qp& qp, const cm::Msg& m) {
    const gid::TrafficClass local = local_class(cfg_);
    std::optional<gid::TrafficClass> peer;
    if (m.has_tc)
        peer = gid::decode_tc_advert(m.tc);
    // CNPs travel at the connection's priority (a lossless class must not pause them out of
    // order) in their own ToS; only dcqcn sends them.
    auto cnp_sock = [&](uint8_t priority) {
        return cc_mode_ == cc::CcMode::dcqcn ? class_socket(cfg_.cnp_traffic_class, priority) : uint8_t(0);
    };
    if (!peer) {
        qp.tos = -1;   // an older peer (no advert): our socket's class
        qp.tx_sock = 0;
        qp.cnp_sock = cnp_sock(cfg_.priority);
        return;
    }
    bool conflict = false;
    const gid::TrafficClass t = gid::negotiate_traffic_class(local, *peer, &conflict);
    // Once per device: it is a fact of the configuration, and any sender of connection requests
    // could otherwise write a line per request.
    if (conflict && !std::exchange(warned_tc_conflict_, true))
        ROCE_WARN("qp 0x%x: both sides configured a traffic class (ours %s, peer's %s): using %s "
                  "(said once per device)", qp.qpn, local.str().c_str(), peer->str().c_str(), t.str().c_str());
    qp.tos = t.tos == cfg_.traffic_class ? -1 : int(t.tos);
    qp.tx_sock = class_socket(t.tos, t.priority);
    qp.cnp_sock = cnp_sock(t.priority);
    ROCE_DEBUG("qp 0x%x: traffic class %s (socket %u)", qp.qpn, t.str().c_str(), unsigned(qp.tx_sock));
}

TxClass qp_tx_class_for_test(Device& dev, uint32_t qpn) {
    auto& d = dynamic_cast<DeviceImpl&>(dev);
    std::lock_guard lk(d.mu_);
    const Qp* qp = d.find_qp(qpn);
    if (!qp)
        return {};
    UdpSocket& s = d.tx_socket(qp->tx_sock);
    return {s.priority(), qp->tos >= 0 ? qp->tos : int(s.traffic_class()), s.fd()};
}

std::vector<int> socket_fds_for_test(Device& dev) {
    auto& d = dynamic_cast<DeviceImpl&>(dev);
    std::lock_guard lk(d.mu_);
    return d.class_socks_.fds();
}

} // namespace roce::sw
