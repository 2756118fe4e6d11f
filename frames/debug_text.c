/* Text for debuggers: what the gdb extension (gdb/crawl.py) calls in a
 * live process to describe a Frame and the activations an interpreter
 * segment hosts. Not for programs: one static buffer. */
#include <stdio.h>

#include "frames/internal.h"

static char text[1024];

const char *crawl_debug_frame_text(const crawl_frame *f, unsigned index)
{
    if (!f || !f->type)
        return NULL;
    const crawl_frame_type *t = f->type;
    if (index == 0) {
        if (!t->describe || t->describe(f, text, sizeof text) < 0)
            snprintf(text, sizeof text, "%s", t->name ? t->name : "?");
        return text;
    }
    if (!t->vm_next)
        return NULL;
    crawl_vm_frame vf = {0};
    for (unsigned i = 0; i < index; i++)
        if (!t->vm_next(f, &vf))
            return NULL;
    if (!t->vm_describe || t->vm_describe(f, &vf, text, sizeof text) < 0)
        snprintf(text, sizeof text, "[%s activation %p]", t->name ? t->name : "?", vf.method);
    return text;
}
