/* rbp_hold.c: a frame without a frame pointer that keeps a value in rbp. */
#ifndef CRAWL_TEST_RBP_HOLD_H
#define CRAWL_TEST_RBP_HOLD_H

/* Call fn with p in rbp the whole time (a walk from inside fn reads it as
 * this frame's rbp). */
void rbp_hold(void *p, void (*fn)(void));

/* With p in rbp, set *holding and spin (no call) until *go: a thread
 * stopped here has p in a register, nowhere else. */
void rbp_spin(void *p, volatile int *holding, volatile int *go);

#endif
