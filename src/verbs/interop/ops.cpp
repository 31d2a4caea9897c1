// The operations of roce_interop_rxe, one check each: the userspace end (Host sw) or the kernel end
// (KernelQp) posts, the other end's memory, receive completion or message is compared byte by byte.
#include <arpa/inet.h>

#include <cstdio>
#include <cstring>

#include "verbs/interop/interop.hpp"

namespace roce::verbs::interop {

void fill(uint8_t* p, size_t n, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; ++i) {
        x = x * 1664525u + 1013904223u;
        p[i] = uint8_t(x >> 24);
    }
}

void Interop::check(const std::string& name, bool ok, const std::string& detail, double t0) {
    std::printf("check %-28s %s  %7.1f ms%s%s\n", name.c_str(), ok ? "pass" : "FAIL", now_ms() - t0,
                detail.empty() ? "" : "  ", detail.c_str());
    (ok ? passed : failed)++;
}

namespace {
std::string sz_name(size_t n) { return std::to_string(n) + "B"; }
} // namespace

// ---- userspace -> rxe

void Interop::sw_send(Link& l, size_t n, const uint32_t* imm) {
    const double t0 = now_ms();
    const uint64_t rid = next_id++, sid = next_id++;
    std::memset(kd.buf(), 0, n + 64);
    std::vector<uint8_t> src(n);
    fill(src.data(), n, uint32_t(rid));
    const bool posted = l.kq.post_recv(rid, 0, uint32_t(region));
    iovec iov{src.data(), n};
    const Status ps = sw.dev->post_send(l.sq, sid, &iov, 1, imm);
    const Status s = posted && ps == Status::ok ? sw_status(sid) : ps;
    const int r = rxe_status(rid);
    const ibv_wc* w = wc(rid);
    bool ok = s == Status::ok && r == IBV_WC_SUCCESS && w->opcode == IBV_WC_RECV && w->byte_len == n &&
              std::memcmp(kd.buf(), src.data(), n) == 0;
    if (ok && imm)
        ok = (w->wc_flags & IBV_WC_WITH_IMM) && ntohl(w->imm_data) == *imm;
    check(std::string("sw>rxe.send") + (imm ? "_imm." : ".") + sz_name(n), ok,
          "sw " + std::string(to_string(s)) + ", rxe wc " + (r < 0 ? "none" : ibv_wc_status_str(ibv_wc_status(r))), t0);
}

void Interop::sw_write(Link& l, size_t n, uint32_t rkey, bool expect_ok) {
    const double t0 = now_ms();
    const uint64_t id = next_id++;
    std::memset(kd.buf(), 0, n);
    std::vector<uint8_t> src(n);
    fill(src.data(), n, uint32_t(id));
    Status s = sw.dev->post_write(l.sq, id, src.data(), n, kd.va(0), rkey, id & 1);
    if (s == Status::ok)
        s = sw_status(id);
    const bool landed = std::memcmp(kd.buf(), src.data(), n) == 0;
    const bool ok = expect_ok ? s == Status::ok && landed : s == Status::remote_access && !landed;
    check(expect_ok ? "sw>rxe.write." + sz_name(n) : "sw>rxe.write.bad_rkey", ok, "sw " + std::string(to_string(s)), t0);
}

void Interop::sw_read(Link& l, size_t n, uint32_t rkey, bool expect_ok) {
    const double t0 = now_ms();
    const uint64_t id = next_id++;
    fill(kd.buf(), n, uint32_t(id));
    std::vector<uint8_t> dst(n, 0);
    Status s = sw.dev->post_read(l.sq, id, dst.data(), n, kd.va(0), rkey);
    if (s == Status::ok)
        s = sw_status(id);
    const bool same = std::memcmp(kd.buf(), dst.data(), n) == 0;
    const bool ok = expect_ok ? s == Status::ok && same : s == Status::remote_access;
    check(expect_ok ? "sw>rxe.read." + sz_name(n) : "sw>rxe.read.bad_rkey", ok, "sw " + std::string(to_string(s)), t0);
}

void Interop::sw_atomics(Link& l) {
    const double t0 = now_ms();
    uint64_t* target = reinterpret_cast<uint64_t*>(kd.buf() + atomic_off);
    *target = 0x1000;
    uint64_t r1 = 0, r2 = 0;
    const uint64_t a = next_id++, c = next_id++;
    Status s1 = sw.dev->post_fetch_add(l.sq, a, kd.va(atomic_off), kd.rkey(), 5, &r1);
    if (s1 == Status::ok)
        s1 = sw_status(a);
    const uint64_t after_add = *target;
    Status s2 = sw.dev->post_cmp_swap(l.sq, c, kd.va(atomic_off), kd.rkey(), 0x1005, 0xabcdef0123456789ull, &r2);
    if (s2 == Status::ok)
        s2 = sw_status(c);
    const bool ok = s1 == Status::ok && r1 == 0x1000 && after_add == 0x1005 && s2 == Status::ok && r2 == 0x1005 &&
                    *target == 0xabcdef0123456789ull;
    check("sw>rxe.atomic.fadd+cswap", ok, "", t0);
}

// ---- rxe -> userspace

void Interop::rxe_send(Link& l, size_t n, const uint32_t* imm) {
    const double t0 = now_ms();
    const uint64_t id = next_id++;
    fill(kd.buf() + src_off, n, uint32_t(id));
    sw.msgs.clear();
    const bool posted = l.kq.post_send(id, src_off, uint32_t(n), imm);
    const int r = posted ? rxe_status(id) : -2;
    drive([&] { return !sw.msgs.empty(); }, r == IBV_WC_SUCCESS ? 5 : 0.1);
    bool ok = r == IBV_WC_SUCCESS && sw.msgs.size() == 1 && sw.msgs[0].qpn == l.sq &&
              sw.msgs[0].data.size() == n && std::memcmp(sw.msgs[0].data.data(), kd.buf() + src_off, n) == 0;
    if (ok)
        ok = imm ? sw.msgs[0].has_imm && sw.msgs[0].imm == *imm : !sw.msgs[0].has_imm;
    check(std::string("rxe>sw.send") + (imm ? "_imm." : ".") + sz_name(n), ok,
          std::string("rxe wc ") + (r < 0 ? "none" : ibv_wc_status_str(ibv_wc_status(r))), t0);
}

void Interop::rxe_write(Link& l, size_t n, uint32_t rkey, bool expect_ok, const uint32_t* imm) {
    const double t0 = now_ms();
    const uint64_t id = next_id++;
    std::memset(smem.data(), 0, n);
    fill(kd.buf() + src_off, n, uint32_t(id));
    sw.msgs.clear();
    const bool posted = l.kq.post_rdma(id, imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE, src_off,
                                       uint32_t(n), sva(0), rkey, imm);
    const int r = posted ? rxe_status(id) : -2;
    const bool landed = std::memcmp(smem.data(), kd.buf() + src_off, n) == 0;
    bool ok = expect_ok ? r == IBV_WC_SUCCESS && landed : r == IBV_WC_REM_ACCESS_ERR && !landed;
    if (ok && imm) {
        drive([&] { return !sw.msgs.empty(); }, 5);
        ok = sw.msgs.size() == 1 && sw.msgs[0].has_imm && sw.msgs[0].imm == *imm && sw.msgs[0].data.empty();
    }
    const std::string name = expect_ok ? std::string("rxe>sw.write") + (imm ? "_imm." : ".") + sz_name(n)
                                       : "rxe>sw.write.bad_rkey";
    check(name, ok, std::string("rxe wc ") + (r < 0 ? "none" : ibv_wc_status_str(ibv_wc_status(r))), t0);
}

void Interop::rxe_read(Link& l, size_t n, uint32_t rkey, bool expect_ok) {
    const double t0 = now_ms();
    const uint64_t id = next_id++;
    fill(smem.data(), n, uint32_t(id));
    std::memset(kd.buf(), 0, n);
    const bool posted = l.kq.post_rdma(id, IBV_WR_RDMA_READ, 0, uint32_t(n), sva(0), rkey);
    const int r = posted ? rxe_status(id) : -2;
    const bool same = std::memcmp(smem.data(), kd.buf(), n) == 0;
    const bool ok = expect_ok ? r == IBV_WC_SUCCESS && same : r == IBV_WC_REM_ACCESS_ERR;
    check(expect_ok ? "rxe>sw.read." + sz_name(n) : "rxe>sw.read.bad_rkey", ok,
          std::string("rxe wc ") + (r < 0 ? "none" : ibv_wc_status_str(ibv_wc_status(r))), t0);
}

void Interop::rxe_atomics(Link& l) {
    const double t0 = now_ms();
    uint64_t* target = reinterpret_cast<uint64_t*>(smem.data() + atomic_off);
    uint64_t* result = reinterpret_cast<uint64_t*>(kd.buf() + atomic_off);
    *target = 0x2000;
    const uint64_t a = next_id++, c = next_id++;
    const int r1 = l.kq.post_atomic(a, IBV_WR_ATOMIC_FETCH_AND_ADD, atomic_off, sva(atomic_off), skeys.rkey, 7, 0)
                       ? rxe_status(a) : -2;
    const uint64_t orig1 = *result, after_add = *target;
    const int r2 = l.kq.post_atomic(c, IBV_WR_ATOMIC_CMP_AND_SWP, atomic_off, sva(atomic_off), skeys.rkey, 0x2007,
                                    0x0123456789abcdefull) ? rxe_status(c) : -2;
    const bool ok = r1 == IBV_WC_SUCCESS && orig1 == 0x2000 && after_add == 0x2007 && r2 == IBV_WC_SUCCESS &&
                    *result == 0x2007 && *target == 0x0123456789abcdefull;
    check("rxe>sw.atomic.fadd+cswap", ok, "", t0);
}

} // namespace roce::verbs::interop
