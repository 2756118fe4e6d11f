/* crawl — GC roots: the stack slots that hold references, found through Frames.
 *
 * A root is the *address of a slot* holding a GC reference, so a moving
 * collector could update it. Frames report their slots through their type's
 * enum_roots hook; crawl_enum_roots walks the calling thread's Frames, and
 * crawl_enum_roots_all_threads every attached thread's, for a collector's
 * push-roots callback. GCPROTECT (after CoreCLR's GCPROTECT_BEGIN) protects
 * C locals.
 *
 * Signal safety and allocation: nothing here allocates or locks (but a
 * GCPROTECT push on a thread not yet attached attaches it: see frames.h);
 * enum_roots hooks run inside a collection (Boehm: with the allocation lock
 * held and the world stopped) and must not allocate from the collector
 * either.
 */
#ifndef CRAWL_GCROOTS_H
#define CRAWL_GCROOTS_H

#include <crawl/stackwalk.h>

#ifdef __cplusplus
extern "C" {
#endif

/* root_flags */
enum {
    CRAWL_ROOT_INTERIOR = 1u << 0,      /* the slot may point inside an object */
    CRAWL_ROOT_PINNED = 1u << 1         /* the object must not move */
};

/* Receives one root. cf is the Frame that reported it (kind CRAWL_CF_FRAME;
 * valid only during the call). */
typedef void (*crawl_root_fn)(void **slot, unsigned root_flags, const crawl_cf *cf, void *ctx);

/* Called by enum_roots hooks, once per slot, with the sink the hook was
 * given (must not be NULL; valid only during that call): it runs the
 * enumeration's callback there, on the enumerating thread, so it is as
 * thread-safe as that callback. */
CRAWL_API void crawl_roots_report(crawl_roots *sink, void **slot, unsigned root_flags);

/* Report the roots of the calling thread's Frames, newest Frame first.
 * flags: CRAWL_WALK_FUNCTIONS_ONLY limits it to CRAWL_FRAME_FUNCTION Frames.
 * CRAWL_WALK_DONE; CRAWL_WALK_FAILED for a NULL fn or a corrupt Frame
 * (the Frames before it are reported). Async-signal-safe if the hooks are. */
CRAWL_API crawl_walk_status crawl_enum_roots(crawl_root_fn fn, void *ctx, unsigned flags);

/* Report the roots of every attached thread's Frames (each thread's newest
 * first). Takes no lock, so a collector may call it with the world
 * stopped: call it only while the other attached threads are stopped or
 * cannot push, pop, attach or detach. CRAWL_WALK_FAILED if any thread's
 * chain is corrupt (its earlier Frames are still reported). */
CRAWL_API crawl_walk_status crawl_enum_roots_all_threads(crawl_root_fn fn, void *ctx,
                                                         unsigned flags);

/* ---- GCPROTECT: C locals that hold references ---------------------------- */

/* A Frame listing the addresses of C variables that hold references. Lives
 * on the stack of the function that protects them. */
typedef struct crawl_gcprotect {
    crawl_frame frame;
    void ***slots;                      /* slots[i] is &variable */
    unsigned n;
} crawl_gcprotect;

CRAWL_API extern const crawl_frame_type crawl_gcprotect_type;

/* Push gp, reporting *slots[0..n) as roots until the matching pop. slots
 * must outlive the protection (it is not copied); gp must not be NULL.
 * Thread-safe: each acts on the calling thread's own chain (gp lives on its
 * stack, and the thread that pushed it pops it). */
CRAWL_API void crawl_gcprotect_push(crawl_gcprotect *gp, void **slots[], unsigned n);
CRAWL_API void crawl_gcprotect_pop(crawl_gcprotect *gp);

/* Boehm's adapter, in crawl-boehm (pkg-config crawl-boehm, CMake
 * crawl::boehm): declared here too, where the GC roots contract first put
 * it; crawl/boehm.h declares it with the rest of crawl-boehm and says
 * what it does. */
CRAWL_API void crawl_boehm_install(void);

/* CRAWL_GCPROTECT_BEGIN(a, b, ...) ... CRAWL_GCPROTECT_END();
 * Protects up to 8 pointer variables for the block in between, which must
 * not be left with return, goto or break. */
#define CRAWL__ADDR1(a) (void **)&(a)
#define CRAWL__ADDR2(a, ...) CRAWL__ADDR1(a), CRAWL__ADDR1(__VA_ARGS__)
#define CRAWL__ADDR3(a, ...) CRAWL__ADDR1(a), CRAWL__ADDR2(__VA_ARGS__)
#define CRAWL__ADDR4(a, ...) CRAWL__ADDR1(a), CRAWL__ADDR3(__VA_ARGS__)
#define CRAWL__ADDR5(a, ...) CRAWL__ADDR1(a), CRAWL__ADDR4(__VA_ARGS__)
#define CRAWL__ADDR6(a, ...) CRAWL__ADDR1(a), CRAWL__ADDR5(__VA_ARGS__)
#define CRAWL__ADDR7(a, ...) CRAWL__ADDR1(a), CRAWL__ADDR6(__VA_ARGS__)
#define CRAWL__ADDR8(a, ...) CRAWL__ADDR1(a), CRAWL__ADDR7(__VA_ARGS__)
#define CRAWL__PICK(_1, _2, _3, _4, _5, _6, _7, _8, name, ...) name
#define CRAWL__ADDRS(...)                                                                        \
    CRAWL__PICK(__VA_ARGS__, CRAWL__ADDR8, CRAWL__ADDR7, CRAWL__ADDR6, CRAWL__ADDR5,             \
                CRAWL__ADDR4, CRAWL__ADDR3, CRAWL__ADDR2, CRAWL__ADDR1, )(__VA_ARGS__)

#define CRAWL_GCPROTECT_BEGIN(...)                                                               \
    do {                                                                                         \
        void **crawl__gp_slots[] = {CRAWL__ADDRS(__VA_ARGS__)};                                  \
        crawl_gcprotect crawl__gp;                                                               \
        crawl_gcprotect_push(&crawl__gp, crawl__gp_slots,                                        \
                             (unsigned)(sizeof crawl__gp_slots / sizeof crawl__gp_slots[0]));

#define CRAWL_GCPROTECT_END()                                                                    \
        crawl_gcprotect_pop(&crawl__gp);                                                         \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
