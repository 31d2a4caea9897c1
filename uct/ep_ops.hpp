// Helpers shared by the endpoint operation files (ep.cpp, ep_am_rma.cpp, ep_amo.cpp).
#pragma once

#include "glue.hpp"

namespace roce::uct {

inline uint32_t rkey32(uct_rkey_t rkey) { return static_cast<uint32_t>(rkey); }

inline void link_op(Ep* ep, Op* op) {
    op->ep = ep;
    op->prev = nullptr;
    op->next = ep->ops_head;
    if (ep->ops_head != nullptr) {
        ep->ops_head->prev = op;
    }
    ep->ops_head = op;
}

inline void unlink_op(Op* op) {
    Ep* ep = op->ep;
    if (ep == nullptr) {
        return;
    }
    if (op->prev != nullptr) {
        op->prev->next = op->next;
    } else {
        ep->ops_head = op->next;
    }
    if (op->next != nullptr) {
        op->next->prev = op->prev;
    }
    op->prev = op->next = nullptr;
    op->ep = nullptr;
}

// Every work request reports a completion, as on an IB QP where an error completes even
// unsignaled WRs: an operation without an Op carries a tagged wr_id (bit 63, the ep's serial and
// QPN), so its completion counts it off and reports a failure, and flush knows exactly what is
// done. Bit 63 is the device contract's wr_id_lazy: nothing but a flush waits for these
// completions, so the device may hold them back until the flush calls complete_lazy().
inline constexpr uint64_t wr_id_untracked_tag = wr_id_lazy;
inline constexpr unsigned wr_id_serial_shift = 24;
inline constexpr uint64_t wr_id_serial_mask = (uint64_t{1} << 39) - 1;

inline uint64_t wr_id_untracked(const Ep* ep) {
    return wr_id_untracked_tag | ((ep->serial & wr_id_serial_mask) << wr_id_serial_shift) | ep->qpn;
}

inline uint64_t wr_id_of(Op* op) { return reinterpret_cast<uint64_t>(op); }

// The wr_id of an operation that may or may not carry an Op.
inline uint64_t wr_id_for(const Ep* ep, Op* op) {
    return op != nullptr ? wr_id_of(op) : wr_id_untracked(ep);
}

// A work request the device accepted: it will report a completion.
inline void note_posted(Ep* ep) {
    ++ep->inflight;
}

// Also called from operations, which do not hold the async lock (failures is the interface's).
inline void queue_failure(Iface* iface, Ep* ep, ucs_status_t status) {
    if (ep->error == UCS_OK) {
        AsyncGuard guard(&iface->super);
        ep->error = status;
        iface->failures.emplace_back(ep->qpn, status);
    }
}

// The device moved the QP to the error state (retries exhausted, peer unreachable or gone):
// every later operation fails, and operations posted without a completion were lost.
inline bool qp_failed(Ep* ep) {
    return ep->iface->dev->qp_state(ep->qpn) == sw::QpState::error;
}

// Status of an operation about to be posted: the ep's failure, or no resources.
inline ucs_status_t tx_check(Ep* ep) {
    if (ucs_unlikely(ep->error != UCS_OK)) {
        return ep->error;
    }
    if (ucs_unlikely(!ep_has_tx_resources(ep))) {
        return UCS_ERR_NO_RESOURCE;
    }
    return UCS_OK;
}

// Result of a device post: no_resource marks the ep for progress.
inline ucs_status_t posted(Ep* ep, Status s) {
    if (ucs_likely(s == Status::ok || s == Status::in_progress)) {
        note_posted(ep);
        return UCS_OK;
    }
    if (s == Status::no_resource) {
        ep->tx_blocked = true;
        ep->iface->attention = true;
        return UCS_ERR_NO_RESOURCE;
    }
    ucs_status_t status = to_ucs(s);
    ucs_debug("rc_roce: post on QP %u failed: %s", ep->qpn, ucs_status_string(status));
    if (s != Status::invalid_param && qp_failed(ep)) {
        queue_failure(ep->iface, ep, UCS_ERR_ENDPOINT_TIMEOUT);
        return UCS_ERR_ENDPOINT_TIMEOUT;
    }
    return status;
}

inline void complete(uct_completion_t* comp, ucs_status_t status) {
    if (comp != nullptr) {
        uct_invoke_completion(comp, status);
    }
}

// ep_amo.cpp: one compare-and-swap step of an AMO loop (also retried by progress).
Status amo_post_step(Ep* ep, Op* op);

} // namespace roce::uct
