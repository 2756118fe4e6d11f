/* crawlvm reader: the node tree. */
#ifndef CRAWLVM_READ_H
#define CRAWLVM_READ_H

#include <stdint.h>

typedef enum { N_INT, N_STR, N_SYM, N_LIST, N_TRUE, N_FALSE, N_NIL } nkind;

struct node {
    nkind kind;
    int line, col;
    intptr_t ival;                      /* N_INT value; N_STR length */
    char *text;                         /* N_SYM name, N_STR bytes */
    struct node **items;                /* N_LIST */
    int nitems;
};

#endif
