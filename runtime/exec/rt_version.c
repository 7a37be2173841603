/*
 * rt_version.c — the version string of the runtime, shared by libkiln and by
 * the libkiln_rt.a that ahead-of-time compiled models link, so a model can
 * say which runtime it was built with.
 */
#include "kiln/core.h"

KILN_API const char *kiln_version(void) { return "0.1.0"; }
