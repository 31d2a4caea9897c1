#include "gid/doctor_verbs.hpp"

#if ROCE_DOCTOR_VERBS
#include <infiniband/verbs.h>

#include "verbs/device.hpp"
#include "verbs/ports.hpp"
#endif

namespace roce::doctor {

#if ROCE_DOCTOR_VERBS

namespace {

// active_mtu of the port (0 if it cannot be read): what the verbs backend's QPs will use at most.
uint32_t active_mtu(const std::string& dev, uint8_t port) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    uint32_t mtu = 0;
    for (int i = 0; list && i < n && mtu == 0; ++i) {
        if (dev != ibv_get_device_name(list[i])) continue;
        if (ibv_context* ctx = ibv_open_device(list[i])) {
            ibv_port_attr pa{};
            if (ibv_query_port(ctx, port, &pa) == 0) mtu = 128u << pa.active_mtu;
            ibv_close_device(ctx);
        }
    }
    if (list) ibv_free_device_list(list);
    return mtu;
}

} // namespace

bool pick_verbs_port(const std::string& spec, VerbsPort& out, std::string& why) {
    const auto ports = verbs::list_roce_ports();
    for (const auto& p : ports) {
        const bool match = spec.empty() || spec == p.dev_name || spec == p.name();
        if (!match) continue;
        out = VerbsPort{p.dev_name, p.port, active_mtu(p.dev_name, p.port)};
        return true;
    }
    if (ports.empty()) {
        why = "no RDMA device with an active RoCE port";
    } else {
        why = "--dev " + spec + ": not an active RoCE port; valid:";
        for (const auto& p : ports) why += " " + p.name();
    }
    return false;
}

Status open_verbs_device(const VerbsPort& p, uint32_t mtu_cap, std::unique_ptr<RcDevice>& out, std::string& err) {
    verbs::DeviceConfig cfg;
    cfg.dev_name = p.dev;
    cfg.port = p.port;
    cfg.mtu = mtu_cap;
    std::unique_ptr<verbs::Device> dev;
    if (Status s = verbs::Device::open(cfg, nullptr, dev); s != Status::ok) {
        err = "cannot open " + p.name() + ": " + std::string(to_string(s));
        return s;
    }
    out = std::move(dev);
    return Status::ok;
}

#else

bool pick_verbs_port(const std::string&, VerbsPort&, std::string& why) {
    why = "no RDMA device (roce_doctor was built without libibverbs)";
    return false;
}

Status open_verbs_device(const VerbsPort&, uint32_t, std::unique_ptr<RcDevice>&, std::string& err) {
    err = "built without libibverbs";
    return Status::unsupported;
}

#endif

} // namespace roce::doctor
