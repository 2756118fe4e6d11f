/* The GDB JIT interface: a named code range appears in
 * __jit_debug_descriptor with an ELF symbol file naming it at its address,
 * and is gone after removal. With "--crash", the program runs real machine
 * code in a registered range that calls abort(): gdb_jit.sh checks that
 * gdb's bt names the range and unwinds through it. */
#include "../support.h"

#include <gelf.h>
#include <libelf.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct jit_code_entry {
    struct jit_code_entry *next_entry, *prev_entry;
    const char *symfile_addr;
    uint64_t symfile_size;
};
struct jit_descriptor {
    uint32_t version, action_flag;
    struct jit_code_entry *relevant_entry, *first_entry;
};
extern struct jit_descriptor __jit_debug_descriptor;

static const crawl_unwind_rule fp = {.kind = CRAWL_UNWIND_FRAME_POINTER};

/* push rbp; mov rbp, rsp; call *rdi; pop rbp; ret (then padding) */
static const unsigned char code[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3};

static void *jit_page(void)
{
    unsigned char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    memset(p, 0xcc, 4096);
    memcpy(p, code, sizeof code);
    return p;
}

/* The name and address of the symbol file's function symbol (a
 * relocatable file: its section's address plus its value). */
static void read_symbol(const struct jit_code_entry *e, char *name, size_t len, uint64_t *value)
{
    elf_version(EV_CURRENT);
    Elf *elf = elf_memory((char *)e->symfile_addr, e->symfile_size);
    assert_non_null(elf);
    Elf_Scn *scn = NULL;
    name[0] = '\0';
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        gelf_getshdr(scn, &sh);
        if (sh.sh_type != SHT_SYMTAB)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        GElf_Sym sym;
        assert_non_null(gelf_getsym(d, 1, &sym));
        snprintf(name, len, "%s", elf_strptr(elf, sh.sh_link, sym.st_name));
        GElf_Shdr text;
        gelf_getshdr(elf_getscn(elf, sym.st_shndx), &text);
        *value = text.sh_addr + sym.st_value;
    }
    elf_end(elf);
}

static void test_descriptor(void **state)
{
    (void)state;
    unsigned char *p = jit_page();
    uintptr_t a = (uintptr_t)p;
    assert_int_equal(crawl_code_range_add(a, a + 64, NULL, &fp, "jit_hello"), 0);
    assert_int_equal(crawl_code_range_add(a + 64, a + 128, NULL, &fp, "jit_world"), 0);
    assert_int_equal(__jit_debug_descriptor.version, 1);
    const struct jit_code_entry *e = __jit_debug_descriptor.first_entry;
    assert_non_null(e);
    assert_non_null(e->next_entry);
    assert_null(e->next_entry->next_entry);
    assert_memory_equal(e->symfile_addr, ELFMAG, SELFMAG);
    char name[64];
    uint64_t value = 0;
    read_symbol(e, name, sizeof name, &value);      /* the newest first */
    assert_string_equal(name, "jit_world");
    assert_int_equal(value, a + 64);
    read_symbol(e->next_entry, name, sizeof name, &value);
    assert_string_equal(name, "jit_hello");
    assert_int_equal(value, a);

    assert_int_equal(crawl_code_range_remove(a + 64), 0);
    e = __jit_debug_descriptor.first_entry;
    assert_non_null(e);
    assert_null(e->next_entry);
    read_symbol(e, name, sizeof name, &value);
    assert_string_equal(name, "jit_hello");
    assert_int_equal(crawl_code_range_remove(a), 0);
    assert_null(__jit_debug_descriptor.first_entry);

    /* off: not announced */
    assert_int_equal(crawl_gdb_jit(0), 1);
    assert_int_equal(crawl_code_range_add(a, a + 64, NULL, &fp, "quiet"), 0);
    assert_null(__jit_debug_descriptor.first_entry);
    assert_int_equal(crawl_code_range_remove(a), 0);
    assert_int_equal(crawl_gdb_jit(1), 0);
    munmap(p, 4096);
}

NOINLINE static void target(void) { abort(); }

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--crash") == 0) {
        unsigned char *p = jit_page();
        crawl_code_range_add((uintptr_t)p, (uintptr_t)p + 64, NULL, &fp, "jit_hello");
        ((void (*)(void (*)(void)))p)(target);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptor),
    };
    return cmocka_run_group_tests_name("gdb_jit", tests, NULL, NULL);
}
