/* The compiled CFI: each module's DWARF CFI reduced to a sorted table of
 * rules, and a rule cache in front of the tables.
 *
 * A module is compiled whole (every row of every FDE its .eh_frame_hdr
 * lists, read through elfutils libdwfl/libdw), in normal context: on
 * warm-up, or the first time a normal-context walk needs one of its rules.
 * Sparse walks (SW_WALK_SPARSE_CFI: the sanitizer's captures) read the
 * rule of each pc they miss alone (sw_rule_single) until they have read
 * SW_SINGLES_MAX of a module's: a process that captures a few stacks (a
 * sampled heap profile, a guarded-pool sample) reads a few rows of libc,
 * not all of them, and one that captures many compiles as before. A rule
 * says CFA = rsp+N or rbp+N, the return address at CFA+a, the caller's rbp
 * at CFA+b or unchanged (cfi_rule.h); signal trampolines and outermost
 * frames have rules of their own; anything else (DWARF expressions, code
 * without an FDE) is "other", for libunwind in normal context.
 *
 * The tables are immutable once published, so any walk, a signal handler's
 * included, can binary-search them without a lock. The rule cache in front
 * (one per module snapshot, see modules.c) turns that search into two loads
 * for pcs seen before, and is filled lock-free by whoever misses. */
#include <dwarf.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stackwalk/internal.h"

static atomic_ulong misses, fallbacks;  /* hits are counted per thread: no shared line */

/* ---- compiling a module (normal context, under modules.c's lock) ---------- */

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

/* One CFI row reduced to a rule word. */
static uint64_t frame_rule(Dwarf_Frame *frame, bool signal_frame)
{
    Dwarf_Op *ops, mem[3];
    size_t n;
    if (signal_frame)
        return sw_rule_make(SW_RULE_SIGFRAME, 0, 0, 0);
    /* the return address (DWARF 16): "undefined" marks the outermost frame */
    if (dwarf_frame_register(frame, 16, mem, &ops, &n) != 0)
        return sw_rule_make(SW_RULE_OTHER, 0, 0, 0);
    if (n == 0 && ops != NULL)
        return sw_rule_make(SW_RULE_END, 0, 0, 0);
    int64_t ra_off, fp_off = 0, cfa_off;
    if (cfa_offset(ops, n, &ra_off) != 0)
        return sw_rule_make(SW_RULE_OTHER, 0, 0, 0);
    if (dwarf_frame_cfa(frame, &ops, &n) != 0 || n != 1)
        return sw_rule_make(SW_RULE_OTHER, 0, 0, 0);
    unsigned reg;
    if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31)
        reg = ops[0].atom - DW_OP_breg0, cfa_off = (int64_t)ops[0].number;
    else if (ops[0].atom == DW_OP_bregx)
        reg = (unsigned)ops[0].number, cfa_off = (int64_t)ops[0].number2;
    else
        return sw_rule_make(SW_RULE_OTHER, 0, 0, 0);
    if (reg != 7 && reg != 6)            /* DWARF 7 is rsp, 6 is rbp */
        return sw_rule_make(SW_RULE_OTHER, 0, 0, 0);
    if (dwarf_frame_register(frame, 6, mem, &ops, &n) != 0)
        return sw_rule_make(SW_RULE_OTHER, 0, 0, 0);
    int fp_saved;
    if (n == 0 && ops == NULL)
        fp_saved = 0;                    /* same value */
    else if (cfa_offset(ops, n, &fp_off) == 0)
        fp_saved = 1;
    else
        return sw_rule_make(SW_RULE_OTHER, 0, 0, 0); /* undefined, or an expression */
    if (!sw_rule_fits(cfa_off, ra_off, fp_off))
        return sw_rule_make(SW_RULE_OTHER, 0, 0, 0);
    unsigned flags = SW_RULE_VALID | (reg == 6 ? SW_RULE_CFA_FP : 0) |
                     (fp_saved ? SW_RULE_FP_SAVED : 0);
    return sw_rule_make(flags, (int32_t)cfa_off, (int)ra_off, (int)fp_off);
}

typedef struct table_builder {
    sw_rules *r;
    size_t cap;
    int failed;
} table_builder;

/* Append "rule from off on", merging with an equal predecessor. */
static void put(table_builder *b, uint64_t off, uint64_t rule)
{
    sw_rules *r = b->r;
    if (b->failed || off > UINT32_MAX) {
        b->failed = 1;
        return;
    }
    if (r->n && r->rule[r->n - 1] == rule)
        return;
    if (r->n && r->off[r->n - 1] >= off) {  /* rows out of order: keep the table sorted */
        if (r->off[r->n - 1] == off)
            r->rule[r->n - 1] = rule;
        return;
    }
    if (r->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 1024;
        uint32_t *o = realloc(r->off, cap * sizeof *o);
        if (o)
            r->off = o;
        uint64_t *u = o ? realloc(r->rule, cap * sizeof *u) : NULL;
        if (!u) {
            b->failed = 1;
            return;
        }
        r->rule = u, b->cap = cap;
    }
    r->off[r->n] = (uint32_t)off;
    r->rule[r->n] = rule;
    r->n++;
}

/* The FDE start addresses of a module, from its .eh_frame_hdr's binary
 * search table (the encodings every x86-64 linker writes). */
static int fde_table(uintptr_t hdr, const int32_t **table, size_t *count)
{
    const uint8_t *h = (const uint8_t *)hdr;
    if (h[0] != 1 || h[2] != 0x03 /* udata4 */ || h[3] != 0x3b /* datarel|sdata4 */)
        return -1;
    size_t ptr_size = (h[1] & 0x0f) == 0x00 ? 8 : (h[1] & 0x0f) == 0x03 || (h[1] & 0x0f) == 0x0b ? 4 : 0;
    if (!ptr_size)
        return -1;
    uint32_t n;
    memcpy(&n, h + 4 + ptr_size, 4);
    *table = (const int32_t *)(h + 8 + ptr_size);
    *count = n;
    return 0;
}

/* ---- signal trampolines ------------------------------------------------------- */

_Atomic uintptr_t sw_sigtramp_lo, sw_sigtramp_len;

void sw_sigtramp_note(uintptr_t lo, uintptr_t hi)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    if (hi <= lo)
        return;
    crawl__lock(&lock);
    uintptr_t olo = atomic_load(&sw_sigtramp_lo), olen = atomic_load(&sw_sigtramp_len);
    uintptr_t nlo = olen && olo < lo ? olo : lo;
    uintptr_t nhi = olen && olo + olen > hi ? olo + olen : hi;
    /* len first, then lo: a walk that reads lo and len in between sees a
     * range that still holds the old one (more, if lo moved down), so it
     * misses at worst the new trampoline, as before it was noted; a frame
     * that is no trampoline sent to the slow path is stepped right too */
    atomic_store(&sw_sigtramp_len, nhi - nlo);
    atomic_store(&sw_sigtramp_lo, nlo);
    crawl__unlock(&lock);
}

/* A CIE's augmentation has 'S' (a signal frame). cie: its first byte. */
static int cie_is_signal(const uint8_t *cie)
{
    uint32_t len, id;
    memcpy(&len, cie, 4);
    memcpy(&id, cie + 4, 4);
    if (len == 0 || len == 0xffffffffu || id != 0)
        return 0;                        /* (64-bit DWARF: not written for x86-64 code) */
    const char *aug = (const char *)cie + 9;   /* after the version byte */
    for (int i = 0; i < 8 && aug[i]; i++)
        if (aug[i] == 'S')
            return 1;
    return 0;
}

void sw_sigtramp_scan(const sw_module *m)
{
    const int32_t *tab;
    size_t nfde;
    if (!m->eh_frame_hdr || fde_table(m->eh_frame_hdr, &tab, &nfde) != 0)
        return;
    /* the CIEs seen so far (a module has a handful) and their answer */
    const uint8_t *cies[16];
    int sig[16], ncies = 0;
    for (size_t i = 0; i < nfde; i++) {
        const uint8_t *fde = (const uint8_t *)(m->eh_frame_hdr + (uintptr_t)(intptr_t)tab[2 * i + 1]);
        uint32_t back;
        memcpy(&back, fde + 4, 4);
        const uint8_t *cie = fde + 4 - back;
        int k = 0;
        while (k < ncies && cies[k] != cie)
            k++;
        if (k == ncies) {
            if (ncies == 16)
                k = 15;                  /* (a module of many CIEs: the last slot rotates) */
            else
                ncies++;
            cies[k] = cie;
            sig[k] = cie_is_signal(cie);
        }
        if (!sig[k])
            continue;
        /* the FDE's code: up to the next FDE's, at most 64 bytes (a
         * trampoline is two instructions and the nop before them) */
        uintptr_t lo = m->eh_frame_hdr + (uintptr_t)(intptr_t)tab[2 * i];
        uintptr_t hi = i + 1 < nfde ? m->eh_frame_hdr + (uintptr_t)(intptr_t)tab[2 * i + 2] : lo + 64;
        sw_sigtramp_note(lo, hi - lo > 64 ? lo + 64 : hi);
    }
}

/* The CFI row that holds addr: its rule, and in *end where the row ends.
 * 0 when libdw has none there. (Under sw_dwfl_lock: cfi lives in the
 * session.) */
static uint64_t row_at(Dwarf_CFI *cfi, Dwarf_Addr bias, uintptr_t addr, uintptr_t *end)
{
    Dwarf_Frame *frame = NULL;
    Dwarf_Addr lo, hi;
    bool sig;
    uint64_t rule = 0;
    if (dwarf_cfi_addrframe(cfi, addr - bias, &frame) != 0)
        return 0;
    if (dwarf_frame_info(frame, &lo, &hi, &sig) >= 0 && hi + bias > addr) {
        rule = frame_rule(frame, sig);
        *end = hi + bias;
        if (sig)
            sw_sigtramp_note(lo + bias, hi + bias);
    }
    free(frame);
    return rule;
}

/* The CFI of the module holding addr and its bias, or NULL (under
 * sw_dwfl_lock). */
static Dwarf_CFI *module_cfi(uintptr_t addr, Dwarf_Addr *bias)
{
    Dwfl_Module *dm = sw_dwfl_module(addr);
    return dm ? dwfl_module_eh_cfi(dm, bias) : NULL;
}

/* Every FDE's rows into r (under sw_dwfl_lock: cfi lives in the session). */
static void compile_fdes(const sw_module *m, const int32_t *tab, size_t nfde, Dwarf_CFI *cfi,
                         Dwarf_Addr bias, table_builder *b)
{
    uint64_t other = sw_rule_make(SW_RULE_OTHER, 0, 0, 0);
    for (size_t i = 0; i < nfde && !b->failed; i++) {
        uintptr_t start = m->eh_frame_hdr + (uintptr_t)(intptr_t)tab[2 * i];
        uintptr_t limit = i + 1 < nfde ? m->eh_frame_hdr + (uintptr_t)(intptr_t)tab[2 * i + 2]
                                       : UINTPTR_MAX;
        uintptr_t addr = start, end;
        uint64_t rule;
        while (addr < limit && !b->failed && (rule = row_at(cfi, bias, addr, &end)) != 0) {
            put(b, addr - m->bias, rule);
            addr = end;
        }
        if (addr < limit)
            put(b, addr - m->bias, other);   /* no FDE until the next one */
    }
}

sw_rules *sw_rules_compile(const sw_module *m)
{
    const int32_t *tab;
    size_t nfde;
    if (!m->eh_frame_hdr || fde_table(m->eh_frame_hdr, &tab, &nfde) != 0 || nfde == 0)
        return NULL;
    sw_rules *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    table_builder b = {.r = r};
    sw_dwfl_lock();
    Dwarf_Addr bias;
    Dwarf_CFI *cfi = module_cfi(m->eh_frame_hdr + (uintptr_t)(intptr_t)tab[0], &bias);
    if (cfi)
        compile_fdes(m, tab, nfde, cfi, bias, &b);
    sw_dwfl_unlock();
    if (!cfi || b.failed || r->n == 0) {
        sw_rules_free(r);
        return NULL;
    }
    return r;
}

uint64_t sw_rule_single(const sw_module *m, uintptr_t pc)
{
    uint64_t rule = 0;                   /* libdwfl does not know it: leave it to the compiler */
    sw_dwfl_lock();
    Dwarf_Addr bias;
    Dwarf_CFI *cfi = module_cfi(pc, &bias);
    if (cfi) {
        uintptr_t end;
        rule = pc - m->bias <= UINT32_MAX ? row_at(cfi, bias, pc, &end) : 0;
        if (!rule)                       /* no row there (no FDE), as the table says */
            rule = sw_rule_make(SW_RULE_OTHER, 0, 0, 0);
    }
    sw_dwfl_unlock();
    return rule;
}

void sw_rules_free(sw_rules *r)
{
    if (!r)
        return;
    free(r->off);
    free(r->rule);
    free(r);
}

/* ---- looking rules up --------------------------------------------------------- */

static void cache_put(sw_cfi_slot *s, uintptr_t key, uint64_t rule)
{
    uintptr_t old = atomic_load_explicit(&s->key, memory_order_relaxed);
    if (old == SW_SLOT_BUSY || !atomic_compare_exchange_strong(&s->key, &old, SW_SLOT_BUSY))
        return;                          /* someone else is writing it: leave it to them */
    atomic_store_explicit(&s->rule, rule, memory_order_release);
    atomic_store_explicit(&s->key, key, memory_order_release);
}

uint64_t sw_rule_lookup(const sw_snapshot *s, uintptr_t key, int signal_safe, int sparse)
{
    atomic_fetch_add_explicit(&misses, 1, memory_order_relaxed);
    const sw_seg *g = sw_seg_find(s, key);
    if (!g)
        return 0;
    sw_module *m = g->mod;
    unsigned trusted =
        atomic_load_explicit(&m->permanent, memory_order_relaxed) ? SW_RULE_TRUSTED : 0;
    uint64_t rule;
    if (sparse && !signal_safe && m->eh_frame_hdr &&
        !atomic_load_explicit(&m->compiled, memory_order_acquire) &&
        atomic_fetch_add_explicit(&m->singles, 1, memory_order_relaxed) < SW_SINGLES_MAX) {
        /* not compiled yet: this pc alone (a sample's walk need not pay for all of libc) */
        rule = sw_rule_single(m, key);
        if (rule) {
            rule |= (uint64_t)trusted << 56;
            cache_put(&s->cache[sw_rule_hash(key) >> (64 - SW_CFI_SLOT_BITS)], key, rule);
            return rule;
        }
        /* (a module libdwfl cannot find would rebuild its session at every
         * lookup: compile it once instead) */
        atomic_store_explicit(&m->singles, SW_SINGLES_MAX, memory_order_relaxed);
    }
    const sw_rules *r = signal_safe ? atomic_load_explicit(&m->rules, memory_order_acquire)
                                    : sw_module_rules(m);
    if (!r) {
        rule = sw_rule_make(SW_RULE_OTHER | trusted, 0, 0, 0);
        if (signal_safe && !atomic_load_explicit(&m->compiled, memory_order_acquire))
            return rule;                 /* not compiled yet: don't cache "other" */
    } else {
        uintptr_t off = key - m->bias;
        if (off > UINT32_MAX || off < r->off[0]) {
            rule = sw_rule_make(SW_RULE_OTHER | trusted, 0, 0, 0);
        } else {
            size_t lo = 0, hi = r->n;
            while (hi - lo > 1) {
                size_t mid = lo + (hi - lo) / 2;
                if (r->off[mid] <= off)
                    lo = mid;
                else
                    hi = mid;
            }
            rule = r->rule[lo] | ((uint64_t)trusted << 56);
        }
    }
    cache_put(&s->cache[sw_rule_hash(key) >> (64 - SW_CFI_SLOT_BITS)], key, rule);
    return rule;
}

void sw_cfi_count_fallback(void)
{
    atomic_fetch_add_explicit(&fallbacks, 1, memory_order_relaxed);
}

static void add_hits(crawl__thread *th, void *sum)
{
    *(unsigned long *)sum += __atomic_load_n(&th->counts[SW_COUNT_CFI_HITS], __ATOMIC_RELAXED);
}

void crawl_cfi_cache_stats(unsigned long *hit, unsigned long *miss, unsigned long *fallback)
{
    if (hit) {
        unsigned long sum = atomic_load(&crawl__exited_counts[SW_COUNT_CFI_HITS]);
        crawl__threads_foreach(add_hits, &sum);   /* approximate while others walk */
        *hit = sum;
    }
    if (miss)
        *miss = atomic_load(&misses);
    if (fallback)
        *fallback = atomic_load(&fallbacks);
}

int crawl_cfi_cache_warm(void)
{
    return sw_modules_warm();
}
