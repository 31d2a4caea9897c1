// The registration cache of a verbs memory domain: UCX's ucs_rcache in front of ibv_reg_mr, as
// UCX's own ib memory domain has. UCP registers a rendezvous buffer per message and releases it
// when the message completes; without a cache every 1 MiB message pinned and unpinned 256 pages
// on both ranks (in the rxe guest a measurable part of MPI's 1 MiB bandwidth, and on a NIC tens
// of microseconds per message). The cache keeps regions registered after their last release and
// drops them when the memory is unmapped (UCM's VM_UNMAPPED events), so a buffer freed and mapped
// again is registered again, never reached through stale pages. The userspace device needs no
// cache: its registration is a table insert.
#include "glue.hpp"

#include <sys/mman.h>
#include <ucm/api/ucm.h>

#include <cstddef>
#include <cstdio>

namespace roce::uct {
namespace {

struct CachedRegion {
    ucs_rcache_region_t super;
    Memh memh;
};
static_assert(std::is_standard_layout_v<CachedRegion>);

CachedRegion* region_of(Memh* memh) {
    return reinterpret_cast<CachedRegion*>(reinterpret_cast<char*>(memh) - offsetof(CachedRegion, memh));
}

// Registered without address lookup (access_no_lookup): the device finds a local buffer's key by
// address when UCP passes no memory handle, and a region this cache holds may outlive the pages
// it pinned (an unmapped region is freed only at the cache's next operation).
ucs_status_t cache_reg(void* context, ucs_rcache_t*, void* arg, ucs_rcache_region_t* r,
                       uint16_t reg_flags) noexcept {
    auto* cr = reinterpret_cast<CachedRegion*>(r);
    unsigned flags = arg != nullptr ? *static_cast<const unsigned*>(arg) : 0;
    if (reg_flags & UCS_RCACHE_MEM_REG_HIDE_ERRORS) {
        flags |= UCT_MD_MEM_FLAG_HIDE_ERRORS;   // the cache retries a merged region that failed
    }
    try {
        cr->memh = Memh{};
        const ucs_status_t s = register_range(static_cast<Md*>(context), reinterpret_cast<void*>(r->super.start),
                                              r->super.end - r->super.start, flags, &cr->memh,
                                              access_all | access_no_lookup);
        cr->memh.cached = true;
        return s;
    } catch (...) {
        return exception_status("rcache mem_reg");
    }
}

void cache_dereg(void* context, ucs_rcache_t*, ucs_rcache_region_t* r) noexcept {
    try {
        deregister_range(static_cast<Md*>(context), &reinterpret_cast<CachedRegion*>(r)->memh);
    } catch (...) {
        exception_status("rcache mem_dereg");
    }
}

void cache_dump(void*, ucs_rcache_t*, ucs_rcache_region_t* r, char* buf, size_t max) noexcept {
    const Memh& m = reinterpret_cast<CachedRegion*>(r)->memh;
    std::snprintf(buf, max, "lkey 0x%x rkey 0x%x", m.keys.lkey, m.keys.rkey);
}

const ucs_rcache_ops_t cache_ops = {
    .mem_reg = cache_reg,
    .mem_dereg = cache_dereg,
    .dump_region = cache_dump,
};

} // namespace

ucs_status_t md_rcache_open(Md* md, const MdConfig& config) {
    if (config.rcache == UCS_NO) {
        return UCS_OK;
    }
    ucs_rcache_params_t p{};
    uct_md_set_rcache_params(&p, &config.rcache_config);
    p.region_struct_size = sizeof(CachedRegion);
    p.max_alignment = ucs_get_page_size();
    p.ucm_events = UCM_EVENT_VM_UNMAPPED;
    p.context = md;
    p.ops = &cache_ops;
    const std::string name = "roce_" + md->rdma_dev;
    const ucs_status_t s = ucs_rcache_create(&p, name.c_str(), nullptr, &md->rcache);
    if (s != UCS_OK) {
        md->rcache = nullptr;
        if (config.rcache == UCS_YES) {
            ucs_error("rc_roce: %s: UCX_ROCE_RCACHE=yes but the registration cache cannot be created: %s",
                      name.c_str(), ucs_status_string(s));
            return s;
        }
        ucs_debug("rc_roce: %s: no registration cache (%s): every registration pins its pages",
                  name.c_str(), ucs_status_string(s));
        return UCS_OK;
    }
    md->rcache_overhead = uct_md_rcache_overhead(&config.rcache_config);
    ucs_debug("rc_roce: %s: using a registration cache", name.c_str());
    return UCS_OK;
}

void md_rcache_close(Md* md) {
    if (md->rcache != nullptr) {
        ucs_rcache_destroy(md->rcache);
        md->rcache = nullptr;
    }
}

ucs_status_t md_rcache_reg(Md* md, void* address, size_t length, unsigned flags, Memh** memh_p) {
    ucs_rcache_region_t* r = nullptr;
    const ucs_status_t s = ucs_rcache_get(md->rcache, address, length, PROT_READ | PROT_WRITE, &flags, &r);
    if (s != UCS_OK) {
        return s;
    }
    *memh_p = &reinterpret_cast<CachedRegion*>(r)->memh;
    return UCS_OK;
}

void md_rcache_dereg(Md* md, Memh* memh) {
    ucs_rcache_region_put(md->rcache, &region_of(memh)->super);
}

} // namespace roce::uct
