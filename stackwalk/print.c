/* Printable frames in the AddressSanitizer shape, and the trace printer. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "stackwalk/internal.h"

int sw_describe_pc(uintptr_t pc, int exact, char *buf, size_t len)
{
    char sbuf[1024];
    crawl_symbol s;
    uintptr_t lookup = exact ? pc : pc - 1;  /* a return address: the call is before it */
    int rc = crawl_symbolize(lookup, &s, sbuf, sizeof sbuf);
    if (rc == -ENOENT || (rc == 0 && !s.function && !s.module))
        return snprintf(buf, len, "<unknown>");
    const char *fn = s.function ? s.function : "<unknown>";
    if (s.file)
        return snprintf(buf, len, "%s %s:%d", fn, s.file, s.line);
    if (s.module) /* the offset of the address printed, not of the call instruction */
        return snprintf(buf, len, "%s (%s+0x%lx)", fn, s.module,
                        (unsigned long)(s.module_offset + (pc - lookup)));
    return snprintf(buf, len, "%s", fn);
}

static int describe_native(const crawl_cf *cf, char *buf, size_t len)
{
    return sw_describe_pc(crawl_cf_ip(cf), (crawl_cf_flags(cf) & CRAWL_CF_EXACT_IP) != 0, buf, len);
}

int crawl_cf_describe(const crawl_cf *cf, char *buf, size_t len)
{
    crawl_frame *f = crawl_cf_frame(cf);
    switch (crawl_cf_kind(cf)) {
    case CRAWL_CF_FRAME:
        if (f->type->describe)
            return f->type->describe(f, buf, len);
        return snprintf(buf, len, "[%s Frame %p]", crawl__type_name(f->type), (void *)f);
    case CRAWL_CF_VM:
        if (f->type->vm_describe)
            return f->type->vm_describe(f, crawl_cf_vm_frame(cf), buf, len);
        return snprintf(buf, len, "[VM method %p pc %#lx in %s Frame]", crawl_cf_method(cf),
                        (unsigned long)crawl_cf_ip(cf), crawl__type_name(f->type));
    case CRAWL_CF_JIT: {
        const char *name = crawl_cf_name(cf);
        return snprintf(buf, len, "%s (JIT code, method %p)", name ? name : "<jit>",
                        crawl_cf_method(cf));
    }
    case CRAWL_CF_NATIVE:
    default:
        return describe_native(cf, buf, len);
    }
}

int crawl_cf_format(const crawl_cf *cf, char *buf, size_t len)
{
    char text[768];
    crawl_cf_describe(cf, text, sizeof text);
    crawl_kind k = crawl_cf_kind(cf);
    if (k == CRAWL_CF_NATIVE || k == CRAWL_CF_JIT)
        return snprintf(buf, len, "    #%u 0x%lx in %s", crawl_cf_depth(cf),
                        (unsigned long)crawl_cf_ip(cf), text);
    return snprintf(buf, len, "    #%u in %s", crawl_cf_depth(cf), text);
}

static crawl_action print_one(const crawl_cf *cf, void *ctx)
{
    int fd = *(int *)ctx;
    char line[1024];
    int n = crawl_cf_format(cf, line, sizeof line - 1);
    if (n < 0)
        return CRAWL_CONTINUE;
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    crawl__write_all(fd, line, (size_t)n);
    return CRAWL_CONTINUE;
}

crawl_walk_status crawl_print_trace(int fd, unsigned flags)
{
    crawl_regs r;
    crawl_capture_regs(&r);
    crawl_walk_status st = sw_walk(&r, 0, 1, print_one, &fd, flags & ~CRAWL_WALK_SIGNAL_SAFE);
    CRAWL__NO_TAIL(st);
    return st;
}

crawl_walk_status crawl_print_trace_context(const ucontext_t *uc, int fd, unsigned flags)
{
    if (!uc)
        return CRAWL_WALK_FAILED;
    crawl_regs r;
    sw_regs_from_ucontext(&r, uc);
    return sw_walk(&r, 1, 0, print_one, &fd, flags & ~CRAWL_WALK_SIGNAL_SAFE);
}
