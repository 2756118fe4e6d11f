// C++ exceptions in a process that links crawl still unwind through
// libgcc's _Unwind_RaiseException.
#include <crawl/crawl.h>
#include <dlfcn.h>
#include <cstdio>
#include <cstring>
#include <stdexcept>

static crawl_action count(const crawl_cf *, void *ctx)
{
    ++*static_cast<int *>(ctx);
    return CRAWL_CONTINUE;
}

int main()
{
    int n = 0;
    try {
        // crawl is C: exceptions must not cross it. Walk, then throw and catch.
        crawl_walk(count, &n, 0);
        throw std::runtime_error("plain");
    } catch (const std::runtime_error &e) {
        if (std::strcmp(e.what(), "plain") != 0)
            return 1;
    }
    Dl_info di;
    void *re = dlsym(RTLD_DEFAULT, "_Unwind_RaiseException");
    // AddressSanitizer intercepts it; libunwind must never be the one.
    if (!re || !dladdr(re, &di) ||
        !(std::strstr(di.dli_fname, "libgcc_s") || std::strstr(di.dli_fname, "libasan"))) {
        std::fprintf(stderr, "_Unwind_RaiseException resolves to %s\n", re ? di.dli_fname : "(none)");
        return 1;
    }
    if (n < 2)
        return 1;
    std::printf("1 passed, 0 failed\n");
    return 0;
}
