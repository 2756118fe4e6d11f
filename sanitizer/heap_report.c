/* Checked-heap error reports in the AddressSanitizer shape, printed from a
 * description (heap_error.h) that heap.c filled from its metadata: the
 * header and access lines, the stack, where the address lies relative to
 * its chunk, the chunk's allocation and free stacks, the summary line and
 * the shadow bytes around the address. */
#include <unistd.h>

#include "sanitizer/heap_error.h"

static void print_location(san_report *r, const san_heap_error *e)
{
    unsigned long a = (unsigned long)e->addr;
    if (!e->has_chunk) {
        san_printf(r, "0x%lx is located in the checked heap, in no chunk it can identify\n", a);
        return;
    }
    const san_chunk_desc *c = &e->chunk;
    unsigned long user = (unsigned long)c->user, end = (unsigned long)(c->user + c->size);
    if (a < user)
        san_printf(r, "0x%lx is located %lu bytes before %zu-byte region [0x%lx,0x%lx)\n", a,
                   user - a, c->size, user, end);
    else if (a >= end)
        san_printf(r, "0x%lx is located %lu bytes after %zu-byte region [0x%lx,0x%lx)\n", a,
                   a - end, c->size, user, end);
    else
        san_printf(r, "0x%lx is located %lu bytes inside of %zu-byte region [0x%lx,0x%lx)\n", a,
                   a - user, c->size, user, end);
}

static void print_chunk_stacks(san_report *r, const san_chunk_desc *c)
{
    if (c->freed) {
        san_printf(r, "freed by thread T%u here:\n", c->free_tid);
        san_print_depot_trace(r, c->free_stack);
        san_printf(r, "\n");
        san_printf(r, "previously allocated by thread T%u here:\n", c->alloc_tid);
    } else {
        san_printf(r, "allocated by thread T%u here:\n", c->alloc_tid);
    }
    san_print_depot_trace(r, c->alloc_stack);
    san_printf(r, "\n");
}

/* "SUMMARY: AddressSanitizer: KIND file:line in function", from the first
 * frame above the entry point. */
static void print_summary(san_report *r, const char *kind, uintptr_t pc)
{
    char buf[1024];
    crawl_symbol s;
    if (crawl_symbolize(pc - 1, &s, buf, sizeof buf) == 0 && s.file)
        san_printf(r, "SUMMARY: AddressSanitizer: %s %s:%d in %s\n", kind, s.file, s.line,
                   s.function ? s.function : "?");
    else if (crawl_symbolize(pc - 1, &s, buf, sizeof buf) == 0 && s.module)
        san_printf(r, "SUMMARY: AddressSanitizer: %s (%s+0x%lx) in %s\n", kind, s.module,
                   (unsigned long)s.module_offset + 1, s.function ? s.function : "?");
    else
        san_printf(r, "SUMMARY: AddressSanitizer: %s (0x%lx)\n", kind, (unsigned long)pc);
}

static void print_shadow(san_report *r, const san_shadow_desc *sh)
{
    san_printf(r, "Shadow bytes around the buggy address:\n");
    for (unsigned k = 0; k < sh->nrows; k++) {
        uintptr_t line = sh->row[k].at;
        san_printf(r, "%s0x%012lx:", sh->row[k].here ? "=>" : "  ", (unsigned long)line);
        for (unsigned i = 0; i < sh->row[k].n; i++) {
            uintptr_t b = line + i;
            char sep = b == sh->bad ? '[' : b == sh->bad + 1 && i > 0 ? ']' : ' ';
            san_printf(r, "%c%02x", sep, sh->row[k].b[i]);
        }
        san_printf(r, "%s\n", line + 15 == sh->bad ? "]" : "");
    }
    san_printf(r, "Shadow byte legend (one shadow byte represents 8 application bytes):\n"
                  "  Addressable:           00\n"
                  "  Partially addressable: 01 02 03 04 05 06 07 \n"
                  "  Heap left redzone:       fa\n"
                  "  Heap right redzone:      fb\n"
                  "  Freed heap region:       fd\n"
                  "  Poisoned by user:        f7\n");
}

void san_report_heap_error(const crawl_regs *entry, const san_heap_error *e)
{
    crawl_regs user;                     /* the frame that made the access or the free */
    san_first_frame(entry, &user);
    san_report *r = san_report_begin();
    int pid = (int)getpid();
    unsigned long a = (unsigned long)e->addr;
    switch (e->kind) {
    case SAN_HEAP_BAD_ACCESS: {
        /* the access's start, as AddressSanitizer's headline; the location
         * line below names its first bad byte */
        unsigned long start = e->access ? (unsigned long)e->access : a;
        san_printf(r, "==%d==ERROR: AddressSanitizer: %s on address 0x%lx at pc 0x%lx bp 0x%lx sp 0x%lx\n",
                   pid, e->bug, start, (unsigned long)user.ip, (unsigned long)user.fp,
                   (unsigned long)user.sp);
        san_printf(r, "%s of size %zu at 0x%lx thread T%u\n", e->is_write ? "WRITE" : "READ",
                   e->access_size, start, san_thread_id());
        break;
    }
    case SAN_HEAP_DOUBLE_FREE:
        san_printf(r, "==%d==ERROR: AddressSanitizer: attempting double-free on 0x%lx in thread T%u:\n",
                   pid, a, san_thread_id());
        break;
    case SAN_HEAP_BAD_FREE:
        san_printf(r, "==%d==ERROR: AddressSanitizer: attempting free on address which was not malloc()-ed: 0x%lx in thread T%u\n",
                   pid, a, san_thread_id());
        break;
    }
    san_print_stack_at(r, entry);
    san_printf(r, "\n");
    if (e->in_heap) {
        print_location(r, e);
        if (e->has_chunk)
            print_chunk_stacks(r, &e->chunk);
    }
    print_summary(r, e->bug, user.ip);
    if (e->has_shadow)
        print_shadow(r, &e->shadow);
    san_report_end(r);
}
