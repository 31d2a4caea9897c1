// Congestion-control settings, UCX style (UCX_RC_ROCE_<NAME>). cc_config_vars below is the one
// place each setting's name, default, valid values, documentation and parser are written: the
// core parser, the UCX glue's config table (uct/ builds ucs_config_field_t entries from it, storing
// strings and calling parse_cc_config), `roce_ccsim --config-md` (the README table) and error
// messages all read it. No UCX headers here.
//
// Units (UCX-like): time "55us" / "1.5ms" / "200ns" / "1s"; rate "40Mbps" "100Gbps" (bits/s) or
// "12.5GBs" "40MBs" (bytes/s, UCX bandwidth style); size "10MB" "64KB" "4096" (binary: K = 1024);
// fractions "1/256" or "0.00390625".
// Every error is one line: "UCX_RC_ROCE_<NAME>=<value>: <problem>; valid: <choices>".
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "cc/cc_time.hpp"
#include "common/status.hpp"

namespace roce::cc {

inline constexpr std::string_view config_prefix = "UCX_RC_ROCE_";

enum class CcMode : uint8_t { auto_, off, dcqcn, delay };
constexpr std::string_view to_string(CcMode m) {
    switch (m) {
    case CcMode::auto_: return "auto";
    case CcMode::off: return "off";
    case CcMode::dcqcn: return "dcqcn";
    case CcMode::delay: return "delay";
    }
    return "?";
}

// DCQCN (Zhu et al., SIGCOMM 2015). Defaults are the paper's (see cc_config_vars for each).
struct DcqcnParams {
    double g = 1.0 / 256;                 // alpha EWMA gain
    double alpha_init = 1.0;              // alpha before the first CNP
    Nanos alpha_period = 55 * ns_per_us;  // alpha decays by (1-g) per period without CNP (K)
    Nanos timer = 55 * ns_per_us;         // rate-increase timer period (T)
    uint64_t byte_counter = 10ull << 20;  // rate-increase byte counter (B)
    uint32_t f = 5;                       // fast-recovery steps (F)
    double rai_bps = 40e6;                // additive increase step (R_AI)
    double rhai_bps = 400e6;              // hyper increase step (R_HAI)
    double min_rate_bps = 1e6;            // floor of the current rate
    Nanos cnp_interval = 50 * ns_per_us;  // NP: at most one CNP per flow per interval (N)
    bool loss_as_cnp = true;              // react to a loss like to a CNP (no PFC)
};

// Swift-like delay-target window (Kumar et al., SIGCOMM 2020), fed by request->completion RTTs.
struct DelayParams {
    Nanos target = 50 * ns_per_us;        // end-to-end RTT target (base + allowed queueing)
    double ai_bytes = 4096;               // additive increase per RTT while below target
    double beta = 0.8;                    // multiplicative decrease gain (per (rtt-target)/rtt)
    double max_mdf = 0.5;                 // largest decrease in one step (cwnd *= 1 - max_mdf)
    double min_cwnd = 256;                // bytes; below one MTU the window is enforced by pacing
    double max_cwnd = 4u << 20;           // bytes
    double init_cwnd = 256u << 10;        // bytes
    bool loss_decrease = true;            // a loss cuts cwnd by max_mdf (once per RTT)
};

// Cap on outstanding RDMA READs per QP (each READ makes the responder send up to its length).
struct ReadCapParams {
    uint32_t max_reads = 16;              // READ requests in flight: the glue copies UCX_RC_ROCE_MAX_RD_ATOMIC
    uint64_t max_bytes = 4u << 20;        // READ response bytes in flight
};

struct CcConfig {
    CcMode mode = CcMode::auto_;
    DcqcnParams dcqcn;
    DelayParams delay;
    ReadCapParams read_cap;
    uint64_t pacer_burst = 16384;         // token-bucket depth in bytes
};

using CcSetter = Status (*)(CcConfig&, std::string_view value, std::string& problem);

struct CcVar {
    std::string_view name;     // without prefix
    std::string_view dfl;      // default, as a string the parser accepts
    std::string_view choices;  // for error messages and the docs
    std::string_view doc;
    CcSetter set;              // parses value into the config; on error fills problem
};

// How many settings the table has, known at compile time (the UCX glue sizes its config table
// with it; config.cpp checks it against the table).
inline constexpr size_t cc_config_var_count = 21;
extern const CcVar cc_config_vars[cc_config_var_count];
std::span<const CcVar> cc_vars();

// A config with every default from the table applied (equal to CcConfig{}; a test checks).
CcConfig default_cc_config();

// One setting by name (with or without the UCX_RC_ROCE_ prefix). Unknown names are errors.
Status set_cc_config(CcConfig& cfg, std::string_view name, std::string_view value, std::string& err);
// Several settings, then cross-checks (e.g. MIN_RATE below the line rate is checked later).
Status parse_cc_config(std::span<const std::pair<std::string, std::string>> settings, CcConfig& out,
                       std::string& err);
// Every UCX_RC_ROCE_<NAME> of the table from the environment (unset: default).
Status cc_config_from_env(CcConfig& out, std::string& err);
// The table as Markdown: | Variable | Default | Values | Description |
std::string cc_config_markdown();

// Which controller a QP gets. auto: dcqcn on the userspace device (nothing else reacts to ECN
// there); off on RDMA devices: hardware NICs run DCQCN on CNPs in firmware, and on rxe/siw (no
// congestion control of their own) the delay window is opt-in, because with a target below the
// unloaded round trip of large requests it throttles an uncongested path (measured, rxe guest);
// off for the userspace device on loopback (no queue there marks ECN; dcqcn costs ~10% there).
enum class DeviceKind : uint8_t { userspace, verbs_soft, verbs_hw, userspace_loopback };
CcMode resolve_mode(CcMode configured, DeviceKind dev);

// Unit parsers (exposed for tests and for the glue).
bool parse_time(std::string_view s, Nanos& out);
bool parse_rate(std::string_view s, double& bps);
bool parse_size(std::string_view s, uint64_t& bytes);
bool parse_fraction(std::string_view s, double& out);

} // namespace roce::cc
