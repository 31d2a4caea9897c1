/*
 * UCT-level self-test of the rc_roce glue, through the public UCT API only (the plugin is
 * LD_PRELOADed by CTest). Two interfaces of one process on the same netdev talk to each other.
 *
 *   uct_selftest basic   AM short/bcopy, PUT/GET (short, bcopy, zcopy), 64- and 32-bit atomics
 *                        with their values checked, flush (ep/iface), send-queue exhaustion,
 *                        AM alignment parameter checks, rkey validation, MD allocation
 *   uct_selftest failure a peer that is gone: the QP fails, the error handler runs once,
 *                        later operations and flushes return the error
 *   uct_selftest flushfail a flush waiting for data to a peer that dies completes with an
 *                        error, also when the failure was found while nobody progressed
 *   uct_selftest flushpend a flush queued as a pending request goes when its turn comes, with
 *                        another request queued behind it
 *   uct_selftest cancel  (rc_roce) flush with UCT_FLUSH_FLAG_CANCEL of an ep whose peer is gone:
 *                        what is outstanding completes as canceled at once, the flush with
 *                        UCS_ERR_CANCELED, and the error handler is not called
 *   uct_selftest events  event_arm / event fd: armed, then readable when an AM arrives
 *   uct_selftest badinput unknown device and memory domain, malformed peer address, foreign
 *                        rkey, wrong rkey, out-of-bounds WRITE/READ: each a clear error, the
 *                        target memory unchanged, the process alive
 *   uct_selftest churn   endpoints created and destroyed on UCX's async thread (as UCP's wireup
 *                        does) while the owner sends AMs on another one: all arrive, in order
 *   uct_selftest ep2ep   (ud_roce) CONNECT_TO_EP: endpoints created without an address, connected
 *                        with each other's endpoint address, AMs both ways; an unconnected
 *                        endpoint refuses to send; then AM short/bcopy/zcopy on CONNECT_TO_IFACE
 *
 * Environment: DEV (netdev, default lo), TL (transport, default rc_roce; failure and events run
 * on ud_roce too), ASYNC=mutex (the async context of UCX_USE_MT_MUTEX=y: no try-lock).
 */
#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_failures;

#define CHECK(_cond, ...) \
    do { \
        if (!(_cond)) { \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #_cond); \
            printf(__VA_ARGS__); \
            printf("\n"); \
            ++g_failures; \
        } \
    } while (0)

#define MUST(_x) \
    do { \
        ucs_status_t _s = (_x); \
        if (_s != UCS_OK && _s != UCS_INPROGRESS) { \
            printf("FAIL %s:%d: %s -> %s\n", __FILE__, __LINE__, #_x, ucs_status_string(_s)); \
            exit(1); \
        } \
    } while (0)

typedef struct {
    uct_component_h cmp;
    uct_md_h md;
    ucs_async_context_t *async;
    uct_worker_h worker;
    uct_md_config_t *md_config;
    uct_iface_config_t *iface_config;
    uct_iface_params_t params;
    uct_iface_h sender, receiver;
    uct_ep_h ep;
} ctx_t;

static int g_errors;
static int g_am_count;
static size_t g_am_len;
static uint8_t g_am_buf[70000];
static int g_done;

static ucs_status_t err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    printf("error handler: %s\n", ucs_status_string(status));
    ++g_errors;
    return UCS_OK;
}

static ucs_status_t am_handler(void *arg, void *data, size_t length, unsigned flags)
{
    ++g_am_count;
    g_am_len = length;
    memcpy(g_am_buf, data, length);
    return UCS_OK;
}

static int g_comp_errors;
static void comp_err_cb(uct_completion_t *comp)
{
    ++g_done;
    if (comp->status != UCS_OK) {
        ++g_comp_errors;
    }
}

static void comp_cb(uct_completion_t *comp)
{
    ++g_done;
    CHECK(comp->status == UCS_OK, "completion status %s", ucs_status_string(comp->status));
}

static size_t pack_5a(void *dst, void *arg)
{
    memset(dst, 0x5a, 1000);
    return 1000;
}

static uint64_t g_unpack_sum;
static void unpack_sum(void *arg, const void *data, size_t length)
{
    g_unpack_sum = 0;
    for (size_t i = 0; i < length; ++i) {
        g_unpack_sum += ((const uint8_t*)data)[i];
    }
}

static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void progress(ctx_t *c) { uct_worker_progress(c->worker); }

static void wait_done(ctx_t *c, int before)
{
    double t0 = now_sec();
    while (g_done == before && now_sec() - t0 < 10) {
        progress(c);
    }
    CHECK(g_done > before, "operation did not complete within 10 s");
}

static void flush_ep(ctx_t *c)
{
    double t0 = now_sec();
    while (uct_ep_flush(c->ep, 0, NULL) != UCS_OK && now_sec() - t0 < 10) {
        progress(c);
    }
}

/* ASYNC=mutex: the async context UCP makes with UCX_USE_MT_MUTEX=y (no try-lock) */
static ucs_async_mode_t async_mode(void)
{
    const char *am = getenv("ASYNC");
    return am && !strcmp(am, "mutex") ? UCS_ASYNC_MODE_THREAD_MUTEX : UCS_ASYNC_MODE_THREAD_SPINLOCK;
}

static void open_all(ctx_t *c, int with_err_handler, int close_receiver_first)
{
    uct_component_h *comps;
    unsigned num;
    memset(c, 0, sizeof(*c));
    MUST(uct_query_components(&comps, &num));
    for (unsigned i = 0; i < num; ++i) {
        uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME};
        MUST(uct_component_query(comps[i], &attr));
        if (!strcmp(attr.name, "roce")) {
            c->cmp = comps[i];
        }
    }
    if (c->cmp == NULL) {
        printf("FAIL: component roce is not registered (is libuct_roce preloaded?)\n");
        exit(1);
    }
    MUST(uct_md_config_read(c->cmp, NULL, NULL, &c->md_config));
    MUST(uct_md_open(c->cmp, getenv("MD") ? getenv("MD") : "roce", c->md_config, &c->md));
    MUST(ucs_async_context_create(async_mode(), &c->async));
    MUST(uct_worker_create(c->async, UCS_THREAD_MODE_SINGLE, &c->worker));
    const char *tl = getenv("TL") ? getenv("TL") : "rc_roce";
    MUST(uct_md_iface_config_read(c->md, tl, NULL, NULL, &c->iface_config));

    c->params.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE;
    c->params.open_mode = UCT_IFACE_OPEN_MODE_DEVICE;
    c->params.mode.device.tl_name = tl;
    c->params.mode.device.dev_name = getenv("DEV") ? getenv("DEV") : "lo";
    if (with_err_handler) {
        c->params.field_mask |= UCT_IFACE_PARAM_FIELD_ERR_HANDLER |
                                UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                                UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS;
        c->params.err_handler = err_handler;
    }
    MUST(uct_iface_open(c->md, c->worker, &c->params, c->iface_config, &c->sender));
    MUST(uct_iface_open(c->md, c->worker, &c->params, c->iface_config, &c->receiver));
    uct_iface_progress_enable(c->sender, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    uct_iface_progress_enable(c->receiver, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    MUST(uct_iface_set_am_handler(c->receiver, 5, am_handler, NULL, 0));

    uint8_t dev_addr[64], iface_addr[64];
    MUST(uct_iface_get_device_address(c->receiver, (uct_device_addr_t*)dev_addr));
    MUST(uct_iface_get_address(c->receiver, (uct_iface_addr_t*)iface_addr));
    CHECK(uct_iface_is_reachable(c->sender, (uct_device_addr_t*)dev_addr,
                                 (uct_iface_addr_t*)iface_addr), "peer not reachable");
    if (close_receiver_first) {
        uct_iface_close(c->receiver);
        c->receiver = NULL;
    }
    uct_ep_params_t ep_params = {
        .field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                      UCT_EP_PARAM_FIELD_IFACE_ADDR,
        .iface      = c->sender,
        .dev_addr   = (uct_device_addr_t*)dev_addr,
        .iface_addr = (uct_iface_addr_t*)iface_addr,
    };
    MUST(uct_ep_create(&ep_params, &c->ep));
}

static void close_all(ctx_t *c)
{
    uct_ep_destroy(c->ep);
    uct_iface_close(c->sender);
    if (c->receiver != NULL) {
        uct_iface_close(c->receiver);
    }
    uct_config_release(c->iface_config);
    uct_worker_destroy(c->worker);
    ucs_async_context_destroy(c->async);
    uct_md_close(c->md);
    uct_config_release(c->md_config);
}

static void test_alignment_params(ctx_t *c)
{
    uct_iface_params_t p;
    uct_iface_h iface;

    p = c->params;   /* offset without alignment */
    p.field_mask |= UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET;
    p.am_align_offset = 11;
    CHECK(uct_iface_open(c->md, c->worker, &p, c->iface_config, &iface) == UCS_ERR_INVALID_PARAM,
          "align offset without alignment accepted");

    p = c->params;   /* not a power of 2 */
    p.field_mask |= UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT;
    p.am_alignment = 3;
    CHECK(uct_iface_open(c->md, c->worker, &p, c->iface_config, &iface) == UCS_ERR_INVALID_PARAM,
          "alignment 3 accepted");

    p = c->params;   /* offset >= alignment */
    p.field_mask |= UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT | UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET;
    p.am_alignment = 8;
    p.am_align_offset = 8;
    CHECK(uct_iface_open(c->md, c->worker, &p, c->iface_config, &iface) == UCS_ERR_INVALID_PARAM,
          "offset 8 with alignment 8 accepted");

    p = c->params;   /* valid */
    p.field_mask |= UCT_IFACE_PARAM_FIELD_AM_ALIGNMENT | UCT_IFACE_PARAM_FIELD_AM_ALIGN_OFFSET;
    p.am_alignment = 64;
    p.am_align_offset = 8;
    ucs_status_t s = uct_iface_open(c->md, c->worker, &p, c->iface_config, &iface);
    CHECK(s == UCS_OK, "valid alignment refused: %s", ucs_status_string(s));
    if (s == UCS_OK) {
        uct_iface_close(iface);
    }
}

static int test_basic(void)
{
    ctx_t c;
    open_all(&c, 0, 0);
    test_alignment_params(&c);

    /* active messages */
    uint64_t payload = 0x1122334455667788ull;
    MUST(uct_ep_am_short(c.ep, 5, 0xabcdef, &payload, 8));
    while (g_am_count < 1) progress(&c);
    CHECK(g_am_len == 16 && *(uint64_t*)g_am_buf == 0xabcdef &&
          *(uint64_t*)(g_am_buf + 8) == payload, "am_short len %zu", g_am_len);
    CHECK(uct_ep_am_bcopy(c.ep, 5, pack_5a, NULL, 0) == 1000, "am_bcopy length");
    while (g_am_count < 2) progress(&c);
    CHECK(g_am_len == 1000 && g_am_buf[999] == 0x5a, "am_bcopy payload");
    uct_iov_t am_iov[2] = {{.buffer = &payload, .length = 8, .count = 1},
                           {.buffer = &payload, .length = 4, .count = 1}};
    MUST(uct_ep_am_short_iov(c.ep, 5, am_iov, 2));
    while (g_am_count < 3) progress(&c);
    CHECK(g_am_len == 12, "am_short_iov length %zu", g_am_len);

    /* memory */
    static uint64_t target[16] __attribute__((aligned(64)));
    static uint8_t big[65536], local[65536];
    uct_mem_h mh_t, mh_b, mh_l;
    MUST(uct_md_mem_reg(c.md, target, sizeof(target), UCT_MD_MEM_ACCESS_ALL, &mh_t));
    MUST(uct_md_mem_reg(c.md, big, sizeof(big), UCT_MD_MEM_ACCESS_ALL, &mh_b));
    MUST(uct_md_mem_reg(c.md, local, sizeof(local), UCT_MD_MEM_ACCESS_ALL, &mh_l));
    uint8_t rkey_buf[2][64];
    uct_rkey_bundle_t rk_t, rk_b;
    MUST(uct_md_mkey_pack(c.md, mh_t, rkey_buf[0]));
    MUST(uct_md_mkey_pack(c.md, mh_b, rkey_buf[1]));
    MUST(uct_rkey_unpack(c.cmp, rkey_buf[0], &rk_t));
    MUST(uct_rkey_unpack(c.cmp, rkey_buf[1], &rk_b));
    uint8_t bad[64] = {0};
    uct_rkey_bundle_t rk_bad;
    CHECK(uct_rkey_unpack(c.cmp, bad, &rk_bad) == UCS_ERR_INVALID_PARAM, "foreign rkey accepted");

    uct_completion_t comp = {.func = comp_cb, .count = 1, .status = UCS_OK};
    uint64_t r64;
    uint32_t r32;
    int before;

    MUST(uct_ep_put_short(c.ep, &payload, 8, (uintptr_t)&target[0], rk_t.rkey));
    flush_ep(&c);
    CHECK(target[0] == payload, "put_short");

#define FETCH64(_op, _val, _exp_old, _exp_new) \
    comp.count = 1; before = g_done; \
    MUST(uct_ep_atomic64_fetch(c.ep, _op, _val, &r64, (uintptr_t)&target[1], rk_t.rkey, &comp)); \
    wait_done(&c, before); \
    CHECK(r64 == (_exp_old) && target[1] == (_exp_new), #_op " old %lu new %lu", \
          (unsigned long)r64, (unsigned long)target[1]);

    target[1] = 10;
    FETCH64(UCT_ATOMIC_OP_ADD, 5, 10, 15);
    FETCH64(UCT_ATOMIC_OP_XOR, 0xff, 15, 240);
    FETCH64(UCT_ATOMIC_OP_AND, 0x30, 240, 0x30);
    FETCH64(UCT_ATOMIC_OP_OR, 0x1, 0x30, 0x31);
    FETCH64(UCT_ATOMIC_OP_SWAP, 7, 0x31, 7);
    comp.count = 1; before = g_done;
    MUST(uct_ep_atomic_cswap64(c.ep, 7, 9, (uintptr_t)&target[1], rk_t.rkey, &r64, &comp));
    wait_done(&c, before);
    CHECK(r64 == 7 && target[1] == 9, "cswap64");
    MUST(uct_ep_atomic64_post(c.ep, UCT_ATOMIC_OP_ADD, 1, (uintptr_t)&target[1], rk_t.rkey));
    MUST(uct_ep_atomic64_post(c.ep, UCT_ATOMIC_OP_XOR, 3, (uintptr_t)&target[1], rk_t.rkey));
    flush_ep(&c);
    CHECK(target[1] == (10 ^ 3), "atomic64_post add+xor: %lu", (unsigned long)target[1]);

    /* 32-bit: both halves of one 64-bit word, the other half must not change */
    uint32_t *t32 = (uint32_t*)&target[2];
    t32[0] = 5;
    t32[1] = 0xaaaaaaaa;
    comp.count = 1; before = g_done;
    MUST(uct_ep_atomic32_fetch(c.ep, UCT_ATOMIC_OP_ADD, 3, &r32, (uintptr_t)&t32[0], rk_t.rkey, &comp));
    wait_done(&c, before);
    CHECK(r32 == 5 && t32[0] == 8 && t32[1] == 0xaaaaaaaa, "fadd32 low half");
    comp.count = 1; before = g_done;
    MUST(uct_ep_atomic32_fetch(c.ep, UCT_ATOMIC_OP_OR, 1, &r32, (uintptr_t)&t32[1], rk_t.rkey, &comp));
    wait_done(&c, before);
    CHECK(r32 == 0xaaaaaaaa && t32[1] == 0xaaaaaaab && t32[0] == 8, "for32 high half");
    comp.count = 1; before = g_done;
    MUST(uct_ep_atomic_cswap32(c.ep, 8, 77, (uintptr_t)&t32[0], rk_t.rkey, &r32, &comp));
    wait_done(&c, before);
    CHECK(r32 == 8 && t32[0] == 77, "cswap32 success");
    comp.count = 1; before = g_done;
    MUST(uct_ep_atomic_cswap32(c.ep, 8, 99, (uintptr_t)&t32[0], rk_t.rkey, &r32, &comp));
    wait_done(&c, before);
    CHECK(r32 == 77 && t32[0] == 77, "cswap32 failure");
    MUST(uct_ep_atomic32_post(c.ep, UCT_ATOMIC_OP_ADD, 1, (uintptr_t)&t32[1], rk_t.rkey));
    flush_ep(&c);
    CHECK(t32[1] == 0xaaaaaaac && t32[0] == 77, "atomic32_post");

    /* GET / PUT */
    memset(big, 3, sizeof(big));
    comp.count = 1; before = g_done;
    MUST(uct_ep_get_bcopy(c.ep, unpack_sum, NULL, 4096, (uintptr_t)big, rk_b.rkey, &comp));
    wait_done(&c, before);
    CHECK(g_unpack_sum == 3 * 4096, "get_bcopy sum %lu", (unsigned long)g_unpack_sum);
    uct_iov_t iov = {.buffer = local, .length = sizeof(local), .memh = mh_l, .stride = 0, .count = 1};
    comp.count = 1; before = g_done;
    MUST(uct_ep_get_zcopy(c.ep, &iov, 1, (uintptr_t)big, rk_b.rkey, &comp));
    wait_done(&c, before);
    CHECK(local[0] == 3 && local[sizeof(local) - 1] == 3, "get_zcopy");
    memset(local, 9, sizeof(local));
    comp.count = 1; before = g_done;
    MUST(uct_ep_put_zcopy(c.ep, &iov, 1, (uintptr_t)big, rk_b.rkey, &comp));
    wait_done(&c, before);
    CHECK(big[0] == 9 && big[sizeof(big) - 1] == 9, "put_zcopy");

    /* flushes with completion */
    MUST(uct_ep_put_short(c.ep, &payload, 8, (uintptr_t)&target[3], rk_t.rkey));
    comp.count = 1; before = g_done;
    if (uct_ep_flush(c.ep, 0, &comp) == UCS_INPROGRESS) {
        wait_done(&c, before);
    }
    comp.count = 1; before = g_done;
    if (uct_iface_flush(c.sender, 0, &comp) == UCS_INPROGRESS) {
        wait_done(&c, before);
    }

    /* the send queue fills up: no_resource, never a crash or a loss */
    int sent = 0;
    for (int i = 0; i < 5000; ++i) {
        ucs_status_t s = uct_ep_put_short(c.ep, &payload, 8, (uintptr_t)&target[4], rk_t.rkey);
        if (s == UCS_ERR_NO_RESOURCE) {
            break;
        }
        CHECK(s == UCS_OK, "put_short: %s", ucs_status_string(s));
        ++sent;
    }
    printf("send queue: %d puts accepted before UCS_ERR_NO_RESOURCE\n", sent);
    flush_ep(&c);

    /* MD allocation */
    uct_allocated_memory_t mem;
    uct_alloc_method_t method = UCT_ALLOC_METHOD_MD;
    uct_mem_alloc_params_t ap = {
        .field_mask = UCT_MEM_ALLOC_PARAM_FIELD_FLAGS | UCT_MEM_ALLOC_PARAM_FIELD_MDS |
                      UCT_MEM_ALLOC_PARAM_FIELD_MEM_TYPE | UCT_MEM_ALLOC_PARAM_FIELD_NAME,
        .flags = UCT_MD_MEM_ACCESS_ALL, .mem_type = UCS_MEMORY_TYPE_HOST, .name = "selftest"};
    ap.mds.mds = &c.md;
    ap.mds.count = 1;
    MUST(uct_mem_alloc(10000, &method, 1, &ap, &mem));
    CHECK(mem.length >= 10000 && mem.memh != UCT_MEM_HANDLE_NULL, "mem_alloc");
    uct_mem_free(&mem);

    uct_rkey_release(c.cmp, &rk_t);
    uct_rkey_release(c.cmp, &rk_b);
    uct_md_mem_dereg(c.md, mh_t);
    uct_md_mem_dereg(c.md, mh_b);
    uct_md_mem_dereg(c.md, mh_l);
    close_all(&c);
    return g_failures;
}

static int test_failure(void)
{
    ctx_t c;
    open_all(&c, 1, 1);   /* the receiver is closed before the ep connects: a dead peer */
    uint64_t x = 1;
    CHECK(uct_ep_am_short(c.ep, 5, 0, &x, 8) == UCS_OK, "am_short to a dead peer posts");
    CHECK(uct_ep_check(c.ep, 0, NULL) == UCS_OK, "ep_check");
    double t0 = now_sec();
    while (g_errors == 0 && now_sec() - t0 < 20) {
        progress(&c);
    }
    printf("failure detected after %.3f s\n", now_sec() - t0);
    CHECK(g_errors == 1, "error handler calls: %d", g_errors);
    ucs_status_t s = uct_ep_flush(c.ep, 0, NULL);
    CHECK(UCS_STATUS_IS_ERR(s), "flush of a failed ep: %s", ucs_status_string(s));
    s = uct_ep_put_short(c.ep, &x, 8, 0, 0);
    CHECK(UCS_STATUS_IS_ERR(s) && s != UCS_ERR_NO_RESOURCE, "put on a failed ep: %s",
          ucs_status_string(s));
    for (int i = 0; i < 100; ++i) {
        progress(&c);
    }
    CHECK(g_errors == 1, "error handler called again: %d", g_errors);
    close_all(&c);
    return g_failures;
}

/* A flush that waits for data to a peer that dies must not report success: what it waited for
 * was never acknowledged. Both ways it can happen: the failure found while the flush waits (the
 * owner progressing), and found by the background thread while nobody progressed, before the
 * owner's next flush. */
static int test_flushfail(void)
{
    for (int phase = 0; phase < 2; ++phase) {
        ctx_t c;
        g_errors = 0;
        open_all(&c, 1, 1);
        uint64_t x = 1;
        CHECK(uct_ep_am_short(c.ep, 5, 0, &x, 8) == UCS_OK, "am_short to a dead peer posts");
        if (phase == 1) {
            struct timespec ts = {4, 0};   /* well past the peer timeout, no progress */
            nanosleep(&ts, NULL);
        }
        uct_completion_t comp = {.func = comp_err_cb, .count = 1, .status = UCS_OK};
        const int before = g_done, comp_errors = g_comp_errors;
        ucs_status_t s;
        double t0 = now_sec();
        while ((s = uct_ep_flush(c.ep, 0, &comp)) == UCS_ERR_NO_RESOURCE && now_sec() - t0 < 20) {
            progress(&c);
        }
        CHECK(s != UCS_OK, "phase %d: flush of unacknowledged data to a dead peer returned UCS_OK",
              phase);
        if (s == UCS_INPROGRESS) {
            while (g_done == before && now_sec() - t0 < 30) {
                progress(&c);
            }
            CHECK(g_done == before + 1, "phase %d: the flush did not complete", phase);
            CHECK(g_comp_errors == comp_errors + 1, "phase %d: the flush completed with %s", phase,
                  ucs_status_string(comp.status));
        }
        printf("phase %d: flush %s, completion %s after %.3f s\n", phase, ucs_status_string(s),
               ucs_status_string(comp.status), now_sec() - t0);
        while (g_errors == 0 && now_sec() - t0 < 30) {
            progress(&c);
        }
        CHECK(g_errors == 1, "phase %d: error handler calls: %d", phase, g_errors);
        s = uct_ep_flush(c.ep, 0, NULL);
        CHECK(UCS_STATUS_IS_ERR(s) && s != UCS_ERR_NO_RESOURCE, "phase %d: flush after the failure: %s",
              phase, ucs_status_string(s));
        close_all(&c);
    }
    return g_failures;
}

/* UCP gives an ep up with flush(CANCEL) (a peer failed, a forced close, err mode PEER): the
 * operations outstanding complete as canceled now, not when the peer timeout fails the QP, and
 * the ep's failure is not reported (UCP is discarding it), as UCX's rc transports do. Before,
 * CANCEL was an ordinary flush: it waited for the QP to fail, completed with that error, and
 * the error handler ran for an ep being discarded. */
static int test_cancel(void)
{
    ctx_t c;
    g_errors = 0;
    open_all(&c, 1, 1);
    uint64_t x = 1;
    uct_completion_t put_comp = {.func = comp_err_cb, .count = 1, .status = UCS_OK};
    CHECK(uct_ep_am_short(c.ep, 5, 0, &x, 8) == UCS_OK, "am_short to a dead peer posts");
    uct_iov_t iov = {.buffer = &x, .length = 8, .memh = UCT_MEM_HANDLE_NULL, .stride = 0, .count = 1};
    ucs_status_t s = uct_ep_put_zcopy(c.ep, &iov, 1, 0, 0, &put_comp);
    CHECK(s == UCS_INPROGRESS, "put_zcopy to a dead peer: %s", ucs_status_string(s));
    uct_completion_t comp = {.func = comp_err_cb, .count = 1, .status = UCS_OK};
    const int before = g_done;
    double t0 = now_sec();
    s = uct_ep_flush(c.ep, UCT_FLUSH_FLAG_CANCEL, &comp);
    CHECK(s == UCS_INPROGRESS || s == UCS_OK, "flush(CANCEL): %s", ucs_status_string(s));
    while (s == UCS_INPROGRESS && g_done < before + 2 && now_sec() - t0 < 20) {
        progress(&c);
    }
    printf("flush(CANCEL) %s, completion %s, put %s after %.3f s\n", ucs_status_string(s),
           ucs_status_string(comp.status), ucs_status_string(put_comp.status), now_sec() - t0);
    if (s == UCS_INPROGRESS) {
        CHECK(g_done == before + 2, "the flush and the put did not both complete");
        CHECK(comp.status == UCS_ERR_CANCELED, "the flush completed with %s", ucs_status_string(comp.status));
    }
    CHECK(put_comp.status == UCS_ERR_CANCELED, "the put completed with %s", ucs_status_string(put_comp.status));
    t0 = now_sec();
    while (now_sec() - t0 < 3) {   /* the QP would have failed by now (failure: well under 1 s) */
        progress(&c);
    }
    CHECK(g_errors == 0, "error handler called %d times for an ep given up", g_errors);
    s = uct_ep_am_short(c.ep, 5, 0, &x, 8);
    CHECK(UCS_STATUS_IS_ERR(s) && s != UCS_ERR_NO_RESOURCE, "am_short after the cancel: %s", ucs_status_string(s));
    close_all(&c);
    return g_failures;
}

/* A flush queued as a pending request (as UCP queues one when uct_ep_flush says NO_RESOURCE) with
 * another request queued behind it: when its turn comes the flush must go, although the queue
 * still holds the later request; the later request then goes too. */
static uct_ep_h g_pend_ep;
static uct_completion_t g_pend_flush_comp;
static int g_pend_flushed, g_pend_sent;
static ucs_status_t pend_flush(uct_pending_req_t *req)
{
    ucs_status_t s = uct_ep_flush(g_pend_ep, 0, &g_pend_flush_comp);
    if (s == UCS_OK) {
        ++g_pend_flushed;
    }
    return s == UCS_INPROGRESS ? UCS_OK : s;
}
static void pend_flush_done(uct_completion_t *comp)
{
    CHECK(comp->status == UCS_OK, "pending flush completed with %s", ucs_status_string(comp->status));
    ++g_pend_flushed;
}
static ucs_status_t pend_send(uct_pending_req_t *req)
{
    uint64_t x = 2;
    ucs_status_t s = uct_ep_am_short(g_pend_ep, 5, 0, &x, 8);
    if (s == UCS_OK) {
        ++g_pend_sent;
    }
    return s;
}

static int test_flushpend(void)
{
    ctx_t c;
    open_all(&c, 0, 0);
    g_pend_ep = c.ep;
    g_pend_flush_comp = (uct_completion_t){.func = pend_flush_done, .count = 1, .status = UCS_OK};
    uct_pending_req_t flush_req = {.func = pend_flush}, send_req = {.func = pend_send};
    uint64_t x = 1;
    int queued = 0, posted = 0;
    for (int attempt = 0; attempt < 10 && !queued; ++attempt) {
        ucs_status_t s = UCS_OK;
        for (int i = 0; i < 200000 && s == UCS_OK; ++i) {
            s = uct_ep_am_short(c.ep, 5, 0, &x, 8);
            posted += s == UCS_OK;
        }
        CHECK(s == UCS_ERR_NO_RESOURCE, "am_short: %s", ucs_status_string(s));
        queued = uct_ep_pending_add(c.ep, &flush_req, 0) == UCS_OK;
    }
    CHECK(queued, "the flush could not be queued");
    CHECK(uct_ep_pending_add(c.ep, &send_req, 0) == UCS_OK, "the request behind the flush");
    double t0 = now_sec();
    while ((g_pend_flushed == 0 || g_pend_sent == 0 || g_am_count < posted + 1) &&
           now_sec() - t0 < 20) {
        progress(&c);
    }
    printf("%d AMs posted before the queue filled; flush %d, later request %d, %d AMs received "
           "after %.3f s\n", posted, g_pend_flushed, g_pend_sent, g_am_count, now_sec() - t0);
    CHECK(g_pend_flushed == 1, "the queued flush did not complete");
    CHECK(g_pend_sent == 1, "the request queued behind the flush did not go");
    CHECK(g_am_count == posted + 1, "AMs received: %d of %d", g_am_count, posted + 1);
    close_all(&c);
    return g_failures;
}

/* UCP's wireup creates and destroys endpoints from UCX's async thread, holding the async lock,
 * while the owner sends and progresses without it. Endpoints to a peer must come and go beside
 * traffic on another endpoint without losing, repeating or reordering any of it, and the
 * interface must still flush. The churn is an event handler of the worker's async context: it
 * runs on UCX's async thread, or on the owner (missed events) when the thread found the lock
 * taken, as UCP's handlers do. It also sends a bcopy AM (bytes 0xa1) on an endpoint of its own
 * while the owner sends others (0xb2): each must arrive whole, not mixed with the other. */
typedef struct {
    int fd;
    uct_ep_params_t params;
    uint8_t dev_addr[64], iface_addr[64];
    int created, failed;
    uct_ep_h ep;      /* the handler's own endpoint */
    int sent;         /* bcopy AMs the handler sent */
} churn_t;

static size_t pack_a1(void *dst, void *arg)
{
    memset(dst, 0xa1, 2000);
    return 2000;
}

static size_t pack_b2(void *dst, void *arg)
{
    memset(dst, 0xb2, 2000);
    return 2000;
}

static int g_pattern_msgs, g_pattern_bad;
static ucs_status_t pattern_handler(void *arg, void *data, size_t length, unsigned flags)
{
    const uint8_t *p = data;
    size_t mixed = 0;
    for (size_t i = 0; i < length; ++i) {
        mixed += p[i] != p[0];
    }
    if ((length != 2000 || mixed != 0 || (p[0] != 0xa1 && p[0] != 0xb2)) && g_pattern_bad++ < 5) {
        printf("bcopy AM of %zu bytes, first 0x%02x, %zu bytes differ from it\n", length, p[0], mixed);
    }
    ++g_pattern_msgs;
    return UCS_OK;
}

static void churn_cb(int id, ucs_event_set_types_t events, void *arg)
{
    churn_t *ch = arg;
    uint64_t v;
    if (read(ch->fd, &v, sizeof(v)) != sizeof(v)) {
        return;   /* another call took the event */
    }
    uct_ep_h eps[2];
    int n = 0;
    for (; n < 2; ++n) {
        ucs_status_t s = uct_ep_create(&ch->params, &eps[n]);
        if (s != UCS_OK) {
            printf("churn: ep_create: %s\n", ucs_status_string(s));
            ++ch->failed;
            break;
        }
    }
    ch->created += n;
    for (int i = 0; i < n; ++i) {
        uct_ep_destroy(eps[i]);
    }
    ch->sent += uct_ep_am_bcopy(ch->ep, 7, pack_a1, NULL, 0) == 2000;
}

static uint64_t g_seq_next;
static int g_seq_bad;
static ucs_status_t seq_handler(void *arg, void *data, size_t length, unsigned flags)
{
    uint64_t seq;
    memcpy(&seq, data, sizeof(seq));   /* the AM's header */
    if (seq != g_seq_next && g_seq_bad++ < 5) {
        printf("AM %lu received, %lu expected\n", (unsigned long)seq, (unsigned long)g_seq_next);
    }
    g_seq_next = seq + 1;
    return UCS_OK;
}

static int test_churn(void)
{
    ctx_t c;
    open_all(&c, 0, 0);
    MUST(uct_iface_set_am_handler(c.receiver, 6, seq_handler, NULL, 0));
    MUST(uct_iface_set_am_handler(c.receiver, 7, pattern_handler, NULL, 0));
    static churn_t ch;
    MUST(uct_iface_get_device_address(c.receiver, (uct_device_addr_t*)ch.dev_addr));
    MUST(uct_iface_get_address(c.receiver, (uct_iface_addr_t*)ch.iface_addr));
    ch.params = (uct_ep_params_t){
        .field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                      UCT_EP_PARAM_FIELD_IFACE_ADDR,
        .iface      = c.sender,
        .dev_addr   = (uct_device_addr_t*)ch.dev_addr,
        .iface_addr = (uct_iface_addr_t*)ch.iface_addr,
    };
    MUST(uct_ep_create(&ch.params, &ch.ep));
    ch.fd = eventfd(0, EFD_NONBLOCK);
    MUST(ch.fd >= 0 ? UCS_OK : UCS_ERR_IO_ERROR);
    MUST(ucs_async_set_event_handler(async_mode(), ch.fd, UCS_EVENT_SET_EVREAD, churn_cb, &ch,
                                     c.async));
    uint64_t sent = 0;
    int sent_b2 = 0;
    double t0 = now_sec();
    while (now_sec() - t0 < 4) {
        while (uct_ep_am_short(c.ep, 6, sent, NULL, 0) == UCS_OK) {
            ++sent;
            if (uct_ep_am_bcopy(c.ep, 7, pack_b2, NULL, 0) == 2000) {
                ++sent_b2;
            }
        }
        progress(&c);
        __ucs_async_poll_missed(c.async);   /* as ucp_worker_progress does */
        const uint64_t one = 1;   /* the next churn round */
        CHECK(write(ch.fd, &one, sizeof(one)) == sizeof(one), "eventfd write");
    }
    MUST(ucs_async_remove_handler(ch.fd, 1));
    close(ch.fd);
    t0 = now_sec();
    while ((g_seq_next < sent || g_pattern_msgs < ch.sent + sent_b2) && now_sec() - t0 < 10) {
        progress(&c);
    }
    ucs_status_t s;
    while ((s = uct_iface_flush(c.sender, 0, NULL)) != UCS_OK && now_sec() - t0 < 20) {
        progress(&c);
    }
    printf("%d endpoints created and destroyed beside %lu AMs; %lu received, %d out of order; "
           "iface flush %s\n", ch.created, (unsigned long)sent, (unsigned long)g_seq_next,
           g_seq_bad, ucs_status_string(s));
    CHECK(ch.created >= 80 && ch.failed == 0, "churn: %d created, %d failed", ch.created, ch.failed);
    CHECK(sent > 0 && g_seq_next == sent && g_seq_bad == 0, "AMs: %lu of %lu, %d out of order",
          (unsigned long)g_seq_next, (unsigned long)sent, g_seq_bad);
    CHECK(s == UCS_OK, "iface flush after the churn: %s", ucs_status_string(s));
    printf("bcopy AMs: %d from the handler, %d from the owner; %d received, %d mixed\n", ch.sent,
           sent_b2, g_pattern_msgs, g_pattern_bad);
    CHECK(ch.sent > 0 && sent_b2 > 0, "bcopy AMs sent: %d by the handler, %d by the owner", ch.sent,
          sent_b2);
    CHECK(g_pattern_msgs == ch.sent + sent_b2 && g_pattern_bad == 0,
          "bcopy AMs: %d of %d received, %d mixed", g_pattern_msgs, ch.sent + sent_b2, g_pattern_bad);
    uct_ep_destroy(ch.ep);
    close_all(&c);
    return g_failures;
}

static int test_events(void)
{
    ctx_t c;
    open_all(&c, 0, 0);
    int fd;
    MUST(uct_iface_event_fd_get(c.receiver, &fd));
    for (int round = 0; round < 5; ++round) {
        double t0 = now_sec();
        ucs_status_t s;
        while ((s = uct_iface_event_arm(c.receiver, UCT_EVENT_RECV | UCT_EVENT_SEND_COMP)) ==
               UCS_ERR_BUSY && now_sec() - t0 < 10) {
            progress(&c);
        }
        CHECK(s == UCS_OK, "event_arm: %s", ucs_status_string(s));
        uint64_t x = 7;
        int count = g_am_count;
        MUST(uct_ep_am_short(c.ep, 5, 0, &x, 8));
        /* only the sender is progressed: the receiver must be woken by its fd (on ud_roce its
         * background thread acknowledges meanwhile, so the flush completes) */
        t0 = now_sec();
        while ((s = uct_ep_flush(c.ep, 0, NULL)) != UCS_OK && now_sec() - t0 < 10) {
            uct_iface_progress(c.sender);
        }
        CHECK(s == UCS_OK, "flush with only the sender progressing: %s (round %d)",
              ucs_status_string(s), round);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        CHECK(poll(&pfd, 1, 5000) == 1, "event fd not readable after an AM (round %d)", round);
        t0 = now_sec();
        while (g_am_count == count && now_sec() - t0 < 10) {
            progress(&c);
        }
        CHECK(g_am_count == count + 1, "AM not delivered after wakeup (round %d)", round);
    }
    close_all(&c);
    return g_failures;
}


/* One remote access that must fail: the completion reports an error (or the error handler
 * runs), the target stays as it was. Uses a fresh pair of interfaces (the QP fails). */
static void bad_access(const char *what, int is_get, int wrong_key, size_t offset, size_t len)
{
    ctx_t c;
    open_all(&c, 1, 0);
    static uint8_t target[4096] __attribute__((aligned(64)));
    static uint8_t local[8192];
    memset(target, 0x11, sizeof(target));
    memset(local, 0x77, sizeof(local));
    uct_mem_h mh_t, mh_l;
    MUST(uct_md_mem_reg(c.md, target, sizeof(target), UCT_MD_MEM_ACCESS_ALL, &mh_t));
    MUST(uct_md_mem_reg(c.md, local, sizeof(local), UCT_MD_MEM_ACCESS_ALL, &mh_l));
    uint8_t rkey_buf[64];
    uct_rkey_bundle_t rk;
    MUST(uct_md_mkey_pack(c.md, mh_t, rkey_buf));
    MUST(uct_rkey_unpack(c.cmp, rkey_buf, &rk));
    uct_rkey_t key = wrong_key ? (rk.rkey ^ 0x5a5a5a5au) : rk.rkey;
    uct_iov_t iov = {.buffer = local, .length = len, .memh = mh_l, .stride = 0, .count = 1};
    uct_completion_t comp = {.func = comp_err_cb, .count = 1, .status = UCS_OK};
    int done0 = g_done, err0 = g_errors, cerr0 = g_comp_errors;
    uint64_t raddr = (uintptr_t)target + offset;
    ucs_status_t s = is_get ? uct_ep_get_zcopy(c.ep, &iov, 1, raddr, key, &comp)
                            : uct_ep_put_zcopy(c.ep, &iov, 1, raddr, key, &comp);
    if (s == UCS_INPROGRESS) {
        double t0 = now_sec();
        while ((g_done == done0 || g_errors == err0) && now_sec() - t0 < 10) {
            progress(&c);
        }
        CHECK(g_done > done0 && g_comp_errors > cerr0, "%s: no error completion", what);
    } else {
        CHECK(UCS_STATUS_IS_ERR(s), "%s: posted with %s", what, ucs_status_string(s));
    }
    CHECK(g_errors > err0, "%s: error handler not called", what);
    int intact = 1;
    for (size_t i = 0; i < sizeof(target); ++i) {
        intact &= target[i] == 0x11;
    }
    CHECK(intact, "%s: target memory changed", what);
    if (is_get) {
        CHECK(local[0] == 0x77, "%s: local buffer overwritten", what);
    }
    printf("%s: refused (error handler calls %d)\n", what, g_errors - err0);
    uct_rkey_release(c.cmp, &rk);
    uct_md_mem_dereg(c.md, mh_t);
    uct_md_mem_dereg(c.md, mh_l);
    close_all(&c);
}

static int test_badinput(void)
{
    ctx_t c;
    open_all(&c, 1, 0);
    uct_iface_h iface;
    uct_iface_params_t p = c.params;
    p.mode.device.dev_name = "nosuchdev0";
    ucs_status_t s = uct_iface_open(c.md, c.worker, &p, c.iface_config, &iface);
    CHECK(s == UCS_ERR_NO_DEVICE, "unknown device: %s", ucs_status_string(s));
    p.mode.device.dev_name = "rxe9:1";   /* not a port of the userspace MD either */
    s = uct_iface_open(c.md, c.worker, &p, c.iface_config, &iface);
    CHECK(s == UCS_ERR_NO_DEVICE, "verbs-style name on the userspace MD: %s", ucs_status_string(s));

    uct_md_h md2;
    s = uct_md_open(c.cmp, "roce_nosuchdev0", c.md_config, &md2);
    CHECK(s != UCS_OK, "memory domain of an absent RDMA device opened");
    if (s == UCS_OK) uct_md_close(md2);
    s = uct_md_open(c.cmp, "bogus", c.md_config, &md2);
    CHECK(s != UCS_OK, "memory domain 'bogus' opened");
    if (s == UCS_OK) uct_md_close(md2);

    /* malformed peer address: interface address with port 0 */
    uint8_t dev_addr[64], iface_addr[64];
    memset(iface_addr, 0, sizeof(iface_addr));
    MUST(uct_iface_get_device_address(c.receiver, (uct_device_addr_t*)dev_addr));
    uct_ep_params_t ep_params = {
        .field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                      UCT_EP_PARAM_FIELD_IFACE_ADDR,
        .iface      = c.sender,
        .dev_addr   = (uct_device_addr_t*)dev_addr,
        .iface_addr = (uct_iface_addr_t*)iface_addr,
    };
    uct_ep_h ep2;
    s = uct_ep_create(&ep_params, &ep2);
    CHECK(s == UCS_ERR_INVALID_PARAM, "ep to port 0: %s", ucs_status_string(s));
    if (s == UCS_OK) uct_ep_destroy(ep2);

    /* an rkey some other component packed */
    uint8_t junk[16] = {1, 2, 3, 4, 5, 6, 7, 8};
    uct_rkey_bundle_t rk;
    s = uct_rkey_unpack(c.cmp, junk, &rk);
    CHECK(s == UCS_ERR_INVALID_PARAM, "foreign rkey unpacked: %s", ucs_status_string(s));
    close_all(&c);

    bad_access("put_zcopy with a wrong rkey", 0, 1, 0, 64);
    bad_access("get_zcopy with a wrong rkey", 1, 1, 0, 64);
    bad_access("put_zcopy past the region", 0, 0, 4096 - 32, 64);
    bad_access("get_zcopy past the region", 1, 0, 4096 - 32, 64);
    bad_access("put_zcopy of 8 KiB into 4 KiB", 0, 0, 0, 8192);
    return g_failures;
}

static int g_back_count;
static ucs_status_t back_handler(void *arg, void *data, size_t length, unsigned flags)
{
    ++g_back_count;
    return UCS_OK;
}

static int test_ep2ep(void)
{
    ctx_t c;
    open_all(&c, 0, 0);
    uct_iface_attr_t attr;
    MUST(uct_iface_query(c.sender, &attr));
    CHECK(attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_EP, "no CONNECT_TO_EP");
    MUST(uct_iface_set_am_handler(c.sender, 6, back_handler, NULL, 0));
    uct_ep_params_t p = {.field_mask = UCT_EP_PARAM_FIELD_IFACE, .iface = c.sender};
    uct_ep_h a, b;
    MUST(uct_ep_create(&p, &a));
    p.iface = c.receiver;
    MUST(uct_ep_create(&p, &b));
    uint64_t x = 42;
    ucs_status_t s = uct_ep_am_short(a, 5, 0, &x, 8);
    CHECK(s == UCS_ERR_NOT_CONNECTED, "am_short on an unconnected ep: %s", ucs_status_string(s));
    uint8_t dev_a[64], dev_b[64], ep_a[64], ep_b[64];
    MUST(uct_iface_get_device_address(c.sender, (uct_device_addr_t*)dev_a));
    MUST(uct_iface_get_device_address(c.receiver, (uct_device_addr_t*)dev_b));
    MUST(uct_ep_get_address(a, (uct_ep_addr_t*)ep_a));
    MUST(uct_ep_get_address(b, (uct_ep_addr_t*)ep_b));
    CHECK(attr.ep_addr_len == 10 && (ep_b[5] & 0x80), "ep address: %zu bytes, MTU code 0x%02x",
          attr.ep_addr_len, ep_b[5]);
    /* An address of the format before the class advert (6 bytes, bit 7 of the MTU code clear)
     * is refused, not read past its end. */
    uint8_t old_fmt[6];
    memcpy(old_fmt, ep_b, sizeof(old_fmt));
    old_fmt[5] &= 0x7f;
    s = uct_ep_connect_to_ep(a, (uct_device_addr_t*)dev_b, (uct_ep_addr_t*)old_fmt);
    CHECK(s == UCS_ERR_INVALID_ADDR, "connect_to_ep with an older build's address: %s", ucs_status_string(s));
    MUST(uct_ep_connect_to_ep(a, (uct_device_addr_t*)dev_b, (uct_ep_addr_t*)ep_b));
    MUST(uct_ep_connect_to_ep(b, (uct_device_addr_t*)dev_a, (uct_ep_addr_t*)ep_a));
    s = uct_ep_connect_to_ep(a, (uct_device_addr_t*)dev_b, (uct_ep_addr_t*)ep_b);
    CHECK(s == UCS_ERR_INVALID_PARAM, "second connect_to_ep: %s", ucs_status_string(s));
    for (int i = 0; i < 100; ++i) {
        x = 1000 + i;
        while (uct_ep_am_short(a, 5, 0, &x, 8) == UCS_ERR_NO_RESOURCE) progress(&c);
        while (uct_ep_am_short(b, 6, 0, &x, 8) == UCS_ERR_NO_RESOURCE) progress(&c);
    }
    double t0 = now_sec();
    while ((g_am_count < 100 || g_back_count < 100) && now_sec() - t0 < 10) progress(&c);
    CHECK(g_am_count == 100 && g_back_count == 100, "AMs over connect_to_ep: %d and %d of 100",
          g_am_count, g_back_count);
    CHECK(g_am_len == 16 && *(uint64_t*)(g_am_buf + 8) == 1099, "last AM: %zu bytes", g_am_len);
    uct_ep_destroy(a);
    uct_ep_destroy(b);

    /* CONNECT_TO_IFACE: bcopy and zcopy, several fragments each */
    MUST(uct_iface_query(c.sender, &attr));
    size_t big = attr.cap.am.max_bcopy;
    g_am_count = 0;
    ssize_t n = uct_ep_am_bcopy(c.ep, 5, pack_5a, NULL, 0);
    CHECK(n == 1000, "am_bcopy: %zd", n);
    static uint8_t zbuf[65536];
    for (size_t i = 0; i < sizeof(zbuf); ++i) zbuf[i] = (uint8_t)(i * 13);
    size_t zlen = attr.cap.am.max_zcopy < sizeof(zbuf) ? attr.cap.am.max_zcopy : sizeof(zbuf);
    uint64_t hdr = 0x1122334455667788ull;
    uct_iov_t iov = {.buffer = zbuf, .length = zlen, .memh = UCT_MEM_HANDLE_NULL, .stride = 0,
                     .count = 1};
    s = uct_ep_am_zcopy(c.ep, 5, &hdr, sizeof(hdr), &iov, 1, 0, NULL);
    CHECK(s == UCS_OK || s == UCS_INPROGRESS, "am_zcopy: %s", ucs_status_string(s));
    t0 = now_sec();
    while (g_am_count < 2 && now_sec() - t0 < 10) progress(&c);
    CHECK(g_am_count == 2, "bcopy + zcopy AMs: %d of 2", g_am_count);
    CHECK(g_am_len == sizeof(hdr) + zlen && !memcmp(g_am_buf + sizeof(hdr), zbuf, zlen) &&
          !memcmp(g_am_buf, &hdr, sizeof(hdr)), "zcopy AM content (%zu bytes)", g_am_len);
    printf("max_bcopy %zu, zcopy %zu bytes in one AM\n", big, zlen);

    /* an iov of 3 pieces of 100 bytes, 1000 apart (count and stride), then 8 more bytes */
    uct_iov_t strided[2] = {
        {.buffer = zbuf, .length = 100, .memh = UCT_MEM_HANDLE_NULL, .stride = 1000, .count = 3},
        {.buffer = zbuf + 5000, .length = 8, .memh = UCT_MEM_HANDLE_NULL, .stride = 0, .count = 1}};
    uint8_t want[sizeof(hdr) + 308];
    memcpy(want, &hdr, sizeof(hdr));
    for (int k = 0; k < 3; ++k) memcpy(want + sizeof(hdr) + 100 * k, zbuf + 1000 * k, 100);
    memcpy(want + sizeof(hdr) + 300, zbuf + 5000, 8);
    s = uct_ep_am_zcopy(c.ep, 5, &hdr, sizeof(hdr), strided, 2, 0, NULL);
    CHECK(s == UCS_OK || s == UCS_INPROGRESS, "strided am_zcopy: %s", ucs_status_string(s));
    t0 = now_sec();
    while (g_am_count < 3 && now_sec() - t0 < 10) progress(&c);
    CHECK(g_am_count == 3 && g_am_len == sizeof(want) && !memcmp(g_am_buf, want, sizeof(want)),
          "strided zcopy AM: %zu bytes, want %zu", g_am_len, sizeof(want));
    s = uct_ep_am_short_iov(c.ep, 5, strided, 2);
    CHECK(s == UCS_OK, "strided am_short_iov: %s", ucs_status_string(s));
    while (g_am_count < 4 && now_sec() - t0 < 10) progress(&c);
    CHECK(g_am_count == 4 && g_am_len == sizeof(want) - sizeof(hdr) &&
          !memcmp(g_am_buf, want + sizeof(hdr), sizeof(want) - sizeof(hdr)),
          "strided short_iov AM: %zu bytes, want %zu", g_am_len, sizeof(want) - sizeof(hdr));
    flush_ep(&c);
    close_all(&c);
    return g_failures;
}


/* Registration cache (verbs memory domains, MD=roce_rxe0): a buffer registered again after its
 * release reuses the cached region (RCACHE_EXPECT_HIT=1); a buffer unmapped and mapped again at
 * the same address is registered again: what a zero-copy PUT then sends is the new memory's
 * content, not the old pages' (a stale registration would keep them pinned and send them). */
static void put_all(ctx_t *c, void *buf, size_t len, uint8_t *target, uct_rkey_t rkey, int reg)
{
    uct_mem_h mh = UCT_MEM_HANDLE_NULL;
    if (reg) {
        MUST(uct_md_mem_reg(c->md, buf, len, UCT_MD_MEM_ACCESS_ALL, &mh));
    }
    uct_iov_t iov = {.buffer = buf, .length = len, .memh = mh, .count = 1};
    uct_completion_t comp = {.func = comp_cb, .count = 1, .status = UCS_OK};
    int before = g_done;
    if (uct_ep_put_zcopy(c->ep, &iov, 1, (uintptr_t)target, rkey, &comp) == UCS_INPROGRESS) {
        wait_done(c, before);
    }
    if (reg) {
        MUST(uct_md_mem_dereg(c->md, mh));
    }
}

static int test_rcache(void)
{
    ctx_t c;
    open_all(&c, 0, 0);
    const size_t len = 1 << 20;
    uint8_t *target = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    MUST(target != MAP_FAILED && buf != MAP_FAILED ? UCS_OK : UCS_ERR_NO_MEMORY);
    uct_mem_h mh_t;
    MUST(uct_md_mem_reg(c.md, target, len, UCT_MD_MEM_ACCESS_ALL, &mh_t));
    uint8_t rkey_buf[64];
    uct_rkey_bundle_t rk;
    MUST(uct_md_mkey_pack(c.md, mh_t, rkey_buf));
    MUST(uct_rkey_unpack(c.cmp, rkey_buf, &rk));

    /* The same remote key twice: the same registration (a new one gets a new key). */
    uct_mem_h m1, m2;
    uint8_t k1[64], k2[64];
    MUST(uct_md_mem_reg(c.md, buf, len, UCT_MD_MEM_ACCESS_ALL, &m1));
    MUST(uct_md_mkey_pack(c.md, m1, k1));
    MUST(uct_md_mem_dereg(c.md, m1));
    MUST(uct_md_mem_reg(c.md, buf, len, UCT_MD_MEM_ACCESS_ALL, &m2));
    MUST(uct_md_mkey_pack(c.md, m2, k2));
    MUST(uct_md_mem_dereg(c.md, m2));
    if (getenv("RCACHE_EXPECT_HIT") && atoi(getenv("RCACHE_EXPECT_HIT"))) {
        CHECK(memcmp(k1, k2, 8) == 0, "registered again instead of reusing the cached region");
    }
    /* Rounds 0-2 register the source (UCP does for rendezvous), rounds 3-5 pass no memory handle
     * (UCP's zero-copy sends may): the device must not reach the unmapped pages through a region
     * the cache still holds. */
    for (int round = 0; round < 6; ++round) {
        const uint8_t v = (uint8_t)(0x11 * (round + 1));
        memset(buf, v, len);
        put_all(&c, buf, len, target, rk.rkey, round < 3);
        size_t wrong = 0;
        for (size_t i = 0; i < len; ++i) wrong += target[i] != v;
        CHECK(wrong == 0, "round %d: %zu of %zu bytes are not 0x%02x (stale pages?)", round, wrong, len, v);
        /* The same address, new pages: munmap, then map again right there. */
        MUST(munmap(buf, len) == 0 ? UCS_OK : UCS_ERR_IO_ERROR);
        uint8_t *again = mmap(buf, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        MUST(again == buf ? UCS_OK : UCS_ERR_NO_MEMORY);
        if (round == 2) {
            /* Cached again at this address, then unmapped: a region the cache holds, not yet freed. */
            uct_mem_h m;
            memset(buf, 0x5a, len);
            MUST(uct_md_mem_reg(c.md, buf, len, UCT_MD_MEM_ACCESS_ALL, &m));
            MUST(uct_md_mem_dereg(c.md, m));
            MUST(munmap(buf, len) == 0 ? UCS_OK : UCS_ERR_IO_ERROR);
            again = mmap(buf, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            MUST(again == buf ? UCS_OK : UCS_ERR_NO_MEMORY);
        }
    }
    uct_rkey_release(c.cmp, &rk);
    MUST(uct_md_mem_dereg(c.md, mh_t));
    close_all(&c);
    munmap(buf, len);
    munmap(target, len);
    return g_failures;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "basic";
    int failures;
    if (!strcmp(mode, "basic")) {
        failures = test_basic();
    } else if (!strcmp(mode, "failure")) {
        failures = test_failure();
    } else if (!strcmp(mode, "flushfail")) {
        failures = test_flushfail();
    } else if (!strcmp(mode, "flushpend")) {
        failures = test_flushpend();
    } else if (!strcmp(mode, "cancel")) {
        failures = test_cancel();
    } else if (!strcmp(mode, "events")) {
        failures = test_events();
    } else if (!strcmp(mode, "badinput")) {
        failures = test_badinput();
    } else if (!strcmp(mode, "ep2ep")) {
        failures = test_ep2ep();
    } else if (!strcmp(mode, "rcache")) {
        failures = test_rcache();
    } else if (!strcmp(mode, "churn")) {
        failures = test_churn();
    } else {
        printf("usage: %s basic|failure|flushfail|flushpend|cancel|events|badinput|ep2ep|rcache|churn\n", argv[0]);
        return 2;
    }
    printf("%s: %s\n", mode, failures ? "FAILED" : "passed");
    return failures ? 1 : 0;
}
