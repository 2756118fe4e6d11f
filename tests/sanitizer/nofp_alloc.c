/* Allocation paths of a host built the default way (CMake gives this file
 * "-O2;-fomit-frame-pointer"): rbp is a general register here. nofp_top
 * even leaves a plausible-looking frame record in rbp (a saved fp and a
 * return address into real code) while it calls on, which is what a
 * frame-pointer walk trusts and a CFI walk ignores. */
#include <crawl/crawl.h>
#include <stdio.h>

#include "nofp_alloc.h"

#if defined(__clang__)
#define KEEP __attribute__((noinline))
#else
#define KEEP __attribute__((noinline, noclone))
#endif

typedef struct nofp_frame {
    crawl_frame frame;
    const char *function;
} nofp_frame;

static const void *nf_method(const crawl_frame *f) { return ((const nofp_frame *)f)->function; }
static int nf_describe_method(const void *m, uintptr_t pc, char *buf, size_t len)
{
    (void)pc;
    return snprintf(buf, len, "%s nofp.script:1", (const char *)m);
}
static const crawl_frame_type nofp_script_type = {
    .name = "nofp-script", .flags = CRAWL_FRAME_FUNCTION, .method = nf_method,
    .describe_method = nf_describe_method,
};

KEEP char *nofp_leaf(size_t n)
{
    char *p = crawl_heap_malloc(n);
    __asm__ volatile("" : "+r"(p));
    return p;
}

KEEP char *nofp_mid(size_t n)
{
    nofp_frame f = {.function = "make_table"};
    crawl_frame_push(&f.frame, &nofp_script_type);
    char *p = nofp_leaf(n);
    crawl_frame_pop(&f.frame);
    __asm__ volatile("" : : "r"(&f) : "memory");
    return p;
}

KEEP char *nofp_top(size_t n)
{
    /* a fake frame record: {older fp, return address into real code} */
    volatile uintptr_t fake[4];
    fake[0] = (uintptr_t)&fake[2];
    fake[1] = (uintptr_t)nofp_decoy + 4;
    fake[2] = 0;
    fake[3] = 0;
    /* rbp is callee-saved: the clobber makes this function save and
     * restore it, and nothing here uses it between the asm and the call */
    __asm__ volatile("movq %0, %%rbp" : : "r"(&fake[0]) : "rbp", "memory");
    char *p = nofp_mid(n);
    __asm__ volatile("" : : "r"(fake) : "memory");
    return p;
}

KEEP void nofp_decoy(void)
{
    __asm__ volatile("nop; nop; nop; nop; nop; nop; nop; nop");
}
