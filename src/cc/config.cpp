#include "cc/config.hpp"

#include <cctype>
#include <iterator>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace roce::cc {
namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// Leading decimal number (digits, one '.'), the rest is the unit.
bool split_number(std::string_view s, double& num, std::string& unit) {
    size_t i = 0;
    while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
    if (i == 0) return false;
    const std::string digits(s.substr(0, i));
    char* end = nullptr;
    num = std::strtod(digits.c_str(), &end);
    if (end != digits.c_str() + digits.size() || !std::isfinite(num) || num < 0) return false;
    unit = lower(s.substr(i));
    return true;
}

Status bad(std::string& problem, std::string_view what) {
    problem = what;
    return Status::invalid_param;
}


Status set_rate_field(double& field, std::string_view v, std::string& problem) {
    double r = 0;
    if (!parse_rate(v, r) || r <= 0) return bad(problem, "not a positive rate");
    field = r;
    return Status::ok;
}

Status set_time_field(Nanos& field, std::string_view v, std::string& problem) {
    Nanos t = 0;
    if (!parse_time(v, t) || t <= 0) return bad(problem, "not a positive time");
    field = t;
    return Status::ok;
}

// A timer period of at least 1 us: the DCQCN timers' catch-up (one step per elapsed period)
// could not keep up with a nanosecond period.
Status set_period_field(Nanos& field, std::string_view v, std::string& problem) {
    Nanos t = 0;
    if (!parse_time(v, t) || t < ns_per_us) return bad(problem, "not a time of 1us or more");
    field = t;
    return Status::ok;
}

Status set_size_field(uint64_t& field, std::string_view v, std::string& problem) {
    uint64_t b = 0;
    if (!parse_size(v, b) || b == 0) return bad(problem, "not a positive size");
    field = b;
    return Status::ok;
}

Status set_size_double(double& field, std::string_view v, std::string& problem) {
    uint64_t b = 0;
    if (!parse_size(v, b) || b == 0) return bad(problem, "not a positive size");
    field = static_cast<double>(b);
    return Status::ok;
}

Status set_unit_fraction(double& field, std::string_view v, std::string& problem, bool allow_one) {
    double f = 0;
    if (!parse_fraction(v, f) || f <= 0 || f > 1 || (!allow_one && f >= 1))
        return bad(problem, allow_one ? "not a fraction in (0, 1]" : "not a fraction in (0, 1)");
    field = f;
    return Status::ok;
}

} // namespace

bool parse_time(std::string_view s, Nanos& out) {
    double n = 0;
    std::string u;
    if (!split_number(s, n, u)) return false;
    double mul = 0;
    if (u == "ns") mul = 1;
    else if (u == "us") mul = 1e3;
    else if (u == "ms") mul = 1e6;
    else if (u == "s") mul = 1e9;
    else return false;
    const double v = n * mul;
    if (v > 9e18) return false;
    out = static_cast<Nanos>(std::llround(v));
    return true;
}

bool parse_rate(std::string_view s, double& bps) {
    double n = 0;
    std::string u;
    if (!split_number(s, n, u)) return false;
    // Case matters for bits vs bytes: "Mbps" bits, "MBs" bytes (UCX bandwidth units).
    std::string raw(s.substr(s.size() - u.size()));
    if (raw.size() > 2 && raw.ends_with("/s"))   // "Mb/s" -> "Mbps", "MB/s" -> "MBs"
        raw = raw.substr(0, raw.size() - 2) + (raw[raw.size() - 3] == 'b' ? "ps" : "s");
    struct Unit { const char* name; double mul; };
    static const Unit units[] = {
        {"bps", 1},     {"Kbps", 1e3}, {"Mbps", 1e6}, {"Gbps", 1e9}, {"Tbps", 1e12},
        {"Bs", 8},      {"KBs", 8e3},  {"MBs", 8e6},  {"GBs", 8e9},
        {"kbps", 1e3},  {"mbps", 1e6}, {"gbps", 1e9}, {"kBs", 8e3},
    };
    for (const auto& unit : units)
        if (raw == unit.name) {
            bps = n * unit.mul;
            return true;
        }
    return false;
}

bool parse_size(std::string_view s, uint64_t& bytes) {
    double n = 0;
    std::string u;
    if (!split_number(s, n, u)) return false;
    double mul = 0;
    if (u.empty() || u == "b") mul = 1;
    else if (u == "k" || u == "kb") mul = 1024.0;
    else if (u == "m" || u == "mb") mul = 1024.0 * 1024;
    else if (u == "g" || u == "gb") mul = 1024.0 * 1024 * 1024;
    else return false;
    const double v = n * mul;
    if (v > 1.8e19 || v != std::floor(v)) return false;
    bytes = static_cast<uint64_t>(v);
    return true;
}

bool parse_fraction(std::string_view s, double& out) {
    const auto slash = s.find('/');
    double a = 0, b = 1;
    std::string u;
    if (slash == std::string_view::npos) {
        if (!split_number(s, a, u) || !u.empty()) return false;
    } else {
        if (!split_number(s.substr(0, slash), a, u) || !u.empty()) return false;
        if (!split_number(s.substr(slash + 1), b, u) || !u.empty() || b == 0) return false;
    }
    out = a / b;
    return true;
}

// The table. Defaults: DCQCN paper (Zhu et al., SIGCOMM 2015) and docs/roce-facts; R_HAI is not
// given there and follows mlx5's ratio rp_hai_rate/rp_ai_rate = 10.
constinit const CcVar cc_config_vars[] = {
    {"CC", "auto", "auto, off, dcqcn, delay",
     "Congestion control of RC QPs. dcqcn: ECN/CNP rate control with a pacer (the userspace device "
     "generates and consumes CNPs); delay: delay-target window from request-to-completion round trips "
     "(any device); off: none. auto: dcqcn on the userspace device (off on loopback, where nothing marks "
     "ECN: dcqcn cost 10% of loopback bandwidth there), off on RDMA devices: hardware NICs run DCQCN in "
     "firmware; on rxe/siw use CC=delay with a DELAY_TARGET above the path's unloaded round trip of "
     "your largest requests (no default fits both a native host and a slow VM). dcqcn on an RDMA device "
     "is off (the NIC's).",
     [](CcConfig& c, std::string_view v, std::string& p) {
         const std::string s = lower(v);
         if (s == "auto") c.mode = CcMode::auto_;
         else if (s == "off" || s == "none") c.mode = CcMode::off;
         else if (s == "dcqcn") c.mode = CcMode::dcqcn;
         else if (s == "delay") c.mode = CcMode::delay;
         else return bad(p, "unknown mode");
         return Status::ok;
     }},
    {"DCQCN_G", "1/256", "fraction in (0, 1), e.g. 1/256",
     "DCQCN alpha gain g: on a CNP alpha = (1-g)*alpha + g; without CNPs alpha *= (1-g) per DCQCN_ALPHA_TIMER.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_unit_fraction(c.dcqcn.g, v, p, false); }},
    {"DCQCN_ALPHA_INIT", "1", "fraction in (0, 1]",
     "DCQCN alpha before the first CNP (the first CNP cuts the rate by alpha/2).",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_unit_fraction(c.dcqcn.alpha_init, v, p, true); }},
    {"DCQCN_ALPHA_TIMER", "55us", "time",
     "DCQCN alpha update period K: alpha decays once per period in which no CNP arrived.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_period_field(c.dcqcn.alpha_period, v, p); }},
    {"DCQCN_TIMER", "55us", "time",
     "DCQCN rate-increase timer T: one increase step per period after a cut.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_period_field(c.dcqcn.timer, v, p); }},
    {"DCQCN_BYTE_COUNTER", "10MB", "size",
     "DCQCN rate-increase byte counter B: one increase step per B bytes sent after a cut.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_size_field(c.dcqcn.byte_counter, v, p); }},
    {"DCQCN_F", "5", "1..64",
     "DCQCN fast-recovery steps F: the first F increase events move the rate halfway back to the target; "
     "then additive increase, and hyper increase once both timer and byte counter passed F.",
     [](CcConfig& c, std::string_view v, std::string& p) {
         unsigned n = 0;
         auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
         if (ec != std::errc() || end != v.data() + v.size() || n < 1 || n > 64) return bad(p, "out of range");
         c.dcqcn.f = n;
         return Status::ok;
     }},
    {"DCQCN_RAI", "40Mbps", "rate",
     "DCQCN additive increase R_AI: target rate step per increase event in the additive stage.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_rate_field(c.dcqcn.rai_bps, v, p); }},
    {"DCQCN_RHAI", "400Mbps", "rate",
     "DCQCN hyper increase R_HAI: the i-th hyper-increase step raises the target by i*R_HAI.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_rate_field(c.dcqcn.rhai_bps, v, p); }},
    {"DCQCN_MIN_RATE", "1Mbps", "rate", "DCQCN floor of the sending rate.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_rate_field(c.dcqcn.min_rate_bps, v, p); }},
    {"CNP_INTERVAL", "50us", "time",
     "Notification point: at most one CNP (BTH opcode 0x81) per flow per interval while CE-marked packets arrive.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_time_field(c.dcqcn.cnp_interval, v, p); }},
    {"CC_LOSS_REACT", "y", "y, n",
     "React to a loss (sequence NAK, retransmission timeout) like to congestion: dcqcn cuts the rate as on a "
     "CNP, delay cuts the window by DELAY_MAX_MDF. Without PFC a flow whose packets are all dropped gets no "
     "CNP and would keep its rate.",
     [](CcConfig& c, std::string_view v, std::string& p) {
         const std::string s = lower(v);
         bool b;
         if (s == "y" || s == "yes" || s == "on" || s == "1") b = true;
         else if (s == "n" || s == "no" || s == "off" || s == "0") b = false;
         else return bad(p, "not a boolean");
         c.dcqcn.loss_as_cnp = c.delay.loss_decrease = b;
         return Status::ok;
     }},
    {"PACER_BURST", "16KB", "size up to 1GB",
     "DCQCN pacer: token-bucket depth (bytes that may leave back to back at line rate).",
     [](CcConfig& c, std::string_view v, std::string& p) {
         // (far above 1 GB a byte no longer changes the bucket's double: the pacer would be off)
         if (Status st = set_size_field(c.pacer_burst, v, p); st != Status::ok) return st;
         return c.pacer_burst <= (uint64_t(1) << 30) ? Status::ok : bad(p, "above 1GB");
     }},
    {"DELAY_TARGET", "50us", "time",
     "Delay control: request-to-completion round-trip target; the window grows below it and shrinks above it.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_time_field(c.delay.target, v, p); }},
    {"DELAY_AI", "4KB", "size", "Delay control: additive window increase per round trip below the target.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_size_double(c.delay.ai_bytes, v, p); }},
    {"DELAY_BETA", "0.8", "fraction in (0, 1]",
     "Delay control: decrease gain; above the target cwnd *= 1 - beta*(rtt-target)/rtt, once per round trip.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_unit_fraction(c.delay.beta, v, p, true); }},
    {"DELAY_MAX_MDF", "0.5", "fraction in (0, 1)", "Delay control: largest multiplicative decrease in one step.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_unit_fraction(c.delay.max_mdf, v, p, false); }},
    {"DELAY_MIN_CWND", "256", "size",
     "Delay control: smallest window; below one MTU the window is enforced by pacing at cwnd/RTT.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_size_double(c.delay.min_cwnd, v, p); }},
    {"DELAY_MAX_CWND", "4MB", "size", "Delay control: largest window.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_size_double(c.delay.max_cwnd, v, p); }},
    {"DELAY_INIT_CWND", "256KB", "size", "Delay control: window of a new QP.",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_size_double(c.delay.init_cwnd, v, p); }},
    {"MAX_RD_BYTES", "4MB", "size",
     "Cap on RDMA READ response bytes outstanding per QP, in every CC mode, on both devices (the count of "
     "READs is capped by MAX_RD_ATOMIC of the interface table; re-issued READs are not held back).",
     [](CcConfig& c, std::string_view v, std::string& p) { return set_size_field(c.read_cap.max_bytes, v, p); }},
};
static_assert(std::size(cc_config_vars) == cc_config_var_count, "update cc_config_var_count");

std::span<const CcVar> cc_vars() { return {cc_config_vars, cc_config_var_count}; }

CcConfig default_cc_config() {
    CcConfig c;
    std::string problem;
    for (const auto& v : cc_vars()) (void)v.set(c, v.dfl, problem);
    return c;
}

Status set_cc_config(CcConfig& cfg, std::string_view name, std::string_view value, std::string& err) {
    if (name.starts_with(config_prefix)) name.remove_prefix(config_prefix.size());
    for (const auto& v : cc_vars()) {
        if (v.name != name) continue;
        std::string problem;
        const Status st = v.set(cfg, value, problem);
        if (st != Status::ok)
            err = std::string(config_prefix) + std::string(name) + "=" + std::string(value) + ": " + problem +
                  "; valid: " + std::string(v.choices);
        return st;
    }
    std::string names;
    for (const auto& v : cc_vars()) names += (names.empty() ? "" : ", ") + std::string(v.name);
    err = std::string(config_prefix) + std::string(name) + ": unknown setting; valid: " + names;
    return Status::invalid_param;
}

Status parse_cc_config(std::span<const std::pair<std::string, std::string>> settings, CcConfig& out,
                       std::string& err) {
    CcConfig c = default_cc_config();
    for (const auto& [k, v] : settings)
        if (Status st = set_cc_config(c, k, v, err); st != Status::ok) return st;
    if (c.delay.min_cwnd > c.delay.max_cwnd) {
        err = std::string(config_prefix) + "DELAY_MIN_CWND: larger than DELAY_MAX_CWND";
        return Status::invalid_param;
    }
    if (c.delay.init_cwnd < c.delay.min_cwnd || c.delay.init_cwnd > c.delay.max_cwnd) {
        err = std::string(config_prefix) + "DELAY_INIT_CWND: outside [DELAY_MIN_CWND, DELAY_MAX_CWND]";
        return Status::invalid_param;
    }
    out = c;
    return Status::ok;
}

Status cc_config_from_env(CcConfig& out, std::string& err) {
    std::vector<std::pair<std::string, std::string>> settings;
    for (const auto& v : cc_vars()) {
        const std::string name = std::string(config_prefix) + std::string(v.name);
        if (const char* val = std::getenv(name.c_str())) settings.emplace_back(name, val);
    }
    return parse_cc_config(settings, out, err);
}

std::string cc_config_markdown() {
    std::string s = "| Variable | Default | Values | Description |\n|---|---|---|---|\n";
    for (const auto& v : cc_vars())
        s += "| `" + std::string(config_prefix) + std::string(v.name) + "` | `" + std::string(v.dfl) + "` | " +
             std::string(v.choices) + " | " + std::string(v.doc) + " |\n";
    return s;
}

CcMode resolve_mode(CcMode configured, DeviceKind dev) {
    if (configured != CcMode::auto_) return configured;
    switch (dev) {
    case DeviceKind::userspace: return CcMode::dcqcn;
    case DeviceKind::verbs_soft: return CcMode::off;   // measured: see the CC entry's doc
    case DeviceKind::verbs_hw: return CcMode::off;
    case DeviceKind::userspace_loopback: return CcMode::off;
    }
    return CcMode::off;
}

} // namespace roce::cc
