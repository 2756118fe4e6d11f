// A throwing operator new that cannot allocate behaves under the preload as
// the C++ runtime's own: the new_handler runs (here once, then it removes
// itself), then std::bad_alloc is thrown and caught. Linked against
// libcrawl-preload.so (its operators are the program's). Once it aborted.
// Exit status 0 when all holds; prints what did not.
#include <cstdio>
#include <new>

static int handler_calls;

static void handler()
{
    handler_calls++;
    std::set_new_handler(nullptr);  // nothing to free: give up the next time
}

int main()
{
    int bad = 0;
    volatile size_t huge = size_t(1) << 50;
    try {
        char *p = new char[huge];
        std::printf("new char[2^50] returned %p\n", (void *)p);
        bad = 1;
    } catch (const std::bad_alloc &) {
    }
    std::set_new_handler(handler);
    try {
        int *p = new int[huge];
        std::printf("new int[2^50] returned %p\n", (void *)p);
        bad = 1;
    } catch (const std::bad_alloc &) {
    }
    if (handler_calls != 1) {
        std::printf("the new_handler ran %d times, not once\n", handler_calls);
        bad = 1;
    }
    char *q = new (std::nothrow) char[huge];
    if (q) {
        std::printf("nothrow new char[2^50] returned %p\n", (void *)q);
        bad = 1;
    }
    // the nothrow forms run the new_handler too, as the C++ runtime's do
    // (under the preload they returned NULL at once: a program whose
    // handler frees a reserve failed where it ran fine without it)
    handler_calls = 0;
    std::set_new_handler(handler);
    q = new (std::nothrow) char[huge];
    std::set_new_handler(handler);
    char *r = new (std::align_val_t(64), std::nothrow) char[huge];
    if (q || r || handler_calls != 2) {
        std::printf("nothrow new: %p %p, the new_handler ran %d times, not twice\n", (void *)q,
                    (void *)r, handler_calls);
        bad = 1;
    }
    char *ok = new char[64];        // and a real one still works
    ok[0] = 1;
    delete[] ok;
    if (!bad)
        std::printf("new_fails: bad_alloc thrown, handler run once\n");
    return bad;
}
