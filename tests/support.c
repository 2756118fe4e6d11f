#define _GNU_SOURCE
#include "support.h"

#include <dlfcn.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int label_describe(const crawl_frame *f, char *buf, size_t len)
{
    return snprintf(buf, len, "%s", ((const label_frame *)f)->label);
}

static const void *label_method(const crawl_frame *f)
{
    return ((const label_frame *)f)->label;
}

const crawl_frame_type t_label_type = {
    .name = "label",
    .flags = CRAWL_FRAME_FUNCTION,
    .method = label_method,
    .describe = label_describe,
};

const crawl_frame_type t_plain_type = {.name = "plain"};

crawl_action t_record(const crawl_cf *cf, void *ctx)
{
    trace *t = ctx;
    if (t->n >= sizeof t->r / sizeof t->r[0])
        return CRAWL_ABORT;
    rec *r = &t->r[t->n++];
    memset(r, 0, sizeof *r);
    r->kind = crawl_cf_kind(cf);
    r->flags = crawl_cf_flags(cf);
    r->depth = crawl_cf_depth(cf);
    r->ip = crawl_cf_ip(cf);
    r->sp = crawl_cf_sp(cf);
    r->frame = crawl_cf_frame(cf);
    r->type = r->frame ? r->frame->type : NULL;
    r->method = crawl_cf_method(cf);
    r->has_regs = crawl_cf_regs(cf) != NULL;
    /* Frames live only as long as the walk: name them now */
    if (r->kind == CRAWL_CF_VM || r->kind == CRAWL_CF_JIT)
        crawl_cf_describe(cf, r->name, sizeof r->name);
    else if (r->kind == CRAWL_CF_FRAME && r->frame->type == &t_label_type)
        snprintf(r->name, sizeof r->name, "%s", ((label_frame *)r->frame)->label);
    else if (r->kind == CRAWL_CF_FRAME)
        snprintf(r->name, sizeof r->name, "[%s]", r->frame->type->name);
    if (t->limit && t->n >= t->limit)
        return CRAWL_ABORT;
    return CRAWL_CONTINUE;
}

void t_name(trace *t)
{
    for (unsigned i = 0; i < t->n; i++) {
        rec *r = &t->r[i];
        if (r->kind == CRAWL_CF_NATIVE) {
            uintptr_t pc = (r->flags & CRAWL_CF_EXACT_IP) ? r->ip : r->ip - 1;
            char buf[1024];
            crawl_symbol s;
            if (crawl_symbolize(pc, &s, buf, sizeof buf) == 0 && s.function)
                snprintf(r->name, sizeof r->name, "%s", s.function);
            else
                snprintf(r->name, sizeof r->name, "?");
            Dl_info di;
            if (dladdr((void *)pc, &di) && di.dli_fname)
                snprintf(r->module, sizeof r->module, "%s", di.dli_fname);
        }
    }
}

int t_find(const trace *t, const char *name, unsigned from)
{
    for (unsigned i = from; i < t->n; i++)
        if (strcmp(t->r[i].name, name) == 0)
            return (int)i;
    return -1;
}

void t_dump(const trace *t, const char *title)
{
    static const char *kinds[] = {"native", "Frame", "vm", "jit"};
    fprintf(stderr, "-- %s: %u frames, status %d\n", title, t->n, t->st);
    for (unsigned i = 0; i < t->n; i++)
        fprintf(stderr, "  #%u %-6s ip=%#lx sp=%#lx flags=%x %s %s\n", t->r[i].depth,
                kinds[t->r[i].kind], (unsigned long)t->r[i].ip, (unsigned long)t->r[i].sp,
                t->r[i].flags, t->r[i].name, t->r[i].module);
}

void t_check_order(const trace *t)
{
    uintptr_t last_native_sp = 0;
    for (unsigned i = 0; i < t->n; i++) {
        const rec *r = &t->r[i];
        assert_int_equal(r->depth, i);
        if (r->kind == CRAWL_CF_NATIVE || r->kind == CRAWL_CF_JIT) {
            if (last_native_sp && r->sp <= last_native_sp) {
                t_dump(t, "native sp not increasing");
                fail();
            }
            last_native_sp = r->sp;
        } else if (last_native_sp && r->sp < last_native_sp) {
            /* a Frame below an already reported native frame's sp: it lies in a
             * newer frame, so it should have come before that frame */
            t_dump(t, "Frame reported after a newer native frame");
            fail();
        }
    }
}

int t_run_child(void (*fn)(void), char *buf, size_t len)
{
    int p[2];
    if (pipe(p) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], STDERR_FILENO);
        close(p[0]);
        fn();
        _exit(0);
    }
    close(p[1]);
    size_t used = 0;
    ssize_t n;
    while (used + 1 < len && (n = read(p[0], buf + used, len - 1 - used)) > 0)
        used += (size_t)n;
    buf[used] = '\0';
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}

void t_depot_text(uint32_t id, char *buf, size_t len)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    crawl_depot_print(id, p[1]);
    close(p[1]);
    ssize_t n = read(p[0], buf, len - 1);
    close(p[0]);
    buf[n > 0 ? n : 0] = '\0';
}

void t_fork_children(int n, int (*ok)(void), int *hung, int *failed)
{
    *hung = *failed = 0;
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            ++*failed;
            continue;
        }
        if (pid == 0) {
            alarm(5);
            _exit(ok() ? 0 : 3);
        }
        int status;
        waitpid(pid, &status, 0);
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
            ++*hung;
        else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            ++*failed;
    }
}

void t_expect_lines(const char *text, const char *const *patterns)
{
    const char *at = text;
    for (int i = 0; patterns[i]; i++) {
        regex_t re;
        regmatch_t m;
        if (regcomp(&re, patterns[i], REG_EXTENDED | REG_NEWLINE) != 0)
            fail_msg("bad regex %s", patterns[i]);
        int rc = regexec(&re, at, 1, &m, 0);
        regfree(&re);
        if (rc != 0)
            fail_msg("/%s/ not found (in order) in:\n%s", patterns[i], text);
        at += m.rm_eo;
    }
}
