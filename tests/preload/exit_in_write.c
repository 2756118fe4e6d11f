/* The program exits in the middle of writing a profile: here a Frame
 * type's describe hook calls exit (libdw's out-of-memory handler does the
 * same, inside symbolization).
 *   - The exit hook waited 5 s for that write, its own thread's, and left
 *     its temporary file beside the path.
 *   - Where the write was not to a temporary file (a descriptor, a device,
 *     a /dev/fd path), the exit hook wrote heap_profile_path again, and
 *     the hook ran (and exited) a second time.
 *   - A heap_profile_signal helper writing at that moment left its own
 *     temporary file.
 * Each time the hook exits it says so on stderr.
 * The fork mode is apart: the describe hook forks once, and both
 * processes finish the write (the child spun for ever in the temporary
 * files' table, whose slots the fork had emptied, its own with them).
 * usage: exit_in_write PATH [fd|helper|fork] (under libcrawl-preload.so,
 *        heap_profile=1; helper: heap_profile_signal=12 and
 *        heap_profile_path set)
 *   (none)  write PATH
 *   fd      write descriptor 1 (crawl_heap_profile_write_fd); PATH unused
 *   helper  raise SIGUSR2 and wait until the helper's write is inside the
 *           hook (where it stays), then write PATH
 *   fork    write PATH, forking inside it; the child exits once its write
 *           returns, and the parent says whether it did within 5 s */
#include <crawl/crawl.h>
#include <crawl/heap_profile.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int exit_now, fork_now;
static pid_t child = -1;
static pthread_t main_thread;
static int helper_inside;

static int describe_method(const void *m, uintptr_t pc, char *buf, size_t len)
{
    (void)pc;
    if (!pthread_equal(pthread_self(), main_thread)) {
        __atomic_store_n(&helper_inside, 1, __ATOMIC_RELEASE);
        for (;;)                             /* (until the process ends) */
            pause();
    }
    if (fork_now) {
        fork_now = 0;
        child = fork();
    }
    if (exit_now) {
        static const char line[] = "exit_in_write: the describe hook exits\n";
        (void)!write(2, line, sizeof line - 1);
        exit(3);
    }
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
    if (argc < 2)
        return 2;
    const char *mode = argc > 2 ? argv[2] : "";
    main_thread = pthread_self();
    crawl_thread_attach();
    crawl_frame f;
    crawl_frame_push(&f, &type);
    kept = malloc(100);                  /* recorded with the Frame's activation */
    crawl_frame_pop(&f);
    if (strcmp(mode, "helper") == 0) {
        raise(SIGUSR2);
        struct timespec t = {0, 1000000};
        for (int i = 0; i < 10000 && !__atomic_load_n(&helper_inside, __ATOMIC_ACQUIRE); i++)
            nanosleep(&t, NULL);
        if (!helper_inside) {
            puts("exit_in_write: the helper never wrote");
            return 4;
        }
    }
    if (strcmp(mode, "fork") == 0) {
        fork_now = 1;
        int rc = crawl_heap_profile_write(argv[1]);
        if (child == 0)
            _exit(rc == 0 ? 0 : 1);
        int st = 0;
        for (int i = 0; i < 500 && child > 0 && waitpid(child, &st, WNOHANG) == 0; i++)
            usleep(10000);
        if (child > 0 && waitpid(child, &st, WNOHANG) == 0) {
            kill(child, SIGKILL);
            printf("exit_in_write: the child still ran after 5 s\n");
            return 1;
        }
        printf("exit_in_write: the child ended (status %d), the parent's write returned %d\n",
               WIFEXITED(st) ? WEXITSTATUS(st) : -1, rc);
        return 0;
    }
    exit_now = 1;
    if (strcmp(mode, "fd") == 0)
        crawl_heap_profile_write_fd(1, CRAWL_HEAP_TEXT);
    else
        crawl_heap_profile_write(argv[1]);
    puts("exit_in_write: the write returned");
    return 0;
}
