// Found relative to guarded.h (the including file), not to preproc.nb.
#include "../sibling.h"
float deep_line() { return __LINE__; }
