// rc_roce endpoints: one RC QP each, connected to the peer interface's device (CONNECT_TO_IFACE:
// the device's connection manager creates the passive QP on the other side).
//
// This file: endpoint life cycle, what progress does for endpoints (completions, pending
// queues, flushes, failures), and pending/flush/fence/check. The operations themselves are in
// ep_am_rma.cpp (active messages, PUT, GET) and ep_amo.cpp (atomics).
//
// Operations that report a completion carry an Op (wr_id = Op*), linked to their ep; when the
// ep is destroyed first, its ops are completed as canceled and become orphans that the
// device's completion then frees.
#include "ep_ops.hpp"

#include <cstring>

namespace roce::uct {

// ---------------------------------------------------------------- progress support

bool ep_has_tx_resources(const Ep* ep) {
    return !ep->tx_blocked && (ep->pending.empty() || ep->dispatching) &&
           ep->inflight < ep->iface->sq_depth;
}

// Nothing posted on the ep is unaccounted for: every completion has been polled.
bool ep_quiet(const Ep* ep) {
    return ep->pending.empty() && ep->amo_inflight == 0 && ep->inflight == 0;
}

// A flush of the ep may complete: everything before it completed, or the ep failed (its
// operations were lost with it), or it was canceled and the canceled completions came in.
bool ep_flushed(const Ep* ep) {
    if (ep->error == UCS_ERR_CANCELED) {
        return ep->inflight == 0 && ep->amo_inflight == 0;
    }
    return ep->error != UCS_OK || ep_quiet(ep);
}

bool iface_quiet(const Iface* iface) {
    for (const auto& [qpn, ep] : iface->eps) {
        if (!ep_quiet(ep)) {
            return false;
        }
    }
    return true;
}

namespace {

// Delivers the result of an Op of a live ep and calls the user back (or takes the next step
// of a compare-and-swap loop).
void finish_op(Iface* iface, Ep* ep, Op* op, ucs_status_t status) {
    if (op->kind == Op::Kind::amo_loop && status == UCS_OK && op->fetched != op->expected) {
        // Lost the race (or guessed wrong): retry with the value just read.
        op->expected = op->fetched;
        Status s = amo_post_step(ep, op);
        if (s == Status::ok || s == Status::in_progress) {
            note_posted(ep);
            return;
        }
        if (s == Status::no_resource) {
            op->queued_retry = true;
            ep->amo_retry.push_back(op);
            iface->attention = true;
            return;
        }
        status = to_ucs(s);
    }
    unlink_op(op);
    // Everything that touches the ep happens before the user's callback, which may destroy it.
    // The ep is alive, so a canceled operation was flushed by a QP failure (peer gone).
    if (status != UCS_OK) {
        queue_failure(iface, ep, status == UCS_ERR_CANCELED ? UCS_ERR_CONNECTION_RESET : status);
    }
    std::unique_ptr<Op> owned(op);
    switch (op->kind) {
    case Op::Kind::plain:
        complete(op->comp, status);
        break;
    case Op::Kind::get_bcopy:
        if (status == UCS_OK) {
            op->unpack_cb(op->unpack_arg, op->buffer.get(), op->length);
        }
        complete(op->comp, status);
        break;
    case Op::Kind::amo_loop:
        --ep->amo_inflight;
        if (status == UCS_OK) {   // deliver the value before the update
            if (op->result32 != nullptr) {
                *op->result32 = static_cast<uint32_t>(op->fetched >> op->shift);
            } else if (op->result != nullptr) {
                *op->result = op->fetched;
            }
        }
        complete(op->comp, status);
        break;
    case Op::Kind::check:
        break;
    }
}

} // namespace

bool ep_actionable(Iface* iface) {
    if (!iface->attention) {
        return false;
    }
    for (auto& [qpn, ep] : iface->eps) {
        if ((!ep->pending.empty() || !ep->amo_retry.empty()) && ep->inflight < iface->sq_depth) {
            return true;
        }
        if (!ep->flush_waiters.empty() && ep_flushed(ep)) {
            return true;
        }
    }
    return !iface->flush_waiters.empty() && iface_quiet(iface);
}

void ep_handle_completion(Iface* iface, const sw::Completion& c) {
    ucs_status_t status = to_ucs(c.status);
    if (c.wr_id & wr_id_untracked_tag) {
        auto it = iface->eps.find(c.qpn);
        const uint64_t serial = (c.wr_id >> wr_id_serial_shift) & wr_id_serial_mask;
        if (it == iface->eps.end() || (it->second->serial & wr_id_serial_mask) != serial) {
            return;   // of an ep destroyed since
        }
        Ep* ep = it->second;
        ep->inflight -= c.count;   // the device may report a run of them as one
        if (status != UCS_OK) {
            queue_failure(iface, ep,
                          status == UCS_ERR_CANCELED ? UCS_ERR_CONNECTION_RESET : status);
        }
        return;
    }
    Op* op = reinterpret_cast<Op*>(c.wr_id);
    Ep* ep = op->ep;
    if (ep == nullptr) {
        delete op;   // its ep was destroyed; the completion was reported as canceled then
        return;
    }
    --ep->inflight;
    finish_op(iface, ep, op, status);
}

// Runs after completions and receives: CAS retries, pending queues, flushes, failures.
void ep_progress_waiting(Iface* iface, unsigned& count) {
    if (iface->attention) {
        bool again = false;
        // By QPN and serial: a callback may destroy an ep and create another on its QPN.
        std::vector<std::pair<uint32_t, uint64_t>> live;
        live.reserve(iface->eps.size());
        for (auto& [qpn, ep] : iface->eps) {
            live.emplace_back(qpn, ep->serial);
        }
        for (auto [qpn, serial] : live) {
            auto find = [&]() -> Ep* {
                auto it = iface->eps.find(qpn);
                return it == iface->eps.end() || it->second->serial != serial ? nullptr : it->second;
            };
            Ep* ep = find();
            if (ep == nullptr) {
                continue;
            }
            ep->tx_blocked = false;

            // Compare-and-swap steps the device refused earlier.
            while (!ep->amo_retry.empty() && ep->error == UCS_OK) {
                Op* op = ep->amo_retry.front();
                Status s = amo_post_step(ep, op);
                if (s == Status::no_resource) {
                    break;
                }
                ep->amo_retry.erase(ep->amo_retry.begin());
                op->queued_retry = false;
                ++count;
                if (s == Status::ok || s == Status::in_progress) {
                    note_posted(ep);
                } else {
                    finish_op(iface, ep, op, to_ucs(s));   // calls the user back
                    ep = find();
                    if (ep == nullptr) {
                        break;
                    }
                }
            }
            // A failed ep cannot take them any more: complete them with its error.
            while (ep != nullptr && ep->error != UCS_OK && !ep->amo_retry.empty()) {
                Op* op = ep->amo_retry.front();
                ep->amo_retry.erase(ep->amo_retry.begin());
                op->queued_retry = false;
                finish_op(iface, ep, op, UCS_ERR_CANCELED);   // calls the user back
                ep = find();
            }
            if (ep == nullptr) {
                continue;
            }

            // Pending requests, in order, while the send queue has room.
            ep->dispatching = true;
            while (!ep->pending.empty() && ep->error == UCS_OK && ep_has_tx_resources(ep)) {
                uct_pending_req_t* req = ep->pending.front();
                ep->pending.pop_front();
                ucs_status_t status = req->func(req);
                ep = find();   // the callback may have destroyed the ep
                if (ep == nullptr) {
                    break;
                }
                if (status == UCS_OK) {
                    ++count;
                    continue;
                }
                ep->pending.push_front(req);
                if (status != UCS_INPROGRESS) {
                    break;
                }
            }
            if (ep == nullptr) {
                continue;
            }
            ep->dispatching = false;

            // Flushes wait for the completions of every operation posted before them.
            if (!ep->flush_waiters.empty() && ep_flushed(ep)) {
                std::vector<uct_completion_t*> waiters;
                waiters.swap(ep->flush_waiters);
                ucs_status_t status = ep->error;
                for (uct_completion_t* comp : waiters) {
                    uct_invoke_completion(comp, status);
                    ++count;
                }
                ep = find();
                if (ep == nullptr) {
                    continue;
                }
            }
            if (!ep->flush_waiters.empty()) {
                // Operations posted after the flush began (from a callback, another thread) are
                // waited for too: keep asking the device to complete lazy ones.
                iface->dev->complete_lazy(ep->qpn);
            }
            if (!ep->pending.empty() || !ep->flush_waiters.empty() || !ep->amo_retry.empty() ||
                ep->tx_blocked) {
                again = true;
            }
        }

        if (!iface->flush_waiters.empty()) {
            if (iface_quiet(iface)) {
                std::vector<uct_completion_t*> waiters;
                waiters.swap(iface->flush_waiters);
                for (uct_completion_t* comp : waiters) {
                    uct_invoke_completion(comp, UCS_OK);
                    ++count;
                }
            } else {
                iface->dev->complete_lazy(0);   // as for an ep's flush above
                again = true;
            }
        }
        iface->attention = again || !iface->flush_waiters.empty();
    }

    // Failures last: the error handler may destroy the ep.
    if (!iface->failures.empty()) {
        std::vector<std::pair<uint32_t, ucs_status_t>> failures;
        failures.swap(iface->failures);
        for (auto [qpn, status] : failures) {
            auto it = iface->eps.find(qpn);
            if (it == iface->eps.end() || it->second->error_reported) {
                continue;
            }
            Ep* ep = it->second;
            ep->error_reported = true;
            iface->attention = true;   // complete its flushes with the error
            ucs_status_t handled =
                    uct_iface_handle_ep_err(&iface->super.super, &ep->super.super, status);
            if (handled != UCS_OK) {
                ucs_log(uct_base_iface_failure_log_level(&iface->super, handled, status),
                        "rc_roce: endpoint %p (QP %u to %s) failed: %s", static_cast<void*>(ep),
                        qpn, ep->peer.to_string().c_str(), ucs_status_string(status));
            }
            ++count;
        }
    }
}

// ---------------------------------------------------------------- create / destroy

ucs_status_t ep_create(const uct_ep_params_t* params, uct_ep_h* ep_p) noexcept {
    UCT_EP_PARAMS_CHECK_DEV_IFACE_ADDRS(params);
    ROCE_UCT_TRY("ep_create", return _exc_status, {
        Iface* iface = to_iface(params->iface);
        AsyncGuard guard(&iface->super);
        auto ep = std::make_unique<Ep>();
        ucs_status_t status = UCS_CLASS_INIT(uct_base_ep_t, &ep->super, &iface->super);
        if (status != UCS_OK) {
            return status;
        }
        ep->iface = iface;
        ep->serial = iface->next_ep_serial++;
        ep->peer = peer_wire_addr(params->dev_addr, params->iface_addr);

        Status s = iface->dev->create_qp(ep->qpn);
        if (s == Status::ok) {
            s = iface->dev->connect_qp(ep->qpn, ep->peer);
            if (s != Status::ok) {
                iface->dev->destroy_qp(ep->qpn);
            }
        }
        if (s != Status::ok) {
            ucs_error("rc_roce: cannot connect to %s: %s", ep->peer.to_string().c_str(),
                      std::string(to_string(s)).c_str());
            UCS_CLASS_CLEANUP(uct_base_ep_t, &ep->super);
            return to_ucs(s);
        }
        iface->eps.emplace(ep->qpn, ep.get());
        ucs_debug("rc_roce: ep %p QP %u -> %s", static_cast<void*>(ep.get()), ep->qpn,
                  ep->peer.to_string().c_str());
        *ep_p = &ep.release()->super.super;
        return UCS_OK;
    })
}

void ep_destroy(uct_ep_h tl_ep) noexcept {
    Ep* ep = to_ep(tl_ep);
    Iface* iface = ep->iface;
    AsyncGuard guard(&iface->super);
    try {
        iface->eps.erase(ep->qpn);
        // A failure not reported yet must not reach an ep that reuses the QPN.
        std::erase_if(iface->failures, [ep](const auto& f) { return f.first == ep->qpn; });
        if (!ep->pending.empty()) {
            ucs_warn("rc_roce: destroying ep %p with %zu pending requests", static_cast<void*>(ep),
                     ep->pending.size());
        }
        // The QP goes first: a canceled GET's buffer may be freed by its completion callback,
        // and until then the device (or its background thread) could still write responses
        // into it. The device completes the destroyed QP's work requests later, as orphans.
        Status s = iface->dev->destroy_qp(ep->qpn);
        if (s != Status::ok) {
            ucs_debug("rc_roce: destroy_qp(%u): %s", ep->qpn, std::string(to_string(s)).c_str());
        }
        // Outstanding operations are canceled (as an RC QP flushed by destroy).
        while (Op* op = ep->ops_head) {
            unlink_op(op);
            uct_completion_t* comp = op->comp;
            op->comp = nullptr;
            if (op->queued_retry) {
                delete op;   // not on the device: nothing will report it
            }
            complete(comp, UCS_ERR_CANCELED);
        }
        for (uct_completion_t* comp : ep->flush_waiters) {
            complete(comp, UCS_ERR_CANCELED);
        }
    } catch (...) {
        exception_status("ep_destroy");
    }
    UCS_CLASS_CLEANUP(uct_base_ep_t, &ep->super);
    delete ep;
}

void ep_destroy_all(Iface* iface) {
    AsyncGuard guard(&iface->super);
    while (!iface->eps.empty()) {
        ep_destroy(&iface->eps.begin()->second->super.super);
    }
    // The canceled operations of the destroyed QPs, also those whose completions event_arm had
    // already taken out of the device: with every ep gone they are orphans, which
    // ep_handle_completion frees.
    for (const sw::Completion& c : iface->comp_stash) {
        ep_handle_completion(iface, c);
    }
    iface->comp_stash.clear();
    size_t n;
    while ((n = iface->dev->poll_completions(iface->comps.data(), iface->comps.size())) != 0) {
        for (size_t i = 0; i < n; ++i) {
            ep_handle_completion(iface, iface->comps[i]);
        }
    }
}

// ---------------------------------------------------------------- pending, flush, fence, check

ucs_status_t ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t* req, unsigned) noexcept {
    Ep* ep = to_ep(tl_ep);
    ROCE_UCT_TRY("pending_add", return _exc_status, {
        if (ep->error == UCS_OK && ep_has_tx_resources(ep)) {
            return UCS_ERR_BUSY;   // resources are free: the caller retries the operation
        }
        ep->pending.push_back(req);
        ep->iface->attention = true;
        return UCS_OK;
    })
}

void ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb, void* arg) noexcept {
    Ep* ep = to_ep(tl_ep);
    try {
        std::deque<uct_pending_req_t*> reqs;
        reqs.swap(ep->pending);
        for (uct_pending_req_t* req : reqs) {
            if (cb != nullptr) {
                cb(req, arg);
            }
        }
    } catch (...) {
        exception_status("pending_purge");
    }
}

ucs_status_t ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t* comp) noexcept {
    Ep* ep = to_ep(tl_ep);
    ROCE_UCT_TRY("ep_flush", return _exc_status, {
        if (ep->error != UCS_OK) {
            return ep->error;
        }
        if (flags & UCT_FLUSH_FLAG_CANCEL) {
            // The caller gives the ep up (UCP after a peer failure, or a forced close): what is
            // outstanding completes as canceled now, not after the peer timeout, and the ep's
            // failure is not reported (its error is set without a report), as UCX's rc
            // transports do (QP to error, no error handler). The flush completes after those
            // completions (ep_flushed). Pending requests are the caller's.
            AsyncGuard guard(&ep->iface->super);
            if (ep->error != UCS_OK) {
                return ep->error;
            }
            ep->error = UCS_ERR_CANCELED;
            ep->iface->dev->cancel_qp(ep->qpn);
            if (ep_flushed(ep)) {
                return UCS_OK;
            }
            if (comp != nullptr) {
                ep->flush_waiters.push_back(comp);
            }
            ep->iface->attention = true;
            return UCS_INPROGRESS;
        }
        // After the queued requests (the caller queues the flush too). Not while this ep's queue
        // is being dispatched: the flush is then the request at its head, and the ones queued
        // behind it would refuse it for ever.
        if (!ep->pending.empty() && !ep->dispatching) {
            return UCS_ERR_NO_RESOURCE;
        }
        // Done when every completion has been polled: a failed operation has reported its
        // error by then (the device completes all work requests, failed ones included).
        if (ep_quiet(ep)) {
            return UCS_OK;
        }
        if (comp != nullptr) {
            ep->flush_waiters.push_back(comp);
            ep->iface->attention = true;
        }
        ep->iface->dev->complete_lazy(ep->qpn);   // the untracked operations may be held back
        return UCS_INPROGRESS;
    })
}

// The responder executes the requests of a QP in PSN order (RDMA READ and atomics included),
// so operations posted after this point cannot overtake earlier ones at the target.
ucs_status_t ep_fence(uct_ep_h tl_ep, unsigned) noexcept {
    Ep* ep = to_ep(tl_ep);
    return ep->error;
}

// Keepalive probe: a 1-byte SEND with the internal AM id, dropped by the peer's glue. A dead
// peer never acknowledges it, the QP exhausts its retries and the ep fails through the error
// handler with UCS_ERR_ENDPOINT_TIMEOUT.
ucs_status_t ep_check(uct_ep_h tl_ep, unsigned flags, uct_completion_t* comp) noexcept {
    Ep* ep = to_ep(tl_ep);
    UCT_EP_KEEPALIVE_CHECK_PARAM(flags, comp);
    ROCE_UCT_TRY("ep_check", return _exc_status, {
        if (ep->error != UCS_OK) {
            return UCS_OK;   // already failed (and reported)
        }
        if (qp_failed(ep)) {
            queue_failure(ep->iface, ep, UCS_ERR_ENDPOINT_TIMEOUT);
            return UCS_OK;
        }
        auto op = std::make_unique<Op>();
        op->kind = Op::Kind::check;
        uint8_t probe = am_id_keepalive;
        iovec iov = {&probe, 1};
        Status s = ep->iface->dev->post_send(ep->qpn, wr_id_of(op.get()), &iov, 1);
        if (s == Status::ok || s == Status::in_progress) {
            note_posted(ep);
            link_op(ep, op.release());
        } else if (s != Status::no_resource) {
            // The QP failed after the check above (the device's thread found it): reported as
            // for any operation. no_resource: operations in flight detect a dead peer the same way.
            posted(ep, s);
        }
        return UCS_OK;
    })
}

} // namespace roce::uct
