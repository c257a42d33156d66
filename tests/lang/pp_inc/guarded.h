// Classic include guards (no #pragma once): the second #include defines nothing again.
#ifndef PP_GUARDED_H
#define PP_GUARDED_H
float guarded_inc(float x) { return x + 1; }
#include "nested/deep.h"
#endif
