// Memory domains: `roce` (one roce::sw::Pd, the userspace device) and `roce_<rdma device>` (one
// roce::verbs::Pd on that device). Registration gives every region all access rights (UCX asks for remote access per operation, not per region); the packed rkey is the
// Pd's rkey plus a marker. UCX passes remote addresses as absolute virtual addresses, which
// is what the device expects, so an unpacked rkey is just the 32-bit key.
#include "glue.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <cstring>

#include "verbs/ports.hpp"

namespace roce::uct {
namespace {

Md* to_md(uct_md_h h) { return reinterpret_cast<Md*>(h); }

void md_close(uct_md_h tl_md) noexcept {
    md_rcache_close(to_md(tl_md));   // deregisters what it holds while the PD is still open
    delete to_md(tl_md);
}

ucs_status_t md_query(uct_md_h tl_md, uct_md_attr_t* attr) noexcept {
    attr->cap.flags = UCT_MD_FLAG_REG | UCT_MD_FLAG_NEED_RKEY | UCT_MD_FLAG_ALLOC;
    attr->cap.reg_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.alloc_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.access_mem_types = UCS_BIT(UCS_MEMORY_TYPE_HOST);
    attr->cap.detect_mem_types = 0;
    attr->cap.max_alloc = ULONG_MAX;     // anonymous mmap: bounded by the address space only
    attr->cap.max_reg = ULONG_MAX;
    attr->rkey_packed_size = sizeof(PackedRkey);
    if (to_md(tl_md)->rcache != nullptr) {
        // UCP then registers zero-copy buffers too (a cache lookup) and passes their key along.
        attr->cap.flags |= UCT_MD_FLAG_NEED_MEMH;
        attr->reg_cost = ucs_linear_func_make(to_md(tl_md)->rcache_overhead, 0);   // a lookup
    } else if (to_md(tl_md)->is_verbs()) {
        // ibv_reg_mr pins and maps every page (the figures UCX's ib MD assumes).
        attr->reg_cost = ucs_linear_func_make(16e-6, 0.06e-9);
    } else {
        // A registration is a table insert in the userspace device: no pinning, no page walk.
        attr->reg_cost = ucs_linear_func_make(0.2e-6, 0);
    }
    std::memset(&attr->local_cpus, 0xff, sizeof(attr->local_cpus));
    return UCS_OK;
}

} // namespace

ucs_status_t register_range(Md* md, void* address, size_t length, unsigned flags, Memh* memh,
                            unsigned access) {
    memh->address = address;
    memh->length = length;
    memh->registered = false;
    if (length == 0) {
        return UCS_OK;   // nothing a peer could access; keys stay 0
    }
    // Rounded out to 8 bytes: a 32-bit atomic runs as a CAS on its aligned 64-bit word, which
    // must be inside the region (the extra bytes are the same words the user registered).
    uintptr_t start = reinterpret_cast<uintptr_t>(address) & ~uintptr_t{atomic_word - 1};
    uintptr_t end = (reinterpret_cast<uintptr_t>(address) + length + atomic_word - 1) &
                    ~uintptr_t{atomic_word - 1};
    Status s = md->pd()->reg_mr(reinterpret_cast<void*>(start), end - start, access, memh->keys);
    if (s != Status::ok) {
        uct_md_log_mem_reg_error(flags, "rc_roce: failed to register %p length %zu: %s", address,
                                 length, std::string(to_string(s)).c_str());
        return to_ucs(s);
    }
    memh->registered = true;
    return UCS_OK;
}

void deregister_range(Md* md, Memh* memh) {
    if (memh->registered) {
        Status s = md->pd()->dereg_mr(memh->keys.lkey);
        if (s != Status::ok) {
            ucs_warn("rc_roce: failed to deregister %p length %zu: %s", memh->address,
                     memh->length, std::string(to_string(s)).c_str());
        }
        memh->registered = false;
    }
}

namespace {

ucs_status_t mem_reg(uct_md_h tl_md, void* address, size_t length, unsigned flags,
                     uct_mem_h* memh_p) noexcept {
    ROCE_UCT_TRY("mem_reg", return _exc_status, {
        Md* md = to_md(tl_md);
        if (md->rcache != nullptr && length != 0) {
            Memh* cached = nullptr;
            const ucs_status_t status = md_rcache_reg(md, address, length, flags, &cached);
            if (status == UCS_OK) *memh_p = cached;
            return status;
        }
        auto memh = std::make_unique<Memh>();
        memh->allocated = false;
        ucs_status_t status = register_range(md, address, length, flags, memh.get());
        if (status != UCS_OK) {
            return status;
        }
        *memh_p = memh.release();
        return UCS_OK;
    })
}

ucs_status_t mem_dereg(uct_md_h tl_md, const uct_md_mem_dereg_params_t* params) noexcept {
    UCT_MD_MEM_DEREG_CHECK_PARAMS(params, 0);
    ROCE_UCT_TRY("mem_dereg", return _exc_status, {
        auto* memh = static_cast<Memh*>(params->memh);
        if (memh->allocated) {
            return UCS_ERR_INVALID_PARAM;   // belongs to mem_free
        }
        if (memh->cached) {
            md_rcache_dereg(to_md(tl_md), memh);   // back to the cache (kept registered)
            return UCS_OK;
        }
        deregister_range(to_md(tl_md), memh);
        delete memh;
        return UCS_OK;
    })
}

ucs_status_t mem_alloc(uct_md_h tl_md, size_t* length_p, void** address_p,
                       ucs_memory_type_t mem_type, unsigned flags, const char* alloc_name,
                       uct_mem_h* memh_p) noexcept {
    if (mem_type != UCS_MEMORY_TYPE_HOST) {
        return UCS_ERR_UNSUPPORTED;
    }
    if (flags & UCT_MD_MEM_FLAG_FIXED) {
        return UCS_ERR_UNSUPPORTED;
    }
    ROCE_UCT_TRY("mem_alloc", return _exc_status, {
        size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        size_t length = (std::max<size_t>(*length_p, 1) + page - 1) / page * page;
        void* address = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                             -1, 0);
        if (address == MAP_FAILED) {
            ucs_debug("rc_roce: mmap(%zu) for %s failed: %m", length, alloc_name);
            return UCS_ERR_NO_MEMORY;
        }
        auto memh = std::make_unique<Memh>();
        memh->allocated = true;
        ucs_status_t status = register_range(to_md(tl_md), address, length, flags, memh.get());
        if (status != UCS_OK) {
            munmap(address, length);
            return status;
        }
        *length_p = length;
        *address_p = address;
        *memh_p = memh.release();
        return UCS_OK;
    })
}

ucs_status_t mem_free(uct_md_h tl_md, uct_mem_h tl_memh) noexcept {
    ROCE_UCT_TRY("mem_free", return _exc_status, {
        auto* memh = static_cast<Memh*>(tl_memh);
        if (!memh->allocated) {
            return UCS_ERR_INVALID_PARAM;
        }
        deregister_range(to_md(tl_md), memh);
        munmap(memh->address, memh->length);
        delete memh;
        return UCS_OK;
    })
}

ucs_status_t mkey_pack(uct_md_h, uct_mem_h tl_memh, const uct_md_mkey_pack_params_t*,
                       void* rkey_buffer) noexcept {
    const auto* memh = static_cast<const Memh*>(tl_memh);
    PackedRkey packed{memh->keys.rkey, rkey_magic};
    std::memcpy(rkey_buffer, &packed, sizeof(packed));
    return UCS_OK;
}

ucs_status_t mem_advise(uct_md_h, uct_mem_h, void*, size_t, unsigned) noexcept {
    return UCS_ERR_UNSUPPORTED;
}

ucs_status_t mem_query(uct_md_h, const void*, size_t, uct_md_mem_attr_t*) noexcept {
    return UCS_ERR_UNSUPPORTED;   // host memory only; nothing to detect
}

int is_sockaddr_accessible(uct_md_h, const ucs_sock_addr_t*,
                           uct_sockaddr_accessibility_t) noexcept {
    return 0;   // no client/server connection manager
}

ucs_status_t detect_memory_type(uct_md_h, const void*, size_t, ucs_memory_type_t*) noexcept {
    return UCS_ERR_UNSUPPORTED;
}

uct_md_ops_t md_ops = {
    .close = md_close,
    .query = md_query,
    .mem_alloc = mem_alloc,
    .mem_free = mem_free,
    .mem_advise = mem_advise,
    .mem_reg = mem_reg,
    .mem_dereg = mem_dereg,
    .mem_query = mem_query,
    .mkey_pack = mkey_pack,
    .is_sockaddr_accessible = is_sockaddr_accessible,
    .detect_memory_type = detect_memory_type,
};

} // namespace

ucs_status_t query_md_resources(uct_component_t*, uct_md_resource_desc_t** resources_p,
                                unsigned* num_resources_p) noexcept {
    ROCE_UCT_TRY("query_md_resources", return _exc_status, {
        std::vector<std::string> names{component_name};
        for (const std::string& dev : verbs::list_roce_devices()) {
            std::string name = verbs_md_prefix + dev;
            if (name.size() < UCT_MD_NAME_MAX) {
                names.push_back(std::move(name));
            }
        }
        auto* res = static_cast<uct_md_resource_desc_t*>(
                ucs_calloc(names.size(), sizeof(uct_md_resource_desc_t), "roce md resources"));
        if (res == nullptr) {
            return UCS_ERR_NO_MEMORY;
        }
        for (size_t i = 0; i < names.size(); ++i) {
            ucs_strncpy_zero(res[i].md_name, names[i].c_str(), sizeof(res[i].md_name));
        }
        *resources_p = res;
        *num_resources_p = static_cast<unsigned>(names.size());
        return UCS_OK;
    })
}

ucs_status_t md_open(uct_component_t* comp, const char* md_name, const uct_md_config_t* md_config,
                     uct_md_h* md_p) noexcept {
    ROCE_UCT_TRY("md_open", return _exc_status, {
        auto md = std::make_unique<Md>();
        md->super.ops = &md_ops;
        md->super.component = comp;
        const std::string name = md_name != nullptr ? md_name : component_name;
        if (name == component_name) {
            md->sw_pd = sw::Pd::create();
            const char* ns = reinterpret_cast<const MdConfig*>(md_config)->netns;
            md->netns = ns != nullptr ? ns : "";
        } else if (name.rfind(verbs_md_prefix, 0) == 0) {
            md->rdma_dev = name.substr(std::strlen(verbs_md_prefix));
            Status s = verbs::Pd::open(md->rdma_dev, md->verbs_pd);   // logs why not
            if (s != Status::ok) {
                return to_ucs(s);
            }
            const ucs_status_t rs = md_rcache_open(md.get(), *reinterpret_cast<const MdConfig*>(md_config));
            if (rs != UCS_OK) {
                return rs;
            }
        } else {
            ucs_error("rc_roce: unknown memory domain '%s' (expected %s or %s<rdma device>)",
                      name.c_str(), component_name, verbs_md_prefix);
            return UCS_ERR_NO_DEVICE;
        }
        if (md->pd() == nullptr) {
            md_rcache_close(md.get());
            return UCS_ERR_NO_MEMORY;
        }
        *md_p = &md.release()->super;
        return UCS_OK;
    })
}

ucs_status_t rkey_unpack(uct_component_t*, const void* rkey_buffer, uct_rkey_t* rkey_p,
                         void** handle_p) noexcept {
    PackedRkey packed;
    std::memcpy(&packed, rkey_buffer, sizeof(packed));
    if (packed.magic != rkey_magic) {
        ucs_error("rc_roce: remote key %08x:%08x was not packed by a roce memory domain",
                  packed.rkey, packed.magic);
        return UCS_ERR_INVALID_PARAM;
    }
    *rkey_p = packed.rkey;
    *handle_p = nullptr;
    return UCS_OK;
}

ucs_status_t rkey_ptr(uct_component_t*, uct_rkey_t, void*, uint64_t, void**) noexcept {
    return UCS_ERR_UNSUPPORTED;
}

ucs_status_t rkey_release(uct_component_t*, uct_rkey_t, void*) noexcept {
    return UCS_OK;
}

} // namespace roce::uct
