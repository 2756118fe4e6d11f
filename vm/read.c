/* The reader: source text to a tree of nodes, with line:column for each. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm/read.h"
#include "vm/value.h"
#include "vm/vm.h"

/* Deeper nesting is refused: the reader, the compiler and vm_free_nodes all
 * recurse on it, on stacks an embedder may have made small. */
#define MAX_NESTING 10000

typedef struct reader {
    const char *src, *p, *file;
    int line, col, depth;
    char *err;
    size_t errlen;
    int failed;
} reader;

static void fail(reader *r, int line, int col, const char *fmt, const char *arg)
{
    if (r->failed)
        return;
    r->failed = 1;
    int n = snprintf(r->err, r->errlen, "%s:%d:%d: syntax error: ", r->file, line, col);
    if (n >= 0 && (size_t)n < r->errlen)
        snprintf(r->err + n, r->errlen - (size_t)n, fmt, arg);
}

static node *new_node(nkind kind, int line, int col)
{
    node *n = calloc(1, sizeof *n);
    if (!n) {
        fprintf(stderr, "crawlvm: out of memory\n");
        exit(70);
    }
    n->kind = kind;
    n->line = line;
    n->col = col;
    return n;
}

/* (the items array doubles, from 8: its capacity is implied by nitems) */
static void push_item(node *list, node *item)
{
    size_t n = (size_t)list->nitems;
    if (n == 0 || (n >= 8 && (n & (n - 1)) == 0)) {
        node **items = realloc(list->items, (n ? 2 * n : 8) * sizeof *items);
        if (!items) {
            fprintf(stderr, "crawlvm: out of memory\n");
            exit(70);
        }
        list->items = items;
    }
    list->items[list->nitems++] = item;
}

static void advance(reader *r)
{
    if (*r->p == '\n') {
        r->line++;
        r->col = 1;
    } else {
        r->col++;
    }
    r->p++;
}

static void skip_space(reader *r)
{
    for (;;) {
        while (*r->p && isspace((unsigned char)*r->p))
            advance(r);
        if (*r->p != ';')
            return;
        while (*r->p && *r->p != '\n')
            advance(r);
    }
}

static int is_delim(char c)
{
    return !c || isspace((unsigned char)c) || c == '(' || c == ')' || c == '"' || c == ';';
}

static node *read_form(reader *r);

static node *read_string(reader *r)
{
    int line = r->line, col = r->col;
    advance(r);                          /* the opening quote */
    size_t cap = 16, len = 0;
    char *s = malloc(cap);
    while (s && *r->p && *r->p != '"') {
        char c = *r->p;
        if (c == '\\') {
            if (!r->p[1])
                break;                   /* a backslash, then the end: unterminated */
            advance(r);
            switch (*r->p) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case '\\': c = '\\'; break;
            case '"': c = '"'; break;
            case '0': c = '\0'; break;
            default:
                fail(r, r->line, r->col, "unknown escape '\\%s' in string", (char[]){*r->p, 0});
                free(s);
                return NULL;
            }
        }
        if (len + 2 > cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) {
                free(s);
                s = NULL;
                break;
            }
            s = t;
        }
        s[len++] = c;
        advance(r);
    }
    if (!s) {
        fprintf(stderr, "crawlvm: out of memory\n");
        exit(70);
    }
    if (*r->p != '"') {
        fail(r, line, col, "unterminated string%s", "");
        free(s);
        return NULL;
    }
    advance(r);
    s[len] = '\0';
    node *n = new_node(N_STR, line, col);
    n->text = s;
    n->ival = (intptr_t)len;
    return n;
}

static node *read_atom(reader *r)
{
    int line = r->line, col = r->col;
    const char *start = r->p;
    while (!is_delim(*r->p))
        advance(r);
    size_t len = (size_t)(r->p - start);
    char *text = strndup(start, len);
    if (!text) {
        fprintf(stderr, "crawlvm: out of memory\n");
        exit(70);
    }
    const char *digits = text + (text[0] == '-' || text[0] == '+');
    if (*digits && strspn(digits, "0123456789") == strlen(digits)) {
        errno = 0;
        long long v = strtoll(text, NULL, 10);
        if (errno == ERANGE || v > FIX_MAX || v < FIX_MIN) {
            fail(r, line, col, "integer %s does not fit in 62 bits", text);
            free(text);
            return NULL;
        }
        node *n = new_node(N_INT, line, col);
        n->ival = (intptr_t)v;
        free(text);
        return n;
    }
    node *n;
    if (strcmp(text, "#t") == 0)
        n = new_node(N_TRUE, line, col);
    else if (strcmp(text, "#f") == 0)
        n = new_node(N_FALSE, line, col);
    else if (strcmp(text, "nil") == 0)
        n = new_node(N_NIL, line, col);
    else if (text[0] == '#' || text[0] == '\'' || text[0] == '`' || text[0] == ',') {
        fail(r, line, col, "unsupported syntax '%s' (no quote, quasiquote or # forms)", text);
        free(text);
        return NULL;
    } else {
        n = new_node(N_SYM, line, col);
        n->text = text;
        return n;
    }
    free(text);
    return n;
}

static node *read_list(reader *r)
{
    int line = r->line, col = r->col;
    if (r->depth >= MAX_NESTING) {
        fail(r, line, col, "nesting deeper than %s levels", "10000");
        return NULL;
    }
    if (vm_stack_low()) {
        fail(r, line, col, "expression nested too deeply for the C stack%s", "");
        return NULL;
    }
    advance(r);                          /* ( */
    node *list = new_node(N_LIST, line, col);
    for (;;) {
        skip_space(r);
        if (!*r->p) {
            fail(r, line, col, "unclosed '(' (end of file reached)%s", "");
            vm_free_nodes(list);
            return NULL;
        }
        if (*r->p == ')') {
            advance(r);
            return list;
        }
        r->depth++;
        node *item = read_form(r);
        r->depth--;
        if (!item) {
            vm_free_nodes(list);
            return NULL;
        }
        push_item(list, item);
    }
}

static node *read_form(reader *r)
{
    skip_space(r);
    switch (*r->p) {
    case '(':
        return read_list(r);
    case ')':
        fail(r, r->line, r->col, "unexpected ')'%s", "");
        return NULL;
    case '"':
        return read_string(r);
    default:
        return read_atom(r);
    }
}

node *vm_read(const char *src, const char *file, char *err, size_t errlen)
{
    reader r = {src, src, file, 1, 1, 0, err, errlen, 0};
    node *all = new_node(N_LIST, 1, 1);
    for (;;) {
        skip_space(&r);
        if (!*r.p)
            return all;
        node *form = read_form(&r);
        if (!form) {
            vm_free_nodes(all);
            return NULL;
        }
        push_item(all, form);
    }
}

void vm_free_nodes(node *n)
{
    if (!n)
        return;
    for (int i = 0; i < n->nitems; i++)
        vm_free_nodes(n->items[i]);
    free(n->items);
    free(n->text);
    free(n);
}
