/* The program exits in the middle of writing a profile: here a Frame
 * type's describe hook calls exit (libdw's out-of-memory handler does the
 * same, inside symbolization). The exit hook waited 5 s for that write,
 * its own thread's, and left its temporary file beside the path.
 * usage: exit_in_write PATH (under libcrawl-preload.so, heap_profile=1) */
#include <crawl/crawl.h>
#include <stdio.h>
#include <stdlib.h>

static int exit_now;

static int describe_method(const void *m, uintptr_t pc, char *buf, size_t len)
{
    (void)pc;
    if (exit_now)
        exit(3);
    return snprintf(buf, len, "%s at script:1", (const char *)m);
}

static const void *method(const crawl_frame *f)
{
    (void)f;
    return "scripted";
}

static const crawl_frame_type type = {.name = "script", .flags = CRAWL_FRAME_FUNCTION,
                                      .method = method, .describe_method = describe_method};

static void *volatile kept;

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    crawl_thread_attach();
    crawl_frame f;
    crawl_frame_push(&f, &type);
    kept = malloc(100);                  /* recorded with the Frame's activation */
    crawl_frame_pop(&f);
    exit_now = 1;
    crawl_heap_profile_write(argv[1]);
    puts("exit_in_write: the write returned");
    return 0;
}
