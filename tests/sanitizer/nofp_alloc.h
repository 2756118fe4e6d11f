/* nofp_alloc.c: allocation paths built without frame pointers. */
#ifndef CRAWL_TEST_NOFP_ALLOC_H
#define CRAWL_TEST_NOFP_ALLOC_H

#include <stddef.h>

/* nofp_top -> nofp_mid (Frame "make_table") -> nofp_leaf -> crawl_heap_malloc */
char *nofp_top(size_t n);
char *nofp_mid(size_t n);
char *nofp_leaf(size_t n);
void nofp_decoy(void);

#endif
