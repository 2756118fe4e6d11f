/* An embedder in miniature: a "VM" function calls libc's qsort (built
 * without frame pointers) through a transition Frame; the comparator comes
 * back into the "VM" through an entry Frame and prints the mixed stack in
 * both walk modes. Run: build/dev/examples/qsort_trace */
#include <crawl/crawl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* A Frame of our own: one "script function" activation. */
typedef struct script_frame {
    crawl_frame frame;
    const char *function, *file;
    int line;
} script_frame;

static int script_describe(const crawl_frame *f, char *buf, size_t len)
{
    const script_frame *s = (const script_frame *)f;
    return snprintf(buf, len, "%s %s:%d", s->function, s->file, s->line);
}

static const void *script_method(const crawl_frame *f)
{
    return ((const script_frame *)f)->function;
}

static const crawl_frame_type script_type = {
    .name = "script",
    .flags = CRAWL_FRAME_FUNCTION,
    .method = script_method,
    .describe = script_describe,
};

static int printed;

static int compare(const void *a, const void *b)
{
    crawl_entry entry = {.target = "compare"};
    crawl_frame_push(&entry.frame, &crawl_entry_type);
    script_frame sf = {.function = "by_value", .file = "sort.script", .line = 7};
    crawl_frame_push(&sf.frame, &script_type);
    if (!printed) {
        printed = 1;
        printf("precise walk (DWARF CFI through libc's qsort):\n");
        fflush(stdout);
        crawl_print_trace(STDOUT_FILENO, 0);
        printf("\nfast walk (frame pointers; resumes at the transition Frame):\n");
        fflush(stdout);
        crawl_print_trace(STDOUT_FILENO, CRAWL_WALK_FAST);
        printf("\nscript frames only:\n");
        fflush(stdout);
        crawl_print_trace(STDOUT_FILENO, CRAWL_WALK_SKIP_NATIVE | CRAWL_WALK_FUNCTIONS_ONLY);
    }
    crawl_frame_pop(&sf.frame);
    crawl_frame_pop(&entry.frame);
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

__attribute__((noinline)) static void sort_numbers(int *v, size_t n)
{
    script_frame sf = {.function = "main", .file = "sort.script", .line = 3};
    crawl_frame_push(&sf.frame, &script_type);
    crawl_transition t;
    crawl_transition_push(&t, NULL);
    qsort(v, n, sizeof v[0], compare);
    crawl_frame_pop(&t.frame);
    crawl_frame_pop(&sf.frame);
}

int main(void)
{
    int v[] = {5, 3, 9, 1, 7};
    sort_numbers(v, sizeof v / sizeof v[0]);
    printf("\nsorted:");
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        printf(" %d", v[i]);
    printf("\n");
    return 0;
}
