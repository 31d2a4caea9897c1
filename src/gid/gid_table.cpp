#include "gid/gid_table.hpp"

#include <charconv>
#include <cstdio>

namespace roce::gid {

std::optional<Gid> Gid::parse(std::string_view text) {
    // sysfs prints all 8 groups with leading zeros, which inet_pton reads as-is.
    auto a = IpAddr::parse(text);
    if (!a) return std::nullopt;
    return Gid{*a};
}

std::string Gid::sysfs_str() const {
    char buf[40];
    const auto& b = raw.b;
    std::snprintf(buf, sizeof(buf), "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
                  b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                  b[14], b[15]);
    return buf;
}

std::vector<std::string> list_rdma_devices(const SysRoot& root) { return root.list("sys/class/infiniband"); }

std::vector<unsigned> list_ports(const SysRoot& root, std::string_view dev) {
    std::vector<unsigned> ports;
    for (const auto& name : root.list("sys/class/infiniband/" + std::string(dev) + "/ports")) {
        unsigned p = 0;
        auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), p);
        if (ec == std::errc() && ptr == name.data() + name.size()) ports.push_back(p);
    }
    return ports;
}

std::optional<uint8_t> parse_tclass_text(std::string_view text) {
    constexpr std::string_view key = "tclass=";
    if (auto pos = text.find(key); pos != std::string_view::npos) text.remove_prefix(pos + key.size());
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    unsigned v = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || p == text.data() || v > 255) return std::nullopt;
    if (p != text.data() + text.size() && *p != '\n' && *p != ' ') return std::nullopt;
    return static_cast<uint8_t>(v);
}

namespace {

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s.empty() ? "none" : s;
}

} // namespace

Status read_port(const SysRoot& root, std::string_view dev, unsigned port, PortInfo& out, std::string& err) {
    const std::string dev_dir = "sys/class/infiniband/" + std::string(dev);
    if (!root.exists(dev_dir)) {
        err = "RDMA device '" + std::string(dev) + "' not found under " + root.path("sys/class/infiniband") +
              "; valid: " + join(list_rdma_devices(root));
        return Status::no_device;
    }
    const std::string port_dir = dev_dir + "/ports/" + std::to_string(port);
    if (!root.exists(port_dir)) {
        std::vector<std::string> ports;
        for (unsigned p : list_ports(root, dev)) ports.push_back(std::to_string(p));
        err = std::string(dev) + " has no port " + std::to_string(port) + "; valid: " + join(ports);
        return Status::no_device;
    }

    out = PortInfo{};
    out.dev = dev;
    out.port = port;
    out.link_layer = root.read(port_dir + "/link_layer").value_or("Ethernet");
    if (auto tc = root.read(dev_dir + "/tc/" + std::to_string(port) + "/traffic_class"))
        out.default_tclass = parse_tclass_text(*tc);

    // gid_tbl_len is the number of gids/<i> files; indexes are dense from 0.
    const auto names = root.list(port_dir + "/gids");
    out.gids.resize(names.size());
    for (unsigned i = 0; i < out.gids.size(); ++i) out.gids[i] = read_gid_entry(root, dev, port, i);
    return Status::ok;
}

GidEntry read_gid_entry(const SysRoot& root, std::string_view dev, unsigned port, unsigned index) {
    const std::string port_dir = "sys/class/infiniband/" + std::string(dev) + "/ports/" + std::to_string(port);
    const std::string idx = std::to_string(index);
    GidEntry e;
    e.index = index;
    if (auto text = root.read(port_dir + "/gids/" + idx))
        if (auto g = Gid::parse(*text)) e.gid = *g;
    if (e.gid.is_zero()) return e;   // unused: types/ndevs read EINVAL anyway
    e.type_text = root.read(port_dir + "/gid_attrs/types/" + idx).value_or("");
    if (e.type_text == "RoCE v2") e.version = RoceVersion::v2;
    else if (e.type_text == "IB/RoCE v1" || e.type_text == "RoCE v1") e.version = RoceVersion::v1;
    e.ndev = root.read(port_dir + "/gid_attrs/ndevs/" + idx).value_or("");
    return e;
}

} // namespace roce::gid
