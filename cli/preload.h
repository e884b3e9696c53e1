/* preload.h — editing an LD_PRELOAD list so libsockswitch.so is in it exactly once, or not at all. */
#ifndef SSW_CLI_PRELOAD_H
#define SSW_CLI_PRELOAD_H

/* Returns a new LD_PRELOAD value (malloc'd) with lib first and the entries of
 * old (may be NULL) after it, minus any other mention of lib.  The switch must
 * come first so its socket wrappers win over other preloaded libraries. */
char *ssw_preload_prepend(const char *lib, const char *old);

/* Returns old (may be NULL) without lib and without any libsockswitch*.so
 * entry (malloc'd; "" when nothing remains), for runs that must be plain TCP. */
char *ssw_preload_without(const char *lib, const char *old);

#endif
