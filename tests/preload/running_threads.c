/* Three detached threads still allocating and freeing lists when main
 * returns, under leak_check=1: the check at exit read chunks in place that
 * another thread freed meanwhile (a guarded-pool slot made inaccessible,
 * or the tail of a heap glibc shrank), and the process
 * died of SIGSEGV (3 runs in 10 of an outside test; 4 in 20 here, with the
 * guarded pool at its default rate, 0 without it). ctest runs it ten
 * times; each must print "bye" and exit normally. (The lists change under
 * the check, which does not stop the threads: its report is not checked
 * here; README "Limits".) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct node {
    struct node *next;
    char data[48];
};

static void *churn(void *arg)
{
    (void)arg;
    struct node *head = NULL;
    for (unsigned c = 1;; c++) {
        struct node *x = malloc(sizeof *x);
        if (!x)
            continue;
        x->next = head;
        head = x;
        if (c % 1000 == 0)
            while (head) {
                struct node *next = head->next;
                free(head);
                head = next;
            }
    }
    return NULL;
}

int main(void)
{
    for (int i = 0; i < 3; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, churn, NULL) != 0)
            return 2;
        pthread_detach(t);
    }
    usleep(200000);
    puts("bye");
    return 0;
}
