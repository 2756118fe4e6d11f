/* The built-in Frame types: transition (VM -> native) and entry (native -> VM). */
#include <stdio.h>

#include "frames/internal.h"

_Static_assert(offsetof(crawl_transition, regs) == 16, "capture_x86_64.S assumes regs at 16");
_Static_assert(offsetof(crawl_regs, ip) == 0 && offsetof(crawl_regs, sp) == 8 &&
                   offsetof(crawl_regs, fp) == 16 && offsetof(crawl_regs, bx) == 24 &&
                   offsetof(crawl_regs, r12) == 32 && offsetof(crawl_regs, r15) == 56,
               "capture_x86_64.S assumes this crawl_regs layout");

static int transition_describe(const crawl_frame *f, char *buf, size_t len)
{
    const crawl_transition *t = (const crawl_transition *)f;
    return snprintf(buf, len, "[transition Frame: VM -> native, saved ip %p sp %p]",
                    (void *)t->regs.ip, (void *)t->regs.sp);
}

const crawl_frame_type crawl_transition_type = {
    .name = "transition",
    .flags = CRAWL_FRAME_SAVES_REGS,
    .describe = transition_describe,
    .kind = CRAWL_FRAME_KIND_TRANSITION,
    .regs_offset = offsetof(crawl_transition, regs),
};

static const void *entry_method(const crawl_frame *f)
{
    return ((const crawl_entry *)f)->target;
}

static int entry_describe(const crawl_frame *f, char *buf, size_t len)
{
    return snprintf(buf, len, "[entry Frame: native -> VM, target %p]",
                    ((const crawl_entry *)f)->target);
}

const crawl_frame_type crawl_entry_type = {
    .name = "entry",
    .method = entry_method,
    .describe = entry_describe,
    .kind = CRAWL_FRAME_KIND_ENTRY,
};

const char *crawl__type_name(const crawl_frame_type *type)
{
    if (!type)
        return "(null type)";
    return type->name ? type->name : "(unnamed)";
}
