/* crawlvm reader: the node tree. */
#ifndef CRAWLVM_READ_H
#define CRAWLVM_READ_H

#include <stddef.h>
#include <stdint.h>

typedef enum { N_INT, N_STR, N_SYM, N_LIST, N_TRUE, N_FALSE, N_NIL } nkind;

typedef struct node node;
struct node {
    nkind kind;
    int line, col;
    intptr_t ival;                      /* N_INT value; N_STR length */
    char *text;                         /* N_SYM name, N_STR bytes */
    struct node **items;                /* N_LIST */
    int nitems;
};

/* The forms of src, as a list of nodes; NULL with a message in err. */
node *vm_read(const char *src, const char *file, char *err, size_t errlen);
void vm_free_nodes(node *n);

#endif
