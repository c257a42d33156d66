// An include cycle without guards or #pragma once (diag_pp_include.nb).
#include "cycle_b.h"
