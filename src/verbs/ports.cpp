#include "verbs/ports.hpp"

#include <infiniband/verbs.h>
#include <sys/stat.h>

#include <algorithm>
#include <dirent.h>
#include <fstream>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/log.hpp"
#include "gid/netdev.hpp"
#include "gid/sysroot.hpp"
#include "verbs/mtu.hpp"

namespace roce::verbs {

ibv_mtu netdev_mtu_cap(const gid::SysRoot& root, const std::string& ndev, bool ipv6) {
    if (ndev.empty() || ndev.find('/') != std::string::npos)
        return IBV_MTU_4096;
    const auto text = root.read("sys/class/net/" + ndev + "/mtu");
    const unsigned long nd_mtu = text ? std::strtoul(text->c_str(), nullptr, 10) : 0;
    if (nd_mtu == 0)
        return IBV_MTU_4096;
    const unsigned fit = gid::largest_roce_mtu(unsigned(std::min<unsigned long>(nd_mtu, 1u << 20)), ipv6);
    return fit >= 256 ? mtu_enum(fit) : IBV_MTU_256;
}

std::vector<PortStatus> query_ports() {
    std::vector<PortStatus> out;
    struct stat st;
    // Without RDMA in the kernel libibverbs has nothing to find; asking it only costs a scan.
    if (::stat("/sys/class/infiniband", &st) != 0)
        return out;
    int n = 0;
    std::unique_ptr<ibv_device*, void (*)(ibv_device**)> list(ibv_get_device_list(&n),
                                                             ibv_free_device_list);
    if (!list)
        return out;
    for (int i = 0; i < n; ++i) {
        ibv_device* dev = list.get()[i];
        ibv_context* ctx = ibv_open_device(dev);
        if (ctx == nullptr) {
            ROCE_DEBUG("verbs: cannot open %s to list its ports", ibv_get_device_name(dev));
            continue;
        }
        ibv_device_attr da{};
        if (ibv_query_device(ctx, &da) == 0) {
            for (uint8_t p = 1; p <= da.phys_port_cnt; ++p) {
                ibv_port_attr pa{};
                if (ibv_query_port(ctx, p, &pa) != 0)
                    continue;
                PortStatus s;
                s.port = {ibv_get_device_name(dev), p};
                s.ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
                s.active = pa.state == IBV_PORT_ACTIVE;
                s.state = ibv_port_state_str(pa.state);
                s.active_mtu = mtu_bytes(pa.active_mtu);
                s.max_mtu = mtu_bytes(pa.max_mtu);
                s.gid_tbl_len = unsigned(pa.gid_tbl_len);
                out.push_back(std::move(s));
            }
        }
        ibv_close_device(ctx);
    }
    return out;
}

std::vector<RocePort> list_roce_ports() {
    std::vector<RocePort> out;
    for (const PortStatus& s : query_ports()) {
        if (!s.ethernet || !s.active) {
            ROCE_DEBUG("verbs: %s skipped (%s, %s)", s.port.name().c_str(), s.ethernet ? "Ethernet" : "not Ethernet",
                       s.state.c_str());
            continue;
        }
        out.push_back(s.port);
    }
    return out;
}

std::vector<std::string> list_roce_devices() {
    std::vector<std::string> out;
    for (const RocePort& p : list_roce_ports()) {
        if (std::find(out.begin(), out.end(), p.dev_name) == out.end())
            out.push_back(p.dev_name);
    }
    return out;
}

bool parse_port_name(const std::string& name, RocePort& out) {
    const size_t colon = name.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 >= name.size())
        return false;
    char* end = nullptr;
    const unsigned long port = std::strtoul(name.c_str() + colon + 1, &end, 10);
    if (*end != '\0' || port == 0 || port > 255)
        return false;
    out.dev_name = name.substr(0, colon);
    out.port = static_cast<uint8_t>(port);
    return true;
}

std::vector<std::pair<std::string, uint64_t>> read_port_hw_counters(const std::string& dev, unsigned port) {
    std::vector<std::pair<std::string, uint64_t>> out;
    const std::string base = "/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port);
    for (const auto& [sub, prefix] : {std::pair{"/hw_counters", ""}, std::pair{"/counters", "port_"}}) {
        const std::string dir = base + sub;
        DIR* d = ::opendir(dir.c_str());
        if (!d)
            continue;
        while (const dirent* e = ::readdir(d)) {
            if (e->d_name[0] == '.' || !std::strcmp(e->d_name, "lifespan"))   // lifespan: a setting
                continue;
            std::ifstream f(dir + "/" + e->d_name);
            unsigned long long v;
            if (f >> v)
                out.emplace_back(std::string(prefix) + e->d_name, uint64_t(v));
        }
        ::closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
}

} // namespace roce::verbs
