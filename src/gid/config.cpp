#include "gid/config.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <set>

namespace roce::gid {
namespace {

const ConfigVar* find_var(std::string_view name) {
    for (const auto& v : gid_config_vars)
        if (v.name == name) return &v;
    return nullptr;
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// "auto" -> nullopt; a number in [0, max] -> value; otherwise error.
Status parse_auto_uint(std::string_view name, std::string_view value, unsigned max,
                       std::optional<unsigned>& out, std::string& err) {
    if (lower(value) == "auto") {
        out.reset();
        return Status::ok;
    }
    unsigned v = 0;
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || p != value.data() + value.size() || value.empty() || v > max) {
        err = config_error(name, value, ec == std::errc::result_out_of_range || (ec == std::errc() && v > max)
                                            ? "out of range" : "not a number",
                           find_var(name)->choices);
        return Status::invalid_param;
    }
    out = v;
    return Status::ok;
}

std::string join_indexes(const std::vector<unsigned>& v) {
    std::string s;
    for (unsigned i : v) s += (s.empty() ? "" : ", ") + std::to_string(i);
    return s;
}

} // namespace

std::string config_error(std::string_view name, std::string_view value, std::string_view problem,
                         std::string_view valid) {
    std::string s = std::string(config_prefix) + std::string(name) + "=" + std::string(value) + ": " + std::string(problem);
    if (!valid.empty()) s += "; valid: " + std::string(valid);
    return s;
}

bool SubnetFilter::allows(const IpAddr& a) const {
    const bool listed = std::any_of(prefixes.begin(), prefixes.end(), [&](const IpPrefix& p) { return p.contains(a); });
    return deny ? !listed : (prefixes.empty() || listed);
}

namespace {

// The messages are written with UCX_RC_ROCE_ names (config_error); ud_roce's copy of the table
// has its own variables, so its errors are renamed once, where they leave this file.
Status named_for(const GidConfig& cfg, Status s, std::string& err) {
    if (s != Status::ok)
        name_settings(cfg, err);
    return s;
}

Status set_one(GidConfig& cfg, std::string_view name, std::string_view value, std::string& err);

} // namespace

void name_settings(const GidConfig& cfg, std::string& msg) {
    if (cfg.var_prefix == config_prefix)
        return;
    for (size_t at = 0; (at = msg.find(config_prefix, at)) != std::string::npos; at += cfg.var_prefix.size())
        msg.replace(at, config_prefix.size(), cfg.var_prefix);
}

Status set_gid_config(GidConfig& cfg, std::string_view name, std::string_view value, std::string& err) {
    return named_for(cfg, set_one(cfg, name, value, err), err);
}

namespace {

Status set_one(GidConfig& cfg, std::string_view name, std::string_view value, std::string& err) {
    if (name.starts_with(cfg.var_prefix)) name.remove_prefix(cfg.var_prefix.size());
    else if (name.starts_with(config_prefix)) name.remove_prefix(config_prefix.size());
    const ConfigVar* var = find_var(name);
    if (var == nullptr) {
        std::string names;
        for (const auto& v : gid_config_vars) names += (names.empty() ? "" : ", ") + std::string(v.name);
        err = std::string(config_prefix) + std::string(name) + ": unknown setting; valid: " + names;
        return Status::invalid_param;
    }
    const std::string v = lower(value);
    auto bad = [&](std::string_view problem) {
        err = config_error(name, value, problem, var->choices);
        return Status::invalid_param;
    };
    std::optional<unsigned> num;
    auto narrow = [](std::optional<unsigned> n) -> std::optional<uint8_t> {
        return n ? std::optional<uint8_t>(static_cast<uint8_t>(*n)) : std::nullopt;
    };

    if (name == "GID_INDEX") {
        // The real bound is the port's table size, checked by check_gid_config.
        if (auto s = parse_auto_uint(name, value, 65535, num, err); s != Status::ok) return s;
        cfg.gid_index = num;
    } else if (name == "ADDR_FAMILY") {
        if (v == "auto") cfg.family.reset();
        else if (v == "inet" || v == "ipv4" || v == "af_inet") cfg.family = Family::inet;
        else if (v == "inet6" || v == "ipv6" || v == "af_inet6") cfg.family = Family::inet6;
        else return bad("unknown address family");
    } else if (name == "ROCE_VERSION") {
        if (v == "auto") cfg.version.reset();
        else if (v == "1" || v == "v1") cfg.version = RoceVersion::v1;
        else if (v == "2" || v == "v2") cfg.version = RoceVersion::v2;
        else return bad("unknown RoCE version");
    } else if (name == "SUBNETS") {
        SubnetFilter f;
        std::string_view rest = value;
        if (v == "all" || v.empty()) {
            cfg.subnets = f;
            return Status::ok;
        }
        if (rest.starts_with('^')) {
            f.deny = true;
            rest.remove_prefix(1);
        }
        while (!rest.empty()) {
            const auto comma = rest.find(',');
            const auto item = rest.substr(0, comma);
            auto p = IpPrefix::parse(item);
            if (!p) return bad("'" + std::string(item) + "' is not a CIDR prefix");
            f.prefixes.push_back(p->network());
            if (comma == std::string_view::npos) break;
            rest.remove_prefix(comma + 1);
        }
        if (f.prefixes.empty()) return bad("empty subnet list");
        cfg.subnets = f;
    } else if (name == "REACHABILITY") {
        if (v == "route") cfg.reachability = Reachability::route;
        else if (v == "local_subnet") cfg.reachability = Reachability::local_subnet;
        else if (v == "all") cfg.reachability = Reachability::all;
        else return bad("unknown reachability mode");
    } else if (name == "GID_NETDEV") {
        if (v == "auto" || v.empty()) cfg.netdev.reset();
        else cfg.netdev = std::string(value);
    } else if (name == "TRAFFIC_CLASS") {
        if (auto s = parse_auto_uint(name, value, 255, num, err); s != Status::ok) return s;
        cfg.traffic_class = narrow(num);
    } else if (name == "DSCP") {
        if (auto s = parse_auto_uint(name, value, 63, num, err); s != Status::ok) return s;
        cfg.dscp = narrow(num);
    } else if (name == "ECN") {
        if (v == "auto") cfg.ecn.reset();
        else if (v == "ect0") cfg.ecn = 2;
        else if (v == "ect1") cfg.ecn = 1;
        else if (v == "off" || v == "not-ect" || v == "no") cfg.ecn = 0;
        else return bad("unknown ECN codepoint");
    } else if (name == "PRIORITY") {
        if (auto s = parse_auto_uint(name, value, 7, num, err); s != Status::ok) return s;
        cfg.priority = narrow(num);
    } else if (name == "CNP_DSCP") {
        if (v == "auto") {
            cfg.cnp_dscp = 48;
            return Status::ok;
        }
        if (auto s = parse_auto_uint(name, value, 63, num, err); s != Status::ok) return s;
        cfg.cnp_dscp = static_cast<uint8_t>(num.value_or(48));
    }
    return Status::ok;
}

std::string tc_text(const GidConfig& c) { return std::to_string(*c.traffic_class); }

Status cross_check(const GidConfig& c, std::string& err) {
    // TRAFFIC_CLASS is the whole byte; a second source for the same bits has no defined winner.
    if (c.traffic_class && c.dscp) {
        err = config_error("DSCP", std::to_string(*c.dscp),
                           "conflicts with UCX_RC_ROCE_TRAFFIC_CLASS=" + tc_text(c) + " (the whole ToS byte)",
                           "auto when TRAFFIC_CLASS is set");
        return Status::invalid_param;
    }
    if (c.traffic_class && c.ecn) {
        err = config_error("ECN", c.ecn == 2 ? "ect0" : c.ecn == 1 ? "ect1" : "off",
                           "conflicts with UCX_RC_ROCE_TRAFFIC_CLASS=" + tc_text(c) + " (the whole ToS byte)",
                           "auto when TRAFFIC_CLASS is set");
        return Status::invalid_param;
    }
    // A fixed index already names one entry; a filter on top would silently be ignored.
    if (c.gid_index && !c.subnets.is_all()) {
        err = config_error("SUBNETS", "...", "cannot be combined with UCX_RC_ROCE_GID_INDEX=" +
                                                  std::to_string(*c.gid_index), "all when GID_INDEX is set");
        return Status::invalid_param;
    }
    if (c.gid_index && c.netdev) {
        err = config_error("GID_NETDEV", *c.netdev,
                           "cannot be combined with UCX_RC_ROCE_GID_INDEX=" + std::to_string(*c.gid_index),
                           "auto when GID_INDEX is set");
        return Status::invalid_param;
    }
    return Status::ok;
}

} // namespace

Status parse_gid_config(std::span<const std::pair<std::string, std::string>> settings, GidConfig& out,
                        std::string& err, std::string_view prefix) {
    GidConfig cfg;
    cfg.var_prefix = std::string(prefix);
    for (const auto& [name, value] : settings)
        if (auto s = set_gid_config(cfg, name, value, err); s != Status::ok) return s;
    if (auto s = cross_check(cfg, err); s != Status::ok) return named_for(cfg, s, err);
    out = std::move(cfg);
    return Status::ok;
}

Status gid_config_from_env(GidConfig& out, std::string& err, std::string_view prefix) {
    std::vector<std::pair<std::string, std::string>> settings;
    for (const auto& v : gid_config_vars) {
        const std::string env = std::string(prefix) + std::string(v.name);
        if (const char* val = std::getenv(env.c_str())) settings.emplace_back(std::string(v.name), val);
    }
    return parse_gid_config(settings, out, err, prefix);
}

static Status check_port(const GidConfig& cfg, const PortInfo& port, std::string& err) {
    const std::string where = port.dev + " port " + std::to_string(port.port);
    std::vector<unsigned> used, matching;
    std::set<std::string> ndevs;
    for (const auto& e : port.gids) {
        if (!e.used()) continue;
        used.push_back(e.index);
        if (!e.ndev.empty()) ndevs.insert(e.ndev);
        if ((!cfg.version || e.version == cfg.version) && (!cfg.family || e.ip().family() == cfg.family))
            matching.push_back(e.index);
    }
    if (cfg.gid_index) {
        const unsigned i = *cfg.gid_index;
        const std::string val = std::to_string(i);
        if (i >= port.gids.size()) {
            err = config_error("GID_INDEX", val,
                               "out of range for " + where + " (" + std::to_string(port.gids.size()) + " entries)",
                               "auto or one of the used entries " + join_indexes(used));
            return Status::invalid_param;
        }
        const GidEntry& e = port.gids[i];
        if (!e.used()) {
            err = config_error("GID_INDEX", val, "entry " + val + " of " + where + " is unused",
                               "auto or one of the used entries " + join_indexes(used));
            return Status::invalid_param;
        }
        if (cfg.version && e.version != cfg.version) {
            err = config_error("GID_INDEX", val,
                               "entry " + val + " is " + std::string(to_string(*e.version)) +
                                   " but UCX_RC_ROCE_ROCE_VERSION=" + (*cfg.version == RoceVersion::v2 ? "2" : "1"),
                               "auto or " + (matching.empty() ? std::string("no entry of that type") : join_indexes(matching)));
            return Status::invalid_param;
        }
        if (cfg.family && e.ip().family() != cfg.family) {
            err = config_error("GID_INDEX", val,
                               "entry " + val + " is " + std::string(to_string(e.ip().family())) +
                                   " but UCX_RC_ROCE_ADDR_FAMILY=" + (*cfg.family == Family::inet ? "inet" : "inet6"),
                               "auto or " + (matching.empty() ? std::string("no entry of that family") : join_indexes(matching)));
            return Status::invalid_param;
        }
    }
    if (cfg.netdev && !ndevs.contains(*cfg.netdev)) {
        std::string names = "auto";
        for (const auto& n : ndevs) names += ", " + n;
        err = config_error("GID_NETDEV", *cfg.netdev, "no entry of " + where + " uses this netdev", names);
        return Status::invalid_param;
    }
    return Status::ok;
}

Status check_gid_config(const GidConfig& cfg, const PortInfo& port, std::string& err) {
    return named_for(cfg, check_port(cfg, port, err), err);
}

} // namespace roce::gid
