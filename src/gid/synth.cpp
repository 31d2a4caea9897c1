#include "gid/synth.hpp"

namespace roce::gid {

PortInfo synthesize_port(const NetModel& net, std::string_view netdev) {
    PortInfo port;
    port.dev = netdev;
    port.port = 1;
    port.synthesised = true;

    std::vector<std::string> devs{std::string(netdev)};
    for (const auto& n : net.netdevs)
        if (n.vlan_id && n.vlan_lower == netdev) devs.push_back(n.name);

    auto add = [&](const IfAddr& a) {
        GidEntry e;
        e.index = static_cast<unsigned>(port.gids.size());
        e.gid = Gid{a.prefix.addr};
        e.version = RoceVersion::v2;
        e.type_text = "RoCE v2";
        e.ndev = a.ifname;
        port.gids.push_back(std::move(e));
    };
    for (const auto& d : devs) {
        const auto addrs = net.addresses_of(d);
        for (const IfAddr* a : addrs)
            if (a->usable && a->prefix.addr.is_link_local() && a->prefix.family() == Family::inet6) add(*a);
        for (const IfAddr* a : addrs)
            if (a->usable && !(a->prefix.addr.is_link_local() && a->prefix.family() == Family::inet6)) add(*a);
    }
    return port;
}

Status choose_netdev_address(const NetModel& net, std::string_view netdev, const GidConfig& cfg, IpAddr& out,
                             std::string& err, Selection* sel_out) {
    if (cfg.version == RoceVersion::v1) {
        err = config_error("ROCE_VERSION", "1", "the userspace device sends RoCE v2 (UDP) only", "auto, 2");
        name_settings(cfg, err);
        return Status::invalid_param;
    }
    const PortInfo port = synthesize_port(net, netdev);
    if (Status s = check_gid_config(cfg, port, err); s != Status::ok) return s;
    Selection sel = select_gid(port, net, cfg);
    Status st = sel.status;
    if (st != Status::ok) {
        err = sel.error;
    } else if (const IpAddr ip = port.gids[*sel.index].ip(); ip.is_link_local() && ip.family() == Family::inet6) {
        // (IPv4 link-local, 169.254/16, has no scope: a socket binds it like any other)
        err = "only link-local addresses on " + std::string(netdev) +
              " qualify; the userspace device needs an address without a scope (" + sel.reason + ")";
        st = Status::no_device;
    } else {
        out = port.gids[*sel.index].ip();
    }
    if (sel_out) *sel_out = std::move(sel);
    return st;
}

} // namespace roce::gid
