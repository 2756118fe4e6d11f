/* The compiled CFI cache: precise unwinding at a few loads per frame.
 *
 * Each return address maps to a rule reduced from the module's DWARF CFI
 * (read through elfutils libdwfl/libdw): CFA = rsp+N or rbp+N, the return
 * address at CFA+a, the caller's rbp at CFA+b or unchanged. Anything else
 * (signal frames, DWARF expressions, CFAs from other registers) is
 * recorded as "ask libunwind". Rules live in a direct-mapped table read
 * lock-free (a slot's key is re-read around its rule, so a slot being
 * rewritten reads as a miss) and filled in normal context under a mutex.
 *
 * Unloading code invalidates rules: every normal-context walk compares
 * glibc's load/unload counters (dl_iterate_phdr's dlpi_adds/dlpi_subs) and
 * flushes the table when something was unloaded. A signal handler cannot
 * make that check, so signal-safe walks use only rules of modules that can
 * never be unloaded: the program and the libraries it was linked against
 * (see find_permanent_modules). */
#include <dwarf.h>
#include <elfutils/libdwfl.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "stackwalk/internal.h"

/* rule word: cfa_off:32 | ra_off:12 | fp_off:12 | flags:8 */
enum {
    R_VALID = SW_CFI_VALID,              /* a rule we can apply */
    R_LIBUNWIND = 1u << 1,               /* known: ask libunwind */
    R_CFA_FP = SW_CFI_CFA_FP,            /* CFA from rbp, else rsp */
    R_FP_SAVED = SW_CFI_FP_SAVED,        /* caller's rbp at CFA+fp_off, else unchanged */
    R_PERMANENT = SW_CFI_PERMANENT,      /* the module can never be unloaded */
};

typedef sw_cfi_slot slot;                /* key: pc, or return address - 1 */
#define SLOT_BITS SW_CFI_SLOT_BITS
#define SLOTS (1u << SLOT_BITS)

static _Atomic(slot *) table;
static pthread_mutex_t fill_lock = PTHREAD_MUTEX_INITIALIZER;
static Dwfl *session;
static unsigned long seen_adds, seen_subs;
static atomic_ulong misses, fallbacks;  /* hits are counted per thread: no shared line */

/* modules that cannot go away (see above) */
#define MAX_PERMANENT 64
static struct { uintptr_t lo, hi; } permanent[MAX_PERMANENT];
static int npermanent;

static char *debuginfo_path;
static const Dwfl_Callbacks callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .debuginfo_path = &debuginfo_path,
};

static slot *table_get(void);

sw_cfi_slot *sw_cfi_table(void)
{
    return table_get();
}

static slot *table_get(void)
{
    slot *t = atomic_load_explicit(&table, memory_order_acquire);
    if (t)
        return t;
    slot *fresh = mmap(NULL, SLOTS * sizeof(slot), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fresh == MAP_FAILED)
        return NULL;
    if (atomic_compare_exchange_strong(&table, &t, fresh))
        return fresh;
    munmap(fresh, SLOTS * sizeof(slot));
    return t;
}

static inline slot *slot_for(slot *t, uintptr_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15u;
    return &t[h >> (64 - SLOT_BITS)];
}

/* ---- the load generation ------------------------------------------------- */

typedef struct counters {
    unsigned long adds, subs;
} counters;

/* The counters are the same in every callback: stop at the first. */
static int read_counters(struct dl_phdr_info *info, size_t size, void *arg)
{
    counters *c = arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        c->adds = info->dlpi_adds;
        c->subs = info->dlpi_subs;
    }
    return 1;
}

/* The modules that can never be unloaded are the program, the libraries it
 * was linked against (the DT_NEEDED closure from the program; the dynamic
 * linker is in it through libc) and the vDSO. Libraries loaded with
 * dlopen, LD_PRELOAD'ed ones (kept out to stay on the safe side) and
 * libcrawl itself when it was dlopen'ed are not: their frames go to
 * libunwind in signal-safe walks. */
#define MAX_MODULES 256
typedef struct module {
    uintptr_t base;
    const ElfW(Phdr) *phdr;
    int phnum;
    const char *file;                    /* the file name, without its directory */
    const char *soname;                  /* DT_SONAME, or "" */
    const ElfW(Dyn) *dyn;
    const char *strtab;                  /* of dyn; NULL without one */
    int keep;
} module;

typedef struct module_list {
    module m[MAX_MODULES];
    int n;
} module_list;

/* Records each module with its dynamic section, string table and name.
 * ld.so relocates DT_STRTAB in place for the objects it loads, not in the
 * vDSO's read-only dynamic section. */
static int collect_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    module_list *ms = arg;
    if (ms->n == MAX_MODULES)
        return 1;
    module *m = &ms->m[ms->n++];
    const char *path = info->dlpi_name ? info->dlpi_name : "", *slash = strrchr(path, '/');
    *m = (module){.base = info->dlpi_addr, .phdr = info->dlpi_phdr, .phnum = info->dlpi_phnum,
                  .file = slash ? slash + 1 : path, .soname = ""};
    for (int i = 0; i < m->phnum; i++)
        if (m->phdr[i].p_type == PT_DYNAMIC)
            m->dyn = (const ElfW(Dyn) *)(m->base + m->phdr[i].p_vaddr);
    for (const ElfW(Dyn) *d = m->dyn; d && d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_STRTAB)
            m->strtab = (const char *)(d->d_un.d_ptr < m->base ? m->base + d->d_un.d_ptr
                                                               : d->d_un.d_ptr);
    for (const ElfW(Dyn) *d = m->dyn; m->strtab && d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_SONAME)
            m->soname = m->strtab + d->d_un.d_val;
    return 0;
}

/* Marks what m needs, adding each newly marked module to the queue. The
 * first module of a name wins: dl_iterate_phdr lists the program's own
 * namespace first, dlmopen'ed copies after it. */
static void keep_needed(module_list *ms, const module *m, int *queue, int *nq)
{
    for (const ElfW(Dyn) *d = m->dyn; m->strtab && d->d_tag != DT_NULL; d++) {
        if (d->d_tag != DT_NEEDED)
            continue;
        const char *needed = m->strtab + d->d_un.d_val;
        for (int i = 0; i < ms->n; i++)
            if (strcmp(ms->m[i].soname, needed) == 0 || strcmp(ms->m[i].file, needed) == 0) {
                if (!ms->m[i].keep) {
                    ms->m[i].keep = 1;
                    queue[(*nq)++] = i;
                }
                break;
            }
    }
}

static void record_module(const module *m)
{
    for (int i = 0; i < m->phnum && npermanent < MAX_PERMANENT; i++) {
        const ElfW(Phdr) *ph = &m->phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            permanent[npermanent].lo = m->base + ph->p_vaddr;
            permanent[npermanent].hi = m->base + ph->p_vaddr + ph->p_memsz;
            npermanent++;
        }
    }
}

__attribute__((constructor)) static void find_permanent_modules(void)
{
    counters c = {0, 0};
    dl_iterate_phdr(read_counters, &c);
    seen_adds = c.adds;
    seen_subs = c.subs;
    module_list *ms = calloc(1, sizeof *ms); /* 12 KiB: neither bss nor the loader's stack */
    if (!ms)
        return;                          /* nothing is permanent: signal-safe walks use libunwind */
    dl_iterate_phdr(collect_module, ms);
    /* the closure, each kept module read once: the program (listed first)
     * and the vDSO start it */
    int queue[MAX_MODULES], nq = 0;
    for (int i = 0; i < ms->n; i++)
        if (i == 0 || strncmp(ms->m[i].file, "linux-vdso", 10) == 0) {
            ms->m[i].keep = 1;
            queue[nq++] = i;
        }
    for (int q = 0; q < nq; q++)
        keep_needed(ms, &ms->m[queue[q]], queue, &nq);
    for (int i = 0; i < ms->n; i++)
        if (ms->m[i].keep)
            record_module(&ms->m[i]);
    free(ms);
}

static int is_permanent(uintptr_t pc)
{
    for (int i = 0; i < npermanent; i++)
        if (pc >= permanent[i].lo && pc < permanent[i].hi)
            return 1;
    return 0;
}

void sw_cfi_check_generation(void)
{
    counters c = {0, 0};
    dl_iterate_phdr(read_counters, &c);
    if (c.adds == seen_adds && c.subs == seen_subs)
        return;
    pthread_mutex_lock(&fill_lock);
    if (c.subs != seen_subs) {           /* something was unloaded: no rule can be trusted */
        slot *t = atomic_load(&table);
        if (t)
            for (unsigned i = 0; i < SLOTS; i++)
                atomic_store_explicit(&t[i].key, 0, memory_order_release);
    }
    if (session) {                       /* the module list changed either way */
        dwfl_end(session);
        session = NULL;
    }
    seen_adds = c.adds;
    seen_subs = c.subs;
    pthread_mutex_unlock(&fill_lock);
}

/* ---- reducing CFI to a rule -------------------------------------------------- */

/* "CFA + constant" as libdw spells it: call_frame_cfa, then plus_uconst. */
static int cfa_offset(const Dwarf_Op *ops, size_t n, int64_t *off)
{
    if (n < 1 || ops[0].atom != DW_OP_call_frame_cfa)
        return -1;
    if (n == 1) {
        *off = 0;
        return 0;
    }
    if (n == 2 && ops[1].atom == DW_OP_plus_uconst) {
        *off = (int64_t)ops[1].number;
        return 0;
    }
    return -1;
}

static Dwfl *get_session(void)
{
    if (!session) {
        session = dwfl_begin(&callbacks);
        if (session) {
            dwfl_report_begin(session);
            if (dwfl_linux_proc_report(session, getpid()) != 0 ||
                dwfl_report_end(session, NULL, NULL) != 0) {
                dwfl_end(session);
                session = NULL;
            }
        }
    }
    return session;
}

static uint64_t compute_rule(uintptr_t addr)
{
    Dwfl *d = get_session();
    Dwfl_Module *m = d ? dwfl_addrmodule(d, addr) : NULL;
    if (!m && d) {                       /* loaded since the session was built */
        dwfl_end(session);
        session = NULL;
        d = get_session();
        m = d ? dwfl_addrmodule(d, addr) : NULL;
    }
    Dwarf_Addr bias;
    Dwarf_CFI *cfi = m ? dwfl_module_eh_cfi(m, &bias) : NULL;
    Dwarf_Frame *frame = NULL;
    if (!cfi || dwarf_cfi_addrframe(cfi, addr - bias, &frame) != 0)
        return R_LIBUNWIND;
    uint64_t rule = R_LIBUNWIND;
    Dwarf_Addr start, end;
    bool signal_frame;
    Dwarf_Op *ops, mem[3];
    size_t n;
    int64_t ra_off, fp_off = 0;
    if (dwarf_frame_info(frame, &start, &end, &signal_frame) < 0 || signal_frame)
        goto out;
    if (dwarf_frame_cfa(frame, &ops, &n) != 0 || n != 1)
        goto out;
    unsigned reg;
    int64_t cfa_off;
    if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31)
        reg = ops[0].atom - DW_OP_breg0, cfa_off = (int64_t)ops[0].number;
    else if (ops[0].atom == DW_OP_bregx)
        reg = (unsigned)ops[0].number, cfa_off = (int64_t)ops[0].number2;
    else
        goto out;
    if ((reg != 7 && reg != 6) || cfa_off < INT32_MIN || cfa_off > INT32_MAX)
        goto out;                        /* DWARF 7 is rsp, 6 is rbp */
    if (dwarf_frame_register(frame, 16, mem, &ops, &n) != 0 || cfa_offset(ops, n, &ra_off) != 0)
        goto out;                        /* 16: the return address */
    if (dwarf_frame_register(frame, 6, mem, &ops, &n) != 0)
        goto out;
    int fp_saved;
    if (n == 0 && ops == NULL)
        fp_saved = 0;                    /* same value */
    else if (cfa_offset(ops, n, &fp_off) == 0)
        fp_saved = 1;
    else
        goto out;                        /* undefined, or an expression */
    if (ra_off < -2048 || ra_off > 2047 || fp_off < -2048 || fp_off > 2047)
        goto out;
    rule = (uint64_t)(uint32_t)(int32_t)cfa_off | ((uint64_t)(ra_off & 0xfff) << 32) |
           ((uint64_t)(fp_off & 0xfff) << 44) |
           ((uint64_t)(R_VALID | (reg == 6 ? R_CFA_FP : 0) | (fp_saved ? R_FP_SAVED : 0)) << 56);
out:
    free(frame);
    return rule;
}

/* ---- the step ----------------------------------------------------------------- */

static uint64_t fill(slot *s, uintptr_t key);

uint64_t sw_cfi_miss(uintptr_t key, int signal_safe)
{
    atomic_fetch_add_explicit(&misses, 1, memory_order_relaxed);
    slot *t = table_get();
    if (signal_safe || !t)
        return 0;
    return fill(slot_for(t, key), key);
}

static uint64_t fill(slot *s, uintptr_t key)
{
    pthread_mutex_lock(&fill_lock);
    uint64_t rule = compute_rule(key);
    if (is_permanent(key))
        rule |= (uint64_t)R_PERMANENT << 56;
    atomic_store_explicit(&s->key, 0, memory_order_release);
    atomic_store_explicit(&s->rule, rule, memory_order_release);
    atomic_store_explicit(&s->key, key, memory_order_release);
    pthread_mutex_unlock(&fill_lock);
    return rule;
}

/* One step of the per-frame walk (sw_step) by the cached rule; the batch
 * walk in walk.c calls sw_cfi_step itself. */
int sw_step_cfi(sw_cursor *c)
{
    slot *t = table_get();
    unsigned long hits = 0;
    int st = t ? sw_cfi_step(c, t, &hits, &c->regs.ip, &c->regs.sp, &c->regs.fp, (int)c->exact)
               : SW_ASK_LIBUNWIND;
    if (hits)
        crawl__self()->cfi_hits += hits;
    if (st == SW_ASK_LIBUNWIND) {
        sw_cfi_count_fallback();
    } else if (st == SW_OK) {
        c->exact = 0;
        c->need_init = 1;                /* libunwind, if asked next, starts from here */
    }
    return st;
}

static void add_hits(crawl__thread *th, void *sum)
{
    *(unsigned long *)sum += th->cfi_hits;
}

void sw_cfi_count_fallback(void)
{
    atomic_fetch_add_explicit(&fallbacks, 1, memory_order_relaxed);
}

void crawl_cfi_cache_stats(unsigned long *hit, unsigned long *miss, unsigned long *fallback)
{
    if (hit) {
        unsigned long sum = atomic_load(&crawl__exited_cfi_hits);
        crawl__threads_foreach(add_hits, &sum);   /* approximate while others walk */
        *hit = sum;
    }
    if (miss)
        *miss = atomic_load(&misses);
    if (fallback)
        *fallback = atomic_load(&fallbacks);
}

static int touch_cfi(Dwfl_Module *m, void **userdata, const char *name, Dwarf_Addr start,
                     void *arg)
{
    (void)userdata, (void)name, (void)start;
    Dwarf_Addr bias;
    if (dwfl_module_eh_cfi(m, &bias))
        ++*(int *)arg;
    return DWARF_CB_OK;
}

int crawl_cfi_cache_warm(void)
{
    sw_cfi_check_generation();
    pthread_mutex_lock(&fill_lock);
    int modules = 0;
    Dwfl *d = get_session();
    if (d)
        dwfl_getmodules(d, touch_cfi, &modules, 0);
    pthread_mutex_unlock(&fill_lock);
    return d ? modules : -1;
}
