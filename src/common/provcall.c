/* provcall.c — the per-thread mark of a provider's own library at work (see sys.h). */
#include "common/sys.h"

__thread int ssw_provider_calls;
