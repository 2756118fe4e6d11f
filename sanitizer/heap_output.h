/* Heap profiles' outputs, private to the sanitizer layer: the live table
 * grouped by stack and by caller module, with every frame symbolized once. */
#ifndef CRAWL_SANITIZER_HEAP_OUTPUT_H
#define CRAWL_SANITIZER_HEAP_OUTPUT_H

#include "sanitizer/heap_profile_internal.h"

typedef struct ho_out {                 /* buffered writes to a descriptor */
    int fd, err;
    size_t n;
    char buf[1 << 16];
} ho_out;
void ho_init(ho_out *o, int fd);
void ho_write(ho_out *o, const char *s, size_t len);
void ho_printf(ho_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ho_flush(ho_out *o);

enum { HO_NATIVE, HO_SCRIPT, HO_JIT };

typedef struct ho_frame {
    uintptr_t key[3];                   /* the depot words it came from */
    uintptr_t pc;                       /* native: the return address */
    int kind, line;
    unsigned name, file, module, text;  /* interned strings (0: none) */
} ho_frame;

typedef struct ho_group {               /* one stack (or one caller pc without a stack) */
    uint32_t stack;
    uintptr_t one;
    unsigned *frames, nframes;          /* frame ids, newest first */
    double bytes, objects;              /* scaled when sampled */
} ho_group;

typedef struct ho_module {
    unsigned name;
    double bytes, objects;              /* scaled when sampled */
} ho_module;

typedef struct ho_profile {
    const hp_snap *snap;
    size_t live_bytes, live_objects;    /* every entry, exact (sampled: the estimate) */
    size_t samples;                     /* sampled: the entries */
    size_t mapped_bytes, mapped_regions; /* HP_MMAP entries (counted in live_* too) */
    double total_bytes, total_objects;  /* the stack view's (scaled) totals */
    ho_group *groups;
    size_t ngroups;
    ho_module *modules;
    size_t nmodules;
    char **strs;
    unsigned *slots;
    size_t nstr, strcap;
    ho_frame *frames;
    unsigned *fslots;
    size_t nframes, fcap;
} ho_profile;

int ho_build(ho_profile *p, const hp_snap *s);   /* 0 or -ENOMEM */
void ho_free(ho_profile *p);
const char *ho_str(const ho_profile *p, unsigned id);
unsigned ho_intern(ho_profile *p, const char *s);   /* 0 for "" (and when out of memory) */

/* The snapshot in format to fd (snapshot sorted in place). 0 or -errno. */
int ho_write_snap(int fd, crawl_heap_format format, hp_snap *s);
/* path created or truncated, then write_fd(fd, the format of its extension). */
int ho_write_path(const char *path, int (*to_fd)(int fd, crawl_heap_format format));
/* Other threads writing a profile beside its path now (a temporary file
 * not yet renamed or removed; writes to a descriptor, a device or a
 * /dev/fd path are not counted) */
int ho_writes_in_flight(void);
/* 1 while the calling thread is inside a write of its own */
int ho_in_own_write(void);
/* The temporary files of the writes under way removed (the exit hook: it
 * ends their writers) */
void ho_remove_temporaries(void);
/* The exit hook runs: from now on only the calling thread's writes may
 * make temporary files (others' fail with -ECANCELED). */
void ho_closing(void);
/* The calling thread's writes are ones the exit hook waits for (on 1) or
 * not: not refused. */
void ho_awaited(int on);
/* In a fork child: no other thread is writing. */
void ho_fork_child(void);

int ho_write_svg(ho_out *o, const ho_profile *p);     /* heap_svg.c */
int ho_write_pprof(ho_out *o, const ho_profile *p);   /* heap_pprof.c */

#endif
