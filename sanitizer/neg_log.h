/* -ln(u) for u in (0, 1], without libm: the heap sampler draws one per
 * sample, and a sample runs with its caches cold (the program's own work in
 * between has pushed everything out), where libm's log, its code and its
 * 4 KiB of tables, cost about a microsecond (perf: a fifth of a sample's
 * own time at 512 KiB in bench/heap_profile). Here: u = m 2^e with m in
 * [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s) with s = (m - 1) / (m + 1),
 * |s| < 0.172, by its series to s^11: relative error under 1e-10, a few
 * instructions and no data. Header-only, so that a test can compare it
 * with log. Async-signal-safe; no allocation. */
#ifndef CRAWL_SANITIZER_NEG_LOG_H
#define CRAWL_SANITIZER_NEG_LOG_H

#include <stdint.h>
#include <string.h>

static inline double crawl__neg_log(double u)
{
    uint64_t b;
    memcpy(&b, &u, sizeof b);
    int e = (int)((b >> 52) & 0x7ff) - 1023;          /* u is normal: u >= 2^-54 where it is drawn */
    b = (b & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;
    double m;
    memcpy(&m, &b, sizeof m);                         /* [1, 2) */
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e++;
    }
    double s = (m - 1) / (m + 1), s2 = s * s;
    double ln_m = 2 * s * (1 + s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7 + s2 * (1.0 / 9 + s2 * (1.0 / 11))))));
    return -((double)e * 0.6931471805599453 + ln_m);
}

#endif
