/* Register capture for transition Frames (x86-64 System V).
 *
 * Written in assembly so the registers saved are exactly the caller's at
 * the call: a C function's prologue would already have changed rbp/rsp and
 * possibly callee-saved registers. Offsets match crawl_regs (common.h),
 * which frame_types.c checks with _Static_assert. */

/* Store the caller's registers into the crawl_regs at \off(%rdi): ip is the
 * return address, sp the caller's stack pointer once the call returns. */
.macro SAVE_CALLER_REGS off
        movq    (%rsp), %rax
        movq    %rax, \off+0(%rdi)
        leaq    8(%rsp), %rax
        movq    %rax, \off+8(%rdi)
        movq    %rbp, \off+16(%rdi)
        movq    %rbx, \off+24(%rdi)
        movq    %r12, \off+32(%rdi)
        movq    %r13, \off+40(%rdi)
        movq    %r14, \off+48(%rdi)
        movq    %r15, \off+56(%rdi)
.endm

        .text

/* void crawl_capture_regs(crawl_regs *out) */
        .globl  crawl_capture_regs
        .type   crawl_capture_regs, @function
        .p2align 4
crawl_capture_regs:
        .cfi_startproc
        SAVE_CALLER_REGS 0
        ret
        .cfi_endproc
        .size   crawl_capture_regs, .-crawl_capture_regs

/* void crawl_transition_push(crawl_transition *t, const crawl_frame_type *type)
 * Saves the caller's registers into t->regs (offset 16), then tail-calls
 * crawl__transition_link(t, type), which returns straight to the caller. */
        .globl  crawl_transition_push
        .type   crawl_transition_push, @function
        .p2align 4
crawl_transition_push:
        .cfi_startproc
        SAVE_CALLER_REGS 16
        jmp     crawl__transition_link
        .cfi_endproc
        .size   crawl_transition_push, .-crawl_transition_push

        .hidden crawl__transition_link
        .section .note.GNU-stack,"",@progbits
