#include "gid/traffic_class.hpp"

#include <algorithm>
#include <tuple>

namespace roce::gid {

std::string_view to_string(TcSource s) {
    switch (s) {
    case TcSource::builtin: return "builtin default";
    case TcSource::device: return "device default";
    case TcSource::config: return "configuration";
    }
    return "?";
}

namespace {
const char* ecn_name(uint8_t ecn) {
    static const char* const names[] = {"Not-ECT", "ECT(1)", "ECT(0)", "CE"};
    return names[ecn & 3];
}
} // namespace

std::string TrafficClass::str() const {
    return "tos " + std::to_string(tos) + " (DSCP " + std::to_string(dscp()) + ", " + ecn_name(ecn()) + ") priority " +
           std::to_string(priority) + " [tos: " + std::string(to_string(tos_source)) +
           ", priority: " + std::string(to_string(priority_source)) + "]";
}

TrafficClass traffic_class_of(uint8_t tos, uint8_t tos_source, uint8_t priority, uint8_t priority_source) {
    TrafficClass tc;
    tc.tos = tos;
    tc.priority = priority;
    tc.tos_source = TcSource(std::min<uint8_t>(tos_source, 2));
    tc.priority_source = TcSource(std::min<uint8_t>(priority_source, 2));
    return tc;
}

TrafficClass resolve_traffic_class(const GidConfig& cfg, std::optional<uint8_t> device_tclass) {
    TrafficClass tc;
    const uint8_t ecn = cfg.ecn.value_or(ecn_ect0);
    if (cfg.traffic_class) {
        tc.tos = *cfg.traffic_class;   // the whole byte, ECN bits included, as the user wrote it
        tc.tos_source = TcSource::config;
    } else if (cfg.dscp) {
        tc.tos = static_cast<uint8_t>(*cfg.dscp << 2 | ecn);
        tc.tos_source = TcSource::config;
    } else if (device_tclass) {
        // The administrator's per-device class (mlx5 "Global tclass=") keeps its ECN bits unless
        // ECN is configured explicitly.
        tc.tos = cfg.ecn ? static_cast<uint8_t>((*device_tclass & 0xfc) | *cfg.ecn) : *device_tclass;
        tc.tos_source = TcSource::device;
    } else {
        tc.tos = static_cast<uint8_t>(default_dscp << 2 | ecn);
        tc.tos_source = cfg.ecn ? TcSource::config : TcSource::builtin;
    }
    if (cfg.priority) {
        tc.priority = *cfg.priority;
        tc.priority_source = TcSource::config;
    }
    return tc;
}

TrafficClass negotiate_traffic_class(const TrafficClass& local, const TrafficClass& peer, bool* conflict) {
    TrafficClass out;
    const auto tos_key = [](const TrafficClass& t) { return std::tuple(t.tos_source, t.tos); };
    const auto prio_key = [](const TrafficClass& t) { return std::tuple(t.priority_source, t.priority); };
    const TrafficClass& tos_from = tos_key(local) >= tos_key(peer) ? local : peer;
    const TrafficClass& prio_from = prio_key(local) >= prio_key(peer) ? local : peer;
    out.tos = tos_from.tos;
    out.tos_source = tos_from.tos_source;
    out.priority = prio_from.priority;
    out.priority_source = prio_from.priority_source;
    if (conflict) {
        *conflict = (local.tos_source == TcSource::config && peer.tos_source == TcSource::config && local.tos != peer.tos) ||
                    (local.priority_source == TcSource::config && peer.priority_source == TcSource::config &&
                     local.priority != peer.priority);
    }
    return out;
}

TcAdvert encode_tc_advert(const TrafficClass& tc) {
    return {tc.tos, tc.priority, static_cast<uint8_t>(tc.tos_source), static_cast<uint8_t>(tc.priority_source)};
}

std::optional<TrafficClass> decode_tc_advert(const TcAdvert& a) {
    if (a[1] > 7 || a[2] > 2 || a[3] > 2) return std::nullopt;
    TrafficClass tc;
    tc.tos = a[0];
    tc.priority = a[1];
    tc.tos_source = static_cast<TcSource>(a[2]);
    tc.priority_source = static_cast<TcSource>(a[3]);
    return tc;
}

TrafficClass class_with(const TrafficClass& ours, const TcAdvert& peer) {
    const std::optional<TrafficClass> p = decode_tc_advert(peer);
    return p ? negotiate_traffic_class(ours, *p) : ours;
}

CnpClass cnp_class(const GidConfig& cfg, const TrafficClass& data) {
    return CnpClass{static_cast<uint8_t>(cfg.cnp_dscp << 2 | ecn_not_ect), data.priority};
}

} // namespace roce::gid
