// crawl_symbolize in a C++ program: names come demangled, and a demangled
// name longer than the mangled one is used only where it leaves room for
// file:line (once it took the room and the call failed with -ENOSPC, so
// reports lost the file, or the whole frame). Exit status 0 when all holds.
#include <crawl/crawl.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace ns {
__attribute__((noinline)) void func(std::vector<int> &v) { v.push_back(1); }
}  // namespace ns

static const char mangled[] = "_ZN2ns4funcERSt6vectorIiSaIiEE";
static const char readable[] = "ns::func(std::vector<int, std::allocator<int> >&)";

int main()
{
    std::vector<int> v;
    ns::func(v);
    uintptr_t pc = (uintptr_t)(void *)&ns::func + 1;
    char big[4096];
    crawl_symbol s;
    int rc = crawl_symbolize(pc, &s, big, sizeof big);
    if (rc != 0 || !s.function || !s.file || !s.module || std::strcmp(s.function, readable) != 0) {
        std::printf("symbolize_cxx: rc %d, function %s, file %s\n", rc,
                    s.function ? s.function : "(null)", s.file ? s.file : "(null)");
        return 1;
    }
    // room for the module, the mangled name and the file, not the demangled name
    size_t need = std::strlen(s.module) + 1 + sizeof mangled + std::strlen(s.file) + 1;
    char small[4096];
    rc = crawl_symbolize(pc, &s, small, need);
    if (rc != 0 || !s.file || !s.function || std::strcmp(s.function, mangled) != 0) {
        std::printf("symbolize_cxx: in %zu bytes: rc %d, function %s, file %s\n", need, rc,
                    s.function ? s.function : "(null)", s.file ? s.file : "(null)");
        return 1;
    }
    std::printf("symbolize_cxx: demangled, and file:line kept in a tight buffer\n");
    return 0;
}
