// Congestion control on an RDMA device: the HCA (or rxe) sends as fast as work requests arrive,
// so the only place to hold traffic back is before ibv_post_send. Each QP owns a cc::QpCc (the
// same state machines as the userspace device and the simulator); WRs the window or the pacer
// does not admit stay in the QP's software queue (VQp::sq, behind the posted ones) and go out
// from a completion or a later progress().
//
//   delay   Swift-like window from request-to-completion round trips: a signaled CQE's time since
//           its post is the sample. An RC QP completes in order, so the sample includes the WRs
//           ahead of it on the same QP: the window bounds what sits in the network and in the
//           sender's queue together, which is what a switch buffer sees.
//   dcqcn   not ours to run here: the NIC's firmware is the reaction point (CNPs never reach
//           software); the QP is treated as off, with a warning.
//   READs   MAX_RD_BYTES caps READ bytes in flight per QP in every mode (MAX_RD_ATOMIC, the count,
//           is the QP's initiator depth).
// A window that waits for completions needs a signaled WR in flight: cc_wants_signal asks for one
// every quarter window (completion moderation would otherwise leave 64 WRs unsignaled).
// No pacer: a window that waits for completions needs no timer, and the smallest window is one
// request in flight. That only bounds the burst if requests are small, so in delay mode WRITEs and
// READs larger than a quarter window (16..64 KiB) are split into pieces (measured on rxe
// behind a 40 Mbit/s tbf with a 64 KiB queue: 1 MiB WRITEs whole overflowed it with any window,
// and a pacer charged a whole 1 MiB request at a sub-MTU window's rate stalled for minutes).
#include <algorithm>
#include <fstream>

#include "common/log.hpp"
#include "verbs/device_impl.hpp"

namespace roce::verbs {

namespace {

bool is_software_device(const std::string& sysroot, const std::string& dev) {
    // rxe (and siw) name the netdev they run on; a PCI function has none.
    std::ifstream f(sysroot + "/sys/class/infiniband/" + dev + "/parent");
    std::string parent;
    return f && std::getline(f, parent) && !parent.empty();
}

// ibv_port_attr speed/width codes (IBTA): Gb/s per lane and lanes.
double port_rate_bps(const ibv_port_attr& a) {
    double lane = 0;
    switch (a.active_speed) {
    case 1: lane = 2.5e9; break;
    case 2: lane = 5e9; break;
    case 4: case 8: lane = 10e9; break;
    case 16: lane = 14e9; break;
    case 32: lane = 25e9; break;
    case 64: lane = 50e9; break;
    case 128: lane = 100e9; break;
    default: lane = 10e9; break;
    }
    int lanes = 1;
    switch (a.active_width) {
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: lanes = 1; break;
    }
    return lane * lanes;
}

} // namespace

cc::CcMode DeviceImpl::resolve_cc_mode() const {
    const bool soft = is_software_device(cfg_.sysroot, cfg_.dev_name);
    cc::CcMode m = cc::resolve_mode(cfg_.cc.mode, soft ? cc::DeviceKind::verbs_soft : cc::DeviceKind::verbs_hw);
    if (m == cc::CcMode::dcqcn) {
        ROCE_WARN("verbs: %s: UCX_RC_ROCE_CC=dcqcn runs on the userspace device only (on an RDMA device "
                  "the NIC's firmware reacts to CNPs); no congestion control of ours on this device",
                  cfg_.dev_name.c_str());
        m = cc::CcMode::off;
    }
    ROCE_DEBUG("verbs: %s: congestion control %s (%s device)", cfg_.dev_name.c_str(),
               std::string(cc::to_string(m)).c_str(), soft ? "software" : "hardware");
    return m;
}

void DeviceImpl::cc_init(VQp& q) {
    if (line_rate_bps_ <= 0)
        line_rate_bps_ = cfg_.line_rate_bps > 0 ? cfg_.line_rate_bps : port_rate_bps(port_attr_);
    // Off still gets a controller: the READ byte cap applies in every mode.
    q.cc.emplace(cfg_.cc, cc_mode_, line_rate_bps_, cfg_.mtu);
}

bool DeviceImpl::cc_may_post(VQp& q, WrRec& r) {
    if (!q.cc)
        return true;
    bool ok = true;
    if (r.op == OpKind::read && !q.cc->read_cap().can_post(r.cc_bytes)) {
        q.st.reads_capped += !r.held;
        ok = false;
    } else if (cc_mode_ == cc::CcMode::delay && q.signaled_inflight != 0 &&
               !q.cc->delay()->can_send(q.cc_outstanding)) {
        // (Only while a completion is coming: a window that shrank below an unsignaled tail
        // posted when it was larger would otherwise wait for a CQE that never comes - the tail's
        // reclaim waits for held WRs. The WR that goes instead is signaled: cc_wants_signal.)
        q.st.cc_held += !r.held;
        ok = false;
    }
    r.held |= !ok;
    if (!ok && !q.cc_held) {
        q.cc_held = true;
        held_.push_back(q.qpn);
    }
    return ok;
}

uint32_t DeviceImpl::cc_chunk(const VQp& q) const {
    if (!q.cc || cc_mode_ != cc::CcMode::delay)
        return 0;
    // At least 16 KiB: each piece costs a doorbell (a system call on rxe) and, at the window's
    // floor, a round trip of its own.
    const uint32_t mtu = cfg_.mtu;
    const double quarter = std::clamp(q.cc->cwnd_bytes() / 4, 16384.0, 65536.0);
    return std::max(mtu, uint32_t(quarter) / mtu * mtu);
}

void DeviceImpl::cc_posted(VQp& q, WrRec& r, uint64_t now) {
    r.post_ns = now;
    if (r.signaled)
        q.unsignaled_bytes = 0;
    if (!q.cc || r.internal)
        return;
    q.cc_outstanding += r.cc_bytes;
    if (!r.signaled)
        q.unsignaled_bytes += r.cc_bytes;
    if (r.op == OpKind::read)
        q.cc->read_cap().on_post(r.cc_bytes);
}

void DeviceImpl::cc_completed(VQp& q, const WrRec& r, bool sample, uint64_t now, uint64_t slack) {
    if (!q.cc || r.internal)
        return;
    q.cc_outstanding -= std::min(q.cc_outstanding, uint64_t(r.cc_bytes));
    if (r.op == OpKind::read)
        q.cc->read_cap().on_complete(r.cc_bytes);
    q.cc_acked += r.cc_bytes;
    if (sample && cc_mode_ == cc::CcMode::delay && now > r.post_ns) {
        if (!q.cc->on_rtt_sample(cc::Nanos(now - r.post_ns), q.cc_acked, cc::Nanos(now), cc::Nanos(slack)))
            ++q.st.rtt_ambiguous;
        ++q.st.rtt_samples;
        q.cc_acked = 0;
    }
}

bool DeviceImpl::cc_wants_signal(const VQp& q, const WrRec& r) const {
    if (!q.cc || cc_mode_ != cc::CcMode::delay)
        return false;
    const double quarter = q.cc->cwnd_bytes() / 4;
    return double(q.unsignaled_bytes + r.cc_bytes) >= quarter ||
           double(q.cc_outstanding + r.cc_bytes) >= q.cc->cwnd_bytes();
}

void DeviceImpl::cc_progress() {
    for (size_t i = 0; i < held_.size();) {
        VQp* q = find_qp(held_[i]);
        if (q && q->state == QpState::rts && q->n_posted < q->sq.size()) {
            post_pending(*q);
            if (q->n_posted < q->sq.size()) {
                ++i;
                continue;
            }
        }
        if (q)
            q->cc_held = false;
        held_[i] = held_.back();
        held_.pop_back();
    }
}

} // namespace roce::verbs
