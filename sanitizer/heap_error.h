/* A checked-heap error, described: what the allocator knows about a bad
 * access or free, copied out of its metadata and shadow (heap.c), then
 * printed in the AddressSanitizer shape (heap_report.c) — the split of
 * compiler-rt's asan_descriptions: describe first, print after, so the
 * printer never reads allocator state. */
#ifndef CRAWL_SANITIZER_HEAP_ERROR_H
#define CRAWL_SANITIZER_HEAP_ERROR_H

#include "sanitizer/internal.h"

/* The chunk an address belongs to or borders. */
typedef struct san_chunk_desc {
    uintptr_t user;                     /* its first user byte */
    size_t size;                        /* user bytes */
    int freed;                          /* in the quarantine or on a free list */
    uint32_t alloc_stack, free_stack;   /* depot ids */
    unsigned alloc_tid, free_tid;
} san_chunk_desc;

/* The shadow rows around the bad address: up to 10 rows of 16 bytes. */
typedef struct san_shadow_desc {
    uintptr_t bad;                      /* the shadow byte of the bad address */
    unsigned nrows;
    struct {
        uintptr_t at;                   /* the row's shadow address */
        unsigned n;                     /* bytes of it inside the shadow in use */
        int here;                       /* the row holding bad ("=>") */
        unsigned char b[16];
    } row[10];
} san_shadow_desc;

typedef enum san_heap_error_kind {
    SAN_HEAP_BAD_ACCESS,                /* crawl_heap_check found one */
    SAN_HEAP_DOUBLE_FREE,
    SAN_HEAP_BAD_FREE,                  /* not an address malloc returned */
} san_heap_error_kind;

typedef struct san_heap_error {
    san_heap_error_kind kind;
    const char *bug;                    /* "heap-use-after-free", "heap-buffer-overflow"... */
    uintptr_t addr;                     /* SAN_HEAP_BAD_ACCESS: its first bad byte */
    uintptr_t access;                   /* SAN_HEAP_BAD_ACCESS: where the access starts */
    size_t access_size;                 /* SAN_HEAP_BAD_ACCESS */
    int is_write;
    int in_heap;                        /* addr lies in the checked heap's used region */
    int has_chunk;                      /* chunk is valid */
    san_chunk_desc chunk;
    int has_shadow;
    san_shadow_desc shadow;
} san_heap_error;

/* Print e as one report (heap_report.c). entry: the registers of the
 * public entry point that found it; the stack printed starts above it. */
void san_report_heap_error(const crawl_regs *entry, const san_heap_error *e);

#endif
