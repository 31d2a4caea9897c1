/*
 * Scale benchmark (issue 5): endpoint-creation time and memory per connected peer.
 *
 *   scale_eps <rc_roce|ud_roce> [device (lo)] [count...] (default 10 100 1000 10000)
 *
 * For each count N, a fresh interface creates N endpoints (CONNECT_TO_IFACE) to N simulated
 * peers: its own device address, and its iface address with the first two bytes (the UDP port,
 * network order, in both transports) set to distinct ports nothing is bound to. Public UCT API
 * only; the plugin is LD_PRELOADed (build/roce-env.sh).
 *
 * stdout: CSV  transport,peers,create_us_total,create_us_per_ep,rss_bytes_per_ep,
 *              rss_bytes_per_ep_progressed,ep_errors,open_fds_per_ep,progress_us_per_call,status
 *   rss_bytes_per_ep            RSS growth right after the N ep_create calls, divided by N
 *   rss_bytes_per_ep_progressed the same after ~0.2 s of worker progress (rc_roce's connection
 *                               manager sends its requests asynchronously)
 *   ep_errors                   error-handler calls during that progress (peers do not exist)
 *   progress_us_per_call        mean uct_worker_progress time with the N endpoints
 *   status                      OK, or why creation stopped (the numbers are then empty)
 * stderr: one human-readable line per count.
 *
 * Environment: SCALE_BASE_PORT (first simulated peer port, default 20000),
 *              SCALE_PROGRESS_MS (progress time after creation, default 200).
 */
#include <uct/api/uct.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int g_ep_errors;

/* Endpoints to peers that do not exist may fail during progress: count, and let them be
 * destroyed with the others. */
static ucs_status_t err_handler(void *arg, uct_ep_h ep, ucs_status_t status)
{
    (void)arg, (void)ep, (void)status;
    ++g_ep_errors;
    return UCS_OK;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static long rss_bytes(void)
{
    long size, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL || fscanf(f, "%ld %ld", &size, &resident) != 2) {
        resident = 0;
    }
    if (f != NULL) {
        fclose(f);
    }
    return resident * sysconf(_SC_PAGESIZE);
}

static int open_fds(void)
{
    int n = -3;   /* ".", ".." and the directory's own fd */
    DIR *d = opendir("/proc/self/fd");
    while (d != NULL && readdir(d) != NULL) {
        ++n;
    }
    if (d != NULL) {
        closedir(d);
    }
    return n;
}

/* A port counts as unused when a wildcard UDP bind to it succeeds: a socket bound to it on
 * any address (a live interface of another process) would make this bind fail. */
static int udp_port_free(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    int ok = fd >= 0 && bind(fd, (struct sockaddr*)&sa, sizeof(sa)) == 0;
    if (fd >= 0) {
        close(fd);
    }
    return ok;
}

typedef struct {
    uct_md_h md;
    uct_worker_h worker;
    uct_iface_config_t *config;
    const char *tl, *dev;
} bench_t;

static void run_count(bench_t *b, long n)
{
    uct_iface_params_t params = {
        .field_mask  = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE |
                       UCT_IFACE_PARAM_FIELD_ERR_HANDLER | UCT_IFACE_PARAM_FIELD_ERR_HANDLER_ARG |
                       UCT_IFACE_PARAM_FIELD_ERR_HANDLER_FLAGS,
        .open_mode   = UCT_IFACE_OPEN_MODE_DEVICE,
        .mode.device = {.tl_name = b->tl, .dev_name = b->dev},
        .err_handler = err_handler,
    };
    /* Everything the measurement does not own is allocated before the baseline. */
    uct_ep_h *eps = calloc(n, sizeof(*eps));
    uint8_t *dev_addr = NULL, *own = NULL, *peers = NULL;
    long created = 0, port = getenv("SCALE_BASE_PORT") ? atol(getenv("SCALE_BASE_PORT")) : 20000;
    int measured = 0;
    char why[160] = "OK";
    uct_iface_attr_t attr;
    uct_iface_h iface = NULL;
    ucs_status_t status = uct_iface_open(b->md, b->worker, &params, b->config, &iface);
    if (status != UCS_OK) {
        iface = NULL;
        snprintf(why, sizeof(why), "iface_open on %s: %s", b->dev, ucs_status_string(status));
        goto out;
    }
    uct_iface_progress_enable(iface, UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    status = uct_iface_query(iface, &attr);
    if (status == UCS_OK && attr.iface_addr_len < 2) {
        status = UCS_ERR_UNSUPPORTED;   /* no port to rewrite */
    }
    if (status == UCS_OK) {
        dev_addr = malloc(attr.device_addr_len);
        own = malloc(attr.iface_addr_len);
        peers = malloc(n * attr.iface_addr_len);
        status = !eps || !dev_addr || !own || !peers ? UCS_ERR_NO_MEMORY : UCS_OK;
    }
    if (status == UCS_OK) {
        status = uct_iface_get_device_address(iface, (uct_device_addr_t*)dev_addr);
    }
    if (status == UCS_OK) {
        status = uct_iface_get_address(iface, (uct_iface_addr_t*)own);
    }
    if (status != UCS_OK) {
        snprintf(why, sizeof(why), "address query: %s", ucs_status_string(status));
        goto out;
    }
    uint16_t own_port_be;
    memcpy(&own_port_be, own, 2);
    for (long i = 0; i < n; ++i, ++port) {
        while (port <= 65535 && (port == ntohs(own_port_be) || !udp_port_free(port))) {
            ++port;
        }
        if (port > 65535) {
            snprintf(why, sizeof(why), "only %ld free UDP ports above the base port", i);
            goto out;
        }
        uint16_t port_be = htons((uint16_t)port);
        memcpy(peers + i * attr.iface_addr_len, own, attr.iface_addr_len);
        memcpy(peers + i * attr.iface_addr_len, &port_be, 2);
    }

    uct_ep_params_t ep_params = {
        .field_mask = UCT_EP_PARAM_FIELD_IFACE | UCT_EP_PARAM_FIELD_DEV_ADDR |
                      UCT_EP_PARAM_FIELD_IFACE_ADDR,
        .iface      = iface,
        .dev_addr   = (uct_device_addr_t*)dev_addr,
    };
    /* One ep created and destroyed first: one-time lazy allocations (of UCX or the transport)
     * would otherwise be charged to the N endpoints, which dominates at small N. */
    ep_params.iface_addr = (uct_iface_addr_t*)peers;
    if (uct_ep_create(&ep_params, &eps[0]) == UCS_OK) {
        uct_ep_destroy(eps[0]);
    }
    g_ep_errors = 0;
    malloc_trim(0);   /* the baseline should not include memory freed by earlier counts */
    const int fds0 = open_fds();
    const long rss0 = rss_bytes();
    const double t0 = now_us();
    for (; created < n; ++created) {
        ep_params.iface_addr = (uct_iface_addr_t*)(peers + created * attr.iface_addr_len);
        status = uct_ep_create(&ep_params, &eps[created]);
        if (status != UCS_OK) {
            snprintf(why, sizeof(why), "ep_create #%ld: %s", created + 1,
                     ucs_status_string(status));
            break;
        }
    }
    const double create_us = now_us() - t0;
    const long rss1 = rss_bytes();
    const int fds1 = open_fds();
    const double p0 = now_us();
    const double progress_us = 1e3 * (getenv("SCALE_PROGRESS_MS") ?
                                      atof(getenv("SCALE_PROGRESS_MS")) : 200);
    long calls = 0;
    for (; now_us() - p0 < progress_us; ++calls) {
        uct_worker_progress(b->worker);
    }
    const double call_us = (now_us() - p0) / (calls ? calls : 1);
    const long rss2 = rss_bytes();
    const double d0 = now_us();
    for (long i = 0; i < created; ++i) {
        uct_ep_destroy(eps[i]);
    }
    const double destroy_us = now_us() - d0;
    measured = 1;
    if (created == n) {
        printf("%s,%ld,%.0f,%.2f,%.0f,%.0f,%d,%.3f,%.2f,OK\n", b->tl, n, create_us,
               create_us / n, (double)(rss1 - rss0) / n, (double)(rss2 - rss0) / n, g_ep_errors,
               (double)(fds1 - fds0) / n, call_us);
    }
    fprintf(stderr, "%s %6ld peers: %s; create %.0f us (%.2f us/ep), destroy %.0f us, "
            "RSS +%ld KiB (+%ld KiB after %.0f ms progress, %.2f us/call), fds %d -> %d, "
            "%d ep errors\n",
            b->tl, n, why, create_us, created ? create_us / created : 0.0, destroy_us,
            (rss1 - rss0) / 1024, (rss2 - rss0) / 1024, progress_us / 1e3, call_us, fds0, fds1,
            g_ep_errors);
out:
    if (!measured) {
        fprintf(stderr, "%s %6ld peers: %s\n", b->tl, n, why);
    }
    if (created != n) {
        for (char *c = why; *c; ++c) {
            *c = *c == ',' ? ';' : *c;   /* a comma would split the CSV field */
        }
        printf("%s,%ld,,,,,,,,%s\n", b->tl, n, why);
    }
    fflush(stdout);
    free(eps);
    free(peers);
    free(own);
    free(dev_addr);
    if (iface != NULL) {
        uct_iface_close(iface);
    }
}

int main(int argc, char **argv)
{
    static char *default_counts[] = {"10", "100", "1000", "10000"};
    bench_t b = {.tl = argc > 1 ? argv[1] : NULL, .dev = argc > 2 ? argv[2] : "lo"};
    uct_component_h *comps, cmp = NULL;
    unsigned num;
    uct_md_config_t *md_config;
    ucs_async_context_t *async;

    char **counts = argc > 3 ? argv + 3 : default_counts, *end;
    const int num_counts = argc > 3 ? argc - 3 : 4;
    for (int i = 0; i < num_counts; ++i) {
        if (strtol(counts[i], &end, 10) <= 0 || *end != '\0') {
            b.tl = NULL;
        }
    }
    if (b.tl == NULL) {
        fprintf(stderr, "usage: %s <rc_roce|ud_roce> [device] [count > 0 ...]\n", argv[0]);
        return 2;
    }
    if (uct_query_components(&comps, &num) != UCS_OK) {
        return 1;
    }
    for (unsigned i = 0; i < num; ++i) {
        uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME};
        if (uct_component_query(comps[i], &attr) == UCS_OK && !strcmp(attr.name, "roce")) {
            cmp = comps[i];
        }
    }
    if (cmp == NULL) {
        fprintf(stderr, "component roce is not registered (source build/roce-env.sh)\n");
        return 1;
    }
    if (uct_md_config_read(cmp, NULL, NULL, &md_config) != UCS_OK ||
        uct_md_open(cmp, "roce", md_config, &b.md) != UCS_OK ||
        ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async) != UCS_OK ||
        uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &b.worker) != UCS_OK) {
        fprintf(stderr, "cannot open MD roce / worker\n");
        return 1;
    }
    ucs_status_t status = uct_md_iface_config_read(b.md, b.tl, NULL, NULL, &b.config);
    if (status != UCS_OK) {
        fprintf(stderr, "%s: no such transport on MD roce: %s\n", b.tl, ucs_status_string(status));
        return 1;
    }
    printf("transport,peers,create_us_total,create_us_per_ep,rss_bytes_per_ep,"
           "rss_bytes_per_ep_progressed,ep_errors,open_fds_per_ep,progress_us_per_call,status\n");
    for (int i = 0; i < num_counts; ++i) {
        run_count(&b, atol(counts[i]));
    }
    uct_config_release(b.config);
    uct_worker_destroy(b.worker);
    ucs_async_context_destroy(async);
    uct_md_close(b.md);
    uct_config_release(md_config);
    return 0;
}
