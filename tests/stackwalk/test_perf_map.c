/* perf's JIT map: code ranges as "START SIZE name" lines in
 * /tmp/perf-PID.map, those registered before it was turned on too, a fork
 * child in its own file; on through the perf_map option as well. The test
 * removes the files it made. */
#include "../support.h"

#include <crawl/sanitizer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static char *map_of(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *buf = calloc(1, 65536);
    size_t n = fread(buf, 1, 65535, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void drop_map(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)pid);
    unlink(path);
}

static const crawl_unwind_rule fp = {.kind = CRAWL_UNWIND_FRAME_POINTER};

static void test_perf_map(void **state)
{
    (void)state;
    drop_map(getpid());
    assert_int_equal(crawl_code_range_add(0x710000, 0x710400, NULL, &fp, "before_on"), 0);
    assert_int_equal(crawl_perf_map(1), 0);
    assert_int_equal(crawl_code_range_add(0x720000, 0x720080, NULL, &fp, "jit_add_one"), 0);
    assert_int_equal(crawl_code_range_remove(0x720000), 0);
    assert_int_equal(crawl_code_range_add(0x720000, 0x720040, NULL, &fp, "jit_replacement"), 0);
    char *map = map_of(getpid());
    assert_non_null(map);
    if (strcmp(map, "710000 400 before_on\n720000 80 jit_add_one\n720000 40 jit_replacement\n") != 0)
        fail_msg("unexpected map:\n%s", map);
    free(map);

    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        int rc = crawl_code_range_add(0x730000, 0x730010, NULL, &fp, "in_child");
        _exit(rc == 0 ? 0 : 1);
    }
    int status;
    waitpid(child, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    map = map_of(child);
    assert_non_null(map);
    assert_string_equal(map, "730000 10 in_child\n");
    free(map);
    drop_map(child);

    assert_int_equal(crawl_perf_map(0), 0);
    assert_int_equal(crawl_code_range_add(0x740000, 0x740010, NULL, &fp, "after_off"), 0);
    map = map_of(getpid());
    assert_null(strstr(map, "after_off"));
    free(map);

    /* the option turns it on */
    assert_int_equal(crawl_sanitizer_set_options("perf_map=1"), 0);
    assert_int_equal(crawl_code_range_add(0x750000, 0x750010, NULL, &fp, "by_option"), 0);
    map = map_of(getpid());
    assert_non_null(strstr(map, "750000 10 by_option\n"));
    free(map);
    assert_int_equal(crawl_sanitizer_set_options("perf_map=0"), 0);
    drop_map(getpid());
    for (uintptr_t a = 0x710000; a <= 0x750000; a += 0x10000)
        crawl_code_range_remove(a);
}

/* --spin: real machine code in a registered range, announced in the perf
 * map, spinning about half a second (a counted loop: mov rcx, N; dec rcx;
 * jnz; ret), for perf.sh to record and name. Prints the pid; the map file
 * stays for perf report (perf.sh removes it). */
static int spin(void)
{
    static const unsigned char code[] = {
        0x48, 0xc7, 0xc1, 0x00, 0x00, 0x00, 0x30,   /* mov rcx, 0x30000000 */
        0x48, 0xff, 0xc9,                           /* 1: dec rcx */
        0x75, 0xfb,                                 /* jnz 1b */
        0xc3,                                       /* ret */
    };
    unsigned char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 2;
    memcpy(p, code, sizeof code);
    if (mprotect(p, 4096, PROT_READ | PROT_EXEC) != 0 || crawl_perf_map(1) != 0 ||
        crawl_code_range_add((uintptr_t)p, (uintptr_t)p + sizeof code, NULL, &fp,
                             "jit_spin_loop") != 0)
        return 3;
    printf("%d\n", (int)getpid());
    fflush(stdout);
    ((void (*)(void))p)();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--spin") == 0)
        return spin();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_perf_map),
    };
    return cmocka_run_group_tests_name("perf_map", tests, NULL, NULL);
}
