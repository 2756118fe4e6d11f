/* A library linked at a base other than 0 (test_fork_child_check): its
 * first mapping does not start at its load bias, and its global holds a
 * chunk the leak check must find reachable. */
void *fork_child_kept;

void fork_child_keep(void *p) { fork_child_kept = p; }
