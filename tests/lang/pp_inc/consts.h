// Included by preproc.nb twice: #pragma once keeps the second #include empty.
#pragma once
static const float kHalf = 0.5;
#define TWICE(x) (2 * (x))
