/* The frame-pointer-less host of nofp_host.c (built -O2 -fomit-frame-pointer). */
#ifndef CRAWL_TEST_NOFP_HOST_H
#define CRAWL_TEST_NOFP_HOST_H

#include <crawl/frames.h>
#include <stddef.h>
#include <stdint.h>

/* c_cmp's Frame type, named "cmp". */
extern const crawl_frame_type nofp_cmp_type;
/* burn's spin count per comparison. */
extern volatile unsigned long nofp_burn_iterations;

/* A frameless leaf that spins n rounds. */
unsigned long burn(unsigned long n);
/* qsort comparator: pushes a "cmp" Frame, calls burn, pops. */
int c_cmp(const void *a, const void *b);
/* qsort(v, n, sizeof *v, c_cmp). */
void host_sort(int *v, size_t n);

/* Call fn(arg) with rbp = rbp_value, from assembly without CFI. */
void junk_call(uintptr_t rbp_value, void (*fn)(void *), void *arg);
/* The return address of junk_call's call. */
extern const char junk_call_ret[];

#endif
