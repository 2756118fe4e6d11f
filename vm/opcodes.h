/* crawlvm bytecode: 32-bit instructions, opcode in the low 8 bits, a 24-bit
 * argument above (signed for jumps and OP_INT). */
#ifndef CRAWLVM_OPCODES_H
#define CRAWLVM_OPCODES_H

#define OPCODES(X)                                                                               \
    X(CONST) X(INT) X(NIL) X(TRUE) X(FALSE) X(GETL) X(SETL) X(GETF) X(GETG) X(SETG) X(DEFG)      \
    X(POP) X(DUP) X(JMP) X(JF) X(JT) X(CALL) X(RET) X(CLOSURE) X(ADD) X(SUB) X(MUL) X(LT) X(LE)  \
    X(GT) X(GE) X(NUMEQ) X(NOT) X(SELF)

enum opcode {
#define X(name) OP_##name,
    OPCODES(X)
#undef X
    OP__COUNT
};

#define INS(op, arg) ((uint32_t)(op) | ((uint32_t)(arg) << 8))
#define INS_OP(i) ((i)&0xffu)
#define INS_ARG(i) ((i) >> 8)
#define INS_SARG(i) ((int32_t)(i) >> 8)
#define ARG_MAX ((1 << 23) - 1)

#endif
