// rc_roce atomics. The device has 64-bit fetch-add and compare-swap; every other operation
// (64-bit AND/OR/XOR/SWAP, all 32-bit ones) runs as a compare-and-swap loop (exact, see Op).
#include "ep_ops.hpp"

namespace roce::uct {
namespace {

uint64_t amo_apply(unsigned op, uint64_t old, uint64_t operand, uint64_t compare) {
    switch (op) {
    case UCT_ATOMIC_OP_AND: return old & operand;
    case UCT_ATOMIC_OP_OR: return old | operand;
    case UCT_ATOMIC_OP_XOR: return old ^ operand;
    case UCT_ATOMIC_OP_SWAP: return operand;
    case UCT_ATOMIC_OP_CSWAP: return old == compare ? operand : old;
    default: return old + operand;   // UCT_ATOMIC_OP_ADD
    }
}

// The word the next CAS stores if the remote word still holds op->expected.
uint64_t amo_desired(const Op* op) {
    if (!op->is32) {
        return amo_apply(op->amo_op, op->expected, op->operand, op->compare);
    }
    const uint64_t mask = uint64_t{0xffffffff} << op->shift;
    uint64_t old32 = (op->expected & mask) >> op->shift;
    uint64_t new32 = amo_apply(op->amo_op, old32, op->operand, op->compare) & 0xffffffff;
    return (op->expected & ~mask) | (new32 << op->shift);
}

// Starts a compare-and-swap loop; the first guess of the remote word is 0. A CAS that finds
// the guessed value has applied the operation (a CSWAP whose compare fails stores the word
// unchanged); otherwise it returns the current word to retry with.
ucs_status_t amo_loop_start(Ep* ep, bool is32, unsigned opcode, uint64_t value, uint64_t compare,
                            void* result, uint64_t remote_addr, uct_rkey_t rkey,
                            uct_completion_t* comp) {
    if (remote_addr % (is32 ? 4 : 8) != 0) {
        ucs_error("rc_roce: unaligned %d-bit atomic at 0x%" PRIx64, is32 ? 32 : 64, remote_addr);
        return UCS_ERR_INVALID_PARAM;
    }
    auto op = std::make_unique<Op>();
    op->kind = Op::Kind::amo_loop;
    op->amo_op = opcode;
    op->operand = value;
    op->compare = compare;
    op->expected = 0;
    op->is32 = is32;
    op->shift = is32 ? static_cast<unsigned>((remote_addr % atomic_word) * 8) : 0;
    op->remote_addr = remote_addr & ~uint64_t{atomic_word - 1};
    if (is32) {
        op->result32 = static_cast<uint32_t*>(result);
    } else {
        op->result = static_cast<uint64_t*>(result);
    }
    op->comp = comp;
    op->rkey = rkey32(rkey);
    ucs_status_t status = posted(ep, amo_post_step(ep, op.get()));
    if (status != UCS_OK) {
        return status;
    }
    link_op(ep, op.release());
    ++ep->amo_inflight;
    return UCS_OK;
}

} // namespace

Status amo_post_step(Ep* ep, Op* op) {
    return ep->iface->dev->post_cmp_swap(ep->qpn, wr_id_of(op), op->remote_addr, op->rkey,
                                         op->expected, amo_desired(op), &op->fetched);
}

// ---------------------------------------------------------------- atomics

ucs_status_t ep_atomic64_post(uct_ep_h tl_ep, unsigned opcode, uint64_t value, uint64_t remote_addr,
                              uct_rkey_t rkey) noexcept {
    Ep* ep = to_ep(tl_ep);
    if (opcode >= 64 || !(atomic_op_flags & UCS_BIT(opcode))) {
        return UCS_ERR_UNSUPPORTED;
    }
    ROCE_UCT_TRY("atomic64_post", return _exc_status, {
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK) {
            return status;
        }
        if (opcode == UCT_ATOMIC_OP_ADD) {
            RcDevice& dev = *ep->iface->dev;
            return posted(ep, dev.post_fetch_add(ep->qpn, wr_id_untracked(ep), remote_addr,
                                                 rkey32(rkey), value, nullptr));
        }
        return amo_loop_start(ep, false, opcode, value, 0, nullptr, remote_addr, rkey, nullptr);
    })
}

ucs_status_t ep_atomic64_fetch(uct_ep_h tl_ep, unsigned opcode, uint64_t value, uint64_t* result,
                               uint64_t remote_addr, uct_rkey_t rkey,
                               uct_completion_t* comp) noexcept {
    Ep* ep = to_ep(tl_ep);
    if (opcode >= 64 || opcode == UCT_ATOMIC_OP_CSWAP || !(atomic_fop_flags & UCS_BIT(opcode))) {
        return UCS_ERR_UNSUPPORTED;
    }
    ROCE_UCT_TRY("atomic64_fetch", return _exc_status, {
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK) {
            return status;
        }
        if (opcode != UCT_ATOMIC_OP_ADD) {
            status = amo_loop_start(ep, false, opcode, value, 0, result, remote_addr, rkey, comp);
            return status == UCS_OK ? UCS_INPROGRESS : status;
        }
        std::unique_ptr<Op> op;
        if (comp != nullptr) {
            op = std::make_unique<Op>();
            op->comp = comp;
        }
        // The device stores the old value to *result before reporting the completion.
        RcDevice& dev = *ep->iface->dev;
        status = posted(ep, dev.post_fetch_add(ep->qpn, wr_id_for(ep, op.get()), remote_addr,
                                               rkey32(rkey), value, result));
        if (status != UCS_OK) {
            return status;
        }
        if (op) {
            link_op(ep, op.release());
        }
        return UCS_INPROGRESS;
    })
}

ucs_status_t ep_atomic_cswap64(uct_ep_h tl_ep, uint64_t compare, uint64_t swap,
                               uint64_t remote_addr, uct_rkey_t rkey, uint64_t* result,
                               uct_completion_t* comp) noexcept {
    Ep* ep = to_ep(tl_ep);
    ROCE_UCT_TRY("atomic_cswap64", return _exc_status, {
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK) {
            return status;
        }
        std::unique_ptr<Op> op;
        if (comp != nullptr) {
            op = std::make_unique<Op>();
            op->comp = comp;
        }
        RcDevice& dev = *ep->iface->dev;
        status = posted(ep, dev.post_cmp_swap(ep->qpn, wr_id_for(ep, op.get()), remote_addr,
                                              rkey32(rkey), compare, swap, result));
        if (status != UCS_OK) {
            return status;
        }
        if (op) {
            link_op(ep, op.release());
        }
        return UCS_INPROGRESS;
    })
}

ucs_status_t ep_atomic32_post(uct_ep_h tl_ep, unsigned opcode, uint32_t value, uint64_t remote_addr,
                              uct_rkey_t rkey) noexcept {
    Ep* ep = to_ep(tl_ep);
    if (opcode >= 64 || !(atomic_op_flags & UCS_BIT(opcode))) {
        return UCS_ERR_UNSUPPORTED;
    }
    ROCE_UCT_TRY("atomic32_post", return _exc_status, {
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK) {
            return status;
        }
        return amo_loop_start(ep, true, opcode, value, 0, nullptr, remote_addr, rkey, nullptr);
    })
}

ucs_status_t ep_atomic32_fetch(uct_ep_h tl_ep, unsigned opcode, uint32_t value, uint32_t* result,
                               uint64_t remote_addr, uct_rkey_t rkey,
                               uct_completion_t* comp) noexcept {
    Ep* ep = to_ep(tl_ep);
    if (opcode >= 64 || opcode == UCT_ATOMIC_OP_CSWAP || !(atomic_fop_flags & UCS_BIT(opcode))) {
        return UCS_ERR_UNSUPPORTED;
    }
    ROCE_UCT_TRY("atomic32_fetch", return _exc_status, {
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK) {
            return status;
        }
        status = amo_loop_start(ep, true, opcode, value, 0, result, remote_addr, rkey, comp);
        return status == UCS_OK ? UCS_INPROGRESS : status;
    })
}

ucs_status_t ep_atomic_cswap32(uct_ep_h tl_ep, uint32_t compare, uint32_t swap,
                               uint64_t remote_addr, uct_rkey_t rkey, uint32_t* result,
                               uct_completion_t* comp) noexcept {
    Ep* ep = to_ep(tl_ep);
    ROCE_UCT_TRY("atomic_cswap32", return _exc_status, {
        ucs_status_t status = tx_check(ep);
        if (status != UCS_OK) {
            return status;
        }
        status = amo_loop_start(ep, true, UCT_ATOMIC_OP_CSWAP, swap, compare, result, remote_addr,
                                rkey, comp);
        return status == UCS_OK ? UCS_INPROGRESS : status;
    })
}

} // namespace roce::uct
