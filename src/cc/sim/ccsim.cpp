// roce_ccsim: runs the congestion-control state machines (src/cc) against a modelled switch port.
//
//   roce_ccsim run [--scenario incast|fairness] [--n N] [--cc off|dcqcn|delay] [--duration T]
//                  [--warmup T] [--out DIR] [--no-ecn] [--set NAME=VALUE]...
//   roce_ccsim sweep [--tiny] [--check] [--out DIR] [--set NAME=VALUE]...
//   roce_ccsim --config-md          (the UCX_RC_ROCE_* congestion-control table as Markdown)
//
// `run` prints one summary line; with --out it writes DIR/ts_<scenario>_<cc>_n<N>.csv (time series).
// `sweep` runs incast for N = 2..1024 and fairness for every CC mode, prints a table and, with
// --out, writes DIR/summary.csv plus the time series; bench/ccsim/plot.py draws the PNGs.
// Table columns: drops = all (incl. the start-up burst), drops_ss / q_*: steady state (after
// --warmup); latency = sender NIC -> receiver per packet.
// --check exits 1 unless: dcqcn keeps the queue below the buffer without drops, Jain >= 0.95 and
// utilisation >= 90% at every N; CC off drops packets / fills the buffer at every N >= 4.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cc/config.hpp"
#include "cc/sim/sim.hpp"

using namespace roce::cc;
using namespace roce::cc::sim;

namespace {

[[noreturn]] void usage(const char* msg = nullptr) {
    if (msg) std::fprintf(stderr, "roce_ccsim: %s\n", msg);
    std::fprintf(stderr,
                 "usage: roce_ccsim run [--scenario incast|fairness] [--n N] [--cc off|dcqcn|delay]\n"
                 "                      [--duration T] [--warmup T] [--out DIR] [--no-ecn] [--set NAME=VALUE]...\n"
                 "       roce_ccsim sweep [--tiny] [--check] [--out DIR] [--set NAME=VALUE]...\n"
                 "       roce_ccsim --config-md\n");
    std::exit(2);
}

CcMode parse_mode(std::string_view s) {
    if (s == "off") return CcMode::off;
    if (s == "dcqcn") return CcMode::dcqcn;
    if (s == "delay") return CcMode::delay;
    usage("--cc: off, dcqcn or delay");
}

const char* scen_name(Scenario s) { return s == Scenario::incast ? "incast" : "fairness"; }

void write_series(const std::string& dir, const SimConfig& c, const SimResult& r) {
    const std::string path = dir + "/ts_" + scen_name(c.scenario) + "_" + std::string(to_string(c.mode)) + "_n" +
                             std::to_string(c.n) + ".csv";
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
        std::perror(path.c_str());
        std::exit(1);
    }
    std::fprintf(f, "t_us,queue_kb,total_gbps");
    const size_t k = r.series.empty() ? 0 : r.series[0].flow_gbps.size();
    for (size_t i = 0; i < k; ++i) std::fprintf(f, ",flow%zu_gbps", i);
    for (size_t i = 0; i < k; ++i) std::fprintf(f, ",flow%zu_rate_gbps", i);
    std::fprintf(f, "\n");
    for (const auto& s : r.series) {
        std::fprintf(f, "%.1f,%.2f,%.3f", double(s.t) / 1e3, double(s.queue_bytes) / 1024, s.total_gbps);
        for (double g : s.flow_gbps) std::fprintf(f, ",%.3f", g);
        for (double g : s.flow_rate_gbps) std::fprintf(f, ",%.4f", g);
        std::fprintf(f, "\n");
    }
    std::fclose(f);
}

const char* header =
    "scenario,cc,n,util,jain,drops,drops_window,marks,cnps,retransmits,timeouts,queue_avg_kb,queue_p99_kb,queue_max_kb,"
    "queue_max_window_kb,lat_p50_us,lat_p99_us,lat_p999_us,min_flow_gbps,max_flow_gbps";

std::string summary(const SimConfig& c, const SimResult& r) {
    double lo = 1e18, hi = 0;
    for (double g : r.flow_gbps) lo = std::min(lo, g), hi = std::max(hi, g);
    char buf[512];
    std::snprintf(buf, sizeof buf, "%s,%s,%u,%.4f,%.4f,%llu,%llu,%llu,%llu,%llu,%llu,%.1f,%.1f,%.1f,%.1f,%.2f,%.2f,%.2f,%.4f,%.4f",
                  scen_name(c.scenario), std::string(to_string(c.mode)).c_str(), c.n, r.utilisation, r.jain,
                  (unsigned long long)r.drops, (unsigned long long)r.drops_window, (unsigned long long)r.marks, (unsigned long long)r.cnps,
                  (unsigned long long)r.retransmits, (unsigned long long)r.timeouts, r.queue_avg / 1024,
                  double(r.queue_p99) / 1024, double(r.queue_max) / 1024, double(r.queue_max_window) / 1024,
                  r.lat_p50_us, r.lat_p99_us, r.lat_p999_us, lo, hi);
    return buf;
}

void print_row(const SimConfig& c, const SimResult& r, double secs) {
    std::printf("%-8s %-5s %5u %6.1f%% %6.3f %9llu %9llu %9.0f %9.0f %9.0f %9.1f %9.1f %9.1f %6.2fs\n", scen_name(c.scenario),
                std::string(to_string(c.mode)).c_str(), c.n, r.utilisation * 100, r.jain, (unsigned long long)r.drops,
                (unsigned long long)r.drops_window, r.queue_avg / 1024, double(r.queue_p99) / 1024, double(r.queue_max_window) / 1024, r.lat_p50_us, r.lat_p99_us,
                r.lat_p999_us, secs);
    std::fflush(stdout);
}

void print_head() {
    std::printf("%-8s %-5s %5s %7s %6s %9s %9s %9s %9s %9s %9s %9s %9s %7s\n", "scenario", "cc", "N", "util", "jain",
                "drops", "drops_ss", "q_avg_KB", "q_p99_KB", "qmax_ss_KB", "p50_us", "p99_us", "p999_us", "wall");
}

struct Opts {
    SimConfig c;
    std::string out;
    bool tiny = false, check = false;
    bool dur_set = false, warm_set = false;
};

Opts parse(int argc, char** argv, int first) {
    Opts o;
    for (int i = first; i < argc; ++i) {
        std::string_view a = argv[i];
        auto val = [&]() -> std::string_view {
            if (i + 1 >= argc) usage((std::string(a) + " needs a value").c_str());
            return argv[++i];
        };
        auto time = [&]() {
            Nanos t = 0;
            if (!parse_time(val(), t)) usage("bad time (e.g. 20ms)");
            return t;
        };
        if (a == "--scenario") {
            auto v = val();
            o.c.scenario = v == "fairness" ? Scenario::fairness : v == "incast" ? Scenario::incast
                                                                             : (usage("--scenario"), Scenario::incast);
        } else if (a == "--n") o.c.n = static_cast<uint32_t>(std::atoi(std::string(val()).c_str()));
        else if (a == "--cc") o.c.mode = parse_mode(val());
        else if (a == "--duration") o.c.duration = time(), o.dur_set = true;
        else if (a == "--warmup") o.c.warmup = time(), o.warm_set = true;
        else if (a == "--spread") o.c.start_spread = time();
        else if (a == "--feedback-delay") o.c.feedback_delay = time();
        else if (a == "--buffer") {
            if (!parse_size(val(), o.c.buffer)) usage("--buffer");
        } else if (a == "--seed") o.c.seed = std::strtoull(std::string(val()).c_str(), nullptr, 10);
        else if (a == "--no-ecn") o.c.ecn = false;
        else if (a == "--mtu") o.c.pkt_bytes = static_cast<uint32_t>(std::atoi(std::string(val()).c_str())) + 62;
        else if (a == "--link") {
            if (!parse_rate(val(), o.c.link_bps)) usage("--link (e.g. 100Gbps)");
        }
        else if (a == "--out") o.out = val();
        else if (a == "--tiny") o.tiny = true;
        else if (a == "--check") o.check = true;
        else if (a == "--set") {
            const std::string kv(val());
            const auto eq = kv.find('=');
            if (eq == std::string::npos) usage("--set NAME=VALUE");
            std::string err;
            if (set_cc_config(o.c.cc, kv.substr(0, eq), kv.substr(eq + 1), err) != roce::Status::ok) {
                std::fprintf(stderr, "roce_ccsim: %s\n", err.c_str());
                std::exit(2);
            }
        } else usage(("unknown option " + std::string(a)).c_str());
    }
    if (o.c.n == 0) usage("--n must be >= 1");
    return o;
}

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int cmd_run(Opts o) {
    if (o.c.scenario == Scenario::fairness) {   // as in the sweep: measure once shares settled
        if (!o.warm_set) o.c.warmup = o.c.join_interval * o.c.n + 25 * ns_per_ms;
        if (!o.dur_set) o.c.duration = o.c.warmup + 30 * ns_per_ms;
    }
    const double t0 = now_s();
    const SimResult r = run(o.c);
    print_head();
    print_row(o.c, r, now_s() - t0);
    if (!o.out.empty()) write_series(o.out, o.c, r);
    std::printf("%s\n%s\n", header, summary(o.c, r).c_str());
    return 0;
}

int cmd_sweep(Opts o) {
    const std::vector<uint32_t> ns = o.tiny ? std::vector<uint32_t>{2, 16, 128, 1024}
                                            : std::vector<uint32_t>{2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
    const CcMode modes[] = {CcMode::off, CcMode::dcqcn, CcMode::delay};
    FILE* sum = nullptr;
    if (!o.out.empty()) {
        sum = std::fopen((o.out + "/summary.csv").c_str(), "w");
        if (!sum) {
            std::perror(o.out.c_str());
            return 1;
        }
        std::fprintf(sum, "%s\n", header);
    }
    int failures = 0, checks = 0;
    const double t_all = now_s();
    print_head();
    for (CcMode m : modes) {
        for (uint32_t n : ns) {
            SimConfig c = o.c;
            c.scenario = Scenario::incast;
            c.mode = m;
            c.n = n;
            if (o.tiny && m == CcMode::off && !o.dur_set) {
                c.duration = 20 * ns_per_ms;   // enough to show the full buffer; drop storms are slow to simulate
                c.warmup = 10 * ns_per_ms;
            }
            const double t0 = now_s();
            const SimResult r = run(c);
            print_row(c, r, now_s() - t0);
            if (sum) std::fprintf(sum, "%s\n", summary(c, r).c_str());
            if (!o.out.empty()) write_series(o.out, c, r);
            if (o.check && m == CcMode::dcqcn) {
                checks++;
                const std::string why = check(c, r, Expectation{});
                if (!why.empty()) {
                    std::printf("CHECK FAILED dcqcn N=%u: %s\n", n, why.c_str());
                    failures++;
                }
            }
            // Without CC the queue is bounded only by the RC windows: once N windows exceed the
            // buffer, the queue must sit at the limit and drop (else the model is not congesting).
            if (o.check && m == CcMode::off && uint64_t(n) * c.window_pkts * c.pkt_bytes > c.buffer) {
                checks++;
                if (r.drops_window == 0 || r.queue_max_window + c.pkt_bytes < c.buffer) {
                    std::printf("CHECK FAILED off N=%u: expected drops and a full buffer without CC\n", n);
                    failures++;
                }
            }
        }
    }
    // Many-flow fairness: flows join one by one; shares must converge.
    const uint32_t nf = o.tiny ? 4 : 8;
    for (CcMode m : modes) {
        SimConfig c = o.c;
        c.scenario = Scenario::fairness;
        c.mode = m;
        c.n = nf;
        c.join_interval = (o.tiny ? 2 : 5) * ns_per_ms;
        c.warmup = c.join_interval * nf + 25 * ns_per_ms;   // DCQCN needs ~20-30 ms to equalise shares
        c.duration = c.warmup + 30 * ns_per_ms;
        const double t0 = now_s();
        const SimResult r = run(c);
        print_row(c, r, now_s() - t0);
        if (sum) std::fprintf(sum, "%s\n", summary(c, r).c_str());
        if (!o.out.empty()) write_series(o.out, c, r);
        if (o.check && m == CcMode::dcqcn) {
            checks++;
            const std::string why = check(c, r, Expectation{});
            if (!why.empty()) {
                std::printf("CHECK FAILED dcqcn fairness N=%u: %s\n", nf, why.c_str());
                failures++;
            }
        }
    }
    if (sum) std::fclose(sum);
    std::printf("sweep: %.1f s wall\n", now_s() - t_all);
    if (o.check) {
        std::printf("%d passed, %d failed\n", checks - failures, failures);
        return failures ? 1 : 0;
    }
    return 0;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) usage();
    const std::string_view cmd = argv[1];
    if (cmd == "--config-md") {
        std::fputs(cc_config_markdown().c_str(), stdout);
        return 0;
    }
    if (cmd == "run") return cmd_run(parse(argc, argv, 2));
    if (cmd == "sweep") return cmd_sweep(parse(argc, argv, 2));
    usage();
}
