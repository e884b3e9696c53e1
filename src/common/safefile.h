/* safefile.h — how the switch opens the files its settings name (configuration,
 * log, stats, the preload library): regular files only, never blocking, and
 * never through a link or file another user planted in a sticky
 * world-writable directory such as /tmp. */
#ifndef SSW_SAFEFILE_H
#define SSW_SAFEFILE_H

#include <stddef.h>

/* Largest file ssw_file_read takes (the configuration file). */
#define SSW_FILE_READ_MAX (1u << 20)

enum ssw_file_mode {
	SSW_FILE_READ,   /* O_RDONLY */
	SSW_FILE_APPEND, /* O_WRONLY | O_APPEND | O_CREAT, mode 0644 */
};

/* Opens path (O_NONBLOCK, O_CLOEXEC, O_NOCTTY) after checking it the way
 * the kernel's protected_symlinks and protected_regular do, whatever those
 * sysctls say: a symlink (in any component) or an existing file that sits in
 * a sticky world-writable directory and belongs neither to us nor to the
 * directory's owner is refused.  The result must be a regular file; other
 * types are refused before they are opened (a device is never opened, a FIFO
 * never waited on).  Returns the fd, or -1 with why set to a short reason
 * ("is a FIFO, not a regular file"; no path in it).  Raw system calls only:
 * safe inside the preloaded library. */
int ssw_file_open(const char *path, enum ssw_file_mode mode, char *why, size_t whylen);

/* Reads the whole file (at most max bytes; more is an error saying the
 * limit) into a NUL-terminated malloc'ed buffer.  0, or -1 with why. */
int ssw_file_read(const char *path, size_t max, char **text, size_t *len, char *why, size_t whylen);

#endif
