/* The GDB JIT interface: a code range registered with a name is announced
 * to a debugger through __jit_debug_register_code with an in-memory ELF
 * symbol file (written with libelf: a .text section at the range's address
 * and one function symbol covering it), and withdrawn when the range is
 * removed. gdb (and lldb) then name the range's frames and, for code with
 * a standard frame-pointer prologue, unwind through them.
 *
 * The two names are the interface's ABI, looked up by the debugger in
 * every loaded object: they are the only names libcrawl exports without
 * the crawl_ prefix. */
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "stackwalk/internal.h"

typedef enum { JIT_NOACTION = 0, JIT_REGISTER_FN, JIT_UNREGISTER_FN } jit_action;

struct jit_code_entry {
    struct jit_code_entry *next_entry, *prev_entry;
    const char *symfile_addr;
    uint64_t symfile_size;
};

struct jit_descriptor {
    uint32_t version;
    uint32_t action_flag;
    struct jit_code_entry *relevant_entry, *first_entry;
};

/* A debugger sets a breakpoint here: it must exist, once, not inlined. */
__attribute__((visibility("default"), noinline, used)) void __jit_debug_register_code(void)
{
    __asm__ volatile("" ::: "memory");
}
__attribute__((visibility("default"), used)) struct jit_descriptor __jit_debug_descriptor = {
    1, JIT_NOACTION, NULL, NULL};

typedef struct announced {
    struct jit_code_entry entry;
    uintptr_t start;
    struct announced *next;
} announced;
static announced *entries;              /* under jit_lock */
static pthread_mutex_t jit_lock = PTHREAD_MUTEX_INITIALIZER;

/* fork(): a child forked while another thread announced or withdrew a
 * range would inherit jit_lock held, and its first crawl_code_range_remove
 * would wait for ever (test_edges caught it: 1 child in 100). */
static void fork_prepare(void) { pthread_mutex_lock(&jit_lock); }
static void fork_release(void) { pthread_mutex_unlock(&jit_lock); }
__attribute__((constructor)) static void register_fork_handlers(void)
{
    pthread_atfork(fork_prepare, fork_release, fork_release);
}
static int gdb_jit_on = 1;

static void *zeros_for(size_t n) { return calloc(1, n ? n : 1); }

/* The ELF image for [start, end) named name, in memory from malloc (its
 * size in *len), or NULL. */
static char *symfile(uintptr_t start, uintptr_t end, const char *name, size_t *len)
{
    int fd = memfd_create("crawl-jit", MFD_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *image = NULL;
    elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_WRITE, NULL);
    Elf64_Ehdr *eh = e ? elf64_newehdr(e) : NULL;
    if (!eh)
        goto out;
    eh->e_ident[EI_DATA] = ELFDATA2LSB;
    eh->e_ident[EI_OSABI] = ELFOSABI_NONE;
    eh->e_machine = EM_X86_64;
    eh->e_type = ET_REL;
    eh->e_version = EV_CURRENT;

    static const char shstr[] = "\0.text\0.symtab\0.strtab\0.shstrtab";
    enum { N_TEXT = 1, N_SYMTAB = 7, N_STRTAB = 15, N_SHSTRTAB = 23 };
    size_t nlen = strlen(name);
    char *strtab = calloc(1, nlen + 2);
    if (!strtab)
        goto out;
    memcpy(strtab + 1, name, nlen);

    Elf_Scn *text = elf_newscn(e), *sym = elf_newscn(e), *str = elf_newscn(e),
            *shs = elf_newscn(e);
    if (!text || !sym || !str || !shs) {
        free(strtab);
        goto out;
    }
    Elf_Data *td = elf_newdata(text);    /* gdb maps only sections with contents: */
    td->d_buf = zeros_for(end - start);  /* zeros (the code itself is read from memory) */
    td->d_size = end - start, td->d_type = ELF_T_BYTE, td->d_align = 16;
    if (!td->d_buf) {
        free(strtab);
        goto out;
    }
    Elf64_Shdr *sh = elf64_getshdr(text);
    sh->sh_name = N_TEXT;
    sh->sh_type = SHT_PROGBITS;
    sh->sh_flags = SHF_ALLOC | SHF_EXECINSTR;
    sh->sh_addr = start;
    sh->sh_size = end - start;
    sh->sh_addralign = 16;

    Elf64_Sym syms[2];
    memset(syms, 0, sizeof syms);
    syms[1].st_name = 1;
    syms[1].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
    syms[1].st_shndx = (Elf64_Half)elf_ndxscn(text);
    syms[1].st_value = 0;                /* ET_REL: an offset in .text, which sits at start */
    syms[1].st_size = end - start;
    Elf_Data *d = elf_newdata(sym);
    d->d_buf = syms, d->d_size = sizeof syms, d->d_type = ELF_T_SYM, d->d_align = 8;
    sh = elf64_getshdr(sym);
    sh->sh_name = N_SYMTAB;
    sh->sh_type = SHT_SYMTAB;
    sh->sh_link = (Elf64_Word)elf_ndxscn(str);
    sh->sh_info = 1;                     /* the first global */
    sh->sh_entsize = sizeof(Elf64_Sym);

    d = elf_newdata(str);
    d->d_buf = strtab, d->d_size = nlen + 2, d->d_type = ELF_T_BYTE, d->d_align = 1;
    sh = elf64_getshdr(str);
    sh->sh_name = N_STRTAB;
    sh->sh_type = SHT_STRTAB;

    d = elf_newdata(shs);
    d->d_buf = (void *)shstr, d->d_size = sizeof shstr, d->d_type = ELF_T_BYTE, d->d_align = 1;
    sh = elf64_getshdr(shs);
    sh->sh_name = N_SHSTRTAB;
    sh->sh_type = SHT_STRTAB;
    eh->e_shstrndx = (Elf64_Half)elf_ndxscn(shs);

    off_t size = elf_update(e, ELF_C_WRITE);
    free(strtab);
    free(td->d_buf);
    if (size <= 0)
        goto out;
    image = malloc((size_t)size);
    if (image && pread(fd, image, (size_t)size, 0) != size) {
        free(image);
        image = NULL;
    }
    *len = (size_t)size;
out:
    if (e)
        elf_end(e);
    close(fd);
    return image;
}

void sw_gdb_jit_add(uintptr_t start, uintptr_t end, const char *name)
{
    if (!name || !__atomic_load_n(&gdb_jit_on, __ATOMIC_RELAXED))
        return;
    size_t len = 0;
    char *image = symfile(start, end, name, &len);
    announced *a = image ? calloc(1, sizeof *a) : NULL;
    if (!a) {
        free(image);
        return;
    }
    a->start = start;
    a->entry.symfile_addr = image;
    a->entry.symfile_size = len;
    pthread_mutex_lock(&jit_lock);
    a->next = entries;
    entries = a;
    a->entry.next_entry = __jit_debug_descriptor.first_entry;
    if (a->entry.next_entry)
        a->entry.next_entry->prev_entry = &a->entry;
    __jit_debug_descriptor.first_entry = &a->entry;
    __jit_debug_descriptor.relevant_entry = &a->entry;
    __jit_debug_descriptor.action_flag = JIT_REGISTER_FN;
    __jit_debug_register_code();
    pthread_mutex_unlock(&jit_lock);
}

void sw_gdb_jit_remove(uintptr_t start)
{
    pthread_mutex_lock(&jit_lock);
    announced **link = &entries, *a = NULL;
    for (; *link; link = &(*link)->next)
        if ((*link)->start == start) {
            a = *link;
            *link = a->next;
            break;
        }
    if (a) {
        struct jit_code_entry *e = &a->entry;
        if (e->prev_entry)
            e->prev_entry->next_entry = e->next_entry;
        else
            __jit_debug_descriptor.first_entry = e->next_entry;
        if (e->next_entry)
            e->next_entry->prev_entry = e->prev_entry;
        __jit_debug_descriptor.relevant_entry = e;
        __jit_debug_descriptor.action_flag = JIT_UNREGISTER_FN;
        __jit_debug_register_code();
    }
    pthread_mutex_unlock(&jit_lock);
    if (a) {
        free((void *)a->entry.symfile_addr);
        free(a);
    }
}

int crawl_gdb_jit(int on)
{
    int was = __atomic_exchange_n(&gdb_jit_on, on != 0, __ATOMIC_ACQ_REL);
    return was;
}
