/* An outside program using the glue libraries as installed: crawl-boehm
 * (crawl/boehm.h) and crawl-ffi (crawl/ffi.h), and the run-time version. */
#include <crawl/boehm.h>
#include <crawl/crawl.h>
#include <crawl/ffi.h>
#include <gc/gc.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    if (crawl_version() != CRAWL_VERSION_HEX) {
        printf("consumer_glue: header %x, library %x\n", CRAWL_VERSION_HEX, crawl_version());
        return 1;
    }
    GC_INIT();
    crawl_boehm_install();
    for (int i = 0; i < 100000; i++)
        (void)GC_MALLOC(64);
    GC_gcollect();
    char err[200];
    crawl_ffi_fn *len = crawl_ffi_wrap((void *)strlen, "strlen", "z(s)", err, sizeof err);
    if (!len) {
        printf("consumer_glue: %s\n", err);
        return 1;
    }
    crawl_ffi_value arg = {.s = "crawl"}, ret = {0};
    crawl_ffi_call(len, &ret, &arg);
    crawl_ffi_free(len);
    if (ret.z != 5)
        return 1;
    printf("consumer_glue: ok (crawl %s)\n", crawl_version_string());
    return 0;
}
