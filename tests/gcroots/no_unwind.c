/* An empty library named libunwind.so.8: on LD_LIBRARY_PATH, crawl finds
 * libunwind but none of its functions (test_gc_diag_no_libunwind). */
int crawl_test_no_unwind;
