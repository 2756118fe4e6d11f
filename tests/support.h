/* Helpers shared by the cmocka tests: record a walk, name its frames. */
#ifndef CRAWL_TEST_SUPPORT_H
#define CRAWL_TEST_SUPPORT_H

#include <crawl/crawl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <sys/mman.h>

/* Start fn(arg) on a new thread whose stack is fresh, zeroed memory: no
 * stale words of earlier tests' threads for a conservative scan to find.
 * Returns the stack, to munmap (FRESH_STACK_SIZE bytes) after the join.
 * Inline, so that pthread_create is the including file's (Boehm's under
 * GC_THREADS). */
#define FRESH_STACK_SIZE ((size_t)1 << 20)
static inline void *start_on_fresh_stack(pthread_t *t, void *(*fn)(void *), void *arg)
{
    void *stack = mmap(NULL, FRESH_STACK_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(stack != MAP_FAILED);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstack(&attr, stack, FRESH_STACK_SIZE);
    assert_int_equal(pthread_create(t, &attr, fn, arg), 0);
    pthread_attr_destroy(&attr);
    return stack;
}

#define NOINLINE __attribute__((noinline))
/* Not inlined, cloned per constant argument or merged with a twin: a
 * function whose frame a test needs exactly as written. */
#ifdef __clang__
#define NO_IPA __attribute__((noinline))
#else
#define NO_IPA __attribute__((noipa))
#endif
/* After a call whose frame must stay on the stack (a walk reads it): no
 * sibling call may replace this function's frame. */
#define T_NO_TAIL() __asm__ volatile("" ::: "memory")

typedef struct rec {
    crawl_kind kind;
    unsigned flags, depth;
    uintptr_t ip, sp;
    crawl_frame *frame;                 /* dead once the walk returns: read type instead */
    const crawl_frame_type *type;       /* the Frame's type, read during the walk */
    const void *method;
    int has_regs;
    char name[160];     /* label, Frame type name, VM describe text or native function */
    char module[160];   /* native frames: the ELF module (dladdr) */
} rec;

typedef struct trace {
    rec r[512];
    unsigned n;
    unsigned limit;     /* abort after this many reports when non-zero */
    crawl_walk_status st;
} trace;

/* A Frame that carries a test label; its describe() is the label. */
typedef struct label_frame {
    crawl_frame frame;
    const char *label;
} label_frame;

extern const crawl_frame_type t_label_type;       /* CRAWL_FRAME_FUNCTION */
extern const crawl_frame_type t_plain_type;       /* no flags */

crawl_action t_record(const crawl_cf *cf, void *ctx);
/* Fill name/module of every record (call after the walk). */
void t_name(trace *t);
/* Index of the first record at or after `from` whose name is `name`, or -1. */
int t_find(const trace *t, const char *name, unsigned from);
void t_dump(const trace *t, const char *title);
/* Check the invariants every walk must keep: depths 0..n-1, native sp
 * strictly increasing, every Frame reported before the first native frame
 * whose sp is above it. */
void t_check_order(const trace *t);

/* Fail unless each extended regex matches a line of text, in order
 * (patterns ends with NULL). */
void t_expect_lines(const char *text, const char *const *patterns);

/* Run fn in a child process; return its wait status and its stderr in buf. */
int t_run_child(void (*fn)(void), char *buf, size_t len);
/* What crawl_depot_print writes for id, NUL-terminated in buf (through a
 * pipe: up to len - 1 bytes). */
void t_depot_text(uint32_t id, char *buf, size_t len);
/* Fork n children in turn, each running ok() under a 5 s alarm (exit 0
 * when it returns nonzero); count the children that hung (the alarm) and
 * those that failed. For "fork while other threads hold locks" tests. */
void t_fork_children(int n, int (*ok)(void), int *hung, int *failed);

/* Assert cond; on failure print trace *tp (labelled with what) and fail
 * with cond's text. EXPECT uses the file's `static trace T`. */
#define T_EXPECT_IN(tp, what, cond)                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            t_dump((tp), (what));                                                              \
            fail_msg("%s: %s", (what), #cond);                                                 \
        }                                                                                      \
    } while (0)
#define EXPECT(cond) T_EXPECT_IN(&T, #cond, cond)

#endif
