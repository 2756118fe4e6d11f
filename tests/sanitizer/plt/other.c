/* A library laid out unlike lib.c (other imports, its data where lib.c's
 * GOT is) but no larger: loaded where a hooked, then unloaded copy of
 * lib.c was, its memory must not change when the hooks are removed. */
#include <stdlib.h>

long plt_other_data[40] = {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
                           7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7};

long plt_other_sum(void)
{
    long s = (long)(size_t)&getenv;
    for (int i = 0; i < 40; i++)
        s += plt_other_data[i];
    return s;
}
