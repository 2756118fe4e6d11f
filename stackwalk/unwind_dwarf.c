/* The precise unwinder: DWARF CFI through libunwind.
 *
 * libunwind is opened with dlopen(RTLD_LOCAL) when libcrawl loads, never
 * linked: Debian's libunwind.so.8 exports backtrace() and the whole
 * _Unwind_* ABI, and a DT_NEEDED on it would let them replace glibc's
 * backtrace() and libgcc's unwinder (C++ exceptions included) in the
 * embedder's process. RTLD_LOCAL keeps its symbols out of the global scope.
 * Loading happens in a constructor so that walks in signal handlers never
 * call dlopen. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "stackwalk/internal.h"

static sw_unw_api api;
static int api_loaded;

__attribute__((constructor)) static void load_libunwind(void)
{
    void *h = dlopen(CRAWL_LIBUNWIND_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
    *(void **)&api.init_local2 = dlsym(h, "_ULx86_64_init_local2");
    *(void **)&api.step = dlsym(h, "_ULx86_64_step");
    *(void **)&api.get_reg = dlsym(h, "_ULx86_64_get_reg");
    *(void **)&api.is_signal_frame = dlsym(h, "_ULx86_64_is_signal_frame");
    int (*set_policy)(unw_addr_space_t, unw_caching_policy_t);
    *(void **)&set_policy = dlsym(h, "_ULx86_64_set_caching_policy");
    unw_addr_space_t *local_as = dlsym(h, "_ULx86_64_local_addr_space");
    if (!api.init_local2 || !api.step || !api.get_reg || !api.is_signal_frame)
        return;
    /* The global cache takes a lock; the per-thread one is signal-safe.
     * Setting it initializes libunwind, which opens a pipe (its memory
     * validation): in a program started with descriptor 0, 1 or 2 closed
     * the pipe took it (sort >&- got SIGPIPE, cat <&- "Resource temporarily
     * unavailable"), so they are held on /dev/null meanwhile. */
    int held[3], nheld = 0;
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int d = open("/dev/null", O_RDWR | O_CLOEXEC);   /* (the lowest free: fd) */
            if (d >= 0)
                held[nheld++] = d;
        }
    if (set_policy && local_as)
        set_policy(*local_as, UNW_CACHE_PER_THREAD);
    while (nheld)
        close(held[--nheld]);
    api_loaded = 1;
}

const sw_unw_api *sw_unw(void)
{
    return api_loaded ? &api : NULL;
}

int crawl_walk_precise_available(void)
{
    return api_loaded;
}

static void regs_to_uctx(ucontext_t *uc, const crawl_regs *r)
{
    greg_t *g = uc->uc_mcontext.gregs;
    g[REG_RIP] = (greg_t)r->ip;
    g[REG_RSP] = (greg_t)r->sp;
    g[REG_RBP] = (greg_t)r->fp;
    g[REG_RBX] = (greg_t)r->bx;
    g[REG_R12] = (greg_t)r->r12;
    g[REG_R13] = (greg_t)r->r13;
    g[REG_R14] = (greg_t)r->r14;
    g[REG_R15] = (greg_t)r->r15;
}

void sw_regs_from_ucontext(crawl_regs *r, const ucontext_t *uc)
{
    const greg_t *g = uc->uc_mcontext.gregs;
    r->ip = (uintptr_t)g[REG_RIP];
    r->sp = (uintptr_t)g[REG_RSP];
    r->fp = (uintptr_t)g[REG_RBP];
    r->bx = (uintptr_t)g[REG_RBX];
    r->r12 = (uintptr_t)g[REG_R12];
    r->r13 = (uintptr_t)g[REG_R13];
    r->r14 = (uintptr_t)g[REG_R14];
    r->r15 = (uintptr_t)g[REG_R15];
}

static int read_regs(const sw_unw_api *u, unw_cursor_t *cur, crawl_regs *r)
{
    unw_word_t v[8];
    static const unw_regnum_t nums[8] = {UNW_REG_IP,      UNW_REG_SP,      UNW_X86_64_RBP,
                                         UNW_X86_64_RBX,  UNW_X86_64_R12,  UNW_X86_64_R13,
                                         UNW_X86_64_R14,  UNW_X86_64_R15};
    for (int i = 0; i < 8; i++) {
        v[i] = 0;
        int rc = u->get_reg(cur, nums[i], &v[i]);
        /* callee-saved registers may be unknown; ip and sp may not */
        if (rc < 0 && i < 2)
            return -1;
    }
    r->ip = v[0], r->sp = v[1], r->fp = v[2], r->bx = v[3];
    r->r12 = v[4], r->r13 = v[5], r->r14 = v[6], r->r15 = v[7];
    return 0;
}

int sw_step_dwarf(sw_cursor *c)
{
    const sw_unw_api *u = sw_unw();
    if (!u)
        return SW_STOP;
    sw_dwarf *d = c->dwarf;
    if (c->need_init) {
        memset(&d->uctx.uc_mcontext, 0, sizeof d->uctx.uc_mcontext);
        regs_to_uctx(&d->uctx, &c->regs);
        if (u->init_local2(&d->unw, &d->uctx, c->from_signal ? UNW_INIT_SIGNAL_FRAME : 0) < 0)
            return SW_STOP;
        c->need_init = 0;
    }
    /* Stepping out of a signal trampoline lands on an interrupted frame,
     * whose ip is exact rather than a return address. */
    int sig = u->is_signal_frame(&d->unw) > 0;
    int rc = u->step(&d->unw);
    if (rc == 0)
        return SW_END;
    if (rc < 0)
        return SW_STOP;
    crawl_regs next;
    if (read_regs(u, &d->unw, &next) < 0)
        return SW_STOP;
    if (!sw_in_stack(c, next.sp, 1) || !sw_progress(c, c->regs.sp, next.sp))
        return SW_CORRUPT;
    if (next.ip == 0)
        return SW_END;
    c->regs = next;
    c->exact = sig;
    return SW_OK;
}
