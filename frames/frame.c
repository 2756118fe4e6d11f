/* The per-thread Frame chain: push, pop, and the table of known types. */
#include <stdatomic.h>
#include <stddef.h>

#include "frames/internal.h"

/* ---- known Frame types --------------------------------------------------
 * An open-addressing set of type pointers, insert-only and lock-free. A walk
 * refuses a Frame whose type is not in it, which turns a garbage type
 * pointer into CRAWL_WALK_FAILED instead of a crash. If the table ever
 * fills, checking is switched off (every type is then accepted). */
#define TYPE_SLOTS 1024u
static _Atomic(const crawl_frame_type *) type_table[TYPE_SLOTS];
static atomic_int type_table_full;

static unsigned type_hash(const crawl_frame_type *type)
{
    uintptr_t x = (uintptr_t)type;
    x ^= x >> 17;
    x *= 0x9E3779B97F4A7C15u;
    return (unsigned)(x >> 40) & (TYPE_SLOTS - 1);
}

void crawl__type_note(const crawl_frame_type *type)
{
    unsigned h = type_hash(type);
    for (unsigned i = 0; i < TYPE_SLOTS; i++) {
        _Atomic(const crawl_frame_type *) *slot = &type_table[(h + i) & (TYPE_SLOTS - 1)];
        const crawl_frame_type *cur = atomic_load_explicit(slot, memory_order_acquire);
        if (cur == type)
            return;
        if (cur == NULL) {
            const crawl_frame_type *expected = NULL;
            if (atomic_compare_exchange_strong(slot, &expected, type) || expected == type)
                return;
        }
    }
    atomic_store(&type_table_full, 1);
}

int crawl__type_known(const crawl_frame_type *type)
{
    if (!type)
        return 0;
    unsigned h = type_hash(type);
    for (unsigned i = 0; i < TYPE_SLOTS; i++) {
        const crawl_frame_type *cur =
            atomic_load_explicit(&type_table[(h + i) & (TYPE_SLOTS - 1)], memory_order_acquire);
        if (cur == type)
            return 1;
        if (cur == NULL)
            break;
    }
    return atomic_load_explicit(&type_table_full, memory_order_relaxed);
}

/* ---- push / pop ---------------------------------------------------------- */

/* The checks every push makes, all passing: the common case, kept short
 * because VMs push Frames on every call into and out of native code. */
static inline int push_is_plain(const crawl__thread *th, const crawl_frame *f,
                                const crawl_frame_type *type)
{
    uintptr_t a = (uintptr_t)f;
    return th->attached && a - th->stack_lo <= th->stack_hi - th->stack_lo - sizeof *f &&
           !(a & (sizeof(void *) - 1)) && f != th->top &&
           (type == th->types[0] || type == th->types[1] || type == th->types[2] ||
            type == th->types[3]) &&
           type;
}

static inline void publish_frame(crawl__thread *th, crawl_frame *f, const crawl_frame_type *type)
{
    f->type = type;
    f->next = th->top;
    /* A signal handler on this thread must never see top before f is filled,
     * nor more Frames on the chain than nframes counts (a walk would take
     * the extra one for a cycle). */
    th->nframes++;
    atomic_signal_fence(memory_order_release);
    th->top = f;
}

/* Every check, with the message for the one that fails. Out of line so the
 * common path needs no stack frame of its own. */
__attribute__((noinline, cold)) static void link_frame(crawl__thread *th, crawl_frame *f,
                                                       const crawl_frame_type *type)
{
    if (!type)
        crawl__fatal("crawl_frame_push of Frame %p with a NULL type", (void *)f);
    if (!th->attached) {
        int rc = crawl_thread_attach();
        if (rc)
            crawl__fatal("crawl_frame_push: cannot attach this thread (error %d)", rc);
    }
    if (!crawl__on_stack(th, (uintptr_t)f, sizeof *f))
        crawl__fatal("crawl_frame_push of '%s' Frame %p: not on this thread's stack [%p, %p) "
                     "(a heap Frame, or another thread's?)",
                     crawl__type_name(type), (void *)f, (void *)th->stack_lo,
                     (void *)th->stack_hi);
    if ((uintptr_t)f & (sizeof(void *) - 1))
        crawl__fatal("crawl_frame_push of '%s' Frame %p: misaligned (Frames are pointer-aligned)",
                     crawl__type_name(type), (void *)f);
    if (f == th->top)
        crawl__fatal("crawl_frame_push of '%s' Frame %p: it is already the top Frame",
                     crawl__type_name(type), (void *)f);
    /* A Frame on the signal stack: remember that stack, so that other
     * threads (a collector enumerating roots) can tell the Frame is valid. */
    if ((uintptr_t)f - th->stack_lo >= th->stack_hi - th->stack_lo)
        crawl__current_altstack(&th->alt_lo, &th->alt_hi);
    if (type != th->types[0] && type != th->types[1] && type != th->types[2] &&
        type != th->types[3]) {
        crawl__type_note(type);
        th->types[th->type_victim++ % 4] = type;
    }
    publish_frame(th, f, type);
}

void crawl_frame_push(crawl_frame *f, const crawl_frame_type *type)
{
    crawl__thread *th = crawl__self();
    if (__builtin_expect(push_is_plain(th, f, type), 1))
        publish_frame(th, f, type);
    else
        link_frame(th, f, type);
}

/* The type name of a Frame the caller handed us, read only if it is safe:
 * a Frame popped by mistake may be garbage. */
static const char *checked_name(const crawl__thread *th, const crawl_frame *f)
{
    crawl__bounds b;
    crawl__thread_bounds(th, 1, &b);
    if (!f || !crawl__frame_ok(f, &b))
        return "?";
    return crawl__type_name(f->type);
}

/* The Frame being popped is not the top: say which is, and stop. caller_sp
 * is the stack pointer of crawl_frame_pop's caller: a top Frame below it
 * lies in a stack frame that has returned (the commonest mistake: a return
 * inside a GCPROTECT block), and its memory is reused, by this very call
 * among others, so it is never read. */
__attribute__((noinline, cold, noreturn)) static void pop_mismatch(const crawl__thread *th,
                                                                  const crawl_frame *f,
                                                                  uintptr_t caller_sp)
{
    const crawl_frame *top = th->top;
    if (!top)
        crawl__fatal("crawl_frame_pop of '%s' Frame %p, but this thread's Frame chain is empty",
                     checked_name(th, f), (void *)f);
    uintptr_t t = (uintptr_t)top;
    int same_stack = (t >= th->stack_lo && t < th->stack_hi) ==
                     (caller_sp >= th->stack_lo && caller_sp < th->stack_hi);
    if (same_stack && t < caller_sp)
        crawl__fatal("Frame popped out of order: crawl_frame_pop of '%s' Frame %p, but the top "
                     "Frame %p lies in a stack frame that has already returned (a return or "
                     "longjmp skipped its crawl_frame_pop? use crawl_frame_unwind_to before a "
                     "longjmp)",
                     checked_name(th, f), (void *)f, (void *)top);
    crawl__fatal("Frame popped out of order: expected the top Frame '%s' at %p, got '%s' at %p "
                 "(Frames are popped newest first)",
                 checked_name(th, top), (void *)top, checked_name(th, f), (void *)f);
}

void crawl_frame_pop(crawl_frame *f)
{
    crawl__thread *th = crawl__self();
    if (__builtin_expect(th->top != f || !f, 0)) {
        /* libcrawl keeps frame pointers: the caller's sp is rbp + 16 */
        pop_mismatch(th, f, (uintptr_t)__builtin_frame_address(0) + 2 * sizeof(void *));
    }
    th->top = f->next;
    atomic_signal_fence(memory_order_release);
    th->nframes--;
}

void crawl_frame_unwind_to(crawl_frame *keep)
{
    crawl__thread *th = crawl__self();
    unsigned n = 0;
    for (crawl_frame *f = th->top; f != keep; f = f->next, n++)
        if (!f || n >= th->nframes)
            crawl__fatal("crawl_frame_unwind_to: Frame %p is not on this thread's Frame chain",
                         (void *)keep);
    th->top = keep;
    atomic_signal_fence(memory_order_release);
    th->nframes -= n;
}

crawl_frame *crawl_frame_top(void)
{
    return crawl__self()->top;
}

unsigned crawl_frame_count(void)
{
    return crawl__self()->nframes;
}

static void (*_Atomic transition_hook)(crawl_frame *f);

void crawl_set_transition_hook(void (*fn)(crawl_frame *f))
{
    atomic_store(&transition_hook, fn);
}

/* Called by crawl_transition_push (assembly) once the registers are saved. */
void crawl__transition_link(crawl_transition *t, const crawl_frame_type *type);
void crawl__transition_link(crawl_transition *t, const crawl_frame_type *type)
{
    if (!type)
        type = &crawl_transition_type;
    else if (!(type->flags & CRAWL_FRAME_SAVES_REGS) ||
             type->regs_offset != offsetof(crawl_transition, regs))
        crawl__fatal("crawl_transition_push with type '%s': it needs CRAWL_FRAME_SAVES_REGS and "
                     "regs_offset == offsetof(crawl_transition, regs)",
                     crawl__type_name(type));
    crawl_frame_push(&t->frame, type);
    void (*hook)(crawl_frame *) = atomic_load_explicit(&transition_hook, memory_order_relaxed);
    if (__builtin_expect(hook != NULL, 0))
        hook(&t->frame);
}
