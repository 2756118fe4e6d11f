/* Heap profiles, private to the sanitizer layer: the live table's entries
 * and a consistent copy of them for the outputs and the leak check. */
#ifndef CRAWL_SANITIZER_HEAP_PROFILE_INTERNAL_H
#define CRAWL_SANITIZER_HEAP_PROFILE_INTERNAL_H

#include <crawl/heap_profile.h>

#include "sanitizer/internal.h"

#define HP_SHARD_BITS 6
#define HP_SHARDS (1 << HP_SHARD_BITS)
#define HP_SAMPLED 1u                   /* flags: a byte sample (scale it) */
#define HP_MMAP 2u                      /* flags: a mapped region (heap_mmap.c), weight 1 */
#define HP_PLACED 4u                    /* flags: a sample libcrawl-preload.so placed where its
                                           free tells it (CRAWL__FREE_ALIGNED) */
#define HP_FLAG_BITS 0xffu              /* flags' own bits; above them, in the live table and
                                           its snapshots, the entry's stamp: HP_STAMP_ONE times
                                           its shard's count of entries made, mod 2^24 */
#define HP_STAMP_ONE 0x100u

typedef struct hp_entry {
    uintptr_t ptr;                      /* the chunk; in the live table itself complemented
                                           (heap_profile.c's key_of), in a snapshot as is
                                           (0 in one taken without addresses) */
    size_t size;
    uintptr_t caller;                   /* return address into the allocating code */
    uint32_t stack;                     /* depot id, 0: none taken */
    uint32_t flags;
} hp_entry;

enum { HP_KIND_HEAP, HP_KIND_CPU };     /* hp_snap.kind: CPU entries are stacks, size their samples */

typedef struct hp_snap {
    hp_entry *e;                        /* n entries (mmap'ed, cap) */
    size_t n, cap;
    int kind;
    unsigned long period_ns;            /* CPU: the sampling period */
    unsigned long sample_bytes;         /* 0: every allocation has its stack */
    unsigned long dropped;
} hp_snap;

/* The live table, copied: 0 or -ENOMEM. Without addresses, every entry's
 * ptr is 0: a copy for the outputs, which need none, holds no chunk's
 * address (a leak check running meanwhile in another thread would scan
 * it as anonymous memory and take the copies for references). */
int hp_snapshot(hp_snap *out, int addresses);
/* 1 if the chunk of e (a snapshot's entry, with its address) is still
 * recorded as that entry: not freed since the snapshot, nor freed and
 * recorded again (its stamp). Thread-safe; takes one shard's lock. */
int hp_still_recorded(const hp_entry *e);
/* Room for more entries in s (its array is mmap'ed: never malloc). 0 or
 * -ENOMEM, s unchanged then. */
int hp_snap_reserve(hp_snap *s, size_t more);
/* [p, p + len), a mapping of crawl's: zeros in a child of fork()
 * (MADV_WIPEONFORK, where the kernel has it): a leak check's state, which
 * holds chunk addresses, must not reach a child whose check would scan it
 * as anonymous memory (the thread that used it is not there). */
void hp_wipe_on_fork(void *p, size_t len);
void hp_snapshot_free(hp_snap *s);
/* The shards' tables [lo, hi) (they hold every chunk's address: a leak
 * check must not take them for roots): first the block of all first
 * tables, then each table that has grown out of it. Their count, at most
 * max (HP_SHARDS + 1 holds them all). */
size_t hp_table_ranges(uintptr_t (*out)[2], size_t max);
/* on 1: the tables stop growing (a leak check lists them, then scans the
 * process's memory); 0: as before. Nests; thread-safe. */
void hp_tables_freeze(int on);
/* Mark the thread as inside crawl (its allocations are not recorded). */
int hp_inside_enter(void);
void hp_inside_leave(int was);
int hp_inside_now(void);
/* 1 if this thread is inside a record, or a shard's lock stays held for
 * 500 ms (this thread's: exit called from a signal handler that
 * interrupted it there). Only for the exit hook. */
int hp_interrupted_inside(void);
/* A stack for a recording made from the frame whose registers are *from,
 * as the options say (inside crawl meanwhile). */
uint32_t hp_capture_stack(const crawl_regs *from);
/* heap_mmap.c: append the mapped regions to a snapshot (flags HP_MMAP).
 * 0 or -ENOMEM. */
int hp_mmap_append(hp_snap *s);
void hp_mmap_fork(int lock);
/* Distinct stacks among the snapshot's entries (heap_output.c). */
size_t hp_count_stacks(const hp_snap *s);

#endif
