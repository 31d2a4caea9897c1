/* ucp_peer_failure [-t bound_s] [-w warmup_s] [-i] [-c] [-r] [-s max_size] [-l linger_s]: issue 5
 * acceptance, public UCP API only.
 * A rank killed mid-run must give the survivor a peer-failure error (UCP_ERR_HANDLING_MODE_PEER)
 * within bound_s (default 30), not a hang, and the survivor must then clean up.
 * The parent (survivor) forks the child (victim); they exchange worker addresses over a
 * socketpair, then tagged messages of 8 B, 64 KiB and 1 MiB (eager and rendezvous), every byte
 * checked, until the parent SIGKILLs the child after warmup_s (default 1) with requests in
 * flight, and keeps progressing and posting to the dead peer (a probe send every 100 ms).
 *   -i  idle survivor: both sides stop posting and drain before the kill and the survivor posts
 *       nothing after it, so only UCP keepalive can detect the failure.
 *   -c  the victim is SIGSTOPped instead of killed: alive, its address held, silent.
 *   -r  reconnect (implies -c): once the survivor has its error and has closed the ep, the victim
 *       is resumed (a partition that heals), and the survivor makes a new ep to the same
 *       address: a message of the largest size each way on it, every byte checked, within
 *       bound_s; the victim answers on a new ep of its own and exits 0. (rc_roce: ud_roce
 *       refuses a new endpoint to an address it gave up, see the README.)
 *   -l  the survivor keeps its worker (and transports) progressing linger_s after the ep close,
 *       e.g. for what the transport frees of the dead peer's state on its own (peer_failure.sh
 *       checks a counter then).
 * Transport from UCX_TLS; UCX_KEEPALIVE_INTERVAL defaults to 1 s here (UCX's default: 20 s).
 * Exit 0 on pass; 1 with a "FAIL:" line on timeout, data mismatch, no error or stuck cleanup. */
#define _GNU_SOURCE
#include <ucp/api/ucp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* _exit: no UCX teardown, which could hang on the very state being reported. */
#define FAIL(...) \
    do { \
        printf("[peer_failure] FAIL: "), printf(__VA_ARGS__), printf("\n"), fflush(stdout); \
        _exit(1); \
    } while (0)
#define MUST(_x) \
    do { \
        ucs_status_t _s = (_x); \
        if (_s != UCS_OK) FAIL("%s: %s", #_x, ucs_status_string(_s)); \
    } while (0)

#define WINDOW 6                 /* iterations in flight per side, each a send and a receive */
#define MAX_PROBES 64
#define PROBE_TAG (1ull << 63)   /* never received: probes only exercise the dead ep */
#define RECON_TAG (1ull << 62)   /* -r: survivor -> victim on the new ep; +1 the answer */
/* 8 B, max/16, max (-s, default 1 MiB). Transports without RDMA move large messages as several
 * AM fragments; UCP 1.13 never completes a receive already matched to such a message when its
 * sender dies mid-way (not even on cancel), so those runs keep every message one fragment. */
static size_t sizes[] = {8, 64 << 10, 1 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

typedef struct {
    void *sreq, *rreq;       /* pending requests; NULL once complete */
    ucs_status_t sst, rst;   /* UCS_INPROGRESS while pending, then the final status */
    uint64_t seq;            /* the tag; the size is sizes[seq % NSIZES] */
    uint64_t *sbuf, *rbuf;
} slot_t;

static ucp_context_h context;
static ucp_worker_h worker;
static ucp_ep_h ep;
static ucp_address_t *peer_addr;   /* the other process's worker address (-r connects again) */
static int is_parent, quiesced;
static slot_t slots[WINDOW];
static void *probes[MAX_PROBES];
static uint64_t probe_buf;
static ucs_status_t ep_err = UCS_OK, req_err = UCS_OK;   /* first ep / request error */
static double ep_err_time, req_err_time;

static double now(void)
{
    struct timespec ts;
    return clock_gettime(CLOCK_MONOTONIC, &ts), ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void err_cb(void *arg, ucp_ep_h e, ucs_status_t status)
{
    (void)arg, (void)e;
    if (ep_err == UCS_OK) ep_err = status, ep_err_time = now();
}

static int failed(void) { return ep_err != UCS_OK || req_err != UCS_OK; }

static void note(ucs_status_t st)
{
    /* Canceled is our own doing (receives canceled at cleanup), not a detected failure. */
    if (st != UCS_OK && st != UCS_INPROGRESS && st != UCS_ERR_CANCELED && req_err == UCS_OK)
        req_err = st, req_err_time = now();
}

/* A just-posted request: NULL = done, error pointer = failed, else pending in *slot. */
static ucs_status_t start(void *r, void **slot)
{
    ucs_status_t st = UCS_PTR_IS_PTR(r) ? UCS_INPROGRESS : UCS_PTR_STATUS(r);
    *slot = UCS_PTR_IS_PTR(r) ? r : NULL;
    return note(st), st;
}

static ucs_status_t poll_req(void **req, ucs_status_t cur)
{
    if (*req == NULL) return cur;
    ucs_status_t st = ucp_request_check_status(*req);
    if (st != UCS_INPROGRESS) ucp_request_free(*req), *req = NULL, note(st);
    return st;
}

/* Word j of message seq from a sender: distinct per sender, sequence and offset. */
static uint64_t pattern(int sender, uint64_t seq, size_t j)
{
    return (seq << 40) ^ (j * 0x9E3779B97F4A7C15ull) ^ (uint64_t)sender;
}

static void post(slot_t *s, uint64_t seq)
{
    size_t len = sizes[seq % NSIZES];
    ucp_request_param_t p = {0};   /* no callbacks: requests are polled */
    s->seq = seq;
    for (size_t j = 0; j < len / 8; ++j) s->sbuf[j] = pattern(is_parent, seq, j);
    s->sst = start(ucp_tag_send_nbx(ep, s->sbuf, len, seq, &p), &s->sreq);
    s->rst = start(ucp_tag_recv_nbx(worker, s->rbuf, len, seq, ~0ull, &p), &s->rreq);
}

/* One progress round: completes requests, checks received data and, unless failed or
 * quiesced, posts the next iteration in every slot that finished. Returns iterations done. */
static int step(void)
{
    int done = 0;
    ucp_worker_progress(worker);
    for (int i = 0; i < WINDOW; ++i) {
        slot_t *s = &slots[i];
        s->sst = poll_req(&s->sreq, s->sst);
        s->rst = poll_req(&s->rreq, s->rst);
        if (s->sst != UCS_OK || s->rst != UCS_OK) continue;   /* pending, failed or retired */
        size_t len = sizes[s->seq % NSIZES];
        for (size_t j = 0; j < len / 8; ++j)
            if (s->rbuf[j] != pattern(!is_parent, s->seq, j))
                FAIL("data mismatch: message %llu (%zu B) word %zu",
                     (unsigned long long)s->seq, len, j);
        ++done;
        if (failed() || quiesced) s->sst = s->rst = UCS_ERR_NO_ELEM;   /* retired */
        else post(s, s->seq + WINDOW);
    }
    for (int i = 0; i < MAX_PROBES; ++i) poll_req(&probes[i], UCS_OK);
    return done;
}

static int pending(int with_recvs)
{
    int n = 0;
    for (int i = 0; i < WINDOW; ++i) n += (slots[i].sreq != NULL) + (with_recvs && slots[i].rreq);
    for (int i = 0; i < MAX_PROBES; ++i) n += probes[i] != NULL;
    return n;
}

static int drain(int with_recvs, double secs)
{
    for (double end = now() + secs; pending(with_recvs) && now() < end;) step();
    return pending(with_recvs);
}

static void xfer(int fd, void *buf, size_t len, int out)
{
    for (size_t off = 0, n; off < len; off += n) {
        char *p = (char *)buf + off;
        ssize_t r = out ? write(fd, p, len - off) : read(fd, p, len - off);
        if (r <= 0) FAIL("address exchange over the socketpair (%s)", out ? "write" : "read");
        n = (size_t)r;
    }
}

/* An ep with peer error handling to the other process. */
static ucp_ep_h connect_peer(void)
{
    ucp_ep_params_t ep_params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = peer_addr,
        .err_mode = UCP_ERR_HANDLING_MODE_PEER, .err_handler = {.cb = err_cb, .arg = NULL}};
    ucp_ep_h e;
    MUST(ucp_ep_create(worker, &ep_params, &e));
    return e;
}

/* Closes `e` (flags: UCP_EP_CLOSE_FLAG_FORCE or 0, a flushing close) and waits for it, 10 s at
 * most; an error status is reported, not a failure (expected on a failed ep). */
static void close_ep(ucp_ep_h e, unsigned flags, const char *what)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = flags};
    void *r = ucp_ep_close_nbx(e, &p);
    for (double end = now() + 10; UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS;) {
        if (now() > end) FAIL("%s ep close did not complete within 10 s", what);
        ucp_worker_progress(worker);
    }
    if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
    else if (UCS_PTR_IS_ERR(r))
        printf("[peer_failure] %s ep close: %s\n", what, ucs_status_string(UCS_PTR_STATUS(r)));
}

/* -r: the message each way on the new eps, the largest size, the sender's pattern.
 * recon_buf[1] is what we send, recon_buf[0] what we receive (recon_check checks it). */
static void *recon_buf[2];

/* Waits for *req (NULL: done already) within bound s; fails on an error. */
static void recon_wait(void **req, const char *what, double bound)
{
    for (double end = now() + bound; *req != NULL;) {
        ucp_worker_progress(worker);
        ucs_status_t st = ucp_request_check_status(*req);
        if (st != UCS_INPROGRESS) {
            ucp_request_free(*req), *req = NULL;
            if (st != UCS_OK) FAIL("reconnect: %s: %s", what, ucs_status_string(st));
        } else if (now() > end) {
            FAIL("reconnect: %s not done within %.0f s", what, bound);
        }
    }
}

static void *recon_post(int send, ucp_ep_h e, uint64_t tag)
{
    size_t len = sizes[NSIZES - 1];
    uint64_t *b = recon_buf[send];
    if (b == NULL && (b = recon_buf[send] = malloc(len)) == NULL) FAIL("malloc");
    ucp_request_param_t p = {0};
    void *r;
    if (send) {
        for (size_t j = 0; j < len / 8; ++j) b[j] = pattern(is_parent, tag, j);
        r = ucp_tag_send_nbx(e, b, len, tag, &p);
    } else {
        r = ucp_tag_recv_nbx(worker, b, len, tag, ~0ull, &p);
    }
    if (UCS_PTR_IS_ERR(r)) FAIL("reconnect: post: %s", ucs_status_string(UCS_PTR_STATUS(r)));
    return r;
}

static void recon_check(uint64_t tag)
{
    const uint64_t *b = recon_buf[0];
    for (size_t j = 0; j < sizes[NSIZES - 1] / 8; ++j)
        if (b[j] != pattern(!is_parent, tag, j))
            FAIL("reconnect: data mismatch: tag %llx word %zu", (unsigned long long)tag, j);
}

/* Context, worker and an ep with peer error handling to the process at the other end of fd. */
static void setup(int fd)
{
    ucp_config_t *cfg;
    MUST(ucp_config_read(NULL, NULL, &cfg));
    /* Keepalive lets a survivor with nothing in flight notice the failure; UCX's default
     * interval (20 s) would eat most of the bound, so 1 s unless the user chose one. */
    if (getenv("UCX_KEEPALIVE_INTERVAL") == NULL)
        MUST(ucp_config_modify(cfg, "KEEPALIVE_INTERVAL", "1s"));
    ucp_params_t cp = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    MUST(ucp_init(&cp, cfg, &context));
    ucp_config_release(cfg);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    MUST(ucp_worker_create(context, &wp, &worker));
    ucp_address_t *addr, *peer;
    size_t len, peer_len;
    MUST(ucp_worker_get_address(worker, &addr, &len));
    xfer(fd, &len, sizeof(len), 1);
    xfer(fd, addr, len, 1);
    xfer(fd, &peer_len, sizeof(peer_len), 0);
    if ((peer = malloc(peer_len)) == NULL) FAIL("malloc");
    xfer(fd, peer, peer_len, 0);
    ucp_worker_release_address(worker, addr);
    peer_addr = peer;
    ep = connect_peer();
    for (int i = 0; i < WINDOW; ++i) {
        slots[i].sbuf = malloc(sizes[NSIZES - 1]);
        slots[i].rbuf = malloc(sizes[NSIZES - 1]);
        if (!slots[i].sbuf || !slots[i].rbuf) FAIL("malloc");
        post(&slots[i], (uint64_t)i);
    }
}

int main(int argc, char **argv)
{
    double bound = 30, warmup = 1, linger = 0;
    int idle = 0, cut = 0, reconnect = 0, opt, sv[2], wst, verified = 0, probes_posted = 0;
    char c = 'q';
    while ((opt = getopt(argc, argv, "t:w:icrs:l:")) != -1) {
        if (opt == 's') sizes[2] = strtoul(optarg, NULL, 0), sizes[1] = sizes[2] / 16;
        else if (opt == 't') bound = atof(optarg);
        else if (opt == 'w') warmup = atof(optarg);
        else if (opt == 'i') idle = 1;
        else if (opt == 'c') cut = 1;   /* SIGSTOP instead of SIGKILL: alive, ports held, silent */
        else if (opt == 'r') reconnect = cut = 1;
        else if (opt == 'l') linger = atof(optarg);
        else return fprintf(stderr, "usage: %s [-t bound_s] [-w warmup_s] [-i] [-c] [-r] [-s max_size] [-l linger_s]\n", argv[0]), 2;
    }
    const char *tls = getenv("UCX_TLS"), *nd = getenv("UCX_NET_DEVICES");
    const char *ka = getenv("UCX_KEEPALIVE_INTERVAL");
    printf("[peer_failure] UCX_TLS=%s UCX_NET_DEVICES=%s UCX_KEEPALIVE_INTERVAL=%s mode=%s "
           "bound=%.0fs\n", tls ? tls : "(all)", nd ? nd : "(all)",
           ka ? ka : "1s (test default)", idle ? "idle" : reconnect ? "probe, traffic cut, then reconnect" :
           cut ? "probe, traffic cut (SIGSTOP)" : "probe", bound);
    fflush(stdout);   /* before fork: no output buffered twice */
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) FAIL("socketpair");
    pid_t pid = fork();   /* before any UCX initialization: each process has its own */
    if (pid < 0) FAIL("fork");
    if (pid == 0) {       /* victim: traffic until killed; dies with the parent if it goes first */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        setup(sv[1]);
        void *recon = reconnect ? recon_post(0, NULL, RECON_TAG) : NULL;
        for (unsigned n = 0; !failed(); ++n) {
            step();   /* keeps progressing after a quiesce: the survivor's rendezvous need it */
            if (!quiesced && n % 1024 == 0) quiesced = recv(sv[1], &c, 1, MSG_DONTWAIT) == 1;
        }
        if (!reconnect) _exit(3);   /* the survivor failed first */
        /* Resumed after the survivor gave us up: our old ep has failed too (the survivor's new
         * connection ended it, or our own timeout); its message comes on the new one. */
        recon_wait(&recon, "the survivor's message", bound);
        recon_check(RECON_TAG);
        ucp_ep_h e2 = connect_peer();
        void *answer = recon_post(1, e2, RECON_TAG + 1);
        recon_wait(&answer, "the answer", bound);
        /* Progress until the survivor has it all (a rendezvous needs us), then leave. */
        while (recv(sv[1], &c, 1, MSG_DONTWAIT) != 1) ucp_worker_progress(worker);
        _exit(0);
    }
    is_parent = 1;
    setup(sv[0]);
    double t0 = now(), last_check = t0;
    while (now() - t0 < warmup || verified < (int)(3 * NSIZES)) {
        verified += step();
        if (failed())
            FAIL("error before the kill: %s", ucs_status_string(ep_err ? ep_err : req_err));
        if (now() - last_check > 0.01) {   /* the victim must not exit on its own */
            last_check = now();
            if (waitpid(pid, &wst, WNOHANG) == pid)
                FAIL("the victim exited (status 0x%x) before the kill", wst);
            if (now() - t0 > bound) FAIL("no traffic: %d messages verified", verified);
        }
    }
    if (idle) {   /* both stop posting; what is in flight completes (or waits for a tag) */
        quiesced = 1;
        xfer(sv[0], &c, 1, 1);
        for (double end = now() + 0.5; now() < end;) verified += step();
    }
    double tk = now();
    if (cut) {   /* its traffic stops: the process lives on, holding its address, answering nothing */
        kill(pid, SIGSTOP);
    } else {
        kill(pid, SIGKILL);
        waitpid(pid, &wst, 0);
    }
    printf("[peer_failure] %s the victim after %.2f s: %d iterations verified, %d requests "
           "pending (%d sends)\n", cut ? "stopped" : "killed", tk - t0, verified, pending(1), pending(0));
    fflush(stdout);

    /* Keep progressing (and, unless idle, posting to the dead peer) until the failure shows. */
    for (double next_probe = tk; !failed();) {
        verified += step();
        if (!idle && now() >= next_probe && probes_posted < MAX_PROBES) {
            ucp_request_param_t p = {0};
            start(ucp_tag_send_nbx(ep, &probe_buf, sizeof(probe_buf), PROBE_TAG, &p),
                  &probes[probes_posted++]);
            next_probe += 0.1;
        }
        if (now() - tk > bound)
            FAIL("no error within %.0f s after the kill (%d requests pending, %d probes posted)",
                 bound, pending(1), probes_posted);
    }
    /* Give the error callback time to follow a failed request (or vice versa), for the report. */
    for (double end = now() + 1; (ep_err == UCS_OK || req_err == UCS_OK) && now() < end;) step();
    if (cut && !reconnect) {   /* the failure was found while the victim was still alive: end it now */
        kill(pid, SIGKILL);
        waitpid(pid, &wst, 0);
    }
    int sends_left = drain(0, 5);   /* UCP must complete sends and probes with the ep's error */
    double first = ep_err && (!req_err || ep_err_time < req_err_time) ? ep_err_time : req_err_time;
    printf("[peer_failure] error %.3f s after the kill; error callback: %s at %.3f s; first "
           "failed request: %s at %.3f s; %d probes posted; %d sends still pending\n", first - tk,
           ep_err ? ucs_status_string(ep_err) : "none", ep_err ? ep_err_time - tk : 0.0,
           req_err ? ucs_status_string(req_err) : "none", req_err ? req_err_time - tk : 0.0,
           probes_posted, sends_left);
    fflush(stdout);

    /* Cleanup. Tag receives belong to the worker, not the ep: no ep failure ends them. */
    for (int i = 0; i < WINDOW; ++i)
        if (slots[i].rreq) ucp_request_cancel(worker, slots[i].rreq);
    double tc = now();
    close_ep(ep, UCP_EP_CLOSE_FLAG_FORCE, "forced");
    int left = drain(1, 10);
    if (left) FAIL("%d requests still pending 10 s after the forced ep close", left);
    if (reconnect) {   /* the partition heals: a new ep to the same address must work */
        double tr = now();
        kill(pid, SIGCONT);
        ucp_ep_h e2 = connect_peer();
        void *in = recon_post(0, NULL, RECON_TAG + 1);
        void *out = recon_post(1, e2, RECON_TAG);
        recon_wait(&out, "the message to the victim", bound);
        recon_wait(&in, "the victim's answer", bound);
        recon_check(RECON_TAG + 1);
        close_ep(e2, 0, "reconnect: flushing");   /* a live peer: it progresses until told to go */
        xfer(sv[0], &c, 1, 1);
        waitpid(pid, &wst, 0);
        if (!WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
            FAIL("reconnect: the victim ended with status 0x%x", wst);
        printf("[peer_failure] reconnected: %zu B each way, every byte checked, in %.3f s\n",
               sizes[NSIZES - 1], now() - tr);
        fflush(stdout);
    }
    if (linger > 0) {
        printf("[peer_failure] lingering %.1f s\n", linger);
        fflush(stdout);
        for (double end = now() + linger; now() < end;) ucp_worker_progress(worker);
    }
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    for (int i = 0; i < WINDOW; ++i) free(slots[i].sbuf), free(slots[i].rbuf);
    printf("[peer_failure] PASS: error %.3f s after the kill (bound %.0f s), cleanup %.3f s\n",
           first - tk, bound, now() - tc);
    return 0;
}
