/* For test_gdb_extension: a Frame gdb cannot read whole, then abort().
 * usage: bad_frames utf8 | unreadable
 *   utf8        its type's name is not UTF-8 (the extension raised
 *               UnicodeDecodeError, and bt showed no Frame)
 *   unreadable  its type pointer leads nowhere (the extension called the
 *               type's hooks in the process anyway: a fault there left the
 *               process stopped inside the call) */
#include <crawl/crawl.h>
#include <stdlib.h>
#include <string.h>

static const crawl_frame_type bad_name = {.name = "\xff bad", .flags = CRAWL_FRAME_FUNCTION};
static const crawl_frame_type good = {.name = "good", .flags = CRAWL_FRAME_FUNCTION};

int main(int argc, char **argv)
{
    if (argc != 2 || crawl_thread_attach() != 0)
        return 2;
    crawl_frame f;
    int unreadable = strcmp(argv[1], "unreadable") == 0;
    crawl_frame_push(&f, unreadable ? &good : &bad_name);
    if (unreadable) {
        uintptr_t nowhere = 0xdeadbeef;
        memcpy((void *)&f.type, &nowhere, sizeof nowhere);
        __asm__ volatile("" : : "r"(&f) : "memory");
    }
    abort();
}
