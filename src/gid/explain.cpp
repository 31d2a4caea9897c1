#include "gid/explain.hpp"

#include <cstdio>

namespace roce::gid {
namespace {

std::string pad(std::string s, size_t w) {
    if (s.size() < w) s.append(w - s.size(), ' ');
    return s;
}

std::string netdev_note(const NetModel& net, const std::string& name) {
    const Netdev* n = net.find(name);
    if (n == nullptr) return name.empty() ? "-" : name + " (missing)";
    std::string s = name;
    if (n->vlan_id) s += " (vlan " + std::to_string(*n->vlan_id) + " on " + n->vlan_lower + ")";
    else if (!n->slaves.empty()) {
        s += " (bond:";
        for (const auto& sl : n->slaves) s += " " + sl;
        s += ")";
    } else if (!n->master.empty()) s += " (slave of " + n->master + ")";
    else if (!n->kind.empty()) s += " (" + n->kind + ")";
    return s;
}

} // namespace

std::string format_gid_table(const PortInfo& port, const NetModel& net) {
    std::string out = port.dev + " port " + std::to_string(port.port) + ": " + port.link_layer + ", " +
                      std::to_string(port.gids.size()) + " GID entries" +
                      (port.synthesised ? " (synthesised from netdev addresses)" : "");
    if (port.default_tclass) out += ", device traffic class " + std::to_string(*port.default_tclass);
    out += "\n" + pad("IDX", 5) + pad("GID", 41) + pad("TYPE", 12) + pad("STATE", 8) + pad("ADDRESS", 28) + "NETDEV\n";
    unsigned unused = 0;
    for (const auto& e : port.gids) {
        if (e.gid.is_zero()) {
            ++unused;
            continue;
        }
        const Netdev* n = net.find(e.ndev);
        std::string addr = e.ip().str();
        if (const IfAddr* a = net.find_address(e.ndev, e.ip())) addr = a->prefix.str();
        out += pad(std::to_string(e.index), 5) + pad(e.gid.sysfs_str(), 41) +
               pad(e.type_text.empty() ? "?" : e.type_text, 12) + pad(n ? n->operstate : "-", 8) + pad(addr, 28) +
               netdev_note(net, e.ndev) + "\n";
    }
    if (unused) out += "(" + std::to_string(unused) + " unused entries)\n";
    return out;
}

std::string format_selection(std::string_view label, const Selection& sel) {
    std::string out = std::string(label) + ": ";
    if (sel.status == Status::ok) out += "index " + std::to_string(*sel.index) + " (" + sel.reason + ")\n";
    else out += "NONE - " + sel.error + "\n";
    for (const auto& c : sel.entries) {
        if (c.verdict == Verdict::chosen || c.verdict == Verdict::unused) continue;
        out += "  index " + pad(std::to_string(c.index), 4) + pad(std::string(to_string(c.verdict)), 27) + c.why + "\n";
    }
    return out;
}

std::string format_traffic_class(const TrafficClass& tc, const CnpClass& cnp, bool vlan_tagged) {
    std::string out = "traffic class: " + tc.str() + "\n";
    out += "CNP: tos " + std::to_string(cnp.tos) + " (DSCP " + std::to_string(cnp.tos >> 2) + ") priority " +
           std::to_string(cnp.priority) + "\n";
    if (tc.ecn() == 0)
        out += "warning: ECN is Not-ECT: congested switches drop instead of marking, so DCQCN cannot react\n";
    if (!vlan_tagged && tc.priority != 0)
        out += "note: the chosen netdev is untagged, so priority " + std::to_string(tc.priority) +
               " reaches the switch only through its DSCP-to-priority map (trust dscp)\n";
    return out;
}

} // namespace roce::gid
