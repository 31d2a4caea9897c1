// Receive buffers go back to a receive queue in chains: one ibv_post_recv / ibv_post_srq_recv per
// 16 buffers instead of one per buffer. Each call takes the provider's queue lock and (rxe)
// publishes the ring index: per message, a cost the emulated rxe guest shows plainly.
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdint>
#include <span>

namespace roce::verbs {

// Posts the buffers `idx` (wr_id = tag | index; `sge_of(index)` says where each one is) through
// `post(first_wr, &bad)` (ibv_post_recv or ibv_post_srq_recv bound to its queue). Returns 0 or
// the first error (the buffers of that chain from `bad` on are not posted: the caller logs it).
template <typename SgeOf, typename Post>
int post_recv_chain(std::span<const uint32_t> idx, uint64_t tag, SgeOf&& sge_of, Post&& post) {
    constexpr size_t chain = 16;
    ibv_sge sge[chain];
    ibv_recv_wr wr[chain];
    for (size_t done = 0; done < idx.size();) {
        const size_t n = std::min(chain, idx.size() - done);
        for (size_t i = 0; i < n; ++i) {
            sge[i] = sge_of(idx[done + i]);
            wr[i] = {};
            wr[i].wr_id = tag | idx[done + i];
            wr[i].sg_list = &sge[i];
            wr[i].num_sge = 1;
            wr[i].next = i + 1 < n ? &wr[i + 1] : nullptr;
        }
        ibv_recv_wr* bad = nullptr;
        if (const int rc = post(wr, &bad); rc != 0)
            return rc;
        done += n;
    }
    return 0;
}

} // namespace roce::verbs
