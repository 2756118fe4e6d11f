/* The CFI rule word: one frame's unwind rule in 64 bits.
 *
 *   bits  0..31  cfa_off  signed: CFA = (rsp or rbp) + cfa_off
 *   bits 32..43  ra_off   signed: the return address is at CFA + ra_off
 *   bits 44..55  fp_off   signed: the caller's rbp is at CFA + fp_off (with FP_SAVED)
 *   bits 56..63  flags    SW_RULE_*
 *
 * Every rule a walk can apply without libunwind has SW_RULE_VALID or is a
 * signal trampoline (SW_RULE_SIGFRAME) or the outermost frame
 * (SW_RULE_END). A word of 0 means "no rule known". This header is the only
 * place that knows the layout (cfi_cache.c encodes, walks decode). */
#ifndef CRAWL_STACKWALK_CFI_RULE_H
#define CRAWL_STACKWALK_CFI_RULE_H

#include <stdint.h>

enum {
    SW_RULE_VALID = 1u << 0,     /* CFA from rsp/rbp, ra and rbp at fixed offsets */
    SW_RULE_OTHER = 1u << 1,     /* in code, but beyond a rule: DWARF expressions, no FDE */
    SW_RULE_CFA_FP = 1u << 2,    /* CFA from rbp, else rsp */
    SW_RULE_FP_SAVED = 1u << 3,  /* caller's rbp at CFA+fp_off, else unchanged */
    SW_RULE_TRUSTED = 1u << 4,   /* the module can never be unloaded: usable in signal context */
    SW_RULE_SIGFRAME = 1u << 5,  /* a signal trampoline: registers in the ucontext at rsp */
    SW_RULE_END = 1u << 6        /* the return address is undefined: the outermost frame */
};

static inline uint64_t sw_rule_make(unsigned flags, int32_t cfa_off, int ra_off, int fp_off)
{
    return (uint64_t)(uint32_t)cfa_off | ((uint64_t)((unsigned)ra_off & 0xfffu) << 32) |
           ((uint64_t)((unsigned)fp_off & 0xfffu) << 44) | ((uint64_t)(flags & 0xffu) << 56);
}

static inline unsigned sw_rule_flags(uint64_t r) { return (unsigned)(r >> 56); }

static inline int64_t sw_rule_cfa_off(uint64_t r) { return (int64_t)(int32_t)(uint32_t)r; }

/* A signed 12-bit field: shifted to the top, then arithmetically back
 * down (two instructions; the compare-and-subtract form took six). */
static inline int64_t sw_rule_field12(uint64_t r, int shift)
{
    return (int64_t)(r << (52 - shift)) >> 52;
}

static inline int64_t sw_rule_ra_off(uint64_t r) { return sw_rule_field12(r, 32); }
static inline int64_t sw_rule_fp_off(uint64_t r) { return sw_rule_field12(r, 44); }

/* ra_off and fp_off must fit 12 signed bits. */
static inline int sw_rule_fits(int64_t cfa_off, int64_t ra_off, int64_t fp_off)
{
    return cfa_off >= INT32_MIN && cfa_off <= INT32_MAX && ra_off >= -2048 && ra_off <= 2047 &&
           fp_off >= -2048 && fp_off <= 2047;
}

/* The hash of a rule-cache key (a pc, or a return address - 1): Fibonacci
 * hashing, 2^64 / golden ratio, whose top bits spread nearby pcs apart. */
static inline uint64_t sw_rule_hash(uintptr_t key) { return (uint64_t)key * 0x9E3779B97F4A7C15u; }

#endif
