/* A __requirePrelude header for slang_prelude.nb: C99 and CUDA (NVRTC compiles it as device code). */
#include "inner.h"
static inline float prelude_twice(float x) { return PRELUDE_TWO * x; }
