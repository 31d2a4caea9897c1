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

} // namespace roce::gid
