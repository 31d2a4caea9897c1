#include "verbs/gid_choice.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <infiniband/verbs.h>

#include "common/log.hpp"

namespace roce::verbs {

namespace {

WireAddr wire_addr(const gid::IpAddr& ip) {
    WireAddr a{};
    if (ip.family() == gid::Family::inet) {
        a.family = AF_INET;
        std::memcpy(a.ip, ip.b.data() + 12, 4);
    } else {
        a.family = AF_INET6;
        std::memcpy(a.ip, ip.b.data(), 16);
    }
    return a;
}

gid::IpAddr ip_of(const WireAddr& a) {
    if (a.family == AF_INET) {
        uint32_t v;
        std::memcpy(&v, a.ip, 4);
        return gid::IpAddr::v4(ntohl(v));
    }
    return gid::IpAddr::from_bytes(a.ip);
}

} // namespace

Status load_gid_context(const std::string& dev, uint8_t port, const gid::GidConfig& cfg, GidContext& out,
                        std::string& err, const std::string& root) {
    const gid::SysRoot sys(root);
    out = GidContext{};
    out.cfg = cfg;
    if (Status s = gid::read_port(sys, dev, port, out.port, err); s != Status::ok)
        return s;
    if (Status s = gid::load_net_model(sys, out.net, err); s != Status::ok)
        return s;
    return gid::check_gid_config(cfg, out.port, err);
}

Status choose_gid(const GidContext& ctx, const WireAddr* peer, const gid::Validator& validate, GidChoice& out,
                  std::string& err) {
    gid::PeerGid p;
    if (peer)
        p = gid::PeerGid{gid::Gid{ip_of(*peer)}, gid::RoceVersion::v2};   // rdma_cm peers are RoCE v2
    const gid::Selection sel = gid::select_gid(ctx.port, ctx.net, ctx.cfg,
                                               peer ? std::span(&p, 1) : std::span<const gid::PeerGid>(), validate);
    if (sel.status != Status::ok) {
        err = sel.error;
        return sel.status;
    }
    const gid::GidEntry& e = ctx.port.gids[*sel.index];
    out = GidChoice{};
    out.index = int(*sel.index);
    std::memcpy(out.gid, e.gid.raw.b.data(), 16);
    out.addr = wire_addr(e.ip());
    out.ndev = e.ndev;
    out.reason = sel.reason;
    return Status::ok;
}

bool gid_entry_sends(ibv_pd* pd, uint8_t port, const gid::GidEntry& e, std::string& why) {
    why.clear();
    if (e.index > 255) {
        why = "index beyond the 8-bit sgid_index of an address handle";
        return false;
    }
    ibv_ah_attr a{};
    a.is_global = 1;
    a.port_num = port;
    a.grh.sgid_index = uint8_t(e.index);
    a.grh.hop_limit = 64;
    std::memcpy(a.grh.dgid.raw, e.gid.raw.b.data(), 16);
    ibv_ah* ah = ibv_create_ah(pd, &a);
    if (!ah) {
        why = std::string("ibv_create_ah: ") + std::strerror(errno);
        return false;
    }
    ibv_destroy_ah(ah);
    return true;
}

Status choose_gid(const std::string& dev, uint8_t port, int override_index, GidChoice& out, const std::string& root) {
    gid::GidConfig cfg;
    if (override_index >= 0)
        cfg.gid_index = unsigned(override_index);
    GidContext ctx;
    std::string err;
    Status s = load_gid_context(dev, port, cfg, ctx, err, root);
    if (s == Status::ok)
        s = choose_gid(ctx, nullptr, {}, out, err);
    if (s != Status::ok)
        ROCE_ERROR("verbs: %s port %u: %s", dev.c_str(), unsigned(port), err.c_str());
    return s;
}

} // namespace roce::verbs
