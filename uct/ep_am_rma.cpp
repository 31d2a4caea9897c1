// rc_roce active messages and RMA.
//
// Active messages are SENDs: 1 byte AM id, then the header, then the payload. The device copies
// SEND iovecs before returning, so every AM completes at once (zcopy included) and needs no
// completion. PUT short/bcopy are copying RDMA WRITEs; PUT/GET zcopy and GET bcopy complete
// through the device's completions.
#include "ep_ops.hpp"

#include <cstring>

namespace roce::uct {
namespace {

// The single contiguous buffer of a put/get zcopy (max_iov is 1): the one non-empty piece of
// `iov` (false if there are several) and the key of its memory handle (0 without one): UCP
// registers zero-copy buffers (UCT_MD_FLAG_NEED_MEMH while the registration cache is on), and the
// device then needs no lookup or registration of its own.
bool single_buffer(const uct_iov_t* iov, size_t iovcnt, void*& buffer, size_t& length,
                   uint32_t* lkey = nullptr) {
    buffer = nullptr;
    length = 0;
    if (lkey != nullptr) *lkey = 0;
    for (size_t i = 0; i < iovcnt; ++i) {
        size_t len = uct_iov_get_length(&iov[i]);
        if (len == 0) {
            continue;
        }
        if (length != 0 || (iov[i].count > 1 && iov[i].stride != iov[i].length)) {
            return false;
        }
        buffer = iov[i].buffer;
        length = len;
        const auto* memh = static_cast<const Memh*>(iov[i].memh);
        if (lkey != nullptr && memh != UCT_MEM_HANDLE_NULL && memh->registered) *lkey = memh->keys.lkey;
    }
    return true;
}

// PUT and GET zcopy: one registered buffer in place, and an Op only when the caller wants a
// completion (without one, flush counts the WR off).
template <typename Post>
ucs_status_t rdma_zcopy(Ep* ep, const char* name, const uct_iov_t* iov, size_t iovcnt,
                        uct_completion_t* comp, Post&& post) noexcept {
    ROCE_UCT_TRY(name, return _exc_status, {
        void* buffer;
        size_t length;
        uint32_t lkey;
        if (!single_buffer(iov, iovcnt, buffer, length, &lkey)) {
            return UCS_ERR_UNSUPPORTED;
        }
        UCT_CHECK_LENGTH(length, 0, max_rdma_msg, name);
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK || length == 0) {
            return status;
        }
        std::unique_ptr<Op> op;
        if (comp != nullptr) {
            op = std::make_unique<Op>();
            op->comp = comp;
        }
        status = posted(ep, post(*ep->iface->dev, ep->qpn, wr_id_for(ep, op.get()), buffer, length, lkey));
        if (status != UCS_OK) {
            return status;
        }
        if (op) {
            link_op(ep, op.release());
        }
        return UCS_INPROGRESS;
    })
}

} // namespace

// ---------------------------------------------------------------- active messages

ucs_status_t ep_am_short(uct_ep_h tl_ep, uint8_t id, uint64_t header, const void* payload,
                         unsigned length) noexcept {
    Ep* ep = to_ep(tl_ep);
    Iface* iface = ep->iface;
    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(sizeof(header) + length, 0,
                     std::min<size_t>(iface->max_msg - 1, iface->mtu - 1), "am_short");
    ROCE_UCT_TRY("am_short", return _exc_status, {
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK) {
            return status;
        }
        iovec iov[3] = {{&id, 1}, {&header, sizeof(header)}, {const_cast<void*>(payload), length}};
        return posted(ep, iface->dev->post_send(ep->qpn, wr_id_untracked(ep), iov, length ? 3 : 2));
    })
}

ucs_status_t ep_am_short_iov(uct_ep_h tl_ep, uint8_t id, const uct_iov_t* uiov,
                             size_t iovcnt) noexcept {
    Ep* ep = to_ep(tl_ep);
    Iface* iface = ep->iface;
    UCT_CHECK_AM_ID(id);
    ROCE_UCT_TRY("am_short_iov", return _exc_status, {
        iovec iov[max_send_iov];
        iov[0] = {&id, 1};
        size_t used = 1, total = 0;
        if (!append_iov(uiov, iovcnt, iov, used, total)) {
            ucs_error("rc_roce: am_short_iov: too many iovecs (%zu)", iovcnt);
            return UCS_ERR_INVALID_PARAM;
        }
        UCT_CHECK_LENGTH(total, 0, std::min<size_t>(iface->max_msg - 1, iface->mtu - 1),
                         "am_short_iov");
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK) {
            return status;
        }
        return posted(ep, iface->dev->post_send(ep->qpn, wr_id_untracked(ep), iov, used));
    })
}

ssize_t ep_am_bcopy(uct_ep_h tl_ep, uint8_t id, uct_pack_callback_t pack_cb, void* arg,
                    unsigned) noexcept {
    Ep* ep = to_ep(tl_ep);
    Iface* iface = ep->iface;
    UCT_CHECK_AM_ID(id);
    ROCE_UCT_TRY("am_bcopy", return _exc_status, {
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK) {
            return status;
        }
        uint8_t* buf = pack_buffer(iface->max_msg + 64);
        buf[0] = id;
        size_t length = pack_cb(buf + 1, arg);
        UCT_CHECK_LENGTH(length, 0, iface->max_msg - 1, "am_bcopy");
        iovec iov = {buf, 1 + length};
        status = posted(ep, iface->dev->post_send(ep->qpn, wr_id_untracked(ep), &iov, 1));
        return status == UCS_OK ? static_cast<ssize_t>(length) : static_cast<ssize_t>(status);
    })
}

ucs_status_t ep_am_zcopy(uct_ep_h tl_ep, uint8_t id, const void* header, unsigned header_length,
                         const uct_iov_t* uiov, size_t iovcnt, unsigned,
                         uct_completion_t*) noexcept {
    Ep* ep = to_ep(tl_ep);
    Iface* iface = ep->iface;
    UCT_CHECK_AM_ID(id);
    UCT_CHECK_LENGTH(header_length, 0, std::min<size_t>(128, (iface->max_msg - 1) / 2),
                     "am_zcopy header");
    ROCE_UCT_TRY("am_zcopy", return _exc_status, {
        iovec iov[max_send_iov];
        iov[0] = {&id, 1};
        size_t used = 1, total = header_length;
        if (header_length != 0) {
            iov[used++] = {const_cast<void*>(header), header_length};
        }
        if (!append_iov(uiov, iovcnt, iov, used, total)) {
            ucs_error("rc_roce: am_zcopy: too many iovecs (%zu)", iovcnt);
            return UCS_ERR_INVALID_PARAM;
        }
        UCT_CHECK_LENGTH(total, 0, iface->max_msg - 1, "am_zcopy");
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK) {
            return status;
        }
        // The device copied the data: the operation is complete, the completion is not used.
        return posted(ep, iface->dev->post_send(ep->qpn, wr_id_untracked(ep), iov, used));
    })
}

// ---------------------------------------------------------------- RMA

ucs_status_t ep_put_short(uct_ep_h tl_ep, const void* buffer, unsigned length,
                          uint64_t remote_addr, uct_rkey_t rkey) noexcept {
    Ep* ep = to_ep(tl_ep);
    UCT_CHECK_LENGTH(length, 0, ep->iface->mtu, "put_short");
    ROCE_UCT_TRY("put_short", return _exc_status, {
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK || length == 0) {
            return status;
        }
        RcDevice& dev = *ep->iface->dev;
        return posted(ep, dev.post_write(ep->qpn, wr_id_untracked(ep), buffer, length,
                                         remote_addr, rkey32(rkey), true));
    })
}

ssize_t ep_put_bcopy(uct_ep_h tl_ep, uct_pack_callback_t pack_cb, void* arg, uint64_t remote_addr,
                     uct_rkey_t rkey) noexcept {
    Ep* ep = to_ep(tl_ep);
    Iface* iface = ep->iface;
    ROCE_UCT_TRY("put_bcopy", return _exc_status, {
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK) {
            return status;
        }
        uint8_t* buf = pack_buffer(iface->bcopy_size + 64);
        size_t length = pack_cb(buf, arg);
        UCT_CHECK_LENGTH(length, 0, iface->bcopy_size, "put_bcopy");
        if (length == 0) {
            return 0;
        }
        status = posted(ep, iface->dev->post_write(ep->qpn, wr_id_untracked(ep), buf, length,
                                                   remote_addr, rkey32(rkey), true));
        return status == UCS_OK ? static_cast<ssize_t>(length) : static_cast<ssize_t>(status);
    })
}

ucs_status_t ep_put_zcopy(uct_ep_h tl_ep, const uct_iov_t* iov, size_t iovcnt, uint64_t remote_addr,
                          uct_rkey_t rkey, uct_completion_t* comp) noexcept {
    UCT_CHECK_IOV_SIZE(iovcnt, 1ul, "put_zcopy");
    return rdma_zcopy(to_ep(tl_ep), "put_zcopy", iov, iovcnt, comp,
                      [&](RcDevice& dev, uint32_t qpn, uint64_t wr_id, void* buffer, size_t length, uint32_t lkey) {
                          return dev.post_write(qpn, wr_id, buffer, length, remote_addr, rkey32(rkey), false, lkey);
                      });
}

ucs_status_t ep_get_bcopy(uct_ep_h tl_ep, uct_unpack_callback_t unpack_cb, void* arg, size_t length,
                          uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t* comp) noexcept {
    Ep* ep = to_ep(tl_ep);
    UCT_CHECK_LENGTH(length, 0, ep->iface->bcopy_size, "get_bcopy");
    ROCE_UCT_TRY("get_bcopy", return _exc_status, {
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK) {
            return status;
        }
        if (length == 0) {
            unpack_cb(arg, nullptr, 0);
            return UCS_OK;
        }
        auto op = std::make_unique<Op>();
        op->kind = Op::Kind::get_bcopy;
        op->comp = comp;
        op->unpack_cb = unpack_cb;
        op->unpack_arg = arg;
        op->length = length;
        op->buffer.reset(new uint8_t[length]);
        RcDevice& dev = *ep->iface->dev;
        status = posted(ep, dev.post_read(ep->qpn, wr_id_for(ep, op.get()), op->buffer.get(),
                                          length, remote_addr, rkey32(rkey)));
        if (status != UCS_OK) {
            return status;
        }
        link_op(ep, op.release());
        return UCS_INPROGRESS;
    })
}

ucs_status_t ep_get_zcopy(uct_ep_h tl_ep, const uct_iov_t* iov, size_t iovcnt, uint64_t remote_addr,
                          uct_rkey_t rkey, uct_completion_t* comp) noexcept {
    UCT_CHECK_IOV_SIZE(iovcnt, 1ul, "get_zcopy");
    return rdma_zcopy(to_ep(tl_ep), "get_zcopy", iov, iovcnt, comp,
                      [&](RcDevice& dev, uint32_t qpn, uint64_t wr_id, void* buffer, size_t length, uint32_t lkey) {
                          return dev.post_read(qpn, wr_id, buffer, length, remote_addr, rkey32(rkey), lkey);
                      });
}

} // namespace roce::uct
