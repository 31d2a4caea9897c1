// Tests of the verbs backend need kernel rxe0, which only the rxe guest has (this host's kernel has
// no RDMA). Elsewhere they skip; in the guest (ROCE_REQUIRE_RXE_DEVICE=1) a missing rxe0 fails
// them instead, so a guest that lost its device cannot pass by skipping everything.
#pragma once

#include <cstdlib>
#include <cstring>
#include <gtest/gtest.h>
#include <unistd.h>

namespace roce::test {

inline bool have_rxe0() { return access("/sys/class/infiniband/rxe0", F_OK) == 0; }

inline bool rxe_required() {
    const char* e = std::getenv("ROCE_REQUIRE_RXE_DEVICE");
    return e && std::strcmp(e, "1") == 0;
}

} // namespace roce::test

// In a test body or fixture SetUp: returns from it (failed or skipped) when rxe0 is absent.
#define ROCE_NEED_RXE0()                                                                            \
    do {                                                                                            \
        if (!::roce::test::have_rxe0()) {                                                           \
            if (::roce::test::rxe_required())                                                       \
                FAIL() << "rxe0 absent but ROCE_REQUIRE_RXE_DEVICE=1";                              \
            GTEST_SKIP() << "no rxe0 (runs in the rxe guest: cmake/rxe-guest/tests/verbs-backend.sh)"; \
        }                                                                                           \
    } while (0)
