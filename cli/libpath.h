/* libpath.h — locating libsockswitch.so for `run` and `bench`. */
#ifndef SSW_CLI_LIBPATH_H
#define SSW_CLI_LIBPATH_H

#include <stddef.h>

#define SSW_LIB_NAME "libsockswitch.so"

/* Finds the library, in this order: $SOCKSWITCH_LIB (when set it is the only
 * candidate: a wrong explicit path must not silently pick another copy); next
 * to the sockswitch executable; ../lib and ../LIBDIR from there (the build's
 * libdir relative to its prefix: lib/x86_64-linux-gnu for /usr on Debian);
 * the install libdir.  On success writes its absolute, symlink-free path to
 * out and returns 0.  Otherwise returns -1 with a message in why saying what
 * was missing and where it looked. */
int ssw_find_lib(char *out, size_t outlen, char *why, size_t whylen);

#endif
