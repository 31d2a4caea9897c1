#include "gid/select.hpp"

#include "common/log.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace roce::gid {

std::string_view to_string(Verdict v) {
    switch (v) {
    case Verdict::chosen: return "chosen";
    case Verdict::unused: return "unused";
    case Verdict::no_netdev: return "no netdev";
    case Verdict::netdev_down: return "netdev down";
    case Verdict::tunnel: return "tunnel netdev";
    case Verdict::enslaved: return "bond slave";
    case Verdict::stale: return "stale";
    case Verdict::excluded: return "excluded by configuration";
    case Verdict::peer_mismatch: return "no matching peer entry";
    case Verdict::unreachable: return "unreachable";
    case Verdict::validation_failed: return "validation failed";
    case Verdict::outranked: return "outranked";
    }
    return "?";
}

namespace {

struct Reject {
    Verdict verdict;
    std::string why;
};

std::string describe(const GidEntry& e) {
    return std::string(to_string(*e.version)) + " " + std::string(to_string(e.ip().family())) +
           (e.ip().is_link_local() ? " link-local " : " ") + e.ip().str() + " on " + e.ndev;
}

// The checks that do not depend on the peer or the configuration: is this entry a real,
// configured, working address of this port?
std::optional<Reject> check_entry(const GidEntry& e, const NetModel& net) {
    if (e.gid.is_zero()) return Reject{Verdict::unused, "unused (all-zero GID)"};
    if (!e.version) {
        return Reject{Verdict::unused, e.type_text.empty() ? "unused (GID type unreadable)"
                                                           : "unknown GID type '" + e.type_text + "'"};
    }
    if (e.ndev.empty()) return Reject{Verdict::no_netdev, "no netdev attached to the entry"};
    const Netdev* nd = net.find(e.ndev);
    if (nd == nullptr) return Reject{Verdict::no_netdev, "netdev " + e.ndev + " does not exist"};
    if (!nd->up()) return Reject{Verdict::netdev_down, "netdev " + e.ndev + " is down (operstate " + nd->operstate + ")"};
    if (nd->is_tunnel()) {
        return Reject{Verdict::tunnel, "netdev " + e.ndev + " is a " + nd->kind +
                                           " tunnel: the NIC sends RoCE packets on the port, unencapsulated"};
    }
    // A VRF is a master too (sysfs `master`), but a routing domain, not a link: its members keep
    // their addresses and their GIDs.
    if (const Netdev* m = nd->master.empty() ? nullptr : net.find(nd->master);
        !nd->master.empty() && !(m != nullptr && m->kind == "vrf")) {
        return Reject{Verdict::enslaved, "netdev " + e.ndev + " is a slave of " + nd->master +
                                             ": its traffic and addresses belong to " + nd->master};
    }
    // The kernel's default GID (fe80::<EUI-64 of the MAC>) exists whatever the IP configuration,
    // so link-local entries are not held to the address list. Every other entry mirrors an
    // address of its netdev; if that address is gone (or on another netdev) the entry is stale.
    if (!e.ip().is_link_local()) {
        const IfAddr* a = net.find_address(e.ndev, e.ip());
        if (a == nullptr) {
            std::string why = "address " + e.ip().str() + " is not configured on " + e.ndev;
            const auto holders = net.holders_of(e.ip());
            if (!holders.empty()) {
                why += " (it is on";
                for (const auto& h : holders) why += " " + h;
                why += ")";
            }
            return Reject{Verdict::stale, why + ": stale entry"};
        }
        if (!a->usable) return Reject{Verdict::stale, "address " + e.ip().str() + " on " + e.ndev + " is " + a->flags};
    }
    return std::nullopt;
}

std::optional<Reject> check_filters(const GidEntry& e, const GidConfig& cfg) {
    const auto v = [](RoceVersion r) { return std::string(r == RoceVersion::v2 ? "2" : "1"); };
    if (cfg.gid_index && e.index != *cfg.gid_index) {
        return Reject{Verdict::excluded, "UCX_RC_ROCE_GID_INDEX=" + std::to_string(*cfg.gid_index) + " selects another entry"};
    }
    if (cfg.version && e.version != cfg.version) {
        return Reject{Verdict::excluded, std::string(to_string(*e.version)) + ", UCX_RC_ROCE_ROCE_VERSION=" + v(*cfg.version)};
    }
    if (cfg.family && e.ip().family() != cfg.family) {
        return Reject{Verdict::excluded, std::string(to_string(e.ip().family())) + ", UCX_RC_ROCE_ADDR_FAMILY=" +
                                             (*cfg.family == Family::inet ? "inet" : "inet6")};
    }
    if (cfg.netdev && e.ndev != *cfg.netdev) {
        return Reject{Verdict::excluded, "netdev " + e.ndev + ", UCX_RC_ROCE_GID_NETDEV=" + *cfg.netdev};
    }
    if (!cfg.subnets.allows(e.ip())) {
        return Reject{Verdict::excluded, e.ip().str() + (cfg.subnets.deny ? " is in a denied subnet" : " is outside the allowed subnets") +
                                             " (UCX_RC_ROCE_SUBNETS)"};
    }
    return std::nullopt;
}

// Lower is better; compared lexicographically.
struct Rank {
    int version = 0;       // 0: v2, 1: v1
    int family = 0;        // 0: IPv4, 1: IPv6 (ADDR_FAMILY=auto; a fixed family filters instead)
    int link_local = 0;
    int route_len = 0;     // negated prefix length of the route / subnet that reaches the peer
    unsigned metric = 0;
    unsigned index = 0;
    unsigned peer_pos = 0;
    auto operator<=>(const Rank&) const = default;
};

Rank base_rank(const GidEntry& e) {
    Rank r;
    r.version = e.version == RoceVersion::v2 ? 0 : 1;
    r.family = e.ip().family() == Family::inet ? 0 : 1;
    r.link_local = e.ip().is_link_local() ? 1 : 0;
    r.index = e.index;
    return r;
}

struct Pairing {
    const GidEntry* entry;
    std::optional<PeerGid> peer;
    Rank rank;
    std::string how;       // how the peer is reached
};

// Can entry `e` talk to peer entry `p`? Fills rank and how on success, why on failure;
// `compatible` tells a class mismatch (version/family/scope) from a reachability failure.
bool reach(const GidEntry& e, const PeerGid& p, const NetModel& net, const GidConfig& cfg, Rank& rank,
           std::string& how, std::string& why, bool& compatible) {
    const IpAddr peer = p.gid.raw;
    compatible = false;
    if (p.version && *p.version != *e.version) {
        why = "peer entry " + peer.str() + " is " + std::string(to_string(*p.version));
        return false;
    }
    if (peer.family() != e.ip().family()) {
        why = "peer entry " + peer.str() + " is " + std::string(to_string(peer.family()));
        return false;
    }
    if (peer.is_link_local() != e.ip().is_link_local()) {
        why = "scope differs from peer entry " + peer.str();
        return false;
    }
    compatible = true;
    switch (cfg.reachability) {
    case Reachability::all:
        how = "REACHABILITY=all";
        return true;
    case Reachability::local_subnet: {
        std::optional<IpPrefix> subnet;
        if (const IfAddr* a = net.find_address(e.ndev, e.ip())) subnet = a->prefix.network();
        else if (e.ip().is_link_local()) subnet = IpPrefix::parse(e.ip().family() == Family::inet ? "169.254.0.0/16" : "fe80::/64");
        if (subnet && subnet->contains(peer)) {
            rank.route_len = -subnet->len;
            how = "same subnet " + subnet->str() + " on " + e.ndev;
            return true;
        }
        why = "peer " + peer.str() + " is outside " + (subnet ? subnet->str() : std::string("the subnet")) + " of " + e.ndev;
        return false;
    }
    case Reachability::route: {
        const Route* r = net.route_via(peer, e.ndev);
        if (r == nullptr) {
            why = "no route to " + peer.str() + " leaving through " + e.ndev;
            if (const Route* best = net.best_route(peer)) why += " (the main table uses " + best->str() + ")";
            return false;
        }
        // RoCE v1 has no IP header: it cannot cross a router.
        if (*e.version == RoceVersion::v1 && r->via) {
            why = "RoCE v1 is L2 only, but " + peer.str() + " is behind gateway " + r->via->str();
            return false;
        }
        rank.route_len = -r->dst.len;
        rank.metric = r->metric;
        how = r->local ? "peer on this host, " + r->str() : (r->connected() ? "connected route " : "route ") + r->str();
        return true;
    }
    }
    return false;
}

std::string family_word(int f) { return f == 0 ? "IPv4" : "IPv6"; }

// Why `loser` lost against `winner`, naming the first criterion that decided.
std::string outranked_why(const Pairing& loser, const Pairing& winner) {
    const Rank& l = loser.rank;
    const Rank& w = winner.rank;
    const std::string n = "entry " + std::to_string(winner.entry->index);
    // Link-local is the criterion users ask about most, so name it even when an earlier one decided.
    const std::string ll = l.link_local > w.link_local ? " (and link-local)" : "";
    if (l.version != w.version) return "RoCE v1: " + n + " is RoCE v2" + ll;
    if (l.family != w.family)
        return family_word(l.family) + ": " + n + " is " + family_word(w.family) + " (IPv4 preferred, ADDR_FAMILY=auto)" + ll;
    if (l.link_local != w.link_local) return "link-local: used only when no global entry qualifies; " + n + " is global";
    if (l.route_len != w.route_len) return "less specific (" + loser.how + "); " + n + " has " + winner.how;
    if (l.metric != w.metric) return "higher route metric (" + loser.how + "); " + n + " has " + winner.how;
    return "equivalent to " + n + ", which has the lower index";
}

std::string peer_label(std::span<const PeerGid> peer) {
    if (peer.empty()) return "";
    std::string s = peer[0].gid.raw.str();
    if (peer.size() > 1) s += " (+" + std::to_string(peer.size() - 1) + " more peer entries)";
    return s;
}

std::string summary(const std::vector<Candidate>& c) {
    std::map<Verdict, std::vector<unsigned>> by;
    for (const auto& x : c) by[x.verdict].push_back(x.index);
    std::string s;
    for (const auto& [v, idx] : by) {
        if (v == Verdict::unused) continue;
        s += s.empty() ? "" : "; ";
        s += std::string(to_string(v)) + ":";
        for (unsigned i : idx) s += " " + std::to_string(i);
    }
    return s.empty() ? "the table has no used entries" : s;
}

} // namespace

namespace {

Selection select_impl(const PortInfo& port, const NetModel& net, const GidConfig& cfg, std::span<const PeerGid> peer,
                      const Validator& validate) {
    Selection sel;
    const std::string where = port.dev + " port " + std::to_string(port.port);
    sel.entries.resize(port.gids.size());
    for (unsigned i = 0; i < port.gids.size(); ++i) sel.entries[i].index = i;

    if (port.link_layer != "Ethernet") {
        sel.status = Status::unsupported;
        sel.error = where + " has link layer " + port.link_layer + ", not Ethernet: its GIDs are not RoCE";
        for (auto& c : sel.entries) c = {c.index, Verdict::excluded, "port is not RoCE"};
        return sel;
    }
    if (cfg.gid_index && *cfg.gid_index >= port.gids.size()) {
        sel.status = Status::invalid_param;
        sel.error = config_error("GID_INDEX", std::to_string(*cfg.gid_index),
                                 "out of range for " + where + " (" + std::to_string(port.gids.size()) + " entries)",
                                 "auto or 0.." + std::to_string(port.gids.size() ? port.gids.size() - 1 : 0));
        return sel;
    }

    // 1. Local checks and configuration filters.
    std::vector<const GidEntry*> eligible;
    std::vector<bool> decided(port.gids.size(), true);
    for (const auto& e : port.gids) {
        Candidate& c = sel.entries[e.index];
        auto rej = check_entry(e, net);
        if (!rej) rej = check_filters(e, cfg);
        if (rej) {
            c.verdict = rej->verdict;
            c.why = rej->why;
            continue;
        }
        eligible.push_back(&e);
        decided[e.index] = false;
    }
    if (cfg.gid_index && eligible.empty()) {
        // The fixed entry itself failed a local check: a configuration error, not a fallback.
        const std::string n = std::to_string(*cfg.gid_index);
        sel.status = Status::invalid_param;
        sel.error = config_error("GID_INDEX", n, "entry " + n + " of " + where + ": " + sel.entries[*cfg.gid_index].why,
                                 "auto or a used entry whose netdev is up");
        return sel;
    }

    // 2. Pair each eligible entry with the peer's entries it can reach.
    std::vector<Pairing> pairs;
    for (const GidEntry* e : eligible) {
        if (peer.empty()) {
            pairs.push_back({e, std::nullopt, base_rank(*e), "no peer given: interface default"});
            continue;
        }
        bool paired = false, any_compatible = false;
        std::string first_unreachable;
        for (unsigned k = 0; k < peer.size(); ++k) {
            Rank rank = base_rank(*e);
            rank.peer_pos = k;
            std::string how, why;
            bool compatible = false;
            if (reach(*e, peer[k], net, cfg, rank, how, why, compatible)) {
                pairs.push_back({e, peer[k], rank, how});
                paired = true;
                continue;
            }
            any_compatible |= compatible;
            if (compatible && first_unreachable.empty()) first_unreachable = why;
        }
        if (paired) continue;
        Candidate& c = sel.entries[e->index];
        decided[e->index] = true;
        if (any_compatible) {
            c.verdict = Verdict::unreachable;
            c.why = first_unreachable;
        } else {
            c.verdict = Verdict::peer_mismatch;
            c.why = "peer has no " + std::string(to_string(*e->version)) + " " +
                    std::string(to_string(e->ip().family())) + (e->ip().is_link_local() ? " link-local" : "") +
                    " entry";
        }
    }
    std::sort(pairs.begin(), pairs.end(), [](const Pairing& a, const Pairing& b) { return a.rank < b.rank; });

    // 3. The best pairing that the validator accepts. An entry the validator refused is not tried
    //    again with another peer entry: address-handle creation fails for the source GID.
    const Pairing* chosen = nullptr;
    for (const auto& p : pairs) {
        Candidate& c = sel.entries[p.entry->index];
        if (c.verdict == Verdict::validation_failed) continue;
        if (validate) {
            std::string why;
            if (!validate(*p.entry, p.peer ? &*p.peer : nullptr, why)) {
                decided[p.entry->index] = true;
                c.verdict = Verdict::validation_failed;
                c.why = "validation failed" + (why.empty() ? std::string() : ": " + why);
                continue;
            }
        }
        chosen = &p;
        break;
    }

    if (chosen == nullptr) {
        const std::string detail = summary(sel.entries);
        if (cfg.gid_index) {
            const Candidate& c = sel.entries[*cfg.gid_index];
            sel.status = peer.empty() ? Status::invalid_param : Status::unreachable;
            const std::string n = std::to_string(*cfg.gid_index);
            sel.error = config_error("GID_INDEX", n,
                                     "entry " + n + " of " + where + (peer.empty() ? "" : " cannot reach peer " + peer_label(peer)) +
                                         ": " + c.why,
                                     "auto");
        } else if (peer.empty()) {
            sel.status = Status::no_device;
            sel.error = "no usable GID on " + where + ": " + detail;
            // Name the setting that excluded entries (the reasons carry UCX_RC_ROCE_<NAME>).
            const auto ex = std::find_if(sel.entries.begin(), sel.entries.end(),
                                         [](const Candidate& c) { return c.verdict == Verdict::excluded; });
            if (ex != sel.entries.end()) sel.error += " (entry " + std::to_string(ex->index) + ": " + ex->why + ")";
        } else {
            sel.status = Status::unreachable;
            sel.error = "no GID of " + where + " reaches peer " + peer_label(peer) + ": " + detail;
        }
        return sel;
    }

    sel.status = Status::ok;
    sel.index = chosen->entry->index;
    sel.peer = chosen->peer;
    sel.reason = describe(*chosen->entry);
    if (chosen->peer) sel.reason += " -> " + chosen->peer->gid.raw.str() + ": " + chosen->how;
    else sel.reason += ": best entry of the interface";
    if (chosen->entry->ip().is_link_local()) sel.reason += " (link-local: no global entry qualifies)";
    sel.entries[*sel.index] = {*sel.index, Verdict::chosen, sel.reason};
    ROCE_DEBUG("gid: %s: index %u (%s)", where.c_str(), *sel.index, sel.reason.c_str());

    // Everything else still marked eligible lost on rank: say which criterion decided.
    for (const GidEntry* e : eligible) {
        Candidate& c = sel.entries[e->index];
        if (decided[e->index] || e->index == *sel.index) continue;
        const auto best = std::find_if(pairs.begin(), pairs.end(), [&](const Pairing& p) { return p.entry == e; });
        c.verdict = Verdict::outranked;
        c.why = outranked_why(*best, *chosen);
    }
    return sel;
}

} // namespace

std::vector<PeerGid> advertised_gids(const PortInfo& port, const NetModel& net, const GidConfig& cfg) {
    std::vector<std::pair<Rank, PeerGid>> ranked;
    if (port.link_layer != "Ethernet") return {};
    for (const auto& e : port.gids)
        if (!check_entry(e, net) && !check_filters(e, cfg)) ranked.push_back({base_rank(e), PeerGid{e.gid, e.version}});
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<PeerGid> out;
    for (const auto& [r, g] : ranked)
        if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
    return out;
}

// The reasons and errors name the settings; a transport with its own variables gets its names.
Selection select_gid(const PortInfo& port, const NetModel& net, const GidConfig& cfg, std::span<const PeerGid> peer,
                     const Validator& validate) {
    Selection sel = select_impl(port, net, cfg, peer, validate);
    name_settings(cfg, sel.error);
    name_settings(cfg, sel.reason);
    for (Candidate& c : sel.entries)
        name_settings(cfg, c.why);
    return sel;
}

} // namespace roce::gid
