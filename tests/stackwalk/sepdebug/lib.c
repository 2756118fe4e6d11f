/* test_sepdebug's library: built -g, then its debug info moved to a
 * separate file (.debug/libcrawl_sepdebug.so.debug, named by
 * .gnu_debuglink) and stripped from it. */
__attribute__((noinline, visibility("default"))) int crawl_sepdebug_fn(int x)
{
    __asm__ volatile("" ::: "memory");
    return x * 7 + 3;                    /* SEPDEBUG_LINE */
}
