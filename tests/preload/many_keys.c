/* A program with more than 32 pthread keys, under the preload's leak check
 * (found by an outside test). crawl made its thread-exit key at the first
 * attach: key 40 here, whose pthread_setspecific ran inside the program's
 * own (in the hook of glibc's calloc of its block for keys 32 to 63) and
 * was then overwritten by it. Each thread's exit went unseen; the next
 * thread on the same TLS linked its record in again, a cycle, and the
 * check at exit looped for ever ("threads"). The block was crawl's own
 * unrecorded allocation, so the value the program kept under key 39 was
 * reported as a leak ("value"). "lost": each thread wipes every key's
 * value, crawl's too, so its exit goes unseen whatever the key's number;
 * the next thread's attach must still leave the registry a list.
 * A 31-byte leak is planted, to show the check ran.
 * usage: many_keys threads|value|lost */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_key_t last;
static int wipe;

static void *worker(void *arg)
{
    (void)arg;
    pthread_setspecific(last, (void *)1);    /* glibc's block for keys 32..63 */
    void *p = malloc(64);                    /* (recorded: this thread attaches) */
    pthread_setspecific(last, p);
    pthread_setspecific(last, NULL);
    free(p);
    if (wipe)
        for (pthread_key_t k = 0; k < 128; k++)
            pthread_setspecific(k, NULL);    /* (EINVAL for keys never made) */
    return NULL;
}

static void *volatile planted;

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "threads";
    for (int i = 0; i < 40; i++)
        if (pthread_key_create(&last, NULL) != 0)
            return 2;
    planted = malloc(31);
    planted = NULL;                          /* the leak */
    if (strcmp(mode, "value") == 0) {
        void *v = malloc(107);               /* kept under the last key: no leak */
        pthread_setspecific(last, v);
        v = NULL;
    } else {
        wipe = strcmp(mode, "lost") == 0;
        for (int i = 0; i < 50; i++) {
            pthread_t t;
            if (pthread_create(&t, NULL, worker, NULL) != 0)
                return 2;
            pthread_join(t, NULL);
        }
    }
    puts("many_keys: done");
    fflush(stdout);                          /* (before the report at exit) */
    return 0;
}
