/* See stdint.h. */
typedef _Bool bool;
#define true 1
#define false 0
