// Traffic class of the userspace device's connections. Each side advertises its class in the CM
// REQ/REP (DeviceConfig::traffic_class and priority with their sources); both sides of a
// connection then use gid::negotiate_traffic_class of the two, a symmetric function, so the
// direction towards the side that did not configure a class is marked like the other one. A
// connection whose ToS differs from the socket's sends it per packet (Qp::tos, datapath.cpp).
#include "common/log.hpp"
#include "gid/traffic_class.hpp"
#include "sw/device_impl.hpp"

namespace roce::sw {

namespace {

gid::TrafficClass local_class(const DeviceConfig& c) {
    gid::TrafficClass tc;
    tc.tos = c.traffic_class;
    tc.priority = c.priority;
    tc.tos_source = gid::TcSource(std::min<uint8_t>(c.traffic_class_source, 2));
    tc.priority_source = gid::TcSource(std::min<uint8_t>(c.priority_source, 2));
    return tc;
}

} // namespace

void DeviceImpl::cm_put_tc(cm::Msg& m) const {
    m.has_tc = true;
    m.tc = gid::encode_tc_advert(local_class(cfg_));
}

void DeviceImpl::cm_take_tc(Qp& qp, const cm::Msg& m) const {
    const gid::TrafficClass local = local_class(cfg_);
    std::optional<gid::TrafficClass> peer;
    if (m.has_tc)
        peer = gid::decode_tc_advert(m.tc);
    if (!peer) {
        qp.tos = -1;   // an older peer (no advert): our socket's class
        return;
    }
    bool conflict = false;
    const gid::TrafficClass t = gid::negotiate_traffic_class(local, *peer, &conflict);
    if (conflict)
        ROCE_WARN("qp 0x%x: both sides configured a traffic class (ours %s, peer's %s): using %s", qp.qpn,
                  local.str().c_str(), peer->str().c_str(), t.str().c_str());
    qp.tos = t.tos == cfg_.traffic_class ? -1 : int(t.tos);
    ROCE_DEBUG("qp 0x%x: traffic class %s", qp.qpn, t.str().c_str());
}

} // namespace roce::sw
