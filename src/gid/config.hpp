// GID and traffic-class settings, UCX style (UCX_RC_ROCE_<NAME>). The table below is the one
// place a setting's name, default, valid choices and documentation are written: the parser, the
// error messages, roce_doctor, UCX's config table (uct/config_table.cpp, `ucx_info -c`) and the
// README's table (roce_config_doc) all read it. Entries must be plain string literals.
//
// Every error is one line: "UCX_RC_ROCE_<NAME>=<value>: <problem>; valid: <choices>".
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.hpp"
#include "gid/gid_table.hpp"
#include "gid/ip.hpp"

namespace roce::gid {

inline constexpr std::string_view config_prefix = "UCX_RC_ROCE_";

struct ConfigVar {
    std::string_view name;      // without prefix
    std::string_view dfl;
    std::string_view choices;   // for error messages
    std::string_view doc;
};

inline constexpr ConfigVar gid_config_vars[] = {
    {"GID_INDEX", "auto", "auto or a GID table index",
     "GID table index of the local address (RDMA devices: the port's sysfs table; the userspace device: "
     "the table synthesised from its netdev's addresses; roce_doctor gid shows both). auto selects per "
     "peer (ud_roce: once per interface, as for no peer): RoCE v2 over v1, IPv4 over IPv6, global over "
     "link-local, an entry whose netdev reaches the peer; never an unused, down, tunnel, bond-slave or "
     "stale entry."},
    {"ADDR_FAMILY", "auto", "auto, inet, inet6",
     "Address family of the GID; auto prefers IPv4 and falls back to IPv6."},
    {"ROCE_VERSION", "auto", "auto, 1, 2",
     "RoCE version of the GID; auto prefers v2 (routable) over v1. rc_roce connects through rdma_cm "
     "(RoCE v2) on RDMA devices and the userspace device speaks v2 only, so both refuse 1 there; "
     "ud_roce on an RDMA device may use a v1 entry (one L2 segment; every peer must use v1 too)."},
    {"SUBNETS", "all", "all, or comma-separated CIDR prefixes (a leading ^ denies them)",
     "Only use GIDs whose address is inside (or, with ^, outside) these subnets."},
    {"REACHABILITY", "route", "route, local_subnet, all",
     "How a GID must reach the peer: a route leaving through the GID's netdev, the same subnet, or any."},
    {"GID_NETDEV", "auto", "auto or a netdev listed in the GID table",
     "Only use GIDs of this netdev (e.g. a VLAN or bond device)."},
    {"TRAFFIC_CLASS", "auto", "auto or 0..255 (the whole ToS byte, DSCP<<2|ECN)",
     "IP ToS / IPv6 traffic class of data packets. auto: DSCP and ECN if set, else the device's "
     "tc/<port>/traffic_class, else 106 (DSCP 26 with ECT(0): UCX's rc_verbs and NCCL default, so mixed "
     "jobs share one class and switches can ECN-mark). Exchanged (rc_roce: at connection setup; ud_roce: "
     "in the interface address, used once a side has the peer's address), so a class configured on one "
     "side only is used in both directions."},
    {"DSCP", "auto", "auto or 0..63", "DSCP of data packets (the ECN bits come from ECN)."},
    {"ECN", "auto", "auto, ect0, ect1, off",
     "ECN field of data packets; auto is ECT(0) so switches mark instead of drop and congestion control works."},
    {"PRIORITY", "auto", "auto or 0..7",
     "802.1p priority (PCP) for PFC; auto is 0 unless the peer configured another (exchanged as "
     "TRAFFIC_CLASS, both directions use it). The userspace device sends at this socket priority "
     "(SO_PRIORITY), which a VLAN netdev's egress-qos-map or the NIC's priority map turns into the PCP; "
     "RDMA devices get it as the QPs' service level (kernel rxe ignores that: its packets leave at priority 0)."},
    {"CNP_DSCP", "48", "0..63",
     "DSCP of the congestion notification packets (BTH opcode 0x81) the userspace device sends when "
     "CC is dcqcn (sent Not-ECT, at the data priority)."},
};

enum class Reachability : uint8_t { route, local_subnet, all };

constexpr std::string_view to_string(Reachability r) {
    return r == Reachability::route ? "route" : r == Reachability::local_subnet ? "local_subnet" : "all";
}

struct SubnetFilter {
    bool deny = false;                  // list is a deny list ("^...")
    std::vector<IpPrefix> prefixes;     // empty + !deny: everything allowed
    bool allows(const IpAddr& a) const;
    bool is_all() const { return !deny && prefixes.empty(); }
};

struct GidConfig {
    std::optional<unsigned> gid_index;     // nullopt: auto
    std::optional<Family> family;
    std::optional<RoceVersion> version;
    SubnetFilter subnets;
    Reachability reachability = Reachability::route;
    std::optional<std::string> netdev;
    std::optional<uint8_t> traffic_class;  // whole ToS byte
    std::optional<uint8_t> dscp;
    std::optional<uint8_t> ecn;            // 0 not-ECT, 1 ECT(1), 2 ECT(0)
    std::optional<uint8_t> priority;
    uint8_t cnp_dscp = 48;
    // The variables these settings came from: UCX_RC_ROCE_ or UCX_UD_ROCE_ (each transport has
    // its own copy of the table), so that errors name the variable the user really set.
    std::string var_prefix = std::string(config_prefix);
};

// One setting by name (with or without cfg.var_prefix). Unknown names are errors too.
Status set_gid_config(GidConfig& cfg, std::string_view name, std::string_view value, std::string& err);

// Several settings, then the cross-checks (e.g. TRAFFIC_CLASS together with DSCP). `prefix`:
// the variables' prefix (GidConfig::var_prefix), the one errors name.
Status parse_gid_config(std::span<const std::pair<std::string, std::string>> settings, GidConfig& out,
                        std::string& err, std::string_view prefix = config_prefix);

// Reads every <prefix><NAME> of the table from the environment.
Status gid_config_from_env(GidConfig& out, std::string& err, std::string_view prefix = config_prefix);

// Settings that only make sense against a concrete port: index in range and of the configured
// type and family, a netdev that appears in the table.
Status check_gid_config(const GidConfig& cfg, const PortInfo& port, std::string& err);

// Messages of this module name the settings UCX_RC_ROCE_<NAME>; for settings read from another
// transport's variables (cfg.var_prefix, e.g. UCX_UD_ROCE_) this renames them in `msg`.
void name_settings(const GidConfig& cfg, std::string& msg);

// "UCX_RC_ROCE_<name>=<value>: <problem>; valid: <choices>"
std::string config_error(std::string_view name, std::string_view value, std::string_view problem,
                         std::string_view valid = {});

} // namespace roce::gid
