// The preload test's buggy program in C++: reads an array after delete[].
// Built without crawl; run under libcrawl-preload.so. Its report's
// allocation and free stacks start at operator new[] and operator delete[].
#include <cstdio>

__attribute__((noinline)) static int *make_table()
{
    int *t = new int[8];
    t[0] = 7;
    return t;
}

__attribute__((noinline)) static void drop_table(int *t) { delete[] t; }

__attribute__((noinline)) static int use_table(const int *t) { return t[0]; }

int main()
{
    int *t = make_table();
    drop_table(t);
    std::printf("%d\n", use_table(t));  // use after delete[]
    return 0;
}
