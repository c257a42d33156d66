/* Included by twice.h, found beside it. */
#define PRELUDE_TWO 2.0f
