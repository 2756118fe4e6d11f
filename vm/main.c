/* crawlvm: the command line. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <gc/gc.h>
#include <unistd.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <crawl/boehm.h>
#include <crawl/guarded.h>
#include <crawl/heap_profile.h>
#include <crawl/profiler.h>

#include "vm/builtins.h"
#include "vm/trace.h"
#include "vm/vm.h"

static const char usage[] =
    "usage: crawlvm [options] FILE\n"
    "       crawlvm [options] -e EXPR\n"
    "Runs a crawlvm script (an s-expression language; see README.md, installed\n"
    "in share/doc/crawl/ beside bin/).\n"
    "  -e EXPR      evaluate EXPR instead of a file\n"
    "  --native     show the C frames between script frames in tracebacks\n"
    "  --fast       walk stacks with frame pointers instead of DWARF CFI\n"
    "  --gc-stats   print collector statistics at exit\n"
    "  --sanitize   native buffers on crawl's checked heap, VM objects checked on\n"
    "               access (use-after-collect): AddressSanitizer-style reports with\n"
    "               script frames and allocation stacks (options: CRAWL_OPTIONS)\n"
    "  --sanitize=sampled  native buffers through the guarded pool, 1 in gpa_sample_rate\n"
    "               (GWP-ASan's design): misuse of a sampled buffer is reported\n"
    "  --gc-stress N  collect before every Nth allocation and at every native call\n"
    "               (a missing root fails at once)\n"
    "  --gc-verify  check every root the VM reports, at every collection\n"
    "  --heap-profile FILE  record every native allocation (libcrawl-preload.so; crawlvm\n"
    "               restarts itself with it) and write what the script still holds\n"
    "               when it ends, with script frames in the stacks: FILE.svg flame\n"
    "               graph, .pb.gz pprof, .json, .folded, else text\n"
    "  --profile FILE  sample CPU time while the script runs (--profile-hz N, 1000 by\n"
    "               default): FILE.svg flame graph, .pb.gz pprof, .folded, else text\n"
    "  --help       this text\n"
    "SIGQUIT (Ctrl-\\) prints every thread's mixed stack to stderr and goes on.\n"
    "Exit status: 0 success, 1 script error, 2 bad usage.\n";

/* --sanitize=sampled: native buffers through crawl's guarded pool, one in
 * gpa_sample_rate (GWP-ASan's production trade-off); misuse of a sampled
 * buffer faults and is reported with script frames. The rest is malloc. */
static void *sampled_alloc(size_t n)
{
    void *p = crawl_gpa_should_sample() ? crawl_gpa_allocate(n, 0) : NULL;
    return p ? p : malloc(n);
}

/* (never a tail call: the free stack starts here, as the allocation
 * stack starts at sampled_alloc) */
__attribute__((noinline)) static void sampled_release(void *p)
{
    if (crawl_gpa_owns(p))
        crawl_gpa_deallocate(p);
    else
        free(p);
    __asm__ volatile("");
}

/* The hardware checks sampled buffers: touch the bytes of an access to one
 * before the VM's own checks refuse it (a freed or too-short buffer faults
 * here, and the guarded pool reports it with the script frames). */
static int sampled_check(const void *addr, size_t size, int is_write)
{
    (void)is_write;
    if (crawl_gpa_owns(addr))
        for (size_t i = 0; i < size; i++)
            (void)((volatile const unsigned char *)addr)[i];
    return 0;
}

/* Only sampled buffers are the pool's: a double free or use of a freed
 * buffer that malloc gave is the VM's own error, as without the option
 * (it was a real double free: glibc aborted). */
static int sampled_covers(const void *p) { return crawl_gpa_owns(p); }

/* --heap-profile: the allocation hooks live in libcrawl-preload.so, beside
 * libcrawl: run this program again with it preloaded and recording. Returns
 * only on failure (after saying why). */
static void restart_with_preload(char **argv)
{
    /* Under AddressSanitizer its runtime must come first in the library
     * list, where its malloc would shadow the preload's: the restarted
     * program died at start ("ASan runtime does not come first") */
    if (dlsym(RTLD_DEFAULT, "__asan_init")) {
        fprintf(stderr, "crawlvm: --heap-profile does not work in a build with "
                        "AddressSanitizer (whose malloc the preload cannot replace)\n");
        return;
    }
    Dl_info info;
    char path[4096];
    if (!dladdr((void *)crawl_heap_profile_start, &info) || !info.dli_fname) {
        fprintf(stderr, "crawlvm: --heap-profile: cannot find libcrawl\n");
        return;
    }
    const char *slash = strrchr(info.dli_fname, '/');
    snprintf(path, sizeof path, "%.*s/libcrawl-preload.so",
             slash ? (int)(slash - info.dli_fname) : 1, slash ? info.dli_fname : ".");
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "crawlvm: --heap-profile needs %s: %s\n", path, strerror(errno));
        return;
    }
    const char *pre = getenv("LD_PRELOAD"), *opts = getenv("CRAWL_OPTIONS");
    /* libcrawl read CRAWL_OPTIONS as it loaded: none applied (its warning
     * is above) leaves the serial at 0, and the restarted program would
     * refuse them again, and not record */
    if (opts && crawl_sanitizer_options_serial() == 0) {
        fprintf(stderr, "crawlvm: --heap-profile: CRAWL_OPTIONS were refused\n");
        return;
    }
    char preload[8192], options[8192];
    int np = snprintf(preload, sizeof preload, "%s%s%s", path, pre && *pre ? ":" : "",
                      pre ? pre : "");
    int no = snprintf(options, sizeof options, "%s%sheap_profile=1", opts ? opts : "",
                      opts && *opts ? ":" : "");
    if (np < 0 || (size_t)np >= sizeof preload || no < 0 || (size_t)no >= sizeof options) {
        fprintf(stderr, "crawlvm: --heap-profile: LD_PRELOAD or CRAWL_OPTIONS is too long "
                        "(%zu bytes at most)\n", sizeof options - 1);
        return;
    }
    /* (the marker first: without it, a restart that lost the others would
     * restart again, for ever) */
    if (setenv("CRAWLVM_HEAP_PROFILE_RESTARTED", "1", 1) != 0 ||
        setenv("LD_PRELOAD", preload, 1) != 0 || setenv("CRAWL_OPTIONS", options, 1) != 0) {
        fprintf(stderr, "crawlvm: --heap-profile: cannot set the environment: %s\n",
                strerror(errno));
        return;
    }
    execv("/proc/self/exe", argv);
    fprintf(stderr, "crawlvm: --heap-profile: cannot restart: %s\n", strerror(errno));
}

/* The script's text, NUL-terminated; NULL with errno set. *nul: the
 * offset of a NUL byte in it, or -1 (the reader would stop there and the
 * rest of the script would silently not run). */
static char *read_file(const char *path, long *nul)
{
    *nul = -1;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    int read_errno = 0;
    errno = 0;
    /* (a NUL byte ends the read at once: /dev/zero or /dev/urandom as the
     * script grew to 2 GB before the whole file was looked at) */
    while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        const char *z = memchr(buf + len, '\0', n);
        len += n;
        if (z) {
            *nul = (long)(z - buf);
            break;
        }
        if (len + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
            }
            buf = b;
        }
    }
    int err = ferror(f);
    if (err)
        read_errno = errno ? errno : EIO;   /* (a directory: EISDIR, not "I/O error") */
    fclose(f);
    if (!buf || err) {
        free(buf);
        errno = err ? read_errno : ENOMEM;
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

int main(int argc, char **argv)
{
    const char *file = NULL, *expr = NULL;
    int native = 0, fast = 0, gc_stats = 0, sanitize = 0, sampled = 0, gc_verify = 0;
    const char *heap_profile = NULL, *cpu_profile = NULL;
    long profile_hz = 1000;
    long gc_stress = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            if (fflush(stdout) != 0) {   /* (lost to /dev/full: not a success) */
                fprintf(stderr, "crawlvm: write error: %s\n", strerror(errno));
                return 1;
            }
            return 0;
        } else if (strcmp(argv[i], "--native") == 0) {
            native = 1;
        } else if (strcmp(argv[i], "--fast") == 0) {
            fast = 1;
        } else if (strcmp(argv[i], "--gc-stats") == 0) {
            gc_stats = 1;
        } else if (strcmp(argv[i], "--sanitize") == 0) {
            sanitize = 1;
        } else if (strcmp(argv[i], "--sanitize=sampled") == 0) {
            sampled = 1;
        } else if (strcmp(argv[i], "--gc-verify") == 0) {
            gc_verify = 1;
        } else if (strcmp(argv[i], "--gc-stress") == 0) {
            char *end = NULL;
            if (++i < argc)
                gc_stress = strtol(argv[i], &end, 10);
            if (i == argc || !end || *end || end == argv[i] || gc_stress < 1 ||
                gc_stress > 1000000000) {
                fprintf(stderr, "crawlvm: --gc-stress needs a count from 1 to 1000000000\n%s",
                        usage);
                return 2;
            }
        } else if (strcmp(argv[i], "--profile") == 0) {
            if (++i == argc || !argv[i][0]) {
                fprintf(stderr, "crawlvm: --profile needs a file name\n%s", usage);
                return 2;
            }
            cpu_profile = argv[i];
        } else if (strcmp(argv[i], "--profile-hz") == 0) {
            char *end = NULL;
            if (++i < argc)
                profile_hz = strtol(argv[i], &end, 10);
            if (i == argc || !end || *end || end == argv[i] || profile_hz < 1 || profile_hz > 10000) {
                fprintf(stderr, "crawlvm: --profile-hz needs a rate from 1 to 10000\n%s", usage);
                return 2;
            }
        } else if (strcmp(argv[i], "--heap-profile") == 0) {
            if (++i == argc || !argv[i][0]) {
                fprintf(stderr, "crawlvm: --heap-profile needs a file name\n%s", usage);
                return 2;
            }
            heap_profile = argv[i];
        } else if (strcmp(argv[i], "-e") == 0) {
            if (++i == argc) {
                fprintf(stderr, "crawlvm: -e needs an expression\n%s", usage);
                return 2;
            }
            if (file || expr) {              /* (in either order: a file, then -e, ran -e alone) */
                fprintf(stderr, "crawlvm: more than one script given\n%s", usage);
                return 2;
            }
            expr = argv[i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "crawlvm: unknown option '%s'\n%s", argv[i], usage);
            return 2;
        } else if (!file && !expr) {
            file = argv[i];
        } else {
            fprintf(stderr, "crawlvm: more than one script given\n%s", usage);
            return 2;
        }
    }
    if (!file && !expr) {
        fprintf(stderr, "crawlvm: no script given\n%s", usage);
        return 2;
    }
    if (heap_profile && !crawl_heap_profile_active()) {
        if (!getenv("CRAWLVM_HEAP_PROFILE_RESTARTED"))
            restart_with_preload(argv);
        else
            fprintf(stderr, "crawlvm: --heap-profile: libcrawl-preload.so is not recording\n");
        return 2;
    }
    char *source = NULL;
    long nul = -1;
    if (file && !(source = read_file(file, &nul))) {
        fprintf(stderr, "crawlvm: cannot read '%s': %s\n", file, strerror(errno));
        return 2;
    }
    if (nul >= 0) {
        fprintf(stderr, "crawlvm: '%s' holds a NUL byte at offset %ld: not a script\n", file, nul);
        return 2;
    }

    GC_INIT();
    crawl_thread_attach();
    /* The reader, compiler and callbacks stop with an error
     * VM_STACK_RESERVE before the C stack's end (vm_stack_low): a stack
     * with not much more than that fails every script with "nested too
     * deeply" (256 KiB did). 64 KiB over the reserve is the least run. */
    uintptr_t lo, hi, here = (uintptr_t)__builtin_frame_address(0);
    uintptr_t least = VM_STACK_RESERVE + ((uintptr_t)64 << 10);
    /* (in ulimit -s's terms: the limit, less what is left below here, plus
     * what is needed there; it said "the C stack is 320 KiB; crawlvm needs
     * 320 KiB" under ulimit -s 324, counting neither the part above main
     * nor the limit's own) */
    if (crawl_thread_stack_bounds(&lo, &hi) == 0 && here - lo < least) {
        struct rlimit rl;
        uintptr_t is = hi - lo;
        if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
            is = (uintptr_t)rl.rlim_cur;
        /* (8 KiB more, for where the kernel puts the stack's top from one
         * run to the next, and a multiple of 16) */
        uintptr_t need = ((is - (here - lo) + least + ((uintptr_t)24 << 10) - 1) >> 14) << 4;
        fprintf(stderr, "crawlvm: the C stack is %lu KiB; crawlvm needs %lu KiB or more "
                        "(ulimit -s)\n", (unsigned long)(is >> 10), (unsigned long)need);
        return 2;
    }
    crawl_install_thread_dump(SIGQUIT, STDERR_FILENO);   /* a thread dump, as the JVM's */
#ifndef CRAWLVM_NO_FRAMES
    crawl_boehm_install();
#endif
    vm_state *vm = vm_new();
    if (!vm) {
        fprintf(stderr, "crawlvm: out of memory\n");
        return 70;
    }
    vm_open_libs(vm);
#ifdef CRAWLVM_NO_FRAMES
    vm_push_roots_directly(vm);
#endif
    vm->native_traces = native;
    vm->walk_flags = fast ? CRAWL_WALK_FAST : 0;
    if (sanitize && crawl_heap_reserve() != 0) {
        fprintf(stderr, "crawlvm: --sanitize: the checked heap cannot reserve its 18 GiB of "
                        "address space (ulimit -v?)\n");
        return 2;
    }
    if (sanitize)
        vm->alloc = (vm_allocator){crawl_heap_malloc, crawl_heap_free, crawl_heap_check, NULL,
                                   crawl_heap_size};
    else if (sampled)
        vm->alloc = (vm_allocator){sampled_alloc, sampled_release, sampled_check, sampled_covers,
                                   crawl__gpa_slot_size};
#ifndef CRAWLVM_NO_FRAMES
    char gc_options[160];
    snprintf(gc_options, sizeof gc_options, "%s%s%s",
             sanitize ? "gc_alloc_stacks=1:gc_poison_collected=1:" : "",
             gc_verify ? "gc_verify=1:" : "", "");
    if (gc_stress) {
        size_t n = strlen(gc_options);
        snprintf(gc_options + n, sizeof gc_options - n, "gc_stress=%ld:gc_stress_transitions=1",
                 gc_stress);
    }
    if (gc_options[0] && crawl_sanitizer_set_options(gc_options) != 0)
        return 2;
    vm->check_objects = sanitize;
#else
    (void)gc_verify, (void)gc_stress;   /* bench/vm's build without crawl */
#endif
    vm_install_fatal_handlers(vm);
    if (cpu_profile) {
        int err = crawl_profiler_start_flags((unsigned)profile_hz, vm->walk_flags);
        if (err) {
            fprintf(stderr, "crawlvm: --profile: cannot start the profiler: %s\n", strerror(-err));
            return 2;
        }
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = vm_eval(vm, expr ? expr : source, expr ? "-e" : file, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (getenv("CRAWLVM_TIME"))          /* bench/profiler: the script's own time */
        fprintf(stderr, "crawlvm: script ran %.3f s\n",
                (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    if (cpu_profile) {
        crawl_profiler_stop();
        crawl_profiler_stats st;
        crawl_profiler_get_stats(&st);
        fprintf(stderr, "crawlvm: profile: %lu samples (%lu without a stack) in %s\n", st.samples,
                st.failed, cpu_profile);
        int err = crawl_profiler_write(cpu_profile);
        if (err) {
            fprintf(stderr, "crawlvm: cannot write the profile to '%s': %s\n", cpu_profile,
                    strerror(-err));
            if (!rc)
                rc = 1;
        }
    }
    fflush(stdout);
    if (heap_profile) {
        int err = crawl_heap_profile_write(heap_profile);
        if (err) {
            fprintf(stderr, "crawlvm: cannot write the heap profile to '%s': %s\n", heap_profile,
                    strerror(-err));
            if (!rc)
                rc = 1;
        }
    }
    if (gc_stats)
        fprintf(stderr,
                "gc: %lu collections, heap %zu KiB (%zu KiB free), %lu roots from crawl in the "
                "last one\n",
                (unsigned long)GC_get_gc_no(), GC_get_heap_size() / 1024,
                GC_get_free_bytes() / 1024, crawl_boehm_last_root_count());
    free(source);
    vm_free(vm);
    if (vm_write_error()) {              /* (the output was lost: /dev/full, a closed pipe) */
        fprintf(stderr, "crawlvm: write error: %s\n", strerror(vm_write_error()));
        rc = 1;
    }
    return rc == 0 ? 0 : 1;
}
