// ud_roce endpoints: an address (a transport peer), AMs, pending queue, flush, keepalive and
// failure reports.
#include "ud_glue.hpp"

#include <arpa/inet.h>

#include <cstring>

#include "netdev.hpp"

namespace roce::uct {
namespace {

// The pending queue is linked through the requests' priv area (UCT leaves it to transports).
uct_pending_req_t*& next_of(uct_pending_req_t* r) {
    static_assert(sizeof(r->priv) >= sizeof(uct_pending_req_t*));
    return *reinterpret_cast<uct_pending_req_t**>(r->priv);
}

void set_waiting(UdEp* ep) {
    if (!ep->waiting) {
        ep->waiting = true;
        ep->iface->waiting.push_back(ep);
    }
}

ucs_status_t send(UdEp* ep, uint8_t am_id, const iovec* iov, size_t iovcnt) {
    if (ucs_unlikely(ep->error != UCS_OK || !ep->connected)) {
        return ep->connected ? ep->error : UCS_ERR_NOT_CONNECTED;
    }
    // Nothing overtakes a queued request: UCP sends a message's fragments in order and queues
    // the rest once one is refused.
    if (ucs_unlikely(ep->pending_head != nullptr && !ep->dispatching)) {
        return UCS_ERR_NO_RESOURCE;
    }
    const Status s = ep->iface->tr->send_am(ep->peer, am_id, iov, iovcnt);
    if (ucs_likely(s == Status::ok)) {
        return UCS_OK;
    }
    if (s == Status::no_resource) {
        UCS_STATS_UPDATE_COUNTER(ep->iface->super.stats, UCT_IFACE_STAT_TX_NO_RES, 1);
        return UCS_ERR_NO_RESOURCE;
    }
    // The peer failed (reported from progress), or the message needs more packets of the
    // peer's MTU than TX_QUEUE_LEN holds (Transport::peer warned).
    return to_ucs(s);
}

bool ep_listed(UdIface* iface, ud::Transport::PeerId peer, const UdEp* ep) {
    for (UdEp* e = iface->ep_by_peer[peer]; e != nullptr; e = e->next_of_peer) {
        if (e == ep) return true;
    }
    return false;
}

} // namespace

namespace {

// The peer a device address + interface (or endpoint) address names, the largest payload its QP
// takes and its class advert; false if malformed/foreign.
bool peer_address(UdIface* iface, const uct_device_addr_t* dev_addr, const void* addr_bytes,
                  ud::UdAddr& addr, size_t& max_payload, ud::ClassAdvert& cls) {
    const DevAddrView dev = unpack_dev_addr(dev_addr);
    addr.net.family = static_cast<uint8_t>(dev.family);
    std::memcpy(addr.net.ip, dev.ip, sizeof(addr.net.ip));
    if (!unpack_iface_addr(addr_bytes, addr, max_payload, cls) ||
        addr.net.family != iface->tr->address().net.family) {
        ucs_error("ud_roce: cannot connect to %s (MTU code 0x%02x): malformed or foreign address, or one of "
                  "a build with another address format", addr.to_string().c_str(),
                  unsigned(static_cast<const uint8_t*>(addr_bytes)[offsetof(UdIfaceAddr, mtu)]));
        return false;
    }
    return true;
}

void attach(UdEp* ep, const ud::UdAddr& addr, size_t max_payload, const ud::ClassAdvert& cls) {
    UdIface* iface = ep->iface;
    ep->peer = iface->tr->peer(addr, max_payload, &cls);
    ep->connected = true;
    if (iface->ep_by_peer.size() <= ep->peer) {
        iface->ep_by_peer.resize(size_t(ep->peer) + 1, nullptr);
    }
    ep->next_of_peer = iface->ep_by_peer[ep->peer];
    iface->ep_by_peer[ep->peer] = ep;
    const Status peer_status = iface->tr->peer_status(ep->peer);
    if (peer_status != Status::ok) {
        // A peer that failed before: the new endpoint is failed too, and says so.
        iface->failures.emplace_back(ep->peer, peer_status);
    }
    ucs_debug("ud_roce: ep %p to %s (peer %u, %zu bytes per packet)", ep, addr.to_string().c_str(), ep->peer,
              iface->tr->packet_payload(ep->peer));
}

} // namespace

// CONNECT_TO_IFACE (device + interface address), or CONNECT_TO_EP: an endpoint of the interface
// alone, connected later by ud_ep_connect_to_ep. An endpoint address is the interface address:
// every endpoint of a peer shares its sequence numbers.
ucs_status_t ud_ep_create(const uct_ep_params_t* params, uct_ep_h* ep_p) noexcept {
    ROCE_UCT_TRY("ud_ep_create", return _exc_status, {
        const uint64_t both = UCT_EP_PARAM_FIELD_DEV_ADDR | UCT_EP_PARAM_FIELD_IFACE_ADDR;
        const bool to_iface = ucs_test_all_flags(params->field_mask, both);
        UCT_CHECK_PARAM(to_iface || !(params->field_mask & both),
                        "give both UCT_EP_PARAM_FIELD_DEV_ADDR and _IFACE_ADDR, or neither");
        UCT_CHECK_PARAM(params->field_mask & UCT_EP_PARAM_FIELD_IFACE,
                        "UCT_EP_PARAM_FIELD_IFACE is not defined");
        UdIface* iface = to_ud_iface(params->iface);
        AsyncGuard guard(&iface->super);
        ud::UdAddr addr;
        size_t max_payload = 0;
        ud::ClassAdvert cls{};
        if (to_iface && !peer_address(iface, params->dev_addr, params->iface_addr, addr, max_payload, cls)) {
            return UCS_ERR_INVALID_ADDR;
        }
        auto ep = std::make_unique<UdEp>();
        ucs_status_t status = UCS_CLASS_INIT(uct_base_ep_t, &ep->super, &iface->super);
        if (status != UCS_OK) {
            return status;
        }
        ep->iface = iface;
        if (to_iface) {
            attach(ep.get(), addr, max_payload, cls);
        }
        *ep_p = &ep.release()->super.super;
        return UCS_OK;
    })
}

ucs_status_t ud_ep_get_address(uct_ep_h tl_ep, uct_ep_addr_t* addr) noexcept {
    UdEp* ep = to_ud_ep(tl_ep);
    AsyncGuard guard(&ep->iface->super);
    const UdIfaceAddr ia = pack_iface_addr(*ep->iface->tr);
    std::memcpy(addr, &ia, sizeof(ia));
    return UCS_OK;
}

ucs_status_t ud_ep_connect_to_ep(uct_ep_h tl_ep, const uct_device_addr_t* dev_addr,
                                 const uct_ep_addr_t* ep_addr) noexcept {
    UdEp* ep = to_ud_ep(tl_ep);
    AsyncGuard guard(&ep->iface->super);
    ROCE_UCT_TRY("ud_ep_connect_to_ep", return _exc_status, {
        if (ep->connected) {
            ucs_error("ud_roce: ep %p is connected already", ep);
            return UCS_ERR_INVALID_PARAM;
        }
        ud::UdAddr addr;
        size_t max_payload = 0;
        ud::ClassAdvert cls{};
        if (dev_addr == nullptr || ep_addr == nullptr ||
            !peer_address(ep->iface, dev_addr, ep_addr, addr, max_payload, cls)) {
            return UCS_ERR_INVALID_ADDR;
        }
        attach(ep, addr, max_payload, cls);
        return UCS_OK;
    })
}

void ud_ep_destroy(uct_ep_h tl_ep) noexcept {
    UdEp* ep = to_ud_ep(tl_ep);
    UdIface* iface = ep->iface;
    AsyncGuard guard(&iface->super);
    try {
        // The transport keeps the peer (its sequence numbers must survive a new endpoint) and
        // finishes delivering what was sent.
        for (UdEp** link = ep->connected ? &iface->ep_by_peer[ep->peer] : nullptr;
             link != nullptr && *link != nullptr; link = &(*link)->next_of_peer) {
            if (*link == ep) {
                *link = ep->next_of_peer;
                break;
            }
        }
        if (ep->waiting) {
            auto& w = iface->waiting;
            w.erase(std::remove(w.begin(), w.end(), ep), w.end());
        }
        for (uct_completion_t* c : ep->flush_waiters) {
            uct_invoke_completion(c, UCS_ERR_CANCELED);
        }
    } catch (...) {
        exception_status("ud_ep_destroy");
    }
    UCS_CLASS_CLEANUP(uct_base_ep_t, &ep->super);
    delete ep;
}

void ud_ep_destroy_all(UdIface* iface) {
    for (UdEp*& head : iface->ep_by_peer) {
        while (head != nullptr) {
            ud_ep_destroy(&head->super.super);
        }
    }
}

ucs_status_t ud_ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header, const void* payload,
                            unsigned length) noexcept {
    UdEp* ep = to_ud_ep(tl_ep);
    AsyncGuard guard(&ep->iface->super);
    ROCE_UCT_TRY("ud_ep_am_short", return _exc_status, {
        iovec iov[2] = {{&header, sizeof(header)}, {const_cast<void*>(payload), length}};
        const ucs_status_t s = send(ep, id, iov, 2);
        if (s == UCS_OK) {
            uct_iface_trace_am(&ep->iface->super, UCT_AM_TRACE_TYPE_SEND, id, &header,
                               length + sizeof(header), "TX: AM_SHORT");
            UCT_TL_EP_STAT_OP(&ep->super, AM, SHORT, sizeof(header) + length);
        }
        return s;
    })
}

ucs_status_t ud_ep_am_short_iov(uct_ep_h tl_ep, uint8_t id, const uct_iov_t* iov,
                                size_t iovcnt) noexcept {
    UdEp* ep = to_ud_ep(tl_ep);
    AsyncGuard guard(&ep->iface->super);
    ROCE_UCT_TRY("ud_ep_am_short_iov", return _exc_status, {
        iovec v[max_send_iov];
        size_t n = 0, total = 0;
        if (!append_iov(iov, iovcnt, v, n, total)) {
            ucs_error("ud_roce: am_short_iov: more than %zu pieces", max_send_iov);
            return UCS_ERR_INVALID_PARAM;
        }
        const ucs_status_t s = send(ep, id, v, n);
        if (s == UCS_OK) {
            UCT_TL_EP_STAT_OP(&ep->super, AM, SHORT, total);
        }
        return s;
    })
}

ssize_t ud_ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb, void* arg,
                       unsigned flags) noexcept {
    UdEp* ep = to_ud_ep(tl_ep);
    AsyncGuard guard(&ep->iface->super);
    ROCE_UCT_TRY("ud_ep_am_bcopy", return _exc_status, {
        UdIface* iface = ep->iface;
        if (ep->error != UCS_OK || !ep->connected) {
            return ep->connected ? ep->error : UCS_ERR_NOT_CONNECTED;
        }
        // Check for room first: pack_cb consumes the caller's data (it must not run twice).
        if ((ep->pending_head != nullptr && !ep->dispatching) ||
            !iface->tr->can_send(ep->peer, iface->max_msg)) {
            return UCS_ERR_NO_RESOURCE;
        }
        const size_t length = pack_cb(iface->bcopy_buf.get(), arg);
        iovec iov{iface->bcopy_buf.get(), length};
        const ucs_status_t s = send(ep, id, &iov, 1);
        if (s != UCS_OK) {
            return s;
        }
        uct_iface_trace_am(&iface->super, UCT_AM_TRACE_TYPE_SEND, id, iface->bcopy_buf.get(),
                           length, "TX: AM_BCOPY");
        UCT_TL_EP_STAT_OP(&ep->super, AM, BCOPY, length);
        return static_cast<ssize_t>(length);
    })
}

// The transport copies the data into its retransmission queue before returning, so the
// operation is complete at once (UCS_OK: `comp` is not called).
ucs_status_t ud_ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void* header, unsigned header_length,
                            const uct_iov_t* iov, size_t iovcnt, unsigned flags,
                            uct_completion_t* comp) noexcept {
    UdEp* ep = to_ud_ep(tl_ep);
    AsyncGuard guard(&ep->iface->super);
    ROCE_UCT_TRY("ud_ep_am_zcopy", return _exc_status, {
        iovec v[max_send_iov];
        v[0] = {const_cast<void*>(header), header_length};
        size_t n = 1, total = header_length;
        if (!append_iov(iov, iovcnt, v, n, total)) {
            ucs_error("ud_roce: am_zcopy: more than %zu pieces", max_send_iov - 1);
            return UCS_ERR_INVALID_PARAM;
        }
        const ucs_status_t s = send(ep, id, v, n);
        if (s == UCS_OK) {
            UCT_TL_EP_STAT_OP(&ep->super, AM, ZCOPY, total);
        }
        return s;
    })
}

ucs_status_t ud_ep_pending_add(uct_ep_h tl_ep, uct_pending_req_t* req, unsigned) noexcept {
    UdEp* ep = to_ud_ep(tl_ep);
    AsyncGuard guard(&ep->iface->super);
    ROCE_UCT_TRY("ud_ep_pending_add", return _exc_status, {
        if (!ep->connected) {
            return UCS_ERR_NOT_CONNECTED;
        }
        if (ep->pending_head == nullptr && ep->error == UCS_OK &&
            ep->iface->tr->can_send(ep->peer, ep->iface->max_msg)) {
            return UCS_ERR_BUSY;   // resources are there: the caller retries the operation
        }
        next_of(req) = nullptr;
        if (ep->pending_tail != nullptr) {
            next_of(ep->pending_tail) = req;
        } else {
            ep->pending_head = req;
        }
        ep->pending_tail = req;
        set_waiting(ep);
        UCT_TL_EP_STAT_PEND(&ep->super);
        return UCS_OK;
    })
}

void ud_ep_pending_purge(uct_ep_h tl_ep, uct_pending_purge_callback_t cb, void* arg) noexcept {
    UdEp* ep = to_ud_ep(tl_ep);
    AsyncGuard guard(&ep->iface->super);
    uct_pending_req_t* r = ep->pending_head;
    ep->pending_head = ep->pending_tail = nullptr;
    while (r != nullptr) {
        uct_pending_req_t* next = next_of(r);
        if (cb != nullptr) {
            cb(r, arg);
        }
        r = next;
    }
}

ucs_status_t ud_ep_flush(uct_ep_h tl_ep, unsigned flags, uct_completion_t* comp) noexcept {
    UdEp* ep = to_ud_ep(tl_ep);
    AsyncGuard guard(&ep->iface->super);
    ROCE_UCT_TRY("ud_ep_flush", return _exc_status, {
        if (ep->error != UCS_OK) {
            return ep->error;
        }
        if (!ep->connected) {
            return UCS_OK;   // nothing was sent
        }
        if (flags & UCT_FLUSH_FLAG_CANCEL) {
            // Nothing to cancel locally that the peer could still be waiting for: what was
            // sent is retransmitted until acknowledged, pending requests belong to the caller.
            return UCS_OK;
        }
        // After the queued requests; not while they are dispatched: the flush is then the one at
        // the head, and those behind it would refuse it for ever.
        if (ep->pending_head != nullptr && !ep->dispatching) {
            return UCS_ERR_NO_RESOURCE;
        }
        if (ep->iface->tr->flushed(ep->peer)) {
            // A failed peer counts as flushed: one found dead whose failure progress has not
            // reported yet (the background thread finds them while the owner is away) had
            // data not acknowledged. Read after flushed(): a failure found in between is seen.
            if (const Status ps = ep->iface->tr->peer_status(ep->peer); ps != Status::ok) {
                return to_ucs(ps);
            }
            UCT_TL_EP_STAT_FLUSH(&ep->super);
            return UCS_OK;
        }
        if (comp != nullptr) {
            ep->flush_waiters.push_back(comp);
            set_waiting(ep);
        }
        UCT_TL_EP_STAT_FLUSH_WAIT(&ep->super);
        return UCS_INPROGRESS;
    })
}

ucs_status_t ud_ep_check(uct_ep_h tl_ep, unsigned flags, uct_completion_t* comp) noexcept {
    UdEp* ep = to_ud_ep(tl_ep);
    AsyncGuard guard(&ep->iface->super);
    UCT_EP_KEEPALIVE_CHECK_PARAM(flags, comp);
    ROCE_UCT_TRY("ud_ep_check", return _exc_status, {
        if (ep->error == UCS_OK && ep->connected) {
            // A sequenced probe: acknowledged by a live peer, else the peer times out and
            // progress reports the failure.
            ep->iface->tr->probe(ep->peer);
        }
        return UCS_OK;
    })
}

void ud_progress_waiting(UdIface* iface, unsigned& count) {
    if (!iface->waiting.empty()) {
        std::vector<UdEp*> eps;
        eps.swap(iface->waiting);
        for (UdEp* ep : eps) {
            ep->waiting = false;
        }
        for (size_t i = 0; i < eps.size(); ++i) {
            UdEp* ep = eps[i];
            // Dispatch pending requests while the peer has room; a request that cannot go
            // returns to the front.
            while (ep->pending_head != nullptr && ep->error == UCS_OK &&
                   iface->tr->can_send(ep->peer, iface->max_msg)) {
                uct_pending_req_t* r = ep->pending_head;
                ep->pending_head = next_of(r);
                if (ep->pending_head == nullptr) ep->pending_tail = nullptr;
                ep->dispatching = true;
                const ucs_status_t s = r->func(r);
                ep->dispatching = false;
                if (s == UCS_OK) {
                    ++count;
                    continue;
                }
                next_of(r) = ep->pending_head;
                ep->pending_head = r;
                if (ep->pending_tail == nullptr) ep->pending_tail = r;
                break;
            }
            if (!ep->flush_waiters.empty() && (ep->error != UCS_OK ||
                (ep->pending_head == nullptr && iface->tr->flushed(ep->peer)))) {
                std::vector<uct_completion_t*> done;
                done.swap(ep->flush_waiters);
                // A failed peer counts as flushed (nothing more will be sent to it), but this
                // progress call may have found the failure before reporting it: the waiters
                // learn it now, not success.
                const Status ps = iface->tr->peer_status(ep->peer);
                const ucs_status_t st = ep->error != UCS_OK ? ep->error
                                        : ps != Status::ok  ? to_ucs(ps)
                                                            : UCS_OK;
                for (uct_completion_t* c : done) {
                    uct_invoke_completion(c, st);
                }
                count += unsigned(done.size());
            }
            // (a failed endpoint's pending requests wait for the owner to purge them)
            if ((ep->pending_head != nullptr && ep->error == UCS_OK) || !ep->flush_waiters.empty()) {
                set_waiting(ep);
            }
        }
    }
    if (!iface->flush_waiters.empty() && iface->waiting.empty() && iface->tr->all_flushed()) {
        std::vector<uct_completion_t*> done;
        done.swap(iface->flush_waiters);
        for (uct_completion_t* c : done) {
            uct_invoke_completion(c, UCS_OK);
        }
        count += unsigned(done.size());
    }
}

void ud_report_failures(UdIface* iface, unsigned& count) {
    if (iface->failures.empty()) {
        return;
    }
    std::vector<std::pair<ud::Transport::PeerId, Status>> failures;
    failures.swap(iface->failures);
    for (auto& [peer, why] : failures) {
        if (peer >= iface->ep_by_peer.size()) continue;
        std::vector<UdEp*> eps;
        for (UdEp* e = iface->ep_by_peer[peer]; e != nullptr; e = e->next_of_peer) {
            eps.push_back(e);
        }
        const ucs_status_t status = to_ucs(why);
        for (UdEp* ep : eps) {
            // A handler may destroy endpoints: only those still listed are reported.
            if (!ep_listed(iface, peer, ep) || ep->error_reported) continue;
            ep->error = status;
            ep->error_reported = true;
            set_waiting(ep);   // its flush waiters complete with the error
            ++count;
            // Not handled (UCP without error handling): fatal, as UCX's own transports make it —
            // UCP would wait for ever for replies to what was lost. A restarted peer that had
            // taken all we sent (reset) lost nothing of ours; as with UCX's ud the endpoint just
            // ends, but a reply the old process owed (a rendezvous, a sync send) will not come.
            const ucs_status_t handled = uct_iface_handle_ep_err(&iface->super.super, &ep->super.super, status);
            if (handled != UCS_OK && status == UCS_ERR_CONNECTION_RESET) {
                ucs_warn("ud_roce: endpoint %p (to %s): the peer process was replaced; all we sent had "
                         "arrived, but a reply it still owed will never come (UCP without error handling "
                         "cannot fail such requests)", static_cast<void*>(ep),
                         iface->tr->peer_addr(peer).to_string().c_str());
            } else if (handled != UCS_OK) {
                ucs_log(uct_base_iface_failure_log_level(&iface->super, handled, status),
                        "ud_roce: endpoint %p (to %s) failed: %s", static_cast<void*>(ep),
                        iface->tr->peer_addr(peer).to_string().c_str(), ucs_status_string(status));
            }
        }
    }
}

} // namespace roce::uct
