#include "gid/doctor_pingpong.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include "gid/doctor_net.hpp"

namespace roce::doctor {

namespace {

std::string size_text(size_t b) {
    if (b >= 1024 && b % 1024 == 0) return std::to_string(b / 1024) + " KiB";
    return std::to_string(b) + " B";
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

void fill(std::vector<uint8_t>& buf, std::mt19937& rng) {
    for (auto& b : buf) b = uint8_t(rng());
}

// "" when equal, else where they differ.
std::string compare(const std::vector<uint8_t>& want, const uint8_t* got, size_t len) {
    if (len != want.size())
        return "echo of " + std::to_string(len) + " bytes for a " + std::to_string(want.size()) + "-byte message";
    for (size_t i = 0; i < len; ++i)
        if (got[i] != want[i]) {
            char b[96];
            std::snprintf(b, sizeof(b), "data mismatch at byte %zu of %zu: sent 0x%02x, got back 0x%02x", i, len,
                          want[i], got[i]);
            return b;
        }
    return "";
}

} // namespace

std::string PingReport::text() const {
    std::string out;
    for (const Line& l : lines) {
        char b[96];
        std::snprintf(b, sizeof(b), "%s%s %.1f us", out.empty() ? "" : ", ", size_text(l.bytes).c_str(),
                      l.median_half_rtt_us);
        out += b;
    }
    return out + " (median half round trip)";
}

Status rc_pingpong(RcDevice& dev, const WireAddr& peer, const std::vector<PingSize>& sizes, double timeout_s,
                   PingReport& out, std::string& err) {
    const uint64_t deadline = now_ns() + uint64_t(timeout_s * 1e9);
    uint32_t qpn = 0;
    if (Status s = dev.create_qp(qpn); s != Status::ok) {
        err = "create_qp: " + std::string(to_string(s));
        return s;
    }
    // The QP goes whatever way this function returns.
    struct QpGuard {
        RcDevice& d;
        uint32_t q;
        ~QpGuard() { d.destroy_qp(q); }
    } guard{dev, qpn};
    if (Status s = dev.connect_qp(qpn, peer); s != Status::ok) {
        err = "connect to " + peer.to_string() + ": " + std::string(to_string(s));
        return s;
    }
    Completion comps[16];
    Status failed = Status::ok;
    // Drives progress; false (err set) on an error completion, a QP in error or the deadline.
    auto step = [&](const char* waiting_for) {
        dev.progress();
        const size_t n = dev.poll_completions(comps, 16);
        for (size_t i = 0; i < n; ++i)
            if (comps[i].status != Status::ok && failed == Status::ok) failed = comps[i].status;
        if (failed != Status::ok || dev.qp_state(qpn) == QpState::error) {
            if (failed == Status::ok) failed = Status::io_error;
            err = std::string(waiting_for) + ": the QP failed (" + std::string(to_string(failed)) + ")";
            return false;
        }
        if (now_ns() > deadline) {
            err = std::string(waiting_for) + ": no progress within " + std::to_string(int(timeout_s)) + " s";
            failed = Status::timeout;
            return false;
        }
        return true;
    };
    while (dev.qp_state(qpn) != QpState::rts)
        if (!step(("connecting to " + peer.to_string()).c_str())) return failed;

    std::mt19937 rng(std::random_device{}());
    std::vector<uint8_t> msg;
    uint64_t wr_id = 1;
    for (const PingSize& ps : sizes) {
        std::vector<double> half_rtt;
        msg.resize(ps.bytes);
        for (unsigned it = 0; it < ps.iters; ++it) {
            fill(msg, rng);
            iovec iov{msg.data(), msg.size()};
            const uint64_t t0 = now_ns();
            Status s;
            while ((s = dev.post_send(qpn, wr_id++, &iov, 1)) == Status::no_resource)
                if (!step("posting")) return failed;
            if (s != Status::ok) {
                err = "post_send of " + size_text(ps.bytes) + ": " + std::string(to_string(s));
                return s;
            }
            bool got = false;
            std::string mismatch;
            const std::string what = "the echo of " + size_text(ps.bytes) + " message " + std::to_string(it + 1);
            while (!got) {
                if (!step(what.c_str())) return failed;
                dev.poll_recv([&](const RecvMessage& m) {
                    if (m.qpn != qpn || got) return;
                    got = true;
                    mismatch = compare(msg, m.data, m.len);
                }, 1);
            }
            if (!mismatch.empty()) {
                err = what + ": " + mismatch;
                return Status::io_error;
            }
            half_rtt.push_back(double(now_ns() - t0) / 2e3);
        }
        out.lines.push_back({ps.bytes, ps.iters, median(half_rtt)});
    }
    return Status::ok;
}

Status ud_pingpong(ud::DatagramQp& qp, const ud::UdAddr& peer, const std::vector<PingSize>& sizes,
                   double timeout_s, PingReport& out, std::string& err) {
    constexpr int tries = 4;
    constexpr uint64_t wait_ns = 250'000'000;
    const uint64_t deadline = now_ns() + uint64_t(timeout_s * 1e9);
    std::mt19937 rng(std::random_device{}());
    std::vector<uint8_t> msg;
    for (const PingSize& ps : sizes) {
        if (ps.bytes > qp.max_payload()) {
            err = size_text(ps.bytes) + " is larger than the QP's " + std::to_string(qp.max_payload()) + "-byte MTU";
            return Status::invalid_param;
        }
        std::vector<double> half_rtt;
        msg.resize(ps.bytes);
        for (unsigned it = 0; it < ps.iters; ++it) {
            bool got = false;
            std::string mismatch;
            for (int t = 0; t < tries && !got; ++t) {
                // A fresh pattern per try: a late echo of an earlier try cannot pass for this one.
                fill(msg, rng);
                iovec iov{msg.data(), msg.size()};
                const uint64_t t0 = now_ns();
                if (Status s = qp.send(peer, 0, &iov, 1); s != Status::ok && s != Status::no_resource) {
                    err = "send of " + size_text(ps.bytes) + " to " + peer.to_string() + ": " + std::string(to_string(s));
                    return s;
                }
                for (uint64_t now = t0; !got && now - t0 < wait_ns && now < deadline; now = now_ns()) {
                    qp.poll([&](const ud::Datagram& d) {
                        if (got || !(d.src == peer) || d.len != msg.size()) return;
                        if (std::memcmp(d.data, msg.data(), msg.size()) != 0) {
                            // Stale echoes have the wrong pattern; a corrupted current one
                            // would too, and then the last try reports it.
                            mismatch = compare(msg, d.data, d.len);
                            return;
                        }
                        got = true;
                        mismatch.clear();
                    }, 16);
                }
                if (got && t == 0) half_rtt.push_back(double(now_ns() - t0) / 2e3);
                if (now_ns() > deadline) break;
            }
            if (!got) {
                err = "no echo of " + size_text(ps.bytes) + " datagram " + std::to_string(it + 1) + " from " +
                      peer.to_string() + " after " + std::to_string(tries) + " tries" +
                      (mismatch.empty() ? "" : " (" + mismatch + ")");
                return mismatch.empty() ? Status::timeout : Status::io_error;
            }
        }
        out.lines.push_back({ps.bytes, ps.iters, median(half_rtt)});
    }
    return Status::ok;
}

bool RcEcho::poll() {
    bool active = dev_->progress() > 0;
    Completion c[16];
    while (dev_->poll_completions(c, 16) > 0) active = true;
    dev_->poll_recv([&](const RecvMessage& m) {
        backlog_.emplace_back(m.qpn, std::vector<uint8_t>(m.data, m.data + m.len));
    }, 64);
    while (!backlog_.empty()) {
        active = true;
        auto& [qpn, data] = backlog_.front();
        iovec iov{data.data(), data.size()};
        const Status s = dev_->post_send(qpn, 0, &iov, 1);
        if (s == Status::no_resource) break;   // retried on the next poll
        backlog_.pop_front();                  // sent, or the QP is gone: either way done
    }
    return active;
}

bool UdEcho::poll() {
    // Copied out first: sending from inside poll()'s callback would re-enter the QP.
    std::vector<std::pair<ud::UdAddr, std::vector<uint8_t>>> got;
    qp_->poll([&](const ud::Datagram& d) { got.emplace_back(d.src, std::vector<uint8_t>(d.data, d.data + d.len)); },
              64);
    for (auto& [src, data] : got) {
        iovec iov{data.data(), data.size()};
        (void)qp_->send(src, 0, &iov, 1);   // a lost echo is a lost datagram: the client retries
    }
    return !got.empty();
}

} // namespace roce::doctor
